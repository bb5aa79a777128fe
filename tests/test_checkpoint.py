"""Checkpoints in a real (tiny) training run: epoch-end hooks, best-model loading, a corrupt latest
checkpoint, unreadable checkpoints, NaN losses, and bad input that must not touch the workdir."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import runpy
import shutil
import subprocess
import time

import faults
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_runs import SHARED_RUN, one_line_error, run_module

from invjax import checkpoint, data, models, train
from invjax import workdir as workdir_lib
from invjax.contract import EpochHooks
from invjax.models.simple import SimpleCNN
from invjax.training import loop
from invjax.training.experiment import prepare
from invjax.training.loop import NonFiniteLossError, restore_metrics
from invjax.training.state import init_variables

# Reading a damaged checkpoint fails inside tensorstore; orbax's other pending reads then call
# back into an asyncio loop that is already closed ("Event loop is closed", ignored at garbage
# collection). The restore itself has failed cleanly by then: that is what the tests check.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOOK_CALLS: list[int] = []


class HookedCNN(EpochHooks, nn.Module):
    """The tiny CNN plus a ``counters`` collection that its ``on_epoch_end`` sets."""

    width: int = 4
    num_classes: int = 10

    @nn.compact
    def __call__(self, x, train: bool = False):
        n = self.variable("counters", "epochs", lambda: jnp.zeros((), jnp.float32))
        return SimpleCNN(self.num_classes, self.width)(x, train) + 0.0 * n.value

    def on_epoch_end(self, variables, epochs_done, images):
        HOOK_CALLS.append(epochs_done)
        assert images.shape == (32, 28, 28, 1) and images.dtype == jnp.float32
        return {**variables, "counters": {"epochs": jnp.asarray(float(epochs_done))}}


models.register("test_hooked_cnn")(
    lambda cfg: HookedCNN(width=cfg.get("width", 4), num_classes=cfg.num_classes)
)


def tiny_config(**train_kw):
    """digits, 100 training images, batch 32 -> 4 steps per epoch; 2 epochs; width 4."""
    config = runpy.run_path(os.path.join(REPO, "configs", "digits_cnn.py"))["get_config"]()
    config.data.name = "digits"
    config.data.n_train = 100
    config.model.width = 4
    config.train.update(
        dict(
            batch_size=32,
            eval_batch_size=200,
            num_epochs=2,
            lr_boundaries=(1,),
            log_every_steps=0,
            checkpoint_every_steps=3,
            keep_checkpoints=3,
        )
    )
    config.train.update(train_kw)
    return config


def snapshot(workdir):
    """{relative path: sha256} of every file (and every directory name) under workdir."""
    out = {}
    for root, dirs, files in os.walk(workdir):
        for d in dirs:
            out[os.path.relpath(os.path.join(root, d), workdir) + "/"] = ""
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, workdir)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def corrupt(workdir, step, flip=False):
    """Damage a step's state: overwrite every array file with garbage, or (``flip``) invert one
    byte of the largest one (same size: only the checksum manifest can tell)."""
    state_dir = os.path.join(checkpoint.checkpoint_dir(workdir), str(step), "state")
    files = []
    for root, _, names in os.walk(state_dir):
        if os.path.basename(root) == "d":
            files += [os.path.join(root, f) for f in names]
    assert files
    if flip:
        path = max(files, key=os.path.getsize)
        raw = bytearray(open(path, "rb").read())
        raw[len(raw) // 2] ^= 0xFF
        open(path, "wb").write(bytes(raw))
        return
    for path in files:
        with open(path, "wb") as fh:
            fh.write(b"not a checkpoint")


def leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def assert_bit_identical(a, b):
    la, lb = leaves(a), leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes()


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 2-epoch run of the hooked model with best-model selection."""
    workdir = str(tmp_path_factory.mktemp("run"))
    config = tiny_config(select_best=True)
    config.model.name = "test_hooked_cnn"
    HOOK_CALLS.clear()
    results = train.train_and_evaluate(config, workdir)
    calls = list(HOOK_CALLS)
    final = checkpoint.restore_latest(workdir)
    return workdir, config, results, calls, final


@pytest.mark.slow
def test_saves_at_interval_and_epoch_ends_keeping_n(finished):
    workdir, _, results, _, final = finished
    # every 3 steps (3, 6) and at epoch ends (4, 8); keep_checkpoints=3 dropped step 3.
    assert checkpoint.list_steps(workdir) == [4, 6, 8]
    assert final.step == 8 and final.meta["epoch"] == 2 and int(final.state["step"]) == 8
    assert final.meta["config"]["train"]["checkpoint_every_steps"] == 3
    assert results["steps"] == 8 and results["epochs"] == 2


