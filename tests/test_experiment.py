"""Two-phase multi-stream training (invjax.training.plan) end to end on tiny digits networks:
phase 1 as separate runs, phase 2 on the frozen streams, reuse of finished phases, resume of
either phase (bit-identical to an uninterrupted run), each stage prepared once, and bad input
stopped before any compute.

The training runs are real ``python -m invjax.main`` commands; this file is their config file
(:func:`get_config`). They compile with XLA's backend optimisations off and share a persistent
compilation cache (a rerun compiles nothing): compiling, not computing, is what tiny networks
cost, and the numerics are those of the same flags in every run compared.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import runpy
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from invjax import checkpoint
from invjax.configs import common as invjax_configs_common
from invjax.training import plan
from invjax.training.experiment import flat_config

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "configs"
REPO = str(CONFIGS.parent)
common = vars(invjax_configs_common)
digits_std = runpy.run_path(str(CONFIGS / "digits_std.py"))

# 100 digits (no augmentation), batch 50: 2 steps per epoch; 2 epochs per stream and 2 for the
# head; widths 4 (E(2): 1-2 fields of D4).
EPOCHS = 2


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return dict(
        os.environ,
        XLA_FLAGS="--xla_backend_optimization_level=0",
        JAX_COMPILATION_CACHE_DIR=str(tmp_path_factory.mktemp("xla_cache")),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
    )


def tiny_stream(family):
    config = digits_std["get_config"]()
    config.data.name = "digits"
    config.data.n_train = 100
    model = digits_std["stream"](family)
    model.stem_width = 4
    config.model = model
    config.train.update(
        dict(
            batch_size=50,
            eval_batch_size=400,
            num_epochs=EPOCHS,
            lr_boundaries=(1,),
            log_every_steps=0,
        )
    )
    return config


def tiny_two_phase():
    streams = {"e2": tiny_stream("e2"), "std": tiny_stream("std")}
    config = tiny_stream("std")
    model = common["multistream"]({k: v.model for k, v in streams.items()})
    config = common["two_phase"](
        config,
        model,
        streams,
        batch_size=50,
        learning_rate=1e-2,
        weight_decay=1e-5,
        epoch_divisor=1,
    )
    config.lock()
    return config


def leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def assert_bit_identical(a, b):
    la, lb = leaves(a), leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def snapshot(workdir):
    out = {}
    for root, _, files in os.walk(workdir):
        for f in files:
            p = os.path.join(root, f)
            out[os.path.relpath(p, workdir)] = (os.path.getmtime(p), os.path.getsize(p))
    return out


def truncate(workdir, keep_step):
    """The run as a kill after its checkpoint ``keep_step`` leaves it: later steps and the
    results gone (the trainer's own SIGKILL tests cover kills at any instant)."""
    for step in checkpoint.list_steps(workdir):
        if step > keep_step:
            shutil.rmtree(os.path.join(checkpoint.checkpoint_dir(workdir), str(step)))
            manifest = os.path.join(workdir, checkpoint.MANIFEST_SUBDIR, f"{step}.json")
            if os.path.exists(manifest):
                os.remove(manifest)
    os.remove(os.path.join(workdir, "results.json"))


def get_config(stream=None):
    """The tiny two-phase config (``--config=tests/test_experiment.py``), or one of its streams
    alone (``--config=tests/test_experiment.py:std``)."""
    return tiny_stream(stream) if stream else tiny_two_phase()


def run(env, workdir, *overrides, entry=("-m", "invjax.main"), stream=""):
    """``python -m invjax.main`` (or another ``entry`` that runs its ``main``) with this file's
    config (of ``stream`` alone if given): ``(results, phase messages, stdout)``."""
    config = str(pathlib.Path(__file__).resolve()) + (f":{stream}" if stream else "")
    proc = subprocess.run(
        [
            sys.executable,
            *entry,
            f"--config={config}",
            f"--workdir={workdir}",
            *overrides,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    said = [x for x in lines if x.startswith(("[", "phase "))]
    results = json.load(open(os.path.join(workdir, "results.json")))
    assert lines[-1] == f"test_error={results['test_error']:.2f}%"
    return results, said, proc.stdout


COUNTING_MAIN = (
    "import atexit, json, os, sys\n"
    "from absl import app\n"
    "from invjax import data, main\n"
    "from invjax.data import subsets\n"
    "from invjax.training import plan\n"
    "calls = {'load': 0, 'limited_subset': 0, 'prepare': []}\n"
    "def counted(name, fn):\n"
    "    def call(*args, **kwargs):\n"
    "        if name == 'prepare':\n"
    "            calls[name].append(os.path.relpath(args[1], sys.argv[-1].split('=', 1)[1]))\n"
    "        else:\n"
    "            calls[name] += 1\n"
    "        return fn(*args, **kwargs)\n"
    "    return call\n"
    "data.load = counted('load', data.load)\n"
    "subsets.limited_subset = counted('limited_subset', subsets.limited_subset)\n"
    "plan.prepare = counted('prepare', plan.prepare)\n"
    "atexit.register(lambda: json.dump(calls, open(os.environ['COUNTS_FILE'], 'w')))\n"
    "app.run(main.main, argv=sys.argv, flags_parser=main._parse_flags)\n"
)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, env):
    """The reference: a fresh two-phase command, run through ``COUNTING_MAIN`` (invjax.main with
    pass-through counters; the other tests' fresh runs without them end bit-identical to it):
    ``(workdir, config, results, phase messages, calls)``."""
    root = tmp_path_factory.mktemp("two_phase")
    workdir, counts_file = str(root / "w"), root / "counts.json"
    results, said, _ = run(
        {**env, "COUNTS_FILE": str(counts_file)}, workdir, entry=("-c", COUNTING_MAIN)
    )
    return workdir, tiny_two_phase(), results, said, json.loads(counts_file.read_text())


@pytest.fixture(scope="module")
def finished(reference):
    """The reference run: ``(workdir, config, results, phase messages)``."""
    return reference[:4]


@pytest.mark.slow
def test_phase_one_streams_are_their_own_runs(finished):
    workdir, config, results, said = finished
    assert [m.split(" in ")[0] for m in said[::2]] == [
        "[1/3] phase 1: stream 'e2'",
        "[2/3] phase 1: stream 'std'",
        "[3/3] phase 2: combination head",
    ]
    for s in ("e2", "std"):
        sdir = os.path.join(workdir, "streams", s)
        r = json.load(open(os.path.join(sdir, "results.json")))
        assert r["epochs"] == EPOCHS and r["n_train"] == 100 and r["model"] == "wrn"
        assert r["stream"] == s and r["config_file"].endswith("tests/test_experiment.py")
        # The stream's own config: its model section, its recipe, the experiment's data.
        stored = checkpoint.read_config(sdir)
        assert stored["model"]["family"] == s and stored["data"] == config.data.to_dict()
        assert stored["train"]["phases"] == "single" and stored["train"]["trainable"] is None
        assert results["phase1"][s]["test_error"] == r["test_error"]
        assert results["phase1"][s]["workdir"] == sdir


@pytest.mark.slow
def test_phase_two_trains_only_the_head_on_the_loaded_streams(finished):
    workdir, config, results, _ = finished
    assert results["phases"] == "two_phase" and results["epochs"] == EPOCHS
    assert 0.0 <= results["test_error"] <= 100.0
    state = checkpoint.restore_latest(workdir).state
    for s in ("e2", "std"):
        source = checkpoint.load_params(os.path.join(workdir, "streams", s))
        # Frozen: parameters and BatchNorm statistics equal the stream run's selected variables
        # after both epochs of phase 2 (its classifier is not part of the multi-stream network).
        src = {k: v for k, v in source["params"].items() if k != "classifier"}
        assert_bit_identical(state["params"][s], src)
        assert_bit_identical(state["batch_stats"][s], source["batch_stats"])
    n_head = sum(x.size for x in leaves({k: state["params"][k] for k in ("head", "classifier")}))
    assert results["trainable_params"] == n_head < results["params"]
    total = results["phase2_wall_time_s"] + sum(
        v["wall_time_s"] for v in results["phase1"].values()
    )
    assert results["wall_time_s"] == pytest.approx(total)
    stored = checkpoint.read_config(workdir)
    assert [tuple(x) for x in stored["train"]["init_from"]] == [
        (os.path.join(workdir, "streams", s), "", s) for s in ("e2", "std")
    ]
    # The contract's results.json is the combined one.
    assert json.load(open(os.path.join(workdir, "results.json")))["phase1"] == results["phase1"]


@pytest.mark.slow
def test_the_job_logs_its_remaining_steps_and_eta(finished):
    """A multi-stage job once had no ETA for the whole job. Each stage's line names the
    job's remaining steps (2 streams and the head, 2 epochs of 2 steps each: 12) and, from the
    second stage on, the job's ETA at the rate so far."""
    _, _, _, said = finished
    starts = [m for m in said if m.startswith("[")]
    assert starts[0].endswith("; job: 12 of 12 steps left (job ETA after the first stage)")
    assert re.search(r"; job: 8 of 12 steps left, job ETA \d+:\d\d:\d\d at the rate", starts[1])
    assert re.search(r"; job: 4 of 12 steps left, job ETA \d+:\d\d:\d\d at the rate", starts[2])


@pytest.mark.slow
def test_finished_phases_are_reused_not_recomputed(finished, env):
    workdir, config, results, _ = finished
    before = snapshot(workdir)
    again, said, _ = run(env, workdir)
    assert len(said) == 3 and all("finished before, reused" in m for m in said)
    after = snapshot(workdir)
    changed = [k for k in after if after[k] != before.get(k)]
    assert changed in ([], ["results.json"]) and set(after) == set(before)
    for k in ("test_error", "val_error", "params", "phase1", "wall_time_s"):
        assert again[k] == results[k]


@pytest.mark.slow
def test_restart_resumes_phase_two(finished, env, tmp_path):
    ref_dir, config, results, _ = finished
    # Phase 1 from the reference's finished stream runs (config.phase1.<stream>.workdir).
    reuse = [f"--config.phase1.{s}.workdir={ref_dir}/streams/{s}" for s in ("e2", "std")]
    workdir = str(tmp_path / "w")
    full, said, _ = run(env, workdir, *reuse)
    assert all("finished before, reused" in m for m in said[:2]) and "reused" not in said[2]
    assert not os.path.exists(os.path.join(workdir, "streams"))
    assert full["phase1"] == results["phase1"]
    ref_state = checkpoint.restore_latest(ref_dir).state
    assert_bit_identical(checkpoint.restore_latest(workdir).state, ref_state)
    # Killed after phase 2's first epoch: the restart resumes phase 2 there.
    first = checkpoint.list_steps(workdir)[0]
    truncate(workdir, first)
    resumed, said, out = run(env, workdir, *reuse)
    assert f"resuming from the checkpoint of step {first}" in out
    assert all("finished before, reused" in m for m in said[:2]) and "reused" not in said[2]
    assert_bit_identical(checkpoint.restore_latest(workdir).state, ref_state)
    assert resumed["test_error"] == results["test_error"]


@pytest.mark.slow
def test_restart_resumes_phase_one_then_trains_phase_two(finished, env, tmp_path):
    ref_dir, config, results, _ = finished
    workdir = str(tmp_path / "w")
    os.makedirs(workdir)
    shutil.copytree(os.path.join(ref_dir, "streams"), os.path.join(workdir, "streams"))
    std_dir = os.path.join(workdir, "streams", "std")
    first = checkpoint.list_steps(std_dir)[0]
    truncate(std_dir, first)  # killed during the std stream's second epoch
    resumed, said, out = run(env, workdir)
    assert "finished before, reused" in said[0] and "reused" not in said[1]
    assert f"resuming from the checkpoint of step {first}" in out
    for sub in ("streams/std", ""):
        assert_bit_identical(
            checkpoint.restore_latest(os.path.join(workdir, sub)).state,
            checkpoint.restore_latest(os.path.join(ref_dir, sub)).state,
        )
    assert resumed["test_error"] == results["test_error"]
    assert resumed["phase1"]["std"]["test_error"] == results["phase1"]["std"]["test_error"]


@pytest.mark.slow
def test_the_validation_interval_does_not_change_training(env, tmp_path):
    """``train.eval_every_epochs`` is among the keys a run may change on resume
    (``RESUMABLE_KEYS``), and the studies' tuning reads only the last epoch's held-out error: so
    without best-epoch selection (which chooses among the validated epochs, by design), validating
    less often must leave training bit-identical, the random scale augmentation included. Every
    stage of a two-phase command is a run of the same loop with its own setting (the next test),
    so one stream's run stands for them: one validates after each epoch, the other after its last
    only."""
    assert tiny_stream("std").data.augment == "default"  # the random scaling, drawn in training
    runs = {}
    for every in (1, EPOCHS):
        flags = ("--config.train.select_best=False", f"--config.train.eval_every_epochs={every}")
        workdir = str(tmp_path / f"every{every}")
        runs[every] = (workdir, run(env, workdir, *flags, stream="std")[0])
    (each_dir, each), (last_dir, last) = runs[1], runs[EPOCHS]
    mine, ref = checkpoint.restore_latest(last_dir), checkpoint.restore_latest(each_dir)
    assert_bit_identical(mine.state, ref.state)
    # the setting took effect: validated once, against after each epoch
    val_epochs = [
        [r["epoch"] for r in m.meta["records"] if r["split"] == "val"] for m in (mine, ref)
    ]
    assert val_epochs == [[EPOCHS], list(range(1, EPOCHS + 1))]
    assert (last["test_error"], last["val_error"]) == (each["test_error"], each["val_error"])


def test_each_stage_validates_at_its_own_interval():
    """``--config.phase1.<stream>.train.eval_every_epochs`` and ``--config.train.eval_every_epochs``
    reach the stream runs and the head as their own settings (nothing trains here)."""
    config = tiny_two_phase().copy_and_resolve_references()
    config.phase1.e2.train.eval_every_epochs = 2
    config.phase1.std.train.eval_every_epochs = 1
    config.train.eval_every_epochs = 3
    got = [plan.stream_config(config, s).train.eval_every_epochs for s in ("e2", "std")]
    assert got == [2, 1] and plan.head_config(config, "w").train.eval_every_epochs == 3


@pytest.mark.slow
def test_each_stage_is_prepared_once_and_the_dataset_loaded_once(reference):
    """A fresh two-phase command (the reference) prepares each of its three stages once (the
    check builds what the execution runs) and loads the dataset and draws its training subset
    once: the stages share one data config. The fresh runs of the restart tests, without the
    counters, end bit-identical to it."""
    calls = reference[4]
    assert calls["prepare"] == [os.path.join("streams", "e2"), os.path.join("streams", "std"), "."]
    assert calls["load"] == 1 and calls["limited_subset"] == 1


@pytest.mark.parametrize(
    "change,match",
    [
        (("phase1", "std", "train", "learning_rate"), -1.0),
        (("model", "freeze_streams"), False),
        (("train", "trainable"), None),
        (("train", "phases"), "three_phase"),
    ],
)
def test_bad_input_stops_before_any_compute(tmp_path, change, match):
    config = tiny_two_phase().copy_and_resolve_references()
    *path, last = change
    node = config
    for p in path:
        node = node[p]
    node[last] = match
    expected = {
        "learning_rate": r"train.learning_rate=-1.0 is invalid",
        "freeze_streams": r"set model.freeze_streams=True",
        "trainable": r"train.trainable=None is invalid for phase 2",
        "phases": r"train.phases='three_phase' is invalid: choose one of",
    }[last]
    workdir = tmp_path / "w"
    with pytest.raises(ValueError, match=expected):
        plan.check(config, str(workdir))
    assert not workdir.exists()


@pytest.mark.slow
def test_a_workdir_of_another_experiment_is_refused(finished):
    workdir, config, _, _ = finished
    other = config.copy_and_resolve_references()
    other.train.learning_rate = 0.5  # phase 2's recipe differs from the stored one
    before = snapshot(workdir)
    with pytest.raises(ValueError, match="holds checkpoints of a different experiment"):
        plan.check(other, workdir)
    assert snapshot(workdir) == before


@pytest.mark.slow
def test_phase_two_whose_sources_vanished_stops_naming_the_stage(tmp_path):
    """Phase 2 prepared while phase 1 was still to run loads its sources when it starts; a
    phase-1 run without a readable checkpoint by then stops the command with a StageError
    naming the stage (before any of phase 2's compute), not a traceback from the loop."""
    from invjax.training.experiment import prepare

    config = tiny_two_phase()
    workdir = str(tmp_path / "w")
    head = plan.head_config(config, workdir)
    exp = prepare(head, workdir, load_sources=False)
    assert exp.sources is None
    stages = [
        plan.Stage(s, plan.stream_config(config, s), plan.stream_workdir(config, workdir, s), {})
        for s in plan.stream_names(config)
    ]  # "finished", but their workdirs hold no checkpoint
    stages.append(plan.Stage("head", head, workdir, experiment=exp))
    said = []
    with pytest.raises(plan.StageError, match=r"phase 2: combination head in .* cannot start"):
        plan.execute(plan.Plan("two_phase", config, workdir, stages), say=said.append)
    assert said[-1].startswith(f"[3/3] phase 2: combination head in {workdir}")  # + job ETA
    assert not os.path.exists(os.path.join(workdir, "checkpoints"))


def test_stream_config_is_the_single_stream_config_file():
    """Phase 1's run of a stream is the same experiment as the stream's own config file, so a
    finished single-stream run can be reused through ``phase1.<stream>.workdir``."""
    config = runpy.run_path(str(CONFIGS / "digits_triple.py"))["get_config"]()
    for s in ("e2", "scale", "std"):
        own = runpy.run_path(str(CONFIGS / f"digits_{s}.py"))["get_config"]()
        assert flat_config(plan.stream_config(config, s)) == flat_config(own)


# ----------------------------------------------------------------------------- the command line

MOCK_MAIN = (
    "import sys\n"
    "import tensorflow_datasets as tfds\n"
    "from absl import app\n"
    "from invjax import main\n"
    "with tfds.testing.mock_data(num_examples=20, policy=tfds.testing.MockPolicy.USE_CODE):\n"
    "    app.run(main.main, argv=sys.argv, flags_parser=main._parse_flags)\n"
)


def tiny_cifar10_triple_args(workdir):
    """configs/cifar10_triple.py at depth 10, width 1, stem 4; 1 epoch per phase, batch 10."""
    args = ["--config=configs/cifar10_triple.py", f"--workdir={workdir}"]
    for s in ("e2", "scale", "std"):
        m, t = f"--config.model.streams.{s}", f"--config.phase1.{s}.train"
        args += [f"{m}.depth=10", f"{m}.widen_factor=1", f"{m}.stem_width=4"]
        args += [f"{t}.num_epochs=1", f"{t}.lr_boundaries=()", f"{t}.batch_size=10"]
        args += [f"{t}.eval_batch_size=20"]
    t = "--config.train"
    args += [f"{t}.num_epochs=1", f"{t}.lr_boundaries=()", f"{t}.eval_batch_size=20"]
    return args + [f"{t}.batch_size=10"]


@pytest.mark.slow
def test_cifar10_triple_runs_both_phases_under_mock_data(tmp_path, env):
    """``python -m invjax.main --config=configs/cifar10_triple.py`` on TFDS records (mocked:
    20 random examples per split) at a tiny width: phase 1's three streams, then the head."""
    pytest.importorskip("tensorflow_datasets")
    workdir = tmp_path / "w"
    proc = subprocess.run(
        [sys.executable, "-c", MOCK_MAIN, *tiny_cifar10_triple_args(workdir)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.load(open(workdir / "results.json"))
    assert proc.stdout.strip().splitlines()[-1] == f"test_error={results['test_error']:.2f}%"
    assert set(results["phase1"]) == {"e2", "scale", "std"} and results["dataset"] == "cifar10"
    assert (results["n_train"], results["n_test"]) == (20, 20)
    assert results["config_file"] == "configs/cifar10_triple.py"
    assert results["overrides"]["model.streams.e2.depth"] == 10
    for s in ("e2", "scale", "std"):
        assert f"phase 1: stream '{s}': test_error=" in proc.stdout
        assert os.path.exists(workdir / "streams" / s / "results.json")


@pytest.mark.slow
def test_cifar10_triple_without_data_names_the_prepare_command(tmp_path):
    env = dict(os.environ, TFDS_DATA_DIR=str(tmp_path / "no_data"))
    workdir = tmp_path / "w"
    proc = subprocess.run(
        [sys.executable, "-m", "invjax.main", *tiny_cifar10_triple_args(workdir)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("invjax: error: dataset 'cifar10' (split 'train') is not prepared")
    assert "python -m invjax.data.prepare cifar10" in last
    assert not workdir.exists()
