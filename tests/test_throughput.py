"""benchmarks/throughput.py: every (dataset, family) it offers has a config, bad flags stop with one
message and exit 2 before any compute, and one row measured through the real train step."""

from __future__ import annotations

import pathlib
import runpy
import subprocess
import sys

import jax
import numpy as np
import pytest

from invjax import models
from invjax.training.state import init_variables

REPO = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "throughput.py"
T = runpy.run_path(str(SCRIPT), run_name="throughput")


@pytest.mark.parametrize("dataset", T["DATASETS"])
def test_every_default_family_has_its_config(dataset):
    fams = T["families_of"](dataset)
    default = [f for f in T["DEFAULT_FAMILIES"] if f in fams]
    # the digits have no pooling E(2) network, Fashion-MNIST (the real-image study's streams) no
    # dual either; every other dataset has all six
    assert len(default) == {"digits": 5, "fashion": 4}.get(dataset, 6)
    for family in default:
        name, config = T["load_config"](dataset, family)
        assert (REPO / "configs" / f"{name}.py").exists()
        scale = family in ("scale", "scale_ii", "dual", "triple")
        assert T["has_scale_layers"](config.model) == scale, (dataset, family)
        if family in ("dual", "triple"):
            assert config.model.name == "multistream"
            assert len(config.model.streams) == (2 if family == "dual" else 3)


def test_width_divisor_multiplies_every_stream():
    _, config = T["load_config"]("digits", "triple")
    before = {k: s.width_divisor for k, s in config.model.streams.items()}
    T["divide_widths"](config.model, 4.0)
    assert {k: s.width_divisor for k, s in config.model.streams.items()} == {
        k: 4.0 * v for k, v in before.items()
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags,message",
    [
        (["--dataset", "mnist"], "--dataset='mnist' is unknown"),
        (["--dataset", "digits", "--families", "e2"], "valid families there are"),
        (["--precision", "fast"], "--precision='fast' is invalid"),
        (["--scale-lowering", "x"], "--scale-lowering='x' is invalid"),
        (["--steps", "0"], "--steps=0 is invalid"),
        (["--width-divisor", "0.5"], "--width-divisor=0.5 is invalid"),
        (["--json", "/nonexistent/dir/x.json"], "is not a writable folder"),
    ],
)
def test_bad_flags_exit_2_with_one_message(flags, message):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *flags], capture_output=True, text=True, cwd=REPO
    )
    assert proc.returncode == 2
    assert proc.stdout == "" and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_one_row_through_the_real_train_step():
    """digits std at a tiny width, in this process: the row names what ran, counts the model's
    parameters, and reports positive times and a finite loss."""
    case = dict(
        dataset="digits",
        family="std",
        precision="highest",
        scale_lowering=None,
        batch=4,
        width_divisor=8.0,
        steps=1,
        warmup=0,
    )
    row = T["measure"](case)
    _, config = T["load_config"]("digits", "std")
    config.model.width_divisor = 8.0
    variables = jax.eval_shape(
        lambda r: init_variables(models.build(config.model), (28, 28, 1), r),
        jax.random.PRNGKey(0),
    )
    params = sum(int(np.prod(p.shape)) for p in jax.tree.leaves(variables["params"]))
    assert row["config"] == "digits_std" and row["batch"] == 4 and row["precision"] == "highest"
    assert row["params"] == row["trainable"] == params
    assert row["first_step_s"] > 0 and row["step_ms"] > 0
    assert row["images_per_s"] == pytest.approx(4 / (row["step_ms"] / 1e3), rel=1e-2)
    assert np.isfinite(row["final_loss"]) and row["devices"] == len(jax.devices())


def test_precisions_are_invjaxs():
    from invjax import precision

    assert set(T["PRECISIONS"]) == set(precision.PRECISIONS)


def test_cpu_slots_splits_the_cores_and_names_bad_input(capsys):
    S = runpy.run_path(str(REPO / "benchmarks" / "cpu_slots.py"), run_name="cpu_slots")
    assert S["core_sets"]([0, 1], 2) == [[0], [1]]
    assert S["core_sets"]([0, 1, 2, 3, 4], 2) == [[0, 1, 2], [3, 4]]
    with pytest.raises(ValueError, match="--slots=3 is invalid"):
        S["core_sets"]([0, 1], 3)
    for argv, message in (
        (["--family", "e2"], "--family='e2' has no config for --dataset=fashion"),
        (["--dataset", "mnist"], "--dataset='mnist' is unknown"),
        (["--window", "0"], "--window=0.0 is invalid"),
        (["--slots", "999"], "--slots=999 is invalid"),
    ):
        assert S["main"](argv) == 2
        assert message in capsys.readouterr().err
