"""The command line (contract 1 and 4) in real subprocesses: outputs, SIGKILL + resume, bad input."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import faults
import jax
import numpy as np
import pytest
from tiny_runs import REPO, run_module, tiny_digits

from invjax import checkpoint

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

# digits, 100 training images, batch 32: 4 steps per epoch, 10 epochs; checkpoints every 3
# steps and at epoch ends.
TINY = tiny_digits(
    32,
    10,
    "(6,)",
    "--config.train.eval_batch_size=200",
    "--config.train.checkpoint_every_steps=3",
    "--config.train.log_every_steps=5",
)


def _wait_for_checkpoint(proc, workdir, target_step: int, timeout: float = 240) -> None:
    """Poll until ``workdir`` holds a checkpoint of step >= ``target_step`` or ``proc`` ends."""
    ckpt_dir = checkpoint.checkpoint_dir(workdir)
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        steps = (
            [int(d) for d in os.listdir(ckpt_dir) if d.isdigit()] if os.path.isdir(ckpt_dir) else []
        )
        if steps and max(steps) >= target_step:
            return
        time.sleep(0.005)


def command(workdir, *extra, fault=None):
    """The tiny run's argv; ``fault``: installed from outside invjax (tests/faults.py)."""
    args = [*TINY, f"--workdir={workdir}", *extra]
    if fault:
        return faults.command(fault, "invjax.main", *args)
    return [sys.executable, "-m", "invjax.main", *args]


def run_main(workdir, *extra, timeout=300, fault=None):
    return run_module(
        "invjax.main", *TINY, f"--workdir={workdir}", *extra, fault=fault, timeout=timeout
    )


