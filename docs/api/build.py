"""Build the API reference from the docstrings with pdoc (the ``docs`` or ``test`` extra).

    python docs/api/build.py                  # -> build/api/index.html
    python docs/api/build.py --out DIR

Every module of the package gets a page, also those a package's ``__all__`` leaves out (pdoc
alone follows ``__all__``); the command-line entry points (``__main__``) are left out: their
``--help`` is their reference. Docstrings are reStructuredText. ``tests/test_api_reference.py``
builds it, so a docstring that breaks the build fails the tests.
"""

from __future__ import annotations

import argparse
import pathlib
import pkgutil

import pdoc

import invjax

ROOT = pathlib.Path(__file__).resolve().parents[2]


def modules() -> list[str]:
    """``invjax`` and every module under it, ``__main__`` modules aside."""
    found = [m.name for m in pkgutil.walk_packages(invjax.__path__, "invjax.")]
    return ["invjax"] + [m for m in found if not m.endswith(".__main__")]


def build(out: pathlib.Path) -> pathlib.Path:
    """Write the reference into ``out``; returns its index page."""
    pdoc.render.configure(docformat="restructuredtext")
    pdoc.pdoc(*modules(), output_directory=out)
    return out / "index.html"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "build" / "api")
    print(build(parser.parse_args().out))


if __name__ == "__main__":
    main()