@pytest.mark.slow
def test_on_epoch_end_runs_and_persists(finished):
    _, _, _, calls, final = finished
    assert calls == [0, 1, 2]  # before the first step, then after each epoch
    assert float(final.state["extra"]["counters"]["epochs"]) == 2.0


@pytest.mark.slow
def test_load_params_gives_the_selected_variables(finished):
    workdir, _, results, _, final = finished
    variables = checkpoint.load_params(workdir)
    assert set(variables) == {"params", "batch_stats", "counters"}
    assert_bit_identical(variables["params"], final.state["best"]["params"])
    assert results["selected_epoch"] in (1, 2)


@pytest.mark.slow
def test_corrupt_latest_checkpoint_is_skipped_with_warning(finished, tmp_path, caplog):
    workdir0, config, results0, _, final0 = finished
    workdir = str(tmp_path / "run")
    shutil.copytree(workdir0, workdir)
    corrupt(workdir, 8)
    # As if killed between orbax's save and the manifest: orbax itself must notice the damage.
    os.remove(os.path.join(workdir, checkpoint.MANIFEST_SUBDIR, "8.json"))
    with caplog.at_level(logging.WARNING):
        restored = checkpoint.restore_latest(workdir)
    assert restored.step == 6 and restored.skipped[0][0] == 8
    assert any(
        "step 8" in r.getMessage() and "is not used" in r.getMessage() for r in caplog.records
    )
    # Resuming from step 6 redoes steps 7, 8 and ends bit-identical to the uninterrupted run;
    # the damaged step is moved aside, not deleted.
    results = train.train_and_evaluate(config, workdir)
    again = checkpoint.restore_latest(workdir)
    assert again.step == 8 and not again.skipped
    assert_bit_identical(again.state, final0.state)
    assert results["test_error"] == results0["test_error"]
    moved = os.listdir(os.path.join(workdir, checkpoint.CORRUPT_SUBDIR))
    assert len(moved) == 1 and moved[0].startswith("8-")


@pytest.mark.slow
def test_unreadable_checkpoints_stop_before_compute(finished, tmp_path):
    workdir0, config, _, _, _ = finished
    workdir = str(tmp_path / "run")
    shutil.copytree(workdir0, workdir)
    corrupt(workdir, 4, flip=True)
    corrupt(workdir, 6)
    corrupt(workdir, 8)
    before = snapshot(workdir)
    with pytest.raises(checkpoint.CheckpointError) as err:
        prepare(config, workdir)
    msg = str(err.value)
    assert msg.startswith(f"no readable checkpoint in {checkpoint.checkpoint_dir(workdir)}")
    assert "steps [4, 6, 8] all failed" in msg and "Nothing was changed" in msg
    assert "differs from when it was saved" in msg  # the flipped byte of step 4
    assert snapshot(workdir) == before


@pytest.mark.slow
@pytest.mark.parametrize(
    "change, match",
    [
        (("data", "n_train", 105), r"n_train=105 cannot be split evenly over the 10 classes"),
        (("data", "name", "cifar100"), r"unknown dataset 'cifar100'"),
        (("model", "name", "test_rgb32"), r"cannot take images of shape \(2, 28, 28, 1\)"),
        (("model", "num_classes", 7), r"model.num_classes=7 but dataset 'digits' has 10"),
        (("train", "batch_size", -4), r"train.batch_size=-4 is invalid"),
        (("model", "width", 6), r"holds checkpoints of a different experiment \(model.width: 4"),
        (("train", "trainable", ("stream",)), r"prefix 'stream' matches no parameter"),
    ],
)
def test_bad_input_stops_before_compute_without_touching_checkpoints(finished, change, match):
    workdir, config, _, _, _ = finished
    config = config.copy_and_resolve_references()
    section, key, value = change
    with config.unlocked():
        config[section][key] = value
    before = snapshot(workdir)
    with pytest.raises(ValueError, match=match):
        prepare(config, workdir)
    assert snapshot(workdir) == before


class RGB32(nn.Module):
    """A model that only takes 32x32 RGB images (flattens to a fixed size)."""

    num_classes: int = 10

    @nn.compact
    def __call__(self, x, train: bool = False):
        return nn.Dense(self.num_classes)(x.reshape(x.shape[0], 32 * 32 * 3))


