"""``python -m invjax.data.prepare`` without its extra: one line naming the extra, exit 2,
before anything is downloaded."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from invjax.data import prepare

REPO = pathlib.Path(__file__).resolve().parents[1]


class _Builder:
    """A TFDS builder whose preparing imports a module that is not installed."""

    def __init__(self, module: str, data_dir: str):
        self.module, self.data_dir = module, data_dir

    def download_and_prepare(self):
        raise ModuleNotFoundError(f"No module named {self.module!r}", name=self.module)


@pytest.mark.parametrize("module", ["tensorflow", "importlib_resources"])
def test_a_missing_module_is_one_line_naming_the_extra(monkeypatch, capsys, tmp_path, module):
    monkeypatch.setattr(prepare, "_builder", lambda name, d: _Builder(module, d))
    assert prepare.main(["svhn_cropped", f"--data_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"invjax: error: preparing 'svhn_cropped' needs the module {module!r} of the 'prepare' "
        'extra, which is not installed: pip install -e ".[prepare]" (in a checkout; or pip '
        "install 'invjax[prepare]')"
    ]
    assert not os.listdir(tmp_path)


def test_the_extra_installs_what_preparing_imports():
    import tomllib

    toml = tomllib.loads((REPO / "pyproject.toml").read_text())
    extra = " ".join(toml["project"]["optional-dependencies"]["prepare"])
    assert "tensorflow" in extra and "importlib-resources" in extra


def test_offline_datasets_need_nothing(capsys):
    assert prepare.main(["scaled_digits"]) == 0
    assert "nothing to prepare" in capsys.readouterr().out


@pytest.mark.slow
def test_the_command_without_the_extra(tmp_path):
    """The real command, in a fresh interpreter where a module of the extra cannot be imported
    (TFDS's downloaders need importlib_resources before they fetch anything)."""
    script = (
        "import sys\n"
        "sys.modules['importlib_resources'] = None\n"
        "from invjax.data import prepare\n"
        f"sys.exit(prepare.main(['cifar10', '--data_dir={tmp_path}']))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("invjax: error: preparing 'cifar10' needs")
    assert 'pip install -e ".[prepare]"' in lines[0]
