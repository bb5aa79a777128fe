"""Measuring a run imports nothing of the trainer: export, the invariance command, the report,
the certificate, the equivariance check and the finished-run reader (:mod:`invjax.run`) reach
no module of :mod:`invjax.training`, neither when imported nor in any function they call."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEASURING = (
    "invjax.run",
    "invjax.export",
    "invjax.export.artifact",
    "invjax.export.__main__",
    "invjax.invariance",
    "invjax.report",
    "invjax.certificate",
    "invjax.equivariance",
)
TRAINER = "invjax.training"


def _path(module: str) -> str | None:
    base = os.path.join(REPO, *module.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return path
    return None


def _imports(module: str) -> set[str]:
    """The invjax modules ``module`` imports anywhere in its file (functions included), with
    the packages above each (importing ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__``)."""
    path = _path(module)
    tree = ast.parse(open(path).read(), path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package upwards
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            names.add(source)
            names.update(f"{source}.{a.name}" for a in node.names)  # a submodule, if one
    found = set()
    for name in names:
        if not name.startswith("invjax"):
            continue
        parts = name.split(".")
        for k in range(1, len(parts) + 1):
            candidate = ".".join(parts[:k])
            if _path(candidate) is not None:
                found.add(candidate)
    return found - {module}


def _reachable(module: str) -> dict[str, str]:
    """Every invjax module ``module`` may import, directly or through others, each with the
    module that imports it (to name the path of an unwanted import)."""
    seen, todo = {module: ""}, [module]
    while todo:
        current = todo.pop()
        for name in _imports(current):
            if name not in seen:
                seen[name] = current
                todo.append(name)
    return seen


def _chain(seen: dict[str, str], name: str) -> str:
    path = [name]
    while seen[path[-1]]:
        path.append(seen[path[-1]])
    return " <- ".join(path)


@pytest.mark.parametrize("module", MEASURING)
def test_no_function_of_a_measuring_module_reaches_the_trainer(module):
    seen = _reachable(module)
    assert _path(module) is not None, module
    bad = [_chain(seen, m) for m in seen if m == TRAINER or m.startswith(TRAINER + ".")]
    assert not bad, bad


def test_the_import_graph_is_read_as_python_reads_it():
    """The static reader above sees the trainer where it is: the command that trains reaches
    it, and so would a measuring module that imported it inside a function."""
    assert "invjax.training.plan" in _reachable("invjax.train")
    assert "invjax.training.state" in _imports("invjax.training.experiment")
    code = "def f():\n    from invjax.training import state\n"
    tree = ast.parse(code)
    (node,) = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert f"{node.module}.{node.names[0].name}" == "invjax.training.state"


def test_importing_a_measuring_module_loads_no_trainer_module():
    """In a fresh interpreter, as a user's script would: after importing each module (and
    using the reader's names), ``sys.modules`` holds no ``invjax.training`` module."""
    code = (
        "import importlib, sys\n"
        f"for m in {list(MEASURING)!r}:\n"
        "    importlib.import_module(m)\n"
        "from invjax import run\n"
        "assert run.RESULTS_FILE == 'results.json' and run.CHECKPOINTS_DIR == 'checkpoints'\n"
        f"bad = sorted(m for m in sys.modules if m == {TRAINER!r} or "
        f"m.startswith({TRAINER + '.'!r}))\n"
        "print('trainer modules:', bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=REPO)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "trainer modules: []" in done.stdout