models.register("test_rgb32")(lambda cfg: RGB32(cfg.num_classes))


@pytest.mark.slow
def test_nan_loss_stops_naming_the_step_and_keeps_last_good_checkpoint(tmp_path):
    workdir = str(tmp_path / "run")
    config = tiny_config(checkpoint_every_steps=2)
    exp = prepare(config, workdir)
    ds = exp.dataset
    # Batch 4 (step 4) of epoch 0 is order[96:100] + order[0:28]: sample order[97] is first
    # seen there. A label outside 0..9 makes that step's cross-entropy NaN. (A NaN *pixel* is
    # not a reliable trigger on CPU: XLA's fast min/max lets ReLU turn NaN into 0.)
    j = int(data.epoch_order(len(ds.train), config.seed, 0)[97])
    labels = ds.train.labels.copy()
    labels[j] = 99
    exp.dataset = dataclasses.replace(ds, train=data.Split(ds.train.images, labels))
    with pytest.raises(NonFiniteLossError, match=r"loss is nan at step 4 .*step 2\) is kept"):
        loop.run(exp)
    assert checkpoint.list_steps(workdir) == [2]
    kept = checkpoint.restore_latest(workdir)
    assert all(np.isfinite(x).all() for x in leaves(kept.state["params"]))


class TwoStream(nn.Module):
    """Phase 2 of multi-stream training in miniature: stream ``a`` is loaded from a finished run
    and frozen (run with ``train=False``, so its BatchNorm statistics stay), ``b`` and the head
    train."""

    @nn.compact
    def __call__(self, x, train: bool = False):
        a = SimpleCNN(10, 4, name="a")(x, False)
        b = SimpleCNN(10, 4, name="b")(x, train)
        return nn.Dense(10, name="head")(jnp.concatenate([a, b], -1))


models.register("test_two_stream")(lambda cfg: TwoStream())


@pytest.mark.slow
def test_phase_two_loads_a_stream_and_keeps_it_frozen(finished, tmp_path):
    stream_dir = finished[0]
    source = checkpoint.load_params(stream_dir)  # the stream run's selected variables
    config = tiny_config(
        init_from=((stream_dir, "SimpleCNN_0", "a"),), trainable=("b", "head"), num_epochs=1
    )
    config.model.name = "test_two_stream"
    config.train.lr_boundaries = ()
    workdir = str(tmp_path / "phase2")
    results = train.train_and_evaluate(config, workdir)
    state = checkpoint.restore_latest(workdir).state
    assert_bit_identical(state["params"]["a"], source["params"]["SimpleCNN_0"])
    assert_bit_identical(state["batch_stats"]["a"], source["batch_stats"]["SimpleCNN_0"])
    fresh = jax.eval_shape(lambda: init_variables(TwoStream(), (28, 28, 1), jax.random.PRNGKey(0)))
    n_a = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(fresh["params"]["a"]))
    assert results["trainable_params"] == results["params"] - n_a
    # Between the checkpoints of steps 3 and 4, b and the head trained, a did not.
    before = checkpoint.restore_step(workdir, 3).state
    assert_bit_identical(before["params"]["a"], state["params"]["a"])
    for part in ("b", "head"):
        for x, y in zip(leaves(before["params"][part]), leaves(state["params"][part])):
            assert not np.array_equal(x, y), part


@pytest.mark.slow
def test_a_step_without_manifest_is_not_loaded_unless_trusted(finished, tmp_path, caplog):
    workdir0, *_ = finished
    workdir = str(tmp_path / "run")
    shutil.copytree(workdir0, workdir)
    with caplog.at_level(logging.WARNING):
        checkpoint.restore_latest(workdir)
    assert not [r for r in caplog.records if "integrity manifest" in r.getMessage()]
    corrupt(workdir, 8, flip=True)
    with caplog.at_level(logging.WARNING):  # with its manifest: the step is refused
        assert checkpoint.restore_latest(workdir).step == 6
    caplog.clear()
    manifest = os.path.join(workdir, checkpoint.MANIFEST_SUBDIR, "8.json")
    os.remove(manifest)
    with caplog.at_level(logging.WARNING):  # without: not trusted either, step 6 is loaded
        restored = checkpoint.restore_latest(workdir)
    assert restored.step == 6 and restored.skipped[0][0] == 8
    assert f"it has no integrity manifest ({manifest})" in restored.skipped[0][1]
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("checkpoint step 8 in ") and "is not used" in m for m in messages)
    # Only explicitly: for one call, or by recording the step's manifest as its files are now.
    assert checkpoint.restore_latest(workdir, allow_unverified=True).step == 8
    with pytest.raises(checkpoint.CheckpointError, match="has a manifest \\(verified\\)"):
        checkpoint.trust_step(workdir, 6)
    checkpoint.trust_step(workdir, 8)
    assert checkpoint.verify_manifest(workdir, 8) is None
    assert checkpoint.restore_latest(workdir).step == 8


