"""Under faults (README "Under faults: what is promised"), as real subprocesses: the workdir lock
(live holder, dead holder, phase-1 stream workdirs), workdir problems found before compute, a full
disk at start and during training, a deleted metrics.jsonl, and invariance's input checks.

Faults that cannot be produced for real on a shared test machine are injected through the
test-only hooks of :mod:`invjax.workdir`: ``INVJAX_TEST_FAULT=enospc_at_save:STEP`` makes orbax's
own write of the checkpoint's meta JSON fail with ENOSPC inside its real save (the state arrays
are already in its temporary directory), and ``INVJAX_TEST_FREE_BYTES`` sets the free space the
start-up check sees. The signal tests are in test_main.py (they share its reference run).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from invjax import checkpoint, workdir

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

# digits, 100 training images, batch 50: 2 steps per epoch, 3 epochs.
TINY = [
    "--config=configs/digits_cnn.py",
    "--config.data.name=digits",
    "--config.data.n_train=100",
    "--config.model.width=4",
    "--config.train.batch_size=50",
    "--config.train.eval_batch_size=400",
    "--config.train.num_epochs=3",
    "--config.train.lr_boundaries=(2,)",
    "--config.train.log_every_steps=0",
]


def run_main(workdir_flag, *extra, env=None, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "invjax.main", *TINY, f"--workdir={workdir_flag}", *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, **(env or {})),
    )


def one_line_error(proc, status=2):
    """The run ended with ``status`` and a single ``invjax: error:`` line, no traceback."""
    assert proc.returncode == status, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [x for x in proc.stderr.splitlines() if x.startswith("invjax: error: ")]
    assert len(errors) == 1 and proc.stderr.strip().splitlines()[-1] == errors[0], proc.stderr
    return errors[0]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished tiny run (3 epochs): its workdir."""
    wd = str(tmp_path_factory.mktemp("finished") / "w")
    proc = run_main(wd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not os.path.exists(os.path.join(wd, workdir.LOCK_FILE))  # released at the end
    return wd


def hold_lock(path):
    """Another process holding ``path``'s lock (as a running invjax.main would)."""
    code = (
        "import sys, time; from invjax import workdir; workdir.acquire(sys.argv[1]); "
        "print('locked', flush=True); time.sleep(600)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, path], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "locked"
    return proc


# ----------------------------------------------------------------------------- lock


def test_second_run_stops_naming_the_holder_and_a_dead_holder_is_taken_over(finished, tmp_path):
    wd = str(tmp_path / "w")
    shutil.copytree(finished, wd)
    before = {p: open(os.path.join(wd, p), "rb").read() for p in ("metrics.jsonl", "results.json")}
    holder = hold_lock(wd)
    try:
        start = time.time()
        line = one_line_error(run_main(wd))
        info = json.load(open(os.path.join(wd, workdir.LOCK_FILE)))
        assert f"--workdir={wd} is in use by another run (host {info['host']}, pid " in line
        assert f"pid {holder.pid}, started {info['started']})" in line
        assert time.time() - start < 60  # stopped before loading data or compiling
        for p, content in before.items():  # nothing of the holder's run was replaced
            assert open(os.path.join(wd, p), "rb").read() == content
    finally:
        holder.send_signal(signal.SIGKILL)  # dies holding it: the lock file stays, unlocked
        holder.wait()
    assert os.path.exists(os.path.join(wd, workdir.LOCK_FILE))
    proc = run_main(wd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "took over the lock of a run that is no longer running" in proc.stderr
    assert f"pid {holder.pid}, started " in proc.stderr
    assert not os.path.exists(os.path.join(wd, workdir.LOCK_FILE))


def test_two_runs_started_together_one_trains_the_other_stops(tmp_path):
    wd = str(tmp_path / "w")
    cmd = [sys.executable, "-m", "invjax.main", *TINY, f"--workdir={wd}"]
    procs = [
        subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [(p.wait(timeout=300), *p.communicate()) for p in procs]
    codes = sorted(o[0] for o in outs)
    assert codes == [0, 2], [o[2][-2000:] for o in outs]
    loser = next(o for o in outs if o[0] == 2)
    assert "is in use by another run (host " in loser[2] and "Traceback" not in loser[2]
    recs = [json.loads(x) for x in open(os.path.join(wd, "metrics.jsonl"))]
    assert [r["epoch"] for r in recs if r["split"] == "val" and not r.get("final")] == [1, 2, 3]
    assert checkpoint.list_steps(wd)[-1] == 6
    assert not [n for n in os.listdir(checkpoint.checkpoint_dir(wd)) if "tmp" in n]


def test_phase_one_stream_workdir_is_locked_before_any_compute(tmp_path):
    wd = str(tmp_path / "two_phase")
    holder = hold_lock(os.path.join(wd, "streams", "e2"))
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "invjax.main",
                "--config=tests/test_experiment.py",
                f"--workdir={wd}",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    line = one_line_error(proc)
    assert f"--workdir={os.path.join(wd, 'streams', 'e2')} is in use by another run" in line
    assert f"pid {holder.pid}," in line
    assert not checkpoint.list_steps(os.path.join(wd, "streams", "std"))  # nothing trained
    assert not os.path.exists(os.path.join(wd, workdir.LOCK_FILE))


def test_sigterm_before_training_stops_in_one_line_and_resumes(tmp_path):
    """SIGTERM as soon as the new workdir is locked (checks done; preparing, compiling or at the
    first steps): status 143, one line, no traceback, and the next start trains to the end."""
    wd = str(tmp_path / "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "invjax.main", *TINY, f"--workdir={wd}"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lock = os.path.join(wd, workdir.LOCK_FILE)
    deadline = time.time() + 120
    while not os.path.exists(lock) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.002)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 143, err[-3000:]
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("invjax: stopped by SIGTERM "), err
    assert not os.path.exists(lock)
    again = run_main(wd)
    assert again.returncode == 0, again.stderr[-3000:]
    assert checkpoint.list_steps(wd)[-1] == 6


def test_file_system_without_locks_warns_and_goes_on(tmp_path, monkeypatch, caplog):
    import errno
    import fcntl
    import logging

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with caplog.at_level(logging.WARNING), workdir.locked([str(tmp_path / "w")]):
        assert workdir.holds(str(tmp_path / "w"))
    assert any("does not support locks" in r.getMessage() for r in caplog.records)
    assert not os.path.exists(tmp_path / "w" / workdir.LOCK_FILE)


# ----------------------------------------------------------------------------- workdir problems


def _read_only_dir(tmp_path):
    """A directory this process cannot create files in, or None."""
    if os.geteuid() != 0:
        d = tmp_path / "ro"
        d.mkdir()
        d.chmod(0o555)
        return str(d)
    # root ignores permission bits; sysfs refuses new files even to root
    if os.path.isdir("/sys/kernel") and workdir._probe_write("/sys/kernel") is not None:
        return "/sys/kernel"
    return None


def test_workdir_problems_are_one_line_before_compute(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    cases = [
        ("", "--workdir= is empty: give a directory"),
        (str(a_file), f"--workdir={a_file} is an existing file, not a directory"),
        (str(a_file / "sub"), f"--workdir={a_file / 'sub'} cannot be created: {a_file} is a file"),
        ("gs://bucket/run", "--workdir=gs://bucket/run is a remote path"),
    ]
    ro = _read_only_dir(tmp_path)
    if ro is not None:
        cases += [
            (ro, f"--workdir={ro} is not writable: "),
            (os.path.join(ro, "new"), f"--workdir={os.path.join(ro, 'new')} cannot be created in"),
        ]
    for flag, message in cases:
        start = time.time()
        line = one_line_error(run_main(flag, timeout=120))
        assert line.startswith(f"invjax: error: {message}"), (flag, line)
        assert time.time() - start < 60  # before the dataset and any compilation
    assert ro is not None, "no read-only directory to test on this machine"


def test_too_little_free_space_stops_before_compute(tmp_path):
    wd = tmp_path / "w"
    proc = run_main(str(wd), env={"INVJAX_TEST_FREE_BYTES": str(1 << 20)})
    line = one_line_error(proc)
    assert line.startswith(f"invjax: error: --workdir={wd}: only 1.0 MiB free on its file system")
    assert "one checkpoint of this run needs about " in line
    assert not checkpoint.list_steps(str(wd)) and not os.path.exists(wd / "metrics.jsonl")


def test_full_disk_during_training_keeps_the_last_checkpoint_and_resumes(tmp_path):
    wd = str(tmp_path / "w")
    proc = run_main(wd, env={"INVJAX_TEST_FAULT": "enospc_at_save:4"})
    line = one_line_error(proc, status=1)
    assert line.startswith(f"invjax: error: cannot save the checkpoint of step 4 in {wd}/")
    assert "No space left on device" in line and "the last good checkpoint (step 2) is kept" in line
    assert checkpoint.list_steps(wd) == [2]
    assert sorted(os.listdir(checkpoint.checkpoint_dir(wd))) == ["2"]  # no orbax temp dir
    assert checkpoint.verify_manifest(wd, 2) is None
    assert not os.path.exists(os.path.join(wd, workdir.LOCK_FILE))
    again = run_main(wd)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming from the checkpoint of step 2" in again.stdout
    assert checkpoint.list_steps(wd)[-1] == 6


def test_other_failed_write_stops_with_one_message_keeping_checkpoints(tmp_path):
    wd = tmp_path / "w"
    (wd / "results.json.tmp").mkdir(parents=True)  # results.json cannot be written
    line = one_line_error(run_main(str(wd)), status=1)
    assert line == (
        f"invjax: error: cannot write in {wd} ([Errno 21] Is a directory: "
        f"{wd}/results.json.tmp): stopped. The last good checkpoint (step 6) is kept; free "
        "some space (or fix the problem) and run the same command to resume."
    )
    assert checkpoint.list_steps(str(wd)) == [2, 4, 6]


# ----------------------------------------------------------------------------- metrics.jsonl


def test_deleted_metrics_are_rebuilt_from_the_checkpoint(finished, tmp_path):
    wd = str(tmp_path / "w")
    shutil.copytree(finished, wd)
    path = os.path.join(wd, "metrics.jsonl")
    original = open(path).read()
    os.remove(path)
    proc = run_main(wd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"invjax: {path} was missing: rebuilt from the checkpoint of step 6 (6 records)" in (
        proc.stderr
    )
    assert open(path).read() == original  # the finished run's records, final ones redone


# ----------------------------------------------------------------------------- invariance


def run_invariance(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "invjax.invariance", "--config=configs/digits_cnn.py", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_invariance_rejects_bad_images_and_another_models_checkpoint(finished, tmp_path):
    from invjax.data.digits import digits

    good = digits()[0][:2].astype(np.float32)  # [2, 28, 28, 1] in [0, 1]
    nan = good.copy()
    nan[1, 5, 5, 0] = np.nan
    cases = {
        "uint8": (
            np.round(good * 255).astype(np.uint8),
            "images are uint8 (values 0..255): model mode takes [N, 28, 28, 1] float32 in "
            "[0, 1]; divide by 255 first",
        ),
        "nan": (nan, "images hold 1 NaN/Inf values (the first in image 1)"),
        "empty": (good[:0], "images hold no image (shape (0, 28, 28, 1))"),
        "range": (good * 2 - 0.5, "images have values in [-0.5, 1.5]: model mode takes"),
        "shape": (good[:, :27], "images have shape (2, 27, 28, 1): digits models take"),
        "int": (good.astype(np.int32), "images have dtype int32: digits models take"),
    }
    data = ["--config.data.name=digits", "--transforms=flip", "--n_samples=2"]
    for name, (images, message) in cases.items():
        path = str(tmp_path / f"{name}.npy")
        np.save(path, images)
        proc = run_invariance(*data, f"--images={path}")
        assert proc.returncode == 2, (name, proc.stderr[-2000:])
        assert proc.stderr.strip().splitlines() == [f"invjax.invariance: error: {message}"] or (
            proc.stderr.strip().splitlines()[-1].startswith(f"invjax.invariance: error: {message}")
        ), (name, proc.stderr)
        assert "Traceback" not in proc.stderr
    # a checkpoint of a width-4 network, asked for with the config's default width
    proc = run_invariance(*data, f"--workdir={finished}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"invjax.invariance: error: --workdir={finished} holds a checkpoint of ")
    assert " variables missing, " in last and "Traceback" not in proc.stderr
    # the right config loads it
    ok = run_invariance(*data, "--config.model.width=4", f"--workdir={finished}", "--json")
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert json.loads(ok.stdout.strip().splitlines()[-1])["variables"] == "checkpoint"
