"""``--config.seeds``: K models of one config in one program, each the single run with its seed.

Tiny runs (digits, N_t = 100, width-4 CNN, batch 32: 4 steps per epoch, 2 epochs): model k of a
K-model run is compared with the single run with seed k, on the same splits (the prepared
datasets) and parameter by parameter after its 8 steps; a K-model run cut after one epoch is
resumed to two; bad ``seeds`` values stop before any compute.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from invjax import checkpoint, configs
from invjax.training import many
from invjax.training import plan as plan_lib
from invjax.training.experiment import describe

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def digits_config(name, seeds, n_train, model, train, extra):
    """``configs/<name>.py`` on ``n_train`` of the offline digits with K = ``seeds``, the
    ``model.*`` and ``train.*`` fields given, then the ``extra`` top-level keys."""
    c = configs.load(os.path.join(REPO, f"configs/{name}.py"))
    c.data.name = "digits"
    c.data.n_train = n_train
    c.model.update(model)
    c.train.update(dict(eval_batch_size=200, lr_boundaries=(), log_every_steps=0, **train))
    c.seeds = seeds
    # float32 products on every backend ('default' is TF32 on GPUs, where a vmapped, i.e.
    # grouped, convolution then differs from a plain one by TF32 rounding, not float32's)
    c.precision = "highest"
    for key, value in extra.items():
        c[key] = value
    return c


def tiny(seeds=None, epochs=2, **extra):
    train = dict(batch_size=32, num_epochs=epochs)
    return digits_config("digits_cnn", seeds, 100, dict(width=4), train, extra)


def params(workdir):
    return checkpoint.restore_latest(workdir).state["params"]


def assert_params_close(a, b, rtol, atol):
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(leaves_a) == len(leaves_b) > 0
    for x, y in zip(leaves_a, leaves_b):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


def assert_same_arithmetic(a, b):
    """The same compiled step in two processes: bit for bit on the CPU; elsewhere (a GPU may
    pick another convolution algorithm per compilation, as seen on an H100) within float32
    rounding of each leaf's scale: a parameter near zero carries the rounding of the sums that
    made it, ~eps x the leaf's largest entries (3e-8 on 0.002 seen there, i.e. rtol 2e-5)."""
    if jax.default_backend() == "cpu":
        assert_params_close(a, b, rtol=0, atol=0)
        return
    eps = float(np.finfo(np.float32).eps)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        y = np.asarray(y)
        np.testing.assert_allclose(np.asarray(x), y, rtol=1e-5, atol=16 * eps * np.abs(y).max())


def command(workdir, *flags) -> list[str]:
    """``-m invjax.main`` and the tiny digits CNN's flags (as :func:`tiny`), then ``flags``."""
    return [
        "-m",
        "invjax.main",
        "--config=configs/digits_cnn.py",
        f"--workdir={workdir}",
        "--config.data.name=digits",
        "--config.data.n_train=100",
        "--config.model.width=4",
        "--config.train.batch_size=32",
        "--config.train.lr_boundaries=()",
        "--compilation_cache=off",
        *flags,
    ]