@pytest.mark.slow
def test_a_step_killed_before_its_manifest_is_not_loaded_until_trusted(finished, tmp_path, caplog):
    """A kill between orbax's commit and the manifest leaves the save's pending marker and no
    manifest. The marker says why the manifest is missing, not that the files are sound, so the
    step is unverified: the newest verified step loads, the next writer sets the step aside
    (with its marker) and records nothing for it; ``trust_step`` alone certifies it."""
    workdir0, *_ = finished
    for trusted in (False, True):
        workdir = str(tmp_path / f"run{int(trusted)}")
        shutil.copytree(workdir0, workdir)
        manifests = os.path.join(workdir, checkpoint.MANIFEST_SUBDIR)
        os.remove(os.path.join(manifests, "8.json"))
        open(os.path.join(manifests, "8.pending"), "w").close()  # as Writer.save leaves it
        assert checkpoint.is_unrecorded(workdir, 8)
        if trusted:
            checkpoint.trust_step(workdir, 8)
            assert sorted(os.listdir(manifests)) == ["4.json", "6.json", "8.json"]
            assert checkpoint.verify_manifest(workdir, 8) is None
            assert checkpoint.restore_latest(workdir).step == 8
            continue
        with caplog.at_level(logging.WARNING):
            restored = checkpoint.restore_latest(workdir)
        assert restored.step == 6 and [s for s, _ in restored.skipped] == [8]
        assert "its save was interrupted before its integrity manifest" in restored.skipped[0][1]
        step_dir = os.path.join(checkpoint.checkpoint_dir(workdir), "8")
        files = snapshot(step_dir)
        checkpoint.Writer(workdir, keep=3, set_aside=restored.skipped).close()
        assert sorted(os.listdir(manifests)) == ["4.json", "6.json"]  # nothing recorded
        assert checkpoint.list_steps(workdir) == [4, 6]
        aside = os.path.join(workdir, checkpoint.CORRUPT_SUBDIR)
        moved = sorted(os.listdir(aside))
        assert len(moved) == 2 and moved[0].startswith("8-") and moved[1] == moved[0] + ".pending"
        assert snapshot(os.path.join(aside, moved[0])) == files  # kept, byte for byte
        with pytest.raises(checkpoint.CheckpointError, match=f"set aside as {aside}/8-"):
            checkpoint.trust_step(workdir, 8)


def _intact_manifest(workdir, step):
    with open(os.path.join(workdir, checkpoint.MANIFEST_SUBDIR, f"{step}.json")) as f:
        return json.load(f)


@pytest.mark.parametrize(
    "edit, why",
    [
        (lambda m: {}, "is malformed (it lists no files)"),
        (lambda m: [], "is malformed (a JSON list, not an object of files)"),
        (lambda m: None, "is malformed (a JSON NoneType, not an object of files)"),
        (lambda m: dict.fromkeys(m, "ok"), "is not [size, sha256]"),
        (lambda m: {k: [v[0], v[1][:8]] for k, v in m.items()}, "is not [size, sha256]"),
        (lambda m: dict(list(m.items())[1:]), "is not in its manifest"),  # a file unlisted
        (lambda m: {"state/extra": [1, "0" * 64], **m}, "file state/extra is missing"),
    ],
    ids=["empty", "list", "null", "strings", "short-sha", "unlisted-file", "extra-entry"],
)
def test_only_a_manifest_that_lists_every_file_verifies_a_step(finished, tmp_path, edit, why):
    """Step 8 damaged (one byte flipped), its manifest replaced by an edited one: never verified,
    so step 6 loads; ``trust_step`` refuses to replace the manifest (one CheckpointError)."""
    workdir0, *_ = finished
    workdir = str(tmp_path / "run")
    shutil.copytree(workdir0, workdir)
    corrupt(workdir, 8, flip=True)
    path = os.path.join(workdir, checkpoint.MANIFEST_SUBDIR, "8.json")
    edited = edit(_intact_manifest(workdir, 8))
    with open(path, "w") as f:
        json.dump(edited, f)
    problem = checkpoint.verify_manifest(workdir, 8)
    assert problem is not None and why in problem, problem
    restored = checkpoint.restore_latest(workdir)
    assert restored.step == 6 and restored.skipped == [(8, problem)]
    with pytest.raises(checkpoint.CheckpointError, match="has a manifest \\(not verified: "):
        checkpoint.trust_step(workdir, 8)
    assert checkpoint.verify_manifest(workdir, 8) == problem  # the manifest is left as it was