def snapshot(workdir):
    out = {}
    for root, _, files in os.walk(workdir):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, workdir)] = fh.read()
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("reference"))
    proc = run_main(workdir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return workdir, proc


def test_host_names_the_processor_beyond_its_model_name(tmp_path):
    """Two processors a virtual machine names alike (``AMD EPYC``) differ in ``cpu_id`` or
    ``cpu_flags``, read from the first processor's block of ``/proc/cpuinfo``; the flags'
    digest ignores their order."""
    from invjax.training.loop import host

    def info(family: str, flags: str) -> dict:
        block = (
            f"processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: {family}\n"
            f"model\t\t: 1\nmodel name\t: AMD  EPYC\nstepping\t: 1\nflags\t\t: {flags}\n"
        )
        path = tmp_path / f"cpuinfo_{family}_{len(flags)}_{flags[:3]}"
        # a second processor's block, other values: not read
        path.write_text(block + "\n" + block.replace(family, "99").replace(flags, "x"))
        return host(str(path))

    a = info("25", "fpu sse2 avx2 fma")
    assert a["cpu"] == "AMD EPYC" and a["cpu_id"] == "AuthenticAMD 25/1/1"
    assert a["jax"] == jax.__version__ and len(a["cpu_flags"]) == 12
    assert info("25", "avx2 fma fpu sse2")["cpu_flags"] == a["cpu_flags"]  # order
    assert info("25", "fpu sse2 avx2 fma avx512f")["cpu_flags"] != a["cpu_flags"]
    assert info("23", "fpu sse2 avx2 fma")["cpu_id"] == "AuthenticAMD 23/1/1"
    bare = host(str(tmp_path / "absent"))  # no /proc/cpuinfo (macOS): the model name only
    assert bare["cpu"] and "cpu_id" not in bare and "cpu_flags" not in bare


@pytest.mark.slow
def test_main_writes_metrics_results_and_last_line(reference):
    workdir, proc = reference
    last = proc.stdout.strip().splitlines()[-1]
    results = json.load(open(os.path.join(workdir, "results.json")))
    assert last == f"test_error={results['test_error']:.2f}%"
    for key in ("test_error", "val_error", "params", "n_train", "seed", "wall_time_s"):
        assert key in results
    assert results["n_train"] == 100 and results["seed"] == 0 and results["steps"] == 40
    assert results["params"] > 0 and results["wall_time_s"] > 0
    import jax

    assert results["host"]["jax"] == jax.__version__ and results["host"]["cpu"].strip()
    if os.path.isfile("/proc/cpuinfo") and hasattr(os, "sched_getaffinity"):
        assert results["host"]["cpus"] == len(os.sched_getaffinity(0))
    records = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
    for rec in records:
        assert {"step", "epoch", "split", "loss", "error"} <= set(rec)
        assert 0.0 <= rec["error"] <= 100.0
    val = [r for r in records if r["split"] == "val" and not r.get("final")]
    assert [r["epoch"] for r in val] == list(range(1, 11))
    test = [r for r in records if r["split"] == "test"]
    assert len(test) == 1 and test[0]["error"] == pytest.approx(results["test_error"])
    # select_best (digits_cnn): the reported model is the best validation epoch.
    assert results["val_error"] == pytest.approx(min(r["error"] for r in val))
    assert os.listdir(os.path.join(workdir, "tensorboard"))
    # Plain log lines (not a terminal): train progress with images/s.
    assert "images/s" in proc.stdout


def _run_and_kill(workdir, target_step, delay):
    """Start a run, wait until it has a checkpoint of step >= target_step, wait ``delay`` more
    seconds (landing anywhere: inside a step, a save, an evaluation), then SIGKILL it.
    Returns the exit status (-SIGKILL if the kill landed before the run ended)."""
    proc = subprocess.Popen(
        command(workdir), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _wait_for_checkpoint(proc, workdir, target_step)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    return proc.wait()


@pytest.mark.slow
def test_sigkill_at_random_point_then_resume_is_bit_identical(reference, tmp_path):
    ref_dir, _ = reference
    rng = random.Random()
    for attempt in range(3):  # a fast machine may finish before a late kill: draw again
        workdir = str(tmp_path / f"killed{attempt}")
        target, delay = rng.randrange(3, 31), rng.uniform(0.0, 0.3)
        if _run_and_kill(workdir, target, delay) == -signal.SIGKILL:
            break
    else:
        pytest.fail("the run always ended before the kill")
    where = f"killed after checkpoint {target} + {delay:.3f}s"
    # A kill between orbax's commit and the manifest leaves a step that is not loaded.
    steps_at_kill = [
        s for s in checkpoint.list_steps(workdir) if checkpoint.has_manifest(workdir, s)
    ]
    resumed = run_main(workdir)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming from the checkpoint of step {steps_at_kill[-1]}" in resumed.stdout, where
    _assert_resumed_bit_identical(ref_dir, workdir, where)


def _assert_resumed_bit_identical(ref_dir, workdir, where):
    a, b = checkpoint.restore_latest(ref_dir), checkpoint.restore_latest(workdir)
    assert a.step == b.step == 40
    # params, batch_stats, optimiser state, best copy, rng, step; strict: same number of leaves
    for x, y in zip(jax.tree.leaves(a.state), jax.tree.leaves(b.state), strict=True):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), where
    ra = json.load(open(os.path.join(ref_dir, "results.json")))
    rb = json.load(open(os.path.join(workdir, "results.json")))
    assert ra["test_error"] == rb["test_error"] and ra["val_error"] == rb["val_error"]
    ma = open(os.path.join(ref_dir, "metrics.jsonl")).read()
    mb = open(os.path.join(workdir, "metrics.jsonl")).read()
    assert ma == mb, where  # metrics.jsonl reads as if the run had never stopped


def _start_and_signal(workdir, target_step, delay, signals, fault=None, between=None):
    """Start a run without interval checkpoints (saves at epoch ends only, every 4 steps), wait
    until it has a checkpoint of step >= target_step plus ``delay`` seconds, then send
    ``signals[0]``; the others after ``between()`` returns (None: at once). Returns
    ``(status, stdout, stderr)``."""
    proc = subprocess.Popen(
        command(workdir, "--config.train.checkpoint_every_steps=0", fault=fault),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for_checkpoint(proc, workdir, target_step)
    time.sleep(delay)
    proc.send_signal(signals[0])
    if between is not None:
        between()
    for sig in signals[1:]:
        proc.send_signal(sig)
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out, err


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_saves_at_the_step_reached_then_resume_is_bit_identical(reference, tmp_path, sig):
    ref_dir, _ = reference
    rng = random.Random()
    for attempt in range(3):  # a fast machine may finish before a late signal: draw again
        workdir = str(tmp_path / f"stopped{attempt}")
        target, delay = rng.randrange(4, 33, 4), rng.uniform(0.0, 0.3)
        status, out, err = _start_and_signal(workdir, target, delay, [sig])
        if status != 0:
            break
    else:
        pytest.fail("the run always ended before the signal")
    where = f"{sig.name} after checkpoint {target} + {delay:.3f}s"
    assert status == 128 + sig, (where, err[-3000:])  # 143 for SIGTERM, 130 for SIGINT
    assert "Traceback" not in err, where
    last = err.strip().splitlines()[-1]
    steps = checkpoint.list_steps(workdir)
    assert last == (
        f"invjax: stopped by {sig.name} after step {steps[-1]} of 40 (epoch "
        f"{steps[-1] / 4:.2f}): checkpoint saved in {checkpoint.checkpoint_dir(workdir)}; run "
        "the same command to resume"
    ), where
    assert steps[-1] >= target, where
    assert checkpoint.verify_manifest(workdir, steps[-1]) is None
    assert os.path.exists(os.path.join(workdir, checkpoint.MANIFEST_SUBDIR, f"{steps[-1]}.json"))
    assert not os.path.exists(os.path.join(workdir, "invjax.lock"))
    # metrics.jsonl was flushed: every epoch completed before the stop has its val record
    val = [json.loads(x) for x in open(os.path.join(workdir, "metrics.jsonl"))]
    assert [r["epoch"] for r in val if r["split"] == "val"] == list(range(1, steps[-1] // 4 + 1))
    resumed = run_main(workdir)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming from the checkpoint of step {steps[-1]} " in resumed.stdout, where
    _assert_resumed_bit_identical(ref_dir, workdir, where)


@pytest.mark.slow
def test_sigterm_mid_epoch_saves_that_exact_step(reference, tmp_path):
    """The process signals itself after step 13 (tests/faults.py), mid-epoch 4 and between the epoch
    checkpoints 12 and 16: it saves step 13 with the epoch's running sums, and resumes exactly."""
    ref_dir, _ = reference
    workdir = str(tmp_path / "w")
    proc = run_main(
        workdir,
        "--config.train.checkpoint_every_steps=0",
        fault="sigterm_after_step:13",
    )
    assert proc.returncode == 143, proc.stderr[-3000:]
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "invjax: stopped by SIGTERM after step 13 of 40 (epoch 3.25): checkpoint saved in "
        )
    )
    assert checkpoint.list_steps(workdir)[-1] == 13
    meta = checkpoint.restore_latest(workdir).meta
    assert meta["epoch_sums"][2] == 32  # one step of epoch 4 done, its sums kept
    resumed = run_main(workdir)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from the checkpoint of step 13 " in resumed.stdout
    _assert_resumed_bit_identical(ref_dir, workdir, "stopped at 13")


@pytest.mark.slow
def test_second_signal_during_the_save_corrupts_nothing(reference, tmp_path):
    """SIGTERM, then SIGINT while the stop's checkpoint is between orbax's commit and its
    integrity manifest (held open 1 s by tests/faults.py): the save completes all the same."""
    ref_dir, _ = reference
    workdir = str(tmp_path / "w")
    ckpt_dir = checkpoint.checkpoint_dir(workdir)
    manifests = os.path.join(workdir, checkpoint.MANIFEST_SUBDIR)

    def in_save():  # a committed step without its manifest yet: the save is under way
        deadline = time.time() + 60
        while time.time() < deadline:
            steps = [d for d in os.listdir(ckpt_dir) if d.isdigit()]
            if any(not os.path.exists(os.path.join(manifests, f"{s}.json")) for s in steps):
                return
            time.sleep(0.002)
        pytest.fail("no save seen after the first signal")

    status, out, err = _start_and_signal(
        workdir,
        6,
        0.05,
        [signal.SIGTERM, signal.SIGINT],
        fault="pause_before_manifest:1",
        between=in_save,
    )
    # Signals pending together are handled in number order (SIGINT first), so either may be
    # the one that stops the run; the other is the one ignored.
    last = err.strip().splitlines()[-1]
    first = signal.SIGTERM if last.startswith("invjax: stopped by SIGTERM ") else signal.SIGINT
    other = signal.SIGINT if first == signal.SIGTERM else signal.SIGTERM
    assert last.startswith(f"invjax: stopped by {first.name} after step "), err[-3000:]
    assert status == 128 + first, err[-3000:]
    assert f"invjax: {other.name} again: already stopping and saving; please wait" in err
    steps = checkpoint.list_steps(workdir)
    for step in steps:
        assert checkpoint.verify_manifest(workdir, step) is None
        assert os.path.exists(os.path.join(manifests, f"{step}.json"))
    assert not [n for n in os.listdir(ckpt_dir) if "tmp" in n]
    resumed = run_main(workdir)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    _assert_resumed_bit_identical(ref_dir, workdir, f"stopped at {steps[-1]}")


def _run_with_a_counted_config(tmp_path, extra):
    """``invjax.main`` with ``--config`` a file that logs each load of its config, then
    ``extra``: the finished process and the log's text."""
    log = tmp_path / "loads.txt"
    config = tmp_path / "counted.py"
    config.write_text(
        '"""A config that counts its loads."""\n'
        "from configs import digits_cnn\n\n\n"
        "def get_config():\n"
        f"    with open({str(log)!r}, 'a') as f:\n"
        "        f.write('loaded\\n')\n"
        "    return digits_cnn.get_config()\n"
    )
    proc = run_module(
        "invjax.main", f"--config={config}", f"--workdir={tmp_path / 'w'}", *extra, timeout=120
    )
    return proc, log.read_text()


@pytest.mark.slow
def test_unknown_config_key_is_one_clear_message(tmp_path):
    """One line naming the key that was meant, before any directory; the config file was loaded
    once (the override check reads that one config)."""
    proc, loads = _run_with_a_counted_config(tmp_path, ["--config.train.learning_rat=0.1"])
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("invjax: error: unknown config key train.learning_rat in ")
    assert "'learning_rate'" in lines[-1] and "Traceback" not in proc.stderr
    assert not os.path.exists(tmp_path / "w")
    assert loads == "loaded\n"


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra", [["--config.train.num_epochs=0"], ["--help"]], ids=["bad_value", "help"]
)
def test_the_config_file_runs_once(tmp_path, extra):
    """--config's file is loaded once: the value check and --help read that one config (the
    override check: test_unknown_config_key_is_one_clear_message)."""
    proc, loads = _run_with_a_counted_config(tmp_path, extra)
    assert proc.returncode == (0 if extra == ["--help"] else 2), proc.stderr[-2000:]
    assert loads == "loaded\n"
    if extra == ["--help"]:
        assert "--config.train.num_epochs=30" in proc.stdout  # the keys of that one load


@pytest.mark.slow
def test_bad_n_train_is_one_clear_message(tmp_path):
    proc = run_main(str(tmp_path / "w"), "--config.data.n_train=95", timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        "invjax: error: n_train=95 cannot be split evenly over the 10 classes: use a multiple "
        "of 10 (e.g. 90 or 100), or 0 for the whole training set"
    )
    assert not os.path.exists(tmp_path / "w")


@pytest.mark.slow
def test_unreadable_checkpoint_stops_without_touching_it(reference, tmp_path):
    ref_dir, _ = reference
    workdir = str(tmp_path / "w")
    shutil.copytree(ref_dir, workdir)
    for step in checkpoint.list_steps(workdir):  # damage every array file of every step
        for root, _, files in os.walk(os.path.join(checkpoint.checkpoint_dir(workdir), str(step))):
            if os.path.basename(root) == "d":
                for f in files:
                    open(os.path.join(root, f), "wb").write(b"garbage")
    before = snapshot(workdir)
    proc = run_main(workdir)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert (
        last.startswith("invjax: error: no readable checkpoint in ")
        and "Nothing was changed" in last
    )
    assert "Traceback" not in proc.stderr
    assert snapshot(workdir) == before


def test_reporter_progress_bar_and_plain_lines(tmp_path, capsys):
    from invjax.logging_utils import Reporter

    for interactive in (True, False):
        workdir = tmp_path / str(interactive)
        workdir.mkdir()
        rep = Reporter(
            str(workdir),
            start_step=0,
            total_steps=4,
            steps_per_epoch=2,
            log_every_steps=2,
            interactive=interactive,
        )
        for s in range(1, 5):
            rep.step_done(s, loss=1.0 / s, errors=3, n=8)
        rep.record({"step": 4, "epoch": 2, "split": "val", "loss": 0.5, "error": 12.5})
        rep.close()
        out = capsys.readouterr()
        if interactive:  # a tqdm bar on stderr with loss, error and images/s
            assert "4/4" in out.err and "loss=" in out.err and "img_s=" in out.err
            assert "epoch 2 step 4 val: loss 0.5000 error 12.50%" in out.err
        else:  # plain lines on stdout every log_every_steps
            lines = out.out.strip().splitlines()
            assert lines[0].startswith("step 2/4 (epoch 1.00): loss 0.7500 error 37.50% ")
            assert lines[0].endswith(" images/s")
            assert lines[-1] == "epoch 2 step 4 val: loss 0.5000 error 12.50%"
        recs = [json.loads(x) for x in open(workdir / "metrics.jsonl")]
        assert recs == [{"step": 4, "epoch": 2, "split": "val", "loss": 0.5, "error": 12.5}]


def _tiny_config(seeds=None):
    """The tiny digits CNN of :data:`TINY` (1 epoch of 4 steps) as a config object."""
    from invjax import configs

    c = configs.load(os.path.join(REPO, "configs/digits_cnn.py"))
    c.data.name, c.data.n_train = "digits", 100
    c.model.width = 4
    c.train.update(
        batch_size=32, num_epochs=1, lr_boundaries=(), eval_batch_size=200, log_every_steps=0
    )
    c.seeds = seeds
    return c


@pytest.mark.slow
def test_python_api_trains_seeds_locked_and_refuses_the_other_kind(tmp_path):
    """``train_and_evaluate`` is the command without its flags: ``config.seeds=(0, 1)`` trains
    two models in ``seed_<k>/`` and records the folder's kind; a second process holding the
    workdir's lock refuses a concurrent call before anything is read; the single-run job in
    that folder is refused naming the command that fits, before any compute."""
    from invjax import train, workdir

    wd = str(tmp_path / "k")
    summary = train.train_and_evaluate(_tiny_config(seeds=(0, 1)), wd)
    assert sorted(summary["results"]) == [0, 1]
    for k in (0, 1):
        with open(os.path.join(wd, f"seed_{k}", "results.json")) as f:
            assert json.load(f)["test_error"] == summary["results"][k]["test_error"]
    assert summary["test_error"] == pytest.approx(
        (summary["results"][0]["test_error"] + summary["results"][1]["test_error"]) / 2
    )
    with open(os.path.join(wd, workdir.KIND_FILE)) as f:
        assert json.load(f) == {"kind": "seeds", "seeds": [0, 1]}
    before = snapshot(wd)

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom invjax import workdir\nworkdir.acquire(sys.argv[1])\n"
            "print('held', flush=True)\ntime.sleep(120)\n",
            wd,
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(workdir.WorkdirBusyError, match=f"pid {holder.pid}"):
            train.train_and_evaluate(_tiny_config(seeds=(0, 1)), wd)
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    with pytest.raises(workdir.WorkdirError, match="resume them with --config.seeds=0,1") as e:
        train.train_and_evaluate(_tiny_config(), wd)
    assert f"--workdir={os.path.join(wd, 'seed_0')}" in str(e.value)
    after = snapshot(wd)
    after.pop(workdir.LOCK_FILE, None)
    before.pop(workdir.LOCK_FILE, None)
    assert after == before  # neither refusal wrote anything

    single = str(tmp_path / "one")
    train.train_and_evaluate(_tiny_config(), single)
    with pytest.raises(workdir.WorkdirError, match="holds a single run.*without --config.seeds"):
        train.train_and_evaluate(_tiny_config(seeds=(0, 1)), single)


# Emulates an editable install (setuptools' finder comes after the path's finder) with the
# working directory first on sys.path, as `python -m` puts it: a folder named invjax there
# (a clone, seen from its parent) then becomes a namespace package ahead of the real one.
_FROM_A_CLONES_PARENT = """
import importlib.machinery, os, runpy, sys
sys.path.insert(0, os.getcwd())
repo = sys.argv[1]
sys.meta_path = [f for f in sys.meta_path
                 if not getattr(f, "__module__", "").startswith("__editable__")]
class Installed:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name == "invjax" or name.startswith("invjax."):
            where = os.path.join(repo, *name.split(".")[:-1])
            return importlib.machinery.PathFinder.find_spec(name, [where])
        return None
sys.meta_path.append(Installed)
sys.argv = ["invjax.main", *sys.argv[2:]]
runpy.run_module("invjax.main", run_name="__main__", alter_sys=True)
"""


@pytest.mark.slow
def test_main_from_a_directory_holding_a_folder_named_invjax(tmp_path):
    """Run from a clone's parent (a folder ``invjax/`` with a ``configs/`` package beside the
    command): the config loads with invjax's own ``invjax.configs`` (the repository's
    ``configs/`` has no ``load``), and a bad value is still one line."""
    (tmp_path / "invjax" / "configs").mkdir(parents=True)
    (tmp_path / "invjax" / "configs" / "__init__.py").write_text("")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    config = os.path.join(REPO, "configs", "digits_cnn.py")

    def main(*args):
        return subprocess.run(
            [sys.executable, "-c", _FROM_A_CLONES_PARENT, REPO, f"--config={config}", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )

    proc = main(f"--workdir={tmp_path / 'w'}", "--dry_run", "--config.data.name=digits")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "dry run: single experiment" in proc.stdout
    proc = main(f"--workdir={tmp_path / 'w'}", "--config.train.num_epochs=0")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("invjax: error: ")
    assert "num_epochs" in proc.stderr.strip().splitlines()[-1]
    assert not os.path.exists(tmp_path / "w")