def records(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def single1(tmp_path_factory):
    """The single run with seed 1 (today's path, ``seeds`` unset): its workdir and plan."""
    workdir = str(tmp_path_factory.mktemp("single") / "run")
    config = tiny()
    config.seed = 1  # invjax/configs/base.py: data.seed follows
    plan = plan_lib.check(config, workdir)
    dataset = plan.stages[0].experiment.dataset
    plan_lib.execute(plan)
    return workdir, dataset


@pytest.mark.slow
def test_model_k_of_a_loop_run_is_the_single_run_and_resumes(single1, tmp_path, capsys):
    ref_dir, ref_data = single1
    workdir = str(tmp_path / "k")
    # One epoch first, then the same command with two: every model resumes from step 4.
    mplan = many.check(tiny(seeds=(0, 1), epochs=1, seeds_strategy="loop"), workdir)
    data = {k: p.stages[0].experiment.dataset for k, p in zip(mplan.seeds, mplan.plans)}
    np.testing.assert_array_equal(data[1].train.labels, ref_data.train.labels)  # same subset
    np.testing.assert_array_equal(data[1].train.images, ref_data.train.images)
    assert not np.array_equal(data[0].train.images, data[1].train.images)  # its own subset
    many.execute(mplan)
    # Every line of each model's banner starts with its seed (the two banners interleave).
    said = capsys.readouterr().out.splitlines()
    for k in (0, 1):
        banner = [x for x in said if x.startswith(f"seed {k}:   ")]
        assert any(x.startswith(f"seed {k}:   model: cnn") for x in banner), said
    assert not [x for x in said if x.startswith("  ")], said
    mplan = many.check(tiny(seeds=(0, 1), epochs=2, seeds_strategy="loop"), workdir)
    assert [p.stages[0].experiment.restored.step for p in mplan.plans] == [4, 4]
    summary = many.execute(mplan)

    assert sorted(os.listdir(workdir)) == ["seed_0", "seed_1", "seeds.json"]
    mine = os.path.join(workdir, "seed_1")
    with (
        open(os.path.join(mine, "config.json")) as f,
        open(os.path.join(ref_dir, "config.json")) as g,
    ):
        assert json.load(f) == json.load(g)  # the single run's config, seed 1
    with (
        open(os.path.join(mine, "results.json")) as f,
        open(os.path.join(ref_dir, "results.json")) as g,
    ):
        got, want = json.load(f), json.load(g)
    for key in ("test_error", "val_error", "n_train", "seed", "steps", "epochs", "params"):
        assert got[key] == want[key], key
    assert [(r["step"], r["split"]) for r in records(mine)] == [
        (r["step"], r["split"]) for r in records(ref_dir)
    ]
    # The single run's own compiled step: bit for bit on CPU. On a GPU each compilation may
    # pick other convolution algorithms (measured on an H100: 2.6e-8 apart after 8 steps).
    assert_same_arithmetic(params(mine), params(ref_dir))
    assert summary["test_errors"]["1"] == want["test_error"]
    assert summary["test_error"] == pytest.approx(np.mean(list(summary["test_errors"].values())))
    assert set(checkpoint.list_steps(mine)) >= {4, 8}


@pytest.mark.slow
def test_model_k_of_a_vmapped_run_matches_the_single_run(single1, tmp_path):
    ref_dir, _ = single1
    workdir = str(tmp_path / "v")
    config = tiny(seeds=(1, 2), seeds_strategy="vmap")
    config.train.checkpoint_every_epochs = 2  # the run's parameters do not depend on saves
    # nor on validations: epoch 1's end then neither saves nor validates, so the stacked states
    # stay stacked through it (lockstep: split only where read), as at N_t <= B every step
    config.train.eval_every_epochs = 2
    summary = many.execute(many.check(config, workdir))
    assert summary["strategy"] == "vmap"
    mine = os.path.join(workdir, "seed_1")
    assert checkpoint.list_steps(mine) == [8]  # epoch 2 (the last) only
    with open(os.path.join(mine, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    assert [(r["epoch"], r["split"]) for r in rows if not r.get("final")] == [
        (1, "train"),
        (2, "train"),
        (2, "val"),
    ]
    # A vmapped convolution is a grouped one: other summation order, float32 rounding only.
    assert_params_close(params(mine), params(ref_dir), rtol=1e-3, atol=2e-5)
    with open(os.path.join(ref_dir, "results.json")) as f:
        want = json.load(f)
    with open(os.path.join(mine, "results.json")) as f:
        got = json.load(f)
    assert got["seed"] == 1 and got["steps"] == want["steps"] == 8
    assert abs(got["test_error"] - want["test_error"]) <= 0.6  # at most 2 of 359 test digits


@pytest.mark.slow
def test_vmapped_models_validate_their_own_state_between_saves(single1, tmp_path):
    """An epoch end that validates but does not save hands each model its state first (epoch 2
    here; epoch 1 neither validates nor saves, so it keeps them stacked): the validation of
    epoch 2 is the single run's, not that of a stale state."""
    ref_dir, _ = single1
    config = tiny(seeds=(1, 2), epochs=3, seeds_strategy="vmap")
    config.train.eval_every_epochs = 2
    config.train.checkpoint_every_epochs = 3
    many.execute(many.check(config, str(tmp_path / "v")))

    def val_loss(run_dir, epoch):
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            rows = [json.loads(line) for line in f]
        val = [r for r in rows if r["split"] == "val" and not r.get("final")]
        (loss,) = [r["loss"] for r in val if r["epoch"] == epoch]
        return loss

    mine = str(tmp_path / "v" / "seed_1")
    assert val_loss(mine, 2) == pytest.approx(val_loss(ref_dir, 2), rel=1e-3)


def test_model_config_is_the_single_runs():
    c = tiny(seeds=(3, 4), realisation_from_seed=True, seeds_strategy="vmap")
    m = many.model_config(c, 4)
    assert (m.seed, m.data.seed, m.data.realisation) == (4, 4, 4)
    assert (m.seeds, m.realisation_from_seed, m.seeds_strategy) == (None, None, None)
    assert (c.seed, c.data.realisation) == (0, 0)  # the command's config is left alone
    assert many.split(tiny(seeds=(5,)))[1].seed == 5  # one seed: the single run with that seed
    plain = tiny()
    assert many.split(plain) == (None, plain)


@pytest.mark.parametrize(
    "seeds, words",
    [
        ((), "is empty"),
        ((0, 1, 1), "repeats [1]"),
        ((0, -1), "(-1)"),
        ((0, 1.5), "(1.5)"),
        (("a,b",), "('a,b')"),
        ((True, 2), "(True)"),
    ],
)
def test_bad_seeds_are_refused(seeds, words):
    with pytest.raises(ValueError, match="seeds=") as e:
        many.split(tiny(seeds=seeds))
    assert words in str(e.value)


@pytest.mark.slow
def test_bad_seeds_stop_the_command_before_compute(tmp_path):
    workdir = tmp_path / "w"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "invjax.main",
            "--config=configs/digits_cnn.py",
            f"--workdir={workdir}",
            "--config.seeds=0,2,2",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "seeds=(0, 2, 2) repeats [2]" in proc.stderr
    assert not workdir.exists()


SPREAD = """
import json, sys
import jax, numpy as np
sys.path.insert(0, {tests!r})
from test_many_models import tiny, params
from invjax.training import lockstep, many

summary = many.execute(many.check(tiny(seeds=(1, 2), seeds_strategy="vmap"), {k!r}))
diff = max(
    float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
    for a, b in zip(jax.tree.leaves(params({k!r} + "/seed_1")), jax.tree.leaves(params({ref!r})))
)
print(json.dumps({{"devices": jax.device_count(), "mesh": dict(lockstep.model_mesh(2).shape),
                  "diff": diff, "strategy": summary["strategy"]}}))
"""


@pytest.mark.slow
def test_models_spread_over_two_devices(single1, tmp_path):
    """2 forced CPU devices: a ('model', 'data') mesh of 2 x 1 puts one model on each device;
    model 1 matches the single run with seed 1 (on one device)."""
    script = SPREAD.format(tests=os.path.join(REPO, "tests"), ref=single1[0], k=str(tmp_path / "k"))
    env = dict(
        os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["devices"] == 2 and out["mesh"] == {"model": 2, "data": 1}
    assert out["strategy"] == "vmap"
    if jax.default_backend() == "cpu":  # the reference ran here: on a GPU it is another arithmetic
        assert out["diff"] < 1e-4


@pytest.mark.slow
def test_the_command_prints_each_model_then_the_mean(tmp_path):
    workdir = tmp_path / "w"
    cmd = [sys.executable, *command(workdir, "--config.train.num_epochs=1", "--config.seeds=3,4")]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.strip().splitlines()[-3:]
    errors = []
    for seed, line in zip((3, 4), last):
        with open(workdir / f"seed_{seed}" / "results.json") as f:
            r = json.load(f)
        assert line == f"seed={seed} test_error={r['test_error']:.2f}%"
        assert r["overrides"]["seed"] == seed and "seeds" not in r["overrides"]
        errors.append(r["test_error"])
    assert last[2] == f"test_error={np.mean(errors):.2f}%"
    # Every progress, evaluation and final line names the model it belongs to.
    lines = proc.stdout.splitlines()
    for seed in (3, 4):
        for start in ("step 4/4 (epoch 1.00): loss", "epoch 1 step 4 val: loss", "final: test"):
            assert sum(line.startswith(f"seed {seed}: {start}") for line in lines) == 1, start
    unlabelled = [line for line in lines if line.startswith(("step ", "epoch ", "final:"))]
    assert not unlabelled
    with open(workdir / "seeds.json") as f:
        assert json.load(f)["test_error"] == pytest.approx(np.mean(errors))
    assert not (workdir / "invjax.lock").exists()


def test_dry_run_describes_every_model_and_writes_nothing(tmp_path):
    from invjax import train

    workdir = str(tmp_path / "w")
    text = train.dry_run(tiny(seeds=(3, 4)), workdir, describe)
    assert text.startswith("dry run: 2 models (seeds 3, 4) of one config in one program")
    assert f"seed 4 in {workdir}/seed_4:" in text and f"run: {workdir}/seed_3 (fresh start)" in text
    assert not os.path.exists(workdir)


def test_checkpoint_every_epochs_saves_every_nth_epoch_end_and_the_last():
    from ml_collections import ConfigDict

    from invjax.training.loop import checkpoint_due
    from invjax.training.optimizer import validate_train_config

    tc = ConfigDict({"checkpoint_every_steps": 0, "checkpoint_every_epochs": 3})
    due = [s for s in range(1, 4 * 7 + 1) if checkpoint_due(s, 4, 28, tc)]
    assert due == [12, 24, 28]
    tc.checkpoint_every_steps = 10
    assert [s for s in range(1, 29) if checkpoint_due(s, 4, 28, tc)] == [10, 12, 20, 24, 28]
    bad = tiny().train
    bad.checkpoint_every_epochs = 0
    with pytest.raises(ValueError, match="train.checkpoint_every_epochs=0 is invalid"):
        validate_train_config(bad)


@pytest.mark.slow
def test_sigterm_saves_every_model_at_its_step_and_the_rerun_resumes_them(single1, tmp_path):
    """A K-model command that receives SIGTERM after step 3 (tests/faults.py) saves each model
    at step 3 and exits 143; the same command resumes both, and model 1 ends as the single run
    with seed 1 (bit for bit on CPU, the same compiled step)."""
    workdir = tmp_path / "w"
    args = command(
        workdir,
        "--config.train.eval_batch_size=200",
        "--config.train.num_epochs=2",
        "--config.train.log_every_steps=0",
        "--config.precision=highest",
        "--config.seeds=0,1",
        "--config.seeds_strategy=loop",
    )
    faults = os.path.join(REPO, "tests", "faults.py")
    stopped = subprocess.run(
        [sys.executable, faults, "sigterm_after_step:3", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert "seed 0 after step 3, seed 1 after step 3" in stopped.stderr, stopped.stderr[-2000:]
    for seed in (0, 1):
        assert checkpoint.list_steps(str(workdir / f"seed_{seed}"))[-1] == 3
        assert not (workdir / f"seed_{seed}" / "results.json").exists()
    resumed = subprocess.run(
        [sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    for seed in (0, 1):
        where = workdir / f"seed_{seed}" / "checkpoints"
        assert f"resuming from the checkpoint of step 3 in {where}" in resumed.stdout, seed
    assert_same_arithmetic(params(str(workdir / "seed_1")), params(single1[0]))


def tiny_monomials(seeds=None, **extra):
    """The study's monomial network (configs/digits_monomials.py) at width 4, without its x2
    upsampling, on 30 digits: one step per epoch, 4 epochs, pruning after epochs 1 and 3, a
    save and a validation at 4."""
    model = dict(widths=(4, 4, 4), hidden=8, prune_epochs=(1, 3), upsample="none")
    train = dict(batch_size=30, num_epochs=4, eval_every_epochs=4, checkpoint_every_epochs=4)
    return digits_config("digits_monomials", seeds, 30, model, train, extra)


@pytest.mark.slow
def test_vmapped_models_stay_stacked_where_the_epoch_hook_does_nothing(tmp_path, monkeypatch):
    """The monomial network's epoch-end hook prunes only after its ``prune_epochs``
    (``acts_at_epoch_end``): K vmapped models get their own states back there and at the last
    epoch's save, not at every epoch end (each of which is a step here, N_t = B), and each model
    is pruned and trained as the single run with its seed."""
    from invjax.training import lockstep

    handed_back = []
    unstack = lockstep._Stacked.unstack

    def counting(self):
        handed_back.append(self.state is not None)
        unstack(self)

    monkeypatch.setattr(lockstep._Stacked, "unstack", counting)
    workdir = str(tmp_path / "v")
    summary = many.execute(many.check(tiny_monomials((0, 1), seeds_strategy="vmap"), workdir))
    assert summary["strategy"] == "vmap"
    # epochs 1 and 3 prune, 4 saves and validates; epoch 2 keeps the states stacked
    assert sum(handed_back) == 3
    monkeypatch.setattr(lockstep._Stacked, "unstack", unstack)
    single = tiny_monomials()
    single.seed = 1
    plan_lib.execute(plan_lib.check(single, str(tmp_path / "s")))
    mine = checkpoint.restore_latest(os.path.join(workdir, "seed_1")).state
    ref = checkpoint.restore_latest(str(tmp_path / "s")).state
    mask = mine["extra"]["ii_mask"]["ii"]["mask"]
    assert int(np.sum(mask)) == 5  # 25 -> 12 -> 5 pairs
    np.testing.assert_array_equal(mask, ref["extra"]["ii_mask"]["ii"]["mask"])
    # Two biases have a zero gradient by construction (each feeds a BatchNorm: conv3's feeds
    # bn3, bn_ii's feeds fc1 then bn_fc1), so theirs is rounding noise, which Adam scales up to
    # steps of the learning rate's size: seen 2e-3 apart after 4 steps, with or without the
    # epoch-end change (the loop strategy matches the single run bit for bit). Every other
    # parameter is held to float32 rounding.
    noise = (("conv3", "bias"), ("bn_ii", "bias"))

    def without_noise(p):
        return {m: {k: v for k, v in d.items() if (m, k) not in noise} for m, d in p.items()}

    assert_params_close(without_noise(mine["params"]), without_noise(ref["params"]), 1e-3, 2e-5)


@pytest.mark.slow
def test_commands_name_the_folder_that_fits_a_folder_of_k_models(tmp_path):
    """The folder of a run of seeds 0, 1 (its record): the same command without
    ``--config.seeds`` is refused (it trained a fresh seed-0 run there), naming the command
    that fits; exporting or measuring the folder names ``DIR/seed_<k>``. Each one line, exit 2,
    before any compute, nothing written."""
    workdir = tmp_path / "k"
    (workdir / "seed_0").mkdir(parents=True)
    (workdir / "run_kind.json").write_text(json.dumps({"kind": "seeds", "seeds": [0, 1]}))
    before = sorted(str(p) for p in workdir.rglob("*"))

    def one_line(*argv):
        proc = subprocess.run(
            [sys.executable, *argv], cwd=REPO, capture_output=True, text=True, timeout=240
        )
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        return line

    line = one_line(*command(workdir))
    assert line == (
        f"invjax: error: --workdir={workdir} holds the models of seeds 0,1 (a run of "
        "--config.seeds, run_kind.json): resume them with --config.seeds=0,1, or give "
        f"--workdir={workdir / 'seed_0'} for the single run of one seed, or choose a new --workdir"
    )
    hint = f"give one model's run, --workdir={workdir / 'seed_<k>'} (e.g. {workdir / 'seed_0'})"
    line = one_line("-m", "invjax.export", f"--workdir={workdir}", f"--out={tmp_path / 'x'}")
    assert line.startswith("invjax.export: error: ") and line.endswith(hint), line
    line = one_line(
        "-m", "invjax.invariance", "--config=configs/digits_cnn.py", f"--workdir={workdir}",
        "--config.data.name=digits",
    )  # fmt: skip
    assert line.startswith("invjax.invariance: error: ") and line.endswith(hint), line
    assert sorted(str(p) for p in workdir.rglob("*")) == before
    assert not (tmp_path / "x").exists()
