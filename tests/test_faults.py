"""Under faults (docs/faults.md), mostly as real subprocesses: the workdir lock (live holder, dead
holder, phase-1 stream workdirs), workdir problems found before compute, a full disk at start and
at every write of a checkpoint save, steps without their integrity manifest, a deleted
metrics.jsonl, a stopped sweep, and invariance's input checks.

Faults are injected from outside invjax (tests/faults.py): in this process through monkeypatch,
in a child started through ``python tests/faults.py FAULTS -m invjax.main ...``; a real full disk
is a small tmpfs, mounted where this machine lets the tests mount one (root), else skipped. The
signal tests are in test_main.py (they share its reference run).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import faults
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_runs import REPO, SHARED_RUN, one_line_error, run_module

from invjax import checkpoint, workdir

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

# digits, 100 training images, batch 50: 2 steps per epoch, 3 epochs (the shared run's flags).
TINY = SHARED_RUN


def run_main(workdir_flag, *extra, fault=None, timeout=300):
    """``python -m invjax.main`` on the tiny run, with ``fault`` (tests/faults.py) if given."""
    return run_module(
        "invjax.main", *TINY, f"--workdir={workdir_flag}", *extra, fault=fault, timeout=timeout
    )


@pytest.fixture
def finished(tiny_digits_run):
    """A finished tiny run (3 epochs, ``TINY``): its workdir (conftest's, shared with
    test_export_run; read only)."""
    return tiny_digits_run


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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_workdir_problems_are_one_line_before_compute(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    holds_a_file = tmp_path / "holds_a_file"  # an existing workdir whose checkpoints/ is a file
    holds_a_file.mkdir()
    (holds_a_file / "checkpoints").write_text("x")
    cases = [
        ("", "--workdir= is empty: give a directory"),
        (str(a_file), f"--workdir={a_file} is an existing file, not a directory"),
        (str(a_file / "sub"), f"--workdir={a_file / 'sub'} cannot be created: {a_file} is a file"),
        ("gs://bucket/run", "--workdir=gs://bucket/run is a remote path"),
        (str(holds_a_file), f"--workdir={holds_a_file}: {holds_a_file / 'checkpoints'} is a file"),
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


@pytest.mark.slow
def test_too_little_free_space_stops_before_compute_leaving_no_directory(tmp_path):
    wd = tmp_path / "new" / "w"
    proc = run_main(str(wd), fault=f"free_bytes:{1 << 20}")
    line = one_line_error(proc)
    assert line.startswith(f"invjax: error: --workdir={wd}: only 1.0 MiB free on its file system")
    assert "one checkpoint of this run needs about " in line
    assert not os.path.exists(tmp_path / "new")  # the directories the run created are gone


def _assert_same_final_state(reference, wd):
    a, b = checkpoint.restore_latest(reference), checkpoint.restore_latest(wd)
    assert a.step == b.step == 6
    for x, y in zip(jax.tree.leaves(a.state), jax.tree.leaves(b.state), strict=True):
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()
    ra, rb = (json.load(open(os.path.join(d, "results.json"))) for d in (reference, wd))
    assert ra["test_error"] == rb["test_error"]


@pytest.mark.slow
def test_full_disk_during_training_keeps_the_last_checkpoint_and_resumes(finished, tmp_path):
    """ENOSPC from the 8th write of step 4's save on (orbax's ``_METADATA`` of the state, after
    its arrays): one line, exit 1, nothing of step 4 left, step 2 verified; orbax's report of
    the failure is in the run's log; the same command then ends bit-identical."""
    wd = str(tmp_path / "w")
    proc = run_main(wd, fault="enospc_from_write:4:8")
    line = one_line_error(proc, status=1)
    assert line.startswith(f"invjax: error: cannot save the checkpoint of step 4 in {wd}/")
    assert "No space left on device" in line and "the last good checkpoint (step 2) is kept" in line
    assert checkpoint.list_steps(wd) == [2]
    assert sorted(os.listdir(checkpoint.checkpoint_dir(wd))) == ["2"]  # no orbax temp dir
    assert checkpoint.verify_manifest(wd, 2) is None
    assert not os.path.exists(os.path.join(wd, workdir.LOCK_FILE))
    assert "No space left on device" in open(os.path.join(wd, workdir.LOG_FILE)).read()
    again = run_main(wd)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming from the checkpoint of step 2" in again.stdout
    _assert_same_final_state(finished, wd)


