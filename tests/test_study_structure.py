"""The structure of launch/: its study modules import one way, build nothing at import, use no
other module's private names, and keep their functions short."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCH = os.path.join(ROOT, "launch")


def _modules(folder: str) -> dict[str, ast.Module]:
    out = {}
    for base, _, files in os.walk(folder):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(base, name)
                with open(path) as f:
                    out[os.path.relpath(path, ROOT)] = ast.parse(f.read())
    return out


def _top_level_imports(tree: ast.Module) -> set[str]:
    """The launch.studies modules a module imports at its top level (not inside functions)."""
    out = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "launch.studies":
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("launch.studies."):
            out.add(node.module.rsplit(".", 1)[1])
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("launch.studies."):
                    out.add(a.name.split(".")[2])
    return out


def _all_imports(tree: ast.Module) -> set[str]:
    """Every launch.studies module a module imports, inside functions too."""
    body = ast.Module(body=list(ast.walk(tree)), type_ignores=[])
    body.body = [n for n in body.body if isinstance(n, ast.Import | ast.ImportFrom)]
    return _top_level_imports(body)


def test_the_study_modules_import_one_way():
    """No cycle among launch/studies' modules, counting imports inside functions too (the
    real-image design once imported its cost model inside a function while the cost model
    imported the design)."""
    mods = _modules(os.path.join(LAUNCH, "studies"))
    graph = {
        os.path.splitext(os.path.basename(p))[0]: _all_imports(t) - {"__main__"}
        for p, t in mods.items()
    }
    graph = {k: {v for v in vs if v in graph and v != k} for k, vs in graph.items()}
    seen, stack = set(), []

    def visit(node):
        if node in stack:
            raise AssertionError(f"import cycle: {' -> '.join(stack[stack.index(node) :])}")
        if node in seen:
            return
        stack.append(node)
        for nxt in sorted(graph[node]):
            visit(nxt)
        stack.pop()
        seen.add(node)

    for node in sorted(graph):
        if node != "__main__":
            visit(node)
    assert "realimages_cost" in graph["realimages_commands"]
    assert "realimages" not in graph["realimages_second"]


def test_importing_the_real_image_study_reads_no_config():
    code = (
        "import sys\n"
        "import launch.studies.realimages as r, launch.studies.realimages_commands\n"
        "assert not [m for m in sys.modules if m.startswith('configs')], 'a config was read'\n"
        "assert '_default_study' in vars(r) and r._default_study.cache_info().currsize == 0\n"
        "assert r.STUDY is r.STUDY and [m for m in sys.modules if m.startswith('configs.')]\n"
    )
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-2000:]


def test_no_module_of_launch_uses_another_modules_private_names():
    bad = []
    for path, tree in _modules(LAUNCH).items():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name)
                and node.value.id not in ("self", "cls")
            ):
                bad.append(f"{path}:{node.lineno} {node.value.id}.{node.attr}")
            if isinstance(node, ast.ImportFrom):
                bad += [
                    f"{path}:{node.lineno} from {node.module} import {a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert not bad, bad


def test_no_function_of_launch_studies_is_over_80_lines():
    long = []
    for path, tree in _modules(os.path.join(LAUNCH, "studies")).items():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = node.body[0]
                doc = isinstance(first, ast.Expr) and isinstance(
                    getattr(first, "value", None), ast.Constant
                )
                start = first.end_lineno + 1 if doc else first.lineno
                if node.end_lineno - start + 1 > 80:
                    long.append(f"{path}:{node.lineno} {node.name}")
    assert not long, long
