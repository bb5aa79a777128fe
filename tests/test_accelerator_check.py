"""benchmarks/accelerator_check.sh: ONLY picks the steps, and the study step runs the study."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest

pytestmark = pytest.mark.slow  # subprocesses or training throughout

REPO = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "accelerator_check.sh"
STEPS = (
    "pytest",
    "precision_layers",
    "precision_svhn",
    "precision_cifar10",
    "scale_lowering",
    "throughput",
)


def run(tmp_path, **env):
    out = tmp_path / "out"
    proc = subprocess.run(
        ["bash", str(SCRIPT), str(out)],
        cwd=REPO,
        env=dict(os.environ, **env),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc.stdout


def test_only_study_runs_the_study_step_alone(tmp_path):
    runs = tmp_path / "runs"
    out, stdout = run(
        tmp_path,
        ONLY="study",
        STUDY_RUNS=str(runs),
        STUDY_FAMILIES="svm",
        STUDY_SIZES="20",
    )
    for name in (*STEPS, "peers"):
        assert f"== {name}: skipped" in stdout
        assert not (out / f"{name}.log").exists()
    assert "== study: exit 0" in stdout
    rows = json.loads((out / "study" / "results.json").read_text())
    assert [(r["experiment"], r["n_train"], r["runs"]) for r in rows] == [("svm", 20, 1)]
    assert (runs / "scaled_digits" / "svm" / "n20_s0" / "results.json").is_file()