def _small_state(sign):
    return {"w": sign * jnp.arange(600, dtype=jnp.float32).reshape(20, 30), "n": jnp.int32(sign)}


def _save_until_it_fits(wd, make_fault):
    """Save step 2 over a verified step 1, with ``make_fault(attempt)`` set up each time, until a
    save succeeds; after each failure only step 1 is there, verified and intact, with nothing
    temporary beside it, and nothing of orbax's on stderr (its log is the run's). Returns the
    failures' messages."""
    one, two = _small_state(1), _small_state(-1)
    with workdir.locked([wd]):
        writer = checkpoint.Writer(wd, keep=3)
        writer.save(1, one, {"n": 1})
        writer.close()
    messages = []
    for attempt in range(60):
        with workdir.locked([wd]), make_fault(attempt):
            writer = checkpoint.Writer(wd, keep=3)  # as the next start would
            try:
                writer.save(2, two, {"n": 2})
                saved = True
            except checkpoint.SaveError as e:
                saved = False
                messages.append(str(e))
            writer.close()
        if saved:
            break
        assert messages[-1].startswith(f"cannot save the checkpoint of step 2 in {wd}/")
        assert "the last good checkpoint (step 1) is kept" in messages[-1]
        assert os.listdir(checkpoint.checkpoint_dir(wd)) == ["1"], attempt
        assert os.listdir(os.path.join(wd, checkpoint.MANIFEST_SUBDIR)) == ["1.json"], attempt
        assert checkpoint.verify_manifest(wd, 1) is None
    else:
        pytest.fail("the save never fitted")
    restored = checkpoint.restore_latest(wd)
    assert restored.step == 2 and restored.meta["n"] == 2
    for x, y in zip(jax.tree.leaves(restored.state), jax.tree.leaves(two), strict=True):
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()
    return messages


@pytest.mark.slow
def test_full_disk_at_every_python_write_of_a_save(tmp_path, monkeypatch, capfd):
    """ENOSPC from the k-th file write of the save on, for k = 1, 2, ... until the save fits:
    every directory, file and rename orbax makes in Python (tmp dirs, metadata, meta JSON,
    commit files, the commit rename) and the manifest's."""
    wd = str(tmp_path / "w")
    seen = []

    @contextlib.contextmanager
    def fault(attempt):
        with monkeypatch.context() as mp:
            seen.append(faults.WriteFault(2, attempt + 1).install(mp.setattr))
            yield

    messages = _save_until_it_fits(wd, fault)
    writes = seen[-1].seen  # every write of the save that fitted
    assert len(messages) == len(writes) and all(f.failed for f in seen[:-1])
    kinds = {(kind, os.path.basename(p)) for kind, p in writes}
    for expected in [
        ("mkdir", "2.orbax-checkpoint-tmp"),
        ("open", "_CHECKPOINT_METADATA"),
        ("open", "metadata"),  # the meta JSON
        ("open", "_METADATA"),  # the state tree
        ("rename", "2"),  # orbax's commit
        ("rename", "2.json"),  # the manifest
    ]:
        assert expected in kinds, (expected, kinds)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "orbax" not in err, err[-3000:]
    assert "No space left on device" in open(os.path.join(wd, workdir.LOG_FILE)).read()


