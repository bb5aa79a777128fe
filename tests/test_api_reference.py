"""The API reference builds from the docstrings with the documented command (docs/README.md)."""

from __future__ import annotations

import os
import pkgutil
import subprocess
import sys

import pytest

import invjax

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(REPO, "docs", "api", "build.py")


@pytest.mark.slow
def test_the_api_reference_builds_a_page_per_module_with_the_layers_arguments(tmp_path):
    out = tmp_path / "api"
    done = subprocess.run(
        [sys.executable, BUILD, "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    modules = [m.name for m in pkgutil.walk_packages(invjax.__path__, "invjax.")]
    modules = [m for m in modules if not m.endswith(".__main__")]  # their --help is their doc
    missing = [m for m in modules if not (out / (m.replace(".", "/") + ".html")).is_file()]
    assert not missing, missing
    contract = (out / "invjax" / "contract.html").read_text()
    for ability in ("Exact", "Typed", "Exportable", "Precise", "EpochHooks"):
        assert f'id="{ability}"' in contract, ability
    e2 = (out / "invjax" / "layers" / "e2.html").read_text()
    for member in ("E2Conv.features", "E2Conv.group", "E2Conv.kernel_size", "E2Conv.precision"):
        assert f'id="{member}"' in e2, member
