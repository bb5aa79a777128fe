"""Several JAX processes on this machine, joined by ``jax.distributed`` over the loopback address.

Every test starts real ``python -m invjax.main`` processes (or small scripts) with their own forced
CPU devices (``XLA_FLAGS=--xla_force_host_platform_device_count=N``: the device count is fixed when
JAX starts, hence subprocesses) and an explicit coordinator (``JAX_COORDINATOR_ADDRESS``,
``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``), the code path of SLURM and TPU VMs where JAX detects
those values itself. They compile with XLA's backend optimisations off and share a persistent
compilation cache, as tests/test_experiment.py does.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import textwrap
import time

import jax
import numpy as np
import pytest

from invjax import checkpoint, parallel

REPO = pathlib.Path(__file__).resolve().parents[1]

# A few steps of a digits run: 250 training digits, batch 64 (4 steps per epoch), 3 epochs of
# SGD, a checkpoint every 2 steps. Few and gentle on purpose: the digits have a constant
# background, so thousands of pixels share one pre-activation per channel, and when a BatchNorm
# bias moves it across zero their ReLUs flip together; a float-rounding difference then jumps to
# 1e-4 in one step (measured with lr 0.05: 1e-6 -> 8e-5 at step 6, and 6% after 51 SGD steps (lr 0.1)
# between 2 and 4 devices of ONE process). Measured here: at most 1.8e-6 relative per leaf.
TINY = (
    "--config=configs/digits_cnn.py",
    "--config.data.name=digits",
    "--config.data.augment=none",
    "--config.data.n_train=250",
    "--config.model.width=16",
    "--config.train.optimizer=sgd",
    "--config.train.learning_rate=0.02",
    "--config.train.batch_size=64",
    "--config.train.eval_batch_size=128",
    "--config.train.num_epochs=3",
    "--config.train.lr_boundaries=(2,)",
    "--config.train.checkpoint_every_steps=2",
    "--config.train.log_every_steps=2",
)
STEPS = 12


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    base = {k: v for k, v in os.environ.items() if k not in parallel.ENV_VARS}
    return dict(
        base,
        JAX_PLATFORMS="cpu",
        JAX_COMPILATION_CACHE_DIR=str(tmp_path_factory.mktemp("xla_cache")),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
    )


def devices_env(env, n: int, port: int | None = None, process: int | None = None, count=2):
    out = dict(
        env,
        XLA_FLAGS=f"--xla_force_host_platform_device_count={n} --xla_backend_optimization_level=0",
    )
    if port is not None:
        out.update(
            JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}",
            JAX_NUM_PROCESSES=str(count),
            JAX_PROCESS_ID=str(process),
        )
    return out


def start(env, workdir, *extra) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "invjax.main", *TINY, f"--workdir={workdir}", *extra],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_processes(env, workdir, n_proc=2, devices=2, timeout=240):
    """``n_proc`` processes with ``devices`` CPU devices each; returns their (rc, stdout, stderr)."""
    port = free_port()
    procs = [start(devices_env(env, devices, port, i, n_proc), workdir) for i in range(n_proc)]
    return [(p.wait(timeout), p.stdout.read(), p.stderr.read()) for p in procs]


def results(workdir) -> dict:
    with open(os.path.join(workdir, "results.json")) as f:
        return json.load(f)


def metrics(workdir) -> list[dict]:
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def model_leaves(workdir) -> list[np.ndarray]:
    state = checkpoint.restore_latest(workdir).state
    return [np.asarray(x) for x in jax.tree.leaves((state["params"], state["batch_stats"]))]


def assert_same_model(workdir_a, workdir_b) -> None:
    """Parameters and BatchNorm statistics agree: 1e-5 relative (norm of the difference over the
    norm) for all of them together, 1e-4 for each leaf. A BatchNorm bias is the sum of a
    gradient over every pixel of the batch (64 x 28 x 28 terms that mostly cancel), so its own
    relative difference is the largest: measured 9.1e-5 between 1 and 8 devices, all leaves
    together 2.7e-6."""
    a, b = model_leaves(workdir_a), model_leaves(workdir_b)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert np.linalg.norm(y - x) <= 1e-4 * np.linalg.norm(x)
    x, y = (np.concatenate([v.ravel() for v in t]) for t in (a, b))
    assert np.linalg.norm(y - x) <= 1e-5 * np.linalg.norm(x)


@pytest.fixture(scope="module")
def single(tmp_path_factory, env):
    """The reference: one process with 4 devices, the same global batch."""
    workdir = str(tmp_path_factory.mktemp("single"))
    proc = start(devices_env(env, 4), workdir)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-3000:]
    return workdir


@pytest.fixture(scope="module")
def multi(tmp_path_factory, env):
    """Two processes with 2 devices each (4 in all), uninterrupted."""
    workdir = str(tmp_path_factory.mktemp("multi"))
    outs = run_processes(env, workdir)
    for i, (rc, _, err) in enumerate(outs):
        assert rc == 0, f"process {i}: {err[-3000:]}"
    return workdir, outs


@pytest.mark.slow
def test_two_processes_match_one_process(single, multi):
    workdir, outs = multi
    # Both processes finish with the same line; only process 0 writes metrics and results.
    assert [o[1].strip().splitlines()[-1] for o in outs] == [
        f"test_error={results(workdir)['test_error']:.2f}%"
    ] * 2
    a, b = metrics(single), metrics(workdir)
    assert [(m["step"], m["split"]) for m in a] == [(m["step"], m["split"]) for m in b]
    np.testing.assert_allclose([m["loss"] for m in b], [m["loss"] for m in a], rtol=1e-5)
    ra, rb = results(single), results(workdir)
    assert rb["devices"] == ra["devices"] == 4
    assert rb["test_error"] == ra["test_error"] and rb["val_error"] == ra["val_error"]
    # Only the float summation order differs (measured: at most 1.8e-6 per leaf).
    assert_same_model(single, workdir)
    # Orbax wrote the checkpoint from both processes (OCDBT: one file set per process).
    state_dir = os.path.join(checkpoint.checkpoint_dir(workdir), str(STEPS), "state")
    assert {"ocdbt.process_0", "ocdbt.process_1"} <= set(os.listdir(state_dir))


@pytest.mark.slow
def test_kill_one_process_then_both_resume(multi, env, tmp_path):
    """Process 0 (the coordinator and primary writer) is killed after a verified checkpoint; the
    other stops (measured: JAX's coordination service aborts it at once, SIGABRT; if it did not, the
    test stops it as srun would); both restart
    and the run resumes from the last checkpoint, ending where the uninterrupted run ended."""
    ref, _ = multi
    workdir = str(tmp_path / "killed")
    port = free_port()
    procs = [start(devices_env(env, 2, port, i), workdir) for i in range(2)]
    ckpt_dir = checkpoint.checkpoint_dir(workdir)
    deadline = time.time() + 240
    while time.time() < deadline and procs[0].poll() is None:
        steps = (
            [int(d) for d in os.listdir(ckpt_dir) if d.isdigit()] if os.path.isdir(ckpt_dir) else []
        )
        # The first checkpoint, once its manifest is recorded: a kill between orbax's commit
        # and the manifest leaves a step that is not loaded until trusted (tests/
        # test_checkpoint.py, the kill inside that window).
        if steps and max(steps) >= 2 and checkpoint.has_manifest(workdir, max(steps)):
            break
        time.sleep(0.01)
    assert procs[0].poll() is None, "the run ended before the kill"
    procs[0].send_signal(signal.SIGKILL)
    assert procs[0].wait() == -signal.SIGKILL
    try:
        survivor = procs[1].wait(timeout=30)
    except subprocess.TimeoutExpired:
        procs[1].kill()
        survivor = procs[1].wait()
    assert survivor != 0  # it did not finish alone
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    steps_at_kill = checkpoint.list_steps(workdir)
    assert steps_at_kill and steps_at_kill[-1] < STEPS, steps_at_kill
    # The newest step with its manifest (a later one may have been cut before its manifest).
    newest = max(s for s in steps_at_kill if checkpoint.has_manifest(workdir, s))

    outs = run_processes(env, workdir)
    for i, (rc, _, err) in enumerate(outs):
        assert rc == 0, f"process {i}: {err[-3000:]}"
    said = outs[0][1]
    assert f"resuming from the checkpoint of step {newest}" in said, said[-2000:]
    # The same topology and the same batches: the resumed run ends bit-identical.
    assert results(workdir)["test_error"] == results(ref)["test_error"]
    for x, y in zip(model_leaves(ref), model_leaves(workdir), strict=True):
        assert x.tobytes() == y.tobytes()
    assert [(m["step"], m["split"], m["loss"]) for m in metrics(workdir)] == [
        (m["step"], m["split"], m["loss"]) for m in metrics(ref)
    ]


@pytest.mark.slow
def test_sigterm_to_one_process_stops_all_at_one_saved_step(env, tmp_path):
    """SIGTERM reaches only process 1 (a node's own signal), after the first checkpoint of a
    long run: the processes agree on one step (invjax.training.signals.StopVote), both save
    their shards of that step's checkpoint and stop with status 143 naming that step."""
    workdir = str(tmp_path / "term")
    port = free_port()
    total = 40 * 4  # 40 epochs: far more steps than run before the signal is handled
    procs = [
        start(devices_env(env, 2, port, i), workdir, "--config.train.num_epochs=40")
        for i in range(2)
    ]
    ckpt_dir = checkpoint.checkpoint_dir(workdir)
    try:
        deadline = time.time() + 240
        while time.time() < deadline and all(p.poll() is None for p in procs):
            if os.path.isdir(ckpt_dir) and any(d.isdigit() for d in os.listdir(ckpt_dir)):
                break
            time.sleep(0.01)
        assert all(p.poll() is None for p in procs), "a process ended before the signal"
        procs[1].send_signal(signal.SIGTERM)
        # Without the agreement process 1 waits in its save for process 0, which trains on.
        outs = [p.communicate(timeout=90) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    stopped = []
    for i, (p, (_, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 128 + signal.SIGTERM, f"process {i}: {err[-3000:]}"
        lines = [line for line in err.splitlines() if "stopped by SIGTERM after step" in line]
        assert len(lines) == 1 and "checkpoint saved in" in lines[0], err[-3000:]
        stopped.append(int(lines[0].split("after step ")[1].split()[0]))
    step = stopped[0]
    assert stopped == [step, step] and 2 <= step < total
    assert checkpoint.list_steps(workdir)[-1] == step  # the last checkpoint is that step's
    state_dir = os.path.join(ckpt_dir, str(step), "state")
    assert {"ocdbt.process_0", "ocdbt.process_1"} <= set(os.listdir(state_dir))  # both saved


@pytest.mark.slow
def test_eight_devices_match_one_device(single, env, tmp_path):
    """A whole short run on 8 forced host devices equals the run on 1 device (and on 4)."""
    outs = {}
    for n in (1, 8):
        workdir = str(tmp_path / f"d{n}")
        proc = start(devices_env(env, n), workdir)
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-3000:]
        outs[n] = workdir
    r1, r8 = results(outs[1]), results(outs[8])
    assert (r1["devices"], r8["devices"]) == (1, 8)
    assert r8["test_error"] == r1["test_error"] == results(single)["test_error"]
    assert r8["val_error"] == r1["val_error"]
    np.testing.assert_allclose(r8["test_loss"], r1["test_loss"], rtol=1e-5)
    m1, m8 = metrics(outs[1]), metrics(outs[8])
    assert [(m["step"], m["split"]) for m in m1] == [(m["step"], m["split"]) for m in m8]
    np.testing.assert_allclose([m["loss"] for m in m8], [m["loss"] for m in m1], rtol=1e-5)
    assert_same_model(outs[1], outs[8])


_FEED = textwrap.dedent(
    """
    import json, sys, jax, numpy as np
    from invjax import parallel
    from invjax.training.steps import batch_indices, eval_batches
    parallel.initialize_distributed()
    assert jax.process_count() == 2 and jax.local_device_count() == 3
    # A mesh whose devices are not ordered process by process.
    devs = jax.devices()
    mesh = parallel.make_mesh([devs[i] for i in (4, 0, 2, 5, 1, 3)])

    class Recorder:  # an array that remembers which rows were read
        def __init__(self, a):
            self.a, self.read, self.shape = a, [], a.shape
        def __getitem__(self, idx):
            self.read += np.asarray(idx).ravel().tolist()
            return self.a[idx]

    data = np.arange(100 * 2, dtype=np.float32).reshape(100, 2)
    src = Recorder(data)
    idx = batch_indices(100, 12, 0, 1, 3)
    x = parallel.gather_batch(src, idx, mesh)
    total = jax.jit(lambda x: x.sum(0), out_shardings=parallel.replicated(mesh))(x)
    rows = parallel.local_rows(12, mesh)
    want = [int(i) for a, b in rows for i in idx[a:b]]
    # Evaluation: 23 samples in batches of 6 -> 24 rows, one padded; counted once.
    step = parallel.jit_eval_step(
        lambda v, x, y, m: {"n": m.sum(), "s": (x[:, 0] * m).sum()}, mesh)
    outs = [step({}, parallel.gather_batch(data, i, mesh), parallel.gather_batch(data[:, 0], i, mesh),
                  parallel.shard_batch(m, mesh)) for i, m in eval_batches(23, 6)]
    print(json.dumps({
        "rows": rows, "read": sorted(src.read), "want": sorted(want),
        "total": np.asarray(total).tolist(), "expect": data[idx].sum(0).tolist(),
        "eval_n": sum(int(o["n"]) for o in outs), "eval_s": sum(float(o["s"]) for o in outs),
        "eval_expect": float(data[:23, 0].sum())}))
    """
)


@pytest.mark.slow
def test_each_process_reads_only_its_rows_in_any_device_order(env):
    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _FEED],
            cwd=REPO,
            env=devices_env(env, 3, port, i),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    res = [json.loads(o.strip().splitlines()[-1]) for o, _ in outs]
    all_rows = sorted(tuple(r) for rr in res for r in rr["rows"])
    # Six devices, 2 rows each; the two processes split the batch between them, with no overlap.
    assert all_rows == [(i, i + 2) for i in range(0, 12, 2)]
    assert set(map(tuple, res[0]["rows"])).isdisjoint(map(tuple, res[1]["rows"]))
    for r in res:
        assert r["read"] == r["want"] and len(r["read"]) == 6  # its own 6 rows, nothing else
        np.testing.assert_allclose(r["total"], r["expect"])  # the global batch, assembled
        assert r["eval_n"] == 23 and r["eval_s"] == pytest.approx(r["eval_expect"])


def test_bad_distributed_environment_is_named():
    assert parallel.distributed_args({}) == {}
    good = {"JAX_COORDINATOR_ADDRESS": "127.0.0.1:1234", "JAX_NUM_PROCESSES": "2"}
    assert parallel.distributed_args({**good, "JAX_PROCESS_ID": "1"}) == {
        "coordinator_address": "127.0.0.1:1234",
        "num_processes": 2,
        "process_id": 1,
    }
    with pytest.raises(ValueError, match=r"JAX_PROCESS_ID='2' is invalid: .* \[0, 1\]"):
        parallel.distributed_args({**good, "JAX_PROCESS_ID": "2"})
    with pytest.raises(ValueError, match=r"JAX_COORDINATOR_ADDRESS='' is invalid"):
        parallel.distributed_args({"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "0"})
    with pytest.raises(ValueError, match=r"JAX_NUM_PROCESSES='x' is invalid"):
        parallel.distributed_args({**good, "JAX_NUM_PROCESSES": "x", "JAX_PROCESS_ID": "0"})


@pytest.mark.slow
def test_main_names_a_bad_process_id_before_waiting(env, tmp_path):
    bad = dict(
        env,
        JAX_COORDINATOR_ADDRESS="127.0.0.1:1",
        JAX_NUM_PROCESSES="2",
        JAX_PROCESS_ID="5",
    )
    proc = subprocess.run(
        [sys.executable, "-m", "invjax.main", *TINY, f"--workdir={tmp_path / 'w'}"],
        cwd=REPO,
        env=bad,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "JAX_PROCESS_ID='5' is invalid: it must be an integer in [0, 1]" in proc.stderr
    assert not (tmp_path / "w").exists()
