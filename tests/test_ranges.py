"""Every value a config takes is range-checked before compute: one line naming the value and
what is valid (probabilities in [0, 1), finite non-negative decays, a learning rate that cannot
blow up the first step, no NaN anywhere, no ``seed`` beside ``seeds``)."""

from __future__ import annotations

import math
import pathlib
import subprocess
import sys

import pytest

from invjax import configs as invjax_configs
from invjax.training import many, plan
from invjax.training.optimizer import MAX_LEARNING_RATE

REPO = pathlib.Path(__file__).resolve().parents[1]

# (key, value, what the message says after "KEY=VALUE is invalid: ")
BAD = [
    ("model.dropout", 2.0, "a dropout probability must be in [0, 1)"),
    ("model.dropout", math.nan, "NaN is not a setting"),
    ("model.dropout", -1.0, "a dropout probability must be in [0, 1)"),
    ("model.dropout", 1.0, "a dropout probability must be in [0, 1)"),
    ("train.weight_decay", math.nan, "NaN is not a setting"),
    ("train.weight_decay", math.inf, "it must be a finite number >= 0"),
    ("train.weight_decay", -1e-4, "it must be a finite number >= 0"),
    ("train.learning_rate", 1e30, f"at most {MAX_LEARNING_RATE:g}"),
    ("train.learning_rate", math.inf, "it must be a finite number > 0"),
    ("train.learning_rate", 0.0, "it must be a finite number > 0"),
    ("train.momentum", math.nan, "NaN is not a setting"),
    ("train.lr_decay_factor", math.inf, "it must be a finite number > 0"),
    ("train.epochs_scale", math.nan, "NaN is not a setting"),
    ("data.val_fraction", math.nan, "NaN is not a setting"),
]


def _config(key: str, value):
    config = invjax_configs.load(str(REPO / "configs" / "digits_cnn.py"))
    *section, name = key.split(".")
    (config[section[0]] if section else config)[name] = value
    return config


def _valid_part(message: str) -> str:
    return message.split(" is invalid: ", 1)[1]


@pytest.mark.parametrize("key,value,valid", BAD)
def test_out_of_range_refused_before_anything_is_loaded(tmp_path, key, value, valid):
    with pytest.raises(ValueError) as e:
        plan.check(_config(key, value), str(tmp_path / "run"))
    message = str(e.value)
    assert message.startswith(f"{key}={value!r} is invalid: "), message
    assert valid in _valid_part(message)
    assert "\n" not in message and not (tmp_path / "run").exists()


def test_every_section_is_checked_multistream_streams_too(tmp_path):
    config = invjax_configs.load(str(REPO / "configs" / "digits_dual.py"))
    config.model.streams.scale.dropout = 1.5
    with pytest.raises(ValueError, match=r"^model.streams.scale.dropout=1.5 is invalid"):
        plan.check(config, str(tmp_path / "run"))
    config = invjax_configs.load(str(REPO / "configs" / "digits_monomials.py"))
    config.model.bn_momentum = 1.0  # running statistics that never move
    with pytest.raises(ValueError, match=r"^model.bn_momentum=1.0 is invalid: BatchNorm's"):
        plan.check(config, str(tmp_path / "run"))
    config.model.bn_momentum = -0.1
    with pytest.raises(ValueError, match=r"^model.bn_momentum=-0.1 is invalid"):
        plan.check(config, str(tmp_path / "run"))
    config.model.bn_momentum = 0.9
    config.train.lr_boundaries = (1.0, math.nan)
    with pytest.raises(ValueError, match=r"^train.lr_boundaries=\(1.0, nan\) is invalid: NaN"):
        plan.check(config, str(tmp_path / "run"))


def test_the_largest_learning_rate_is_accepted(tmp_path):
    from invjax.training.optimizer import validate_train_config

    tc = _config("train.learning_rate", MAX_LEARNING_RATE).train
    validate_train_config(tc)  # the bound itself is valid
    tc.learning_rate = MAX_LEARNING_RATE * (1 + 1e-9)
    with pytest.raises(ValueError, match=r"^train.learning_rate=10.0000000\d* is invalid"):
        validate_train_config(tc)


def test_seed_beside_seeds_is_refused():
    config = _config("seed", 5)
    config.seeds = (0, 1)
    with pytest.raises(ValueError, match=r"^seed=5 and seeds=\(0, 1\) are both set: .* drop"):
        many.split(config)
    config.seed = 0  # the default seed: each model's seed is one of the seeds
    seeds, _ = many.split(config)
    assert seeds == (0, 1)


def _run(*overrides: str, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "invjax.main",
            "--config=configs/digits_cnn.py",
            f"--workdir={tmp_path / 'run'}",
            *overrides,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides,key",
    [
        (("--config.model.dropout=2",), "model.dropout=2.0"),
        (("--config.model.dropout=nan",), "model.dropout=nan"),
        (("--config.model.dropout=-1", "--dry_run"), "model.dropout=-1.0"),
        (("--config.train.weight_decay=nan", "--dry_run"), "train.weight_decay=nan"),
        (("--config.train.learning_rate=1e30",), "train.learning_rate=1e+30"),
        (("--config.seeds=0,1", "--config.seed=5", "--dry_run"), "seed=5 and seeds=(0, 1)"),
    ],
)
def test_the_command_refuses_with_one_line(tmp_path, overrides, key):
    """The real command: exit 2, one ``invjax: error:`` line naming the key, nothing written."""
    proc = _run(*overrides, tmp_path=tmp_path)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"invjax: error: {key} "), proc.stderr
    assert not (tmp_path / "run").exists()