def test_the_config_is_read_from_a_verified_step(finished, tmp_path):
    """An edited config in the newest step's meta (its manifest intact, so the step is damaged)
    is not the run's config: the newest verified step's is."""
    workdir0, *_ = finished
    workdir = str(tmp_path / "run")
    shutil.copytree(workdir0, workdir)
    path = os.path.join(checkpoint.checkpoint_dir(workdir), "8", "meta", "metadata")
    with open(path) as f:
        meta = json.load(f)
    assert meta["config"]["model"]["width"] == 4
    meta["config"]["model"]["width"] = 6
    with open(path, "w") as f:
        json.dump(meta, f)
    assert "file meta/metadata " in checkpoint.verify_manifest(workdir, 8)
    assert checkpoint.read_config(workdir)["model"]["width"] == 4
    shutil.rmtree(os.path.join(workdir, checkpoint.MANIFEST_SUBDIR))  # none verified: the newest
    assert checkpoint.read_config(workdir)["model"]["width"] == 6


def test_every_saved_step_lists_all_its_files(finished):
    """The strict rule holds for what training writes: every step of the finished run (saved,
    reopened by later writers) has no file outside its manifest."""
    workdir, *_ = finished
    for step in checkpoint.list_steps(workdir):
        assert checkpoint.verify_manifest(workdir, step) is None
        step_dir = os.path.join(checkpoint.checkpoint_dir(workdir), str(step))
        files = {
            os.path.relpath(os.path.join(r, f), step_dir)
            for r, _, fs in os.walk(step_dir)
            for f in fs
        }
        assert set(_intact_manifest(workdir, step)) == files


@pytest.mark.slow
def test_no_verified_step_stops_naming_how_to_load_one(finished, tmp_path):
    workdir0, config, *_ = finished
    workdir = str(tmp_path / "run")
    shutil.copytree(workdir0, workdir)
    shutil.rmtree(os.path.join(workdir, checkpoint.MANIFEST_SUBDIR))
    before = snapshot(workdir)
    with pytest.raises(checkpoint.CheckpointError) as err:
        prepare(config, workdir)
    msg = str(err.value)
    assert "steps [4, 6, 8] all failed: step 8: it has no integrity manifest" in msg
    assert f"python -m invjax.checkpoint --workdir={workdir} --trust_step=8" in msg
    assert snapshot(workdir) == before


@pytest.mark.slow
def test_manifests_work_through_epath_on_a_remote_path(finished, tmp_path):
    """Manifest writing and checking on ``gs://bucket/run``, its etils.epath backend mocked onto
    a local copy (a real bucket is not reachable here; the arrays stay orbax's business)."""
    from etils.epath import testing as epath_testing

    workdir0, *_ = finished
    local = str(tmp_path / "bucket")
    shutil.copytree(workdir0, os.path.join(local, "run"))
    calls = []

    def to_local(p):
        calls.append(str(p))
        return str(p).replace("gs://bucket", local)

    one = lambda fn, p, *a, **k: fn(to_local(p), *a, **k)  # noqa: E731
    two = lambda fn, p, q, *a, **k: fn(to_local(p), to_local(q), *a, **k)  # noqa: E731
    mocks = {n: one for n in ("open", "exists", "isdir", "listdir", "makedirs", "mkdir", "remove")}
    mocks.update(stat=one, rmtree=one, glob=one, rename=two, replace=two)
    remote = "gs://bucket/run"
    manifest = os.path.join(local, "run", checkpoint.MANIFEST_SUBDIR, "8.json")
    with epath_testing.mock_epath(**mocks):
        assert checkpoint.checkpoint_dir(remote) == "gs://bucket/run/checkpoints"
        assert checkpoint.verify_manifest(remote, 8) is None
        os.remove(manifest)
        checkpoint.write_manifest(remote, 8, kept_steps=[6, 7, 8])
        assert os.path.exists(manifest) and checkpoint.verify_manifest(remote, 8) is None
        corrupt(os.path.join(local, "run"), 8, flip=True)
        assert "differs from when it was saved" in checkpoint.verify_manifest(remote, 8)
    assert any(c.startswith("gs://bucket/run/checkpoints/8/state/") for c in calls)


