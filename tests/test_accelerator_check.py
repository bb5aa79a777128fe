"""benchmarks/accelerator_check.sh: ONLY picks the steps, and the protocol step runs the digits
study through ``python -m launch.studies digits run``."""

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
    "peers",
    "many_models_step",
    "many_models",
    "disco_net",
    "realimages",
    "realisation_devices",
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


def test_only_protocol_runs_the_digits_study_step_alone(tmp_path):
    # The RBF-SVM family: its six tuning fits and one main fit take seconds, and land as rows
    # of the record exactly as the networks' runs do.
    runs, record = tmp_path / "runs", tmp_path / "record" / "runs.jsonl"
    out, stdout = run(
        tmp_path,
        ONLY="protocol",
        PROTOCOL_STAGE="all",
        PROTOCOL_FAMILIES="svm",
        PROTOCOL_RUNS=str(runs),
        PROTOCOL_RECORD=str(record),
        PROTOCOL_ARGS="--sizes 20 --seeds 0",
    )
    for name in STEPS:
        assert f"== {name}: skipped" in stdout
        assert not (out / f"{name}.log").exists()
    assert "== study:" not in stdout
    assert "== protocol: exit 0" in stdout
    rows = [json.loads(line) for line in record.read_text().splitlines() if line.strip()]
    main = [r for r in rows if r["stage"] == "main"]
    assert [(r["dataset"], r["family"], r["n_train"], r["seed"]) for r in main] == [
        ("scaled_digits", "svm", 20, 0)
    ]
    assert main[0]["run"] == "main/scaled_digits/svm/n20/seed_0"
    assert 0.0 <= main[0]["test_error"] <= 100.0  # percent
    assert sorted(r["label"] for r in rows if r["stage"] == "tune") == sorted(
        f"C{c}_g{g}" for c in (1, 10, 100) for g in (0.3, 1)
    )
    assert (runs / "main" / "scaled_digits" / "svm" / "n20" / "seed_0" / "results.json").is_file()


def _real_plan(tmp_path, **env):
    out, stdout = run(
        tmp_path,
        ONLY="realimages",
        REAL_DATASETS="scaled_fashion_mnist",
        REAL_FAMILIES="disco,ii_ws",
        REAL_SIZES="1000",
        REAL_RUNS=str(tmp_path / "runs"),
        REAL_RECORD=str(tmp_path / "runs.jsonl"),
        REAL_ARGS="--seeds 0,1 --dry_run",
        **env,
    )
    assert "== realimages: exit 0" in stdout
    log = (out / "realimages.log").read_text()
    return [line for line in log.splitlines() if line.startswith("python -m invjax.main")]


def test_the_realimages_step_runs_k_realisations_per_program_unless_told_one(tmp_path):
    # Default: each arm's realisations in one vmapped program.
    together = _real_plan(tmp_path / "a")
    assert len(together) == 2
    assert all("--config.seeds=(0,1,)" in c for c in together)
    # REAL_ONE= (empty): one program per realisation and arm, pairs interleaved, so that each
    # lands as it finishes and a cut-off leaves the finished pairs.
    alone = _real_plan(tmp_path / "b", REAL_ONE="")
    assert len(alone) == 4
    assert not any("--config.seeds" in c for c in alone)
    got = [
        (c.split("--config=configs/")[1].split(".py")[0], c.split("--config.seed=")[1].split()[0])
        for c in alone
    ]
    assert got == [
        ("mnist_disco", "0"),
        ("mnist_ii_disco_ws", "0"),
        ("mnist_disco", "1"),
        ("mnist_ii_disco_ws", "1"),
    ]
