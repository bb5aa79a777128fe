"""Values the checks once let through, and messages that misled.

Each test reproduces one earlier failure (named in its docstring) and asserts the fix.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from invjax import configs as invjax_configs
from invjax import invariance as I
from invjax.training import experiment
from invjax.training.optimizer import validate_train_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def _main(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


def _digits_config(**train):
    config = invjax_configs.load(os.path.join(REPO, "configs", "digits_cnn.py"))
    config.data.name, config.data.n_train = "digits", 100
    config.model.width = 4
    for k, v in train.items():
        config.train[k] = v
    return config


# --------------------------------------------------------------------------- checks (item 5)


@pytest.mark.parametrize("lr", [math.inf, -math.inf, math.nan, 0.0, -0.1])
def test_learning_rate_must_be_finite_and_positive(lr):
    """Issue: ``learning_rate=inf`` was accepted."""
    tc = _digits_config().train
    tc.learning_rate = lr
    with pytest.raises(ValueError, match=r"train.learning_rate=.* is invalid: it must be a finite"):
        validate_train_config(tc)


@pytest.mark.slow
def test_batch_larger_than_the_training_set_is_refused_by_checks_and_dry_run(tmp_path):
    """Issue: ``train.batch_size`` larger than the training set passed the checks and
    ``--dry_run``, then died with a 54-line out-of-memory traceback leaving a workdir."""
    with pytest.raises(ValueError, match=r"batch_size=128 is larger than the training set: .*100"):
        experiment.prepare(_digits_config(batch_size=128), str(tmp_path / "a"))
    workdir = tmp_path / "b"
    base = ["invjax.main", "--config=configs/digits_cnn.py", "--config.data.name=digits"]
    proc = _main(*base, "--config.data.n_train=100", "--config.train.batch_size=101",
                 f"--workdir={workdir}", "--dry_run")  # fmt: skip
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1, proc.stderr[-2000:]
    assert "train.batch_size=101 is larger than the training set" in err[0]
    assert "use train.batch_size <= 100" in err[0]
    assert not workdir.exists()


def test_absurd_num_epochs_is_refused_before_compute(tmp_path):
    """Issue: ``num_epochs=1e12`` was accepted (ETA 307,082,357 h). Bound: 10^7 steps."""
    assert experiment.MAX_STEPS == 10**7
    config = _digits_config(batch_size=50, num_epochs=5 * 10**6 + 1, lr_boundaries=(1,))
    with pytest.raises(ValueError, match=r"num_epochs=5000001 is invalid: .*use at most 5000000"):
        experiment.prepare(config, str(tmp_path / "run"))
    config.train.num_epochs = 5 * 10**6  # exactly the bound: accepted
    assert experiment.prepare(config, str(tmp_path / "run")).num_steps == 10**7
    # (A non-integer, --config.train.num_epochs=1e12 or 2.5, is refused by the flag parser: one
    # line, "invalid literal for int()"; <= 0 by validate_train_config.)
    config.train.num_epochs = 0
    with pytest.raises(ValueError, match=r"train.num_epochs=0 is invalid"):
        validate_train_config(config.train)


_EIGHT_DEVICES = textwrap.dedent(
    """
    import json, os, sys, jax
    sys.path.insert(0, os.getcwd())
    from invjax import configs as invjax_configs
    from invjax import parallel
    from invjax.training import experiment
    from invjax.training.state import init_variables
    from invjax.training.steps import evaluate, make_eval_step
    assert jax.device_count() == 8, jax.devices()
    config = invjax_configs.load("configs/digits_cnn.py")
    config.data.name, config.data.n_train, config.model.width = "digits", 100, 4
    config.train.batch_size = 48
    assert config.train.eval_batch_size == 500  # the default
    exp = experiment.prepare(config, sys.argv[1])  # refused before the fix
    ds = exp.dataset
    v = init_variables(exp.model, ds.image_shape, jax.random.PRNGKey(0))
    out = {}
    for n in (8, 1):
        mesh = parallel.make_mesh(jax.devices()[:n])
        step = parallel.jit_eval_step(make_eval_step(exp.model, ds.mean, ds.std), mesh)
        out[n] = evaluate(step, v, ds.test, config.train.eval_batch_size, mesh)
    print(json.dumps({"eight": out[8], "one": out[1], "n_test": len(ds.test),
                      "rounded": parallel.per_device_batch(500, parallel.make_mesh())}))
    """
)


@pytest.mark.slow
def test_default_eval_batch_fits_eight_devices(tmp_path):
    """Issue: the default ``eval_batch_size=500`` stopped a run on 8 devices ("cannot be split
    over the 8 devices"). Now rounded up per device (504), the padding masked: the same loss and
    error as on one device."""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8")
    proc = subprocess.run(
        [sys.executable, "-c", _EIGHT_DEVICES, str(tmp_path / "run")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["rounded"] == 504 and res["n_test"] == 359
    assert res["eight"][1] == res["one"][1]  # the error: the same count of mistakes
    np.testing.assert_allclose(res["eight"][0], res["one"][0], rtol=1e-5)


@pytest.mark.parametrize("n", ["0", "-3"])
def test_invariance_n_samples_must_be_positive(n, capsys):
    """Issue: ``--n_samples=0`` was an IndexError, ``-3`` measured 356 images silently."""
    argv = ["invariance", "--config=configs/digits_cnn.py", f"--n_samples={n}"]
    assert I.main(argv) == 2
    err = capsys.readouterr().err
    assert f"--n_samples={n} is invalid: it must be an integer >= 1" in err
    assert I.main(["invariance", "--table1", f"--n_samples={n}"]) == 2
    assert "it must be an integer >= 1" in capsys.readouterr().err


# --------------------------------------------------------------------------- messages (item 6)


def test_images_file_messages(tmp_path, capsys):
    """Issue: a text file as ``--images`` suggested ``allow_pickle=`` (unsafe loading); a missing
    file was a bare ``[Errno 2]``."""
    text = tmp_path / "images.txt"
    text.write_text("0.1 0.2\n")
    pickled = tmp_path / "objects.npy"
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    for path, match in [
        (text, "is not a NumPy .npy array file"),
        (pickled, "is not a NumPy .npy array file"),
        (tmp_path / "missing.npy", "no such file"),
    ]:
        argv = ["invariance", "--config=configs/digits_cnn.py", f"--images={path}"]
        assert I.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"invjax.invariance: error: --images={path}"), err
        assert match in err and "allow_pickle" not in err and "Errno" not in err, err
        assert len(err.splitlines()) == 1


@pytest.mark.slow
def test_config_without_get_config_is_named(tmp_path):
    """Issue: a config file without ``get_config`` was reported as ``config_config``."""
    bad = tmp_path / "my_experiment.py"
    bad.write_text("SEED = 1\n")
    proc = _main("invjax.main", f"--config={bad}", f"--workdir={tmp_path / 'w'}")
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1, proc.stderr
    assert f"config file {bad} defines no get_config() function" in err[0]
    assert "config_config" not in proc.stderr
    with pytest.raises(
        invjax_configs.ConfigFileError, match="my_experiment.py defines no get_config"
    ):
        invjax_configs.load(str(bad))


def test_models_unknown_name_is_short(capsys):
    """Issue: ``python -m invjax.models`` (now ``invjax.summary``) with an unknown name printed a
    5,000-character line."""
    from invjax import summary as models_cli

    with pytest.raises(SystemExit) as e:
        models_cli.main(["svhn_e2_i"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert len(err) < 300, len(err)
    assert "did you mean svhn_e2_ii" in err and "python -m invjax.summary --list" in err
    assert models_cli.main(["--list"]) == 0
    listed = capsys.readouterr().out
    assert "  svhn_e2_ii\n" in listed and "  digits_cnn\n" in listed


@pytest.mark.slow
def test_main_help_lists_the_compilation_cache():
    """Issue: ``invjax.main --help`` omitted ``--compilation_cache``."""
    proc = _main("invjax.main", "--help", timeout=120)
    assert proc.returncode == 0
    assert "  --compilation_cache: Directory of JAX's persistent compilation cache" in proc.stdout