def test_restore_metrics_rebuilds_repairs_or_keeps_the_history(tmp_path, caplog, capsys):
    recs = [
        {"step": s, "epoch": s // 4, "split": "val", "loss": 0.5, "error": 10.0} for s in (4, 8)
    ]
    path = tmp_path / "metrics.jsonl"
    text = "".join(json.dumps(r) + "\n" for r in recs)
    restored = checkpoint.Restored(8, None, {"records": recs}, [])
    # missing: rebuilt, with a message
    assert restore_metrics(str(tmp_path), restored) == recs
    assert path.read_text() == text and "was missing: rebuilt" in capsys.readouterr().err
    # later records (work about to be redone) and a line cut short: as the checkpoint says
    path.write_text(text + json.dumps(dict(recs[0], step=12)) + '\n{"step": 1')
    restore_metrics(str(tmp_path), restored)
    assert path.read_text().startswith(text)  # the Reporter drops step 12 itself
    assert not os.path.exists(str(path) + ".bak") and not capsys.readouterr().err
    # a lost record: rebuilt, the earlier file kept
    path.write_text(json.dumps(recs[1]) + "\n")
    restore_metrics(str(tmp_path), restored)
    assert path.read_text() == text
    assert open(str(path) + ".bak").read() == json.dumps(recs[1]) + "\n"
    assert "disagreed with the checkpoint" in capsys.readouterr().err
    # a checkpoint from before records were stored: the file is the history, or a warning
    old = checkpoint.Restored(8, None, {}, [])
    assert restore_metrics(str(tmp_path), old) == recs
    os.remove(path)
    with caplog.at_level(logging.WARNING):
        assert restore_metrics(str(tmp_path), old) == []
    assert any("holds no records to rebuild it" in r.getMessage() for r in caplog.records)


# ----------------------------------------------------------------------------- the commands


def _copy_run(tiny_digits_run, tmp_path):
    """A copy of conftest's finished tiny run (steps 2, 4, 6) and its manifests folder."""
    wd = str(tmp_path / "w")
    shutil.copytree(tiny_digits_run, wd)
    return wd, os.path.join(wd, checkpoint.MANIFEST_SUBDIR)


def _listing(wd):
    """``python -m invjax.checkpoint wd``: ``{step: its line}``."""
    proc = run_module("invjax.checkpoint", wd, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    return {int(x.split(":")[0].split()[1]): x for x in lines if x.startswith("step ")}


def _same_final_state(reference, wd):
    a, b = checkpoint.restore_latest(reference), checkpoint.restore_latest(wd)
    assert a.step == b.step == 6 and not b.skipped
    assert_bit_identical(a.state, b.state)


@pytest.mark.slow
@pytest.mark.parametrize("attack", ["stale pending marker", "empty manifest"])
def test_commands_neither_load_nor_certify_a_damaged_step(tiny_digits_run, tmp_path, attack):
    """The attack as a user makes it: one byte of step 6 flipped, then its manifest deleted and
    a ``6.pending`` marker made, or the manifest replaced by ``{}``. The listing says step 6 is
    not loaded; the run resumes from step 4 (exit 0), records no manifest for step 6, sets it
    aside byte for byte, and ends bit-identical to the undamaged run."""
    wd, manifests = _copy_run(tiny_digits_run, tmp_path)
    corrupt(wd, 6, flip=True)
    if attack == "empty manifest":
        with open(os.path.join(manifests, "6.json"), "w") as f:
            f.write("{}")
    else:
        os.remove(os.path.join(manifests, "6.json"))
        open(os.path.join(manifests, "6.pending"), "w").close()
    damaged = snapshot(os.path.join(checkpoint.checkpoint_dir(wd), "6"))
    lines = _listing(wd)
    assert lines[4] == "step 4: verified" and lines[2] == "step 2: verified"
    assert "not loaded" in lines[6] and "verified" not in lines[6], lines[6]
    proc = run_module("invjax.main", *SHARED_RUN, f"--workdir={wd}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resuming from the checkpoint of step 4" in proc.stdout, proc.stdout
    assert "recorded the missing manifest" not in proc.stderr
    assert "checkpoint step 6 in " in proc.stderr and "is not used" in proc.stderr
    aside = os.path.join(wd, checkpoint.CORRUPT_SUBDIR)
    (moved,) = [m for m in os.listdir(aside) if m.startswith("6-") and "." not in m]
    assert snapshot(os.path.join(aside, moved)) == damaged  # nothing saved is lost
    assert checkpoint.verify_manifest(wd, 6) is None  # the step saved again by the resumed run
    _same_final_state(tiny_digits_run, wd)


@pytest.mark.slow
def test_trust_step_on_a_malformed_manifest_is_one_line(tiny_digits_run, tmp_path):
    """``--trust_step`` over a manifest of ``[]``, ``{}`` or text that is not JSON: exit 2 and one
    line naming the manifest; the manifest is left as it was."""
    wd, manifests = _copy_run(tiny_digits_run, tmp_path)
    path = os.path.join(manifests, "6.json")
    for content, why in [
        ("[]", "is malformed (a JSON list, not an object of files)"),
        ("{}", "is malformed (it lists no files)"),
        ("not json", "is unreadable (JSONDecodeError"),
    ]:
        with open(path, "w") as f:
            f.write(content)
        proc = run_module("invjax.checkpoint", f"--workdir={wd}", "--trust_step=6", timeout=120)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith(
            f"invjax.checkpoint: error: checkpoint step 6 in {checkpoint.checkpoint_dir(wd)} "
            f"has a manifest (not verified: its manifest {path} {why}"
        ), line
        assert line.endswith("only a step without one can be trusted"), line
        assert open(path).read() == content
    usage = run_module("invjax.checkpoint", "--trust_step=x", timeout=120)  # a usage error
    assert usage.returncode == 2 and usage.stderr.strip().splitlines() == [
        "invjax.checkpoint: error: argument --trust_step: invalid int value: 'x' (see --help)"
    ], usage.stderr


@pytest.mark.slow
def test_a_run_killed_before_its_first_manifest_resumes_only_once_trusted(
    tiny_digits_run, tmp_path
):
    """A real kill (SIGKILL) between orbax's commit of step 2 (the first save) and its manifest
    (held open by tests/faults.py): step 2 and its pending marker remain. No step is verified,
    so the next start stops (exit 2, one line naming ``--trust_step=2``) and changes nothing;
    after ``--trust_step=2`` it resumes from step 2 and ends bit-identical to an unbroken run."""
    wd = str(tmp_path / "w")
    manifests = os.path.join(wd, checkpoint.MANIFEST_SUBDIR)
    argv = faults.command("pause_before_manifest:600", "invjax.main", *SHARED_RUN)
    proc = subprocess.Popen(
        [*argv, f"--workdir={wd}"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 240
        while not os.path.exists(os.path.join(manifests, "2.pending")) or not (
            os.path.isdir(os.path.join(checkpoint.checkpoint_dir(wd), "2"))
        ):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-3000:]
            time.sleep(0.05)
        time.sleep(0.5)  # orbax's commit is the rename to "2": it is complete
    finally:
        proc.kill()
        proc.communicate()
    assert checkpoint.list_steps(wd) == [2] and os.listdir(manifests) == ["2.pending"]
    assert "its save was interrupted before its integrity manifest" in _listing(wd)[2]
    before = snapshot(wd)
    line = one_line_error(run_module("invjax.main", *SHARED_RUN, f"--workdir={wd}"))
    assert "step 2: its save was interrupted" in line and "--trust_step=2" in line, line
    # Only the killed run's lock is gone (its holder is dead: the next start takes it over).
    assert snapshot(wd) == {k: v for k, v in before.items() if k != workdir_lib.LOCK_FILE}
    trust = run_module("invjax.checkpoint", f"--workdir={wd}", "--trust_step=2", timeout=120)
    assert trust.returncode == 0, trust.stderr[-3000:]
    assert "step 2: verified" in trust.stdout and os.listdir(manifests) == ["2.json"]
    again = run_module("invjax.main", *SHARED_RUN, f"--workdir={wd}")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming from the checkpoint of step 2" in again.stdout
    _same_final_state(tiny_digits_run, wd)
