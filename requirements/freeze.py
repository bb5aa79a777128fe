"""Write requirements/tested.txt: the installed versions of invjax's dependencies (runtime and
the ``test`` extra) and of everything they need, pinned (``name==version``).

    python requirements/freeze.py        # after the tests passed in this environment

Only packages reachable from pyproject.toml's requirements are listed (not the rest of the
environment); ``pip install -r requirements/tested.txt -e ".[test]"`` reproduces the set.
"""

from __future__ import annotations

import importlib.metadata as md
import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXTRAS = ("test",)


def _name(req: str) -> str:
    return re.split(r"[\s<>=!~;\[(]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _extras(req: str) -> set[str]:
    m = re.match(r"^[^\[;]*\[([^\]]*)\]", req)
    return {e.strip() for e in m.group(1).split(",")} if m else set()


def _applies(req: str, extras: set[str]) -> bool:
    """True unless an environment marker excludes it (extras: those asked for)."""
    if ";" not in req:
        return True
    from packaging.markers import Marker

    marker = Marker(req.split(";", 1)[1])
    return any(marker.evaluate({"extra": e}) for e in (extras or {""}))


def closure(requirements: list[str]) -> dict[str, str]:
    pinned: dict[str, str] = {}
    todo = [(r, _extras(r)) for r in requirements]
    seen: set[tuple[str, frozenset]] = set()
    while todo:
        req, extras = todo.pop()
        name = _name(req)
        if (name, frozenset(extras)) in seen:
            continue
        seen.add((name, frozenset(extras)))
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue  # an optional dependency of a dependency that is not installed
        pinned[dist.metadata["Name"]] = dist.version
        for sub in dist.requires or []:
            if _applies(sub, extras):
                todo.append((sub, _extras(sub)))
    return pinned


def main(argv=None) -> int:
    import argparse

    argparse.ArgumentParser(
        prog="python requirements/freeze.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    ).parse_args(argv)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in EXTRAS:
        reqs += project["optional-dependencies"][extra]
    pinned = closure(reqs)
    lines = [
        "# The development machine's working install that the tests run with "
        f"(python requirements/freeze.py; Python {sys.version.split()[0]}, CPU).",
        '# pip install -r requirements/tested.txt -e ".[test]"',
        *[f"{k}=={v}" for k, v in sorted(pinned.items(), key=lambda kv: kv[0].lower())],
    ]
    (ROOT / "requirements" / "tested.txt").write_text("\n".join(lines) + "\n")
    print(f"requirements/tested.txt: {len(pinned)} packages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