@contextlib.contextmanager
def _mounted_tmpfs(path, size: str):
    """A fresh tmpfs of ``size`` at ``path`` (the test is skipped where this process may not
    mount one: not root, or a container without the capability)."""
    os.makedirs(path)
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip() or proc.returncode})")
    try:
        yield str(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.fixture
def tmpfs(tmp_path):
    with _mounted_tmpfs(tmp_path / "tmpfs", "1m") as mnt:
        yield mnt


@pytest.fixture
def tmpfs_24m(tmp_path):
    with _mounted_tmpfs(tmp_path / "tmpfs", "24m") as mnt:
        yield mnt


@pytest.mark.slow
def test_full_disk_on_a_real_tmpfs_at_every_write_of_a_save(tmpfs, capfd):
    """A real full disk: before each save the file system is filled up to k pages free, k = 0,
    1, ... until the save fits, so the kernel's ENOSPC lands on every write of the save in turn
    (tensorstore's array, metadata and OCDBT files as well as orbax's Python writes)."""
    wd = os.path.join(tmpfs, "w")

    @contextlib.contextmanager
    def fault(attempt):
        faults.fill_disk(tmpfs, attempt * 4096)
        try:
            yield
        finally:
            os.remove(os.path.join(tmpfs, faults.FILLER))

    messages = _save_until_it_fits(wd, fault)
    assert len(messages) >= 8
    assert any("RESOURCE_EXHAUSTED" in m for m in messages)  # tensorstore's writes
    assert any("OSError: [Errno 28]" in m for m in messages)  # Python's
    err = capfd.readouterr().err
    assert "Traceback" not in err and "orbax" not in err, err[-3000:]


@pytest.mark.slow
def test_full_disk_on_a_real_tmpfs_stops_in_one_line_and_resumes(finished, tmpfs_24m):
    """The command on a real 24 MiB tmpfs filled (before step 4's save) up to 8 KiB free: exit
    1, one line, no traceback, step 2 kept; with the space back, the same command resumes and
    ends bit-identical. Which write meets the full disk first (the checkpoint's, or the run's
    log and metrics files beside it) depends on timing: both end in the same one line."""
    tmpfs = tmpfs_24m
    wd = os.path.join(tmpfs, "w")
    proc = run_main(wd, fault="fill_disk_at_save:4:8192")
    line = one_line_error(proc, status=1)
    assert line.startswith(
        (
            f"invjax: error: cannot save the checkpoint of step 4 in {wd}/",
            f"invjax: error: cannot write in {wd}",
        )
    ), line
    assert "last good checkpoint (step 2) is kept" in line.lower(), line
    assert sorted(os.listdir(checkpoint.checkpoint_dir(wd))) == ["2"]
    assert checkpoint.verify_manifest(wd, 2) is None
    os.remove(os.path.join(tmpfs, faults.FILLER))
    again = run_main(wd)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming from the checkpoint of step 2" in again.stdout
    _assert_same_final_state(finished, wd)


@pytest.mark.slow
def test_damaged_steps_without_manifests_are_not_loaded(finished, tmp_path):
    """Every manifest deleted and 100 bytes overwritten in the newest step: the run stops (exit
    2, one line naming how to load a step anyway) and changes nothing; trusting step 4 makes the
    next start resume there (the damaged step 6 set aside) and end bit-identical."""
    wd = str(tmp_path / "w")
    shutil.copytree(finished, wd)
    shutil.rmtree(os.path.join(wd, checkpoint.MANIFEST_SUBDIR))
    state_dir = os.path.join(checkpoint.checkpoint_dir(wd), "6", "state")
    files = [os.path.join(r, f) for r, _, fs in os.walk(state_dir) for f in fs]
    biggest = max(files, key=os.path.getsize)
    with open(biggest, "r+b") as f:
        f.seek(os.path.getsize(biggest) // 2)
        f.write(bytes(range(100)))
    before = {p: open(p, "rb").read() for p in files}
    line = one_line_error(run_main(wd))
    assert f"no readable checkpoint in {checkpoint.checkpoint_dir(wd)} (steps [2, 4, 6]" in line
    assert "step 6: it has no integrity manifest" in line
    assert f"python -m invjax.checkpoint --workdir={wd} --trust_step=6" in line
    assert {p: open(p, "rb").read() for p in files} == before
    trust = subprocess.run(
        [sys.executable, "-m", "invjax.checkpoint", f"--workdir={wd}", "--trust_step=4"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert trust.returncode == 0, trust.stderr
    assert "step 4: verified" in trust.stdout and "step 6: it has no integrity manifest" in (
        trust.stdout
    )
    again = run_main(wd)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming from the checkpoint of step 4" in again.stdout
    assert "checkpoint step 6 in " in again.stderr and "has no integrity manifest" in again.stderr
    moved = os.listdir(os.path.join(wd, checkpoint.CORRUPT_SUBDIR))
    assert [m for m in moved if m.startswith("6-")]
    _assert_same_final_state(finished, wd)


@pytest.mark.slow
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


@pytest.mark.slow
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


def run_invariance(capsys, monkeypatch, *args):
    """``invjax.invariance``'s command in this process (its flags are its own ``FlagValues``,
    read afresh each call; ml_collections finds the ``--config.*`` overrides in ``sys.argv``, set
    as the command line would set it; the subprocess adds nothing under test here): ``(status,
    stdout, stderr)``. An uncaught exception propagates and fails the test, as a traceback
    would."""
    from invjax import invariance

    argv = ["invariance", "--config=configs/digits_cnn.py", *args]
    capsys.readouterr()
    with monkeypatch.context() as mp:
        mp.setattr(sys, "argv", argv)
        status = invariance.main(argv)
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.slow
def test_invariance_rejects_bad_images_and_another_models_checkpoint(
    finished, tmp_path, capsys, monkeypatch
):
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
        status, _, err = run_invariance(capsys, monkeypatch, *data, f"--images={path}")
        assert status == 2, (name, err[-2000:])
        assert err.strip().splitlines() == [f"invjax.invariance: error: {message}"] or (
            err.strip().splitlines()[-1].startswith(f"invjax.invariance: error: {message}")
        ), (name, err)
        assert "Traceback" not in err
    # a checkpoint of a width-4 network, asked for with the config's default width
    status, _, err = run_invariance(capsys, monkeypatch, *data, f"--workdir={finished}")
    assert status == 2, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"invjax.invariance: error: --workdir={finished} holds a checkpoint of ")
    assert " variables missing, " in last and "Traceback" not in err
    # the right config loads it
    status, out, err = run_invariance(
        capsys, monkeypatch, *data, "--config.model.width=4", f"--workdir={finished}", "--json"
    )
    assert status == 0, err[-2000:]
    assert json.loads(out.strip().splitlines()[-1])["variables"] == "checkpoint"


# ----------------------------------------------------------------------------- sweep


@pytest.mark.slow
def test_sweep_passes_sigterm_to_its_run_which_saves_and_a_rerun_resumes(tmp_path):
    """SIGTERM to ``launch/sweep.py --local`` while its run trains: the run gets it, saves at the
    step it reached and ends before the sweep, which exits 143; the same sweep command resumes
    the run from that checkpoint and finishes it."""
    runs = tmp_path / "runs"
    sets = {
        "data.name": "digits",
        "model.width": 4,
        "train.batch_size": 32,
        "train.eval_batch_size": 200,
        "train.num_epochs": 10,
        "train.lr_boundaries": "(6,)",
        "train.checkpoint_every_steps": 0,
        "train.log_every_steps": 0,
    }
    cmd = [sys.executable, "launch/sweep.py", "digits_cnn", "--sizes", "100", "--seeds", "0"]
    cmd += ["--runs-dir", str(runs), "--local"]
    for key, value in sets.items():
        cmd += ["--set", f"{key}={value}"]
    wd = str(runs / "digits_cnn" / "n100_s0")
    for _ in range(3):  # a fast machine may finish before the signal: start afresh
        shutil.rmtree(runs, ignore_errors=True)
        sweep = subprocess.Popen(
            cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        ckpt = checkpoint.checkpoint_dir(wd)
        deadline = time.time() + 240
        while sweep.poll() is None and time.time() < deadline:
            if os.path.isdir(ckpt) and any(d.isdigit() for d in os.listdir(ckpt)):
                break
            time.sleep(0.01)
        try:
            child = json.load(open(os.path.join(wd, workdir.LOCK_FILE)))["pid"]
        except (OSError, ValueError):
            child = None
        sweep.send_signal(signal.SIGTERM)
        out, err = sweep.communicate(timeout=300)
        if sweep.returncode != 0:
            break
    assert sweep.returncode == 143, err[-3000:]
    assert child is not None
    with pytest.raises(ProcessLookupError):  # the run ended before the sweep did
        os.kill(child, 0)
    lines = err.strip().splitlines()
    assert lines[-1].startswith("sweep: stopped by SIGTERM: 1 run(s) saved a checkpoint"), err
    assert any(x.startswith("invjax: stopped by SIGTERM after step ") for x in lines), err
    steps = checkpoint.list_steps(wd)
    assert steps and checkpoint.verify_manifest(wd, steps[-1]) is None
    assert not os.path.exists(os.path.join(wd, "results.json"))
    again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming from the checkpoint of step {steps[-1]} " in again.stdout
    assert json.load(open(os.path.join(wd, "results.json")))["steps"] == 40
