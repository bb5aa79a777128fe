"""Orbax checkpoints of a run: train state, position, RNG and config; resume; integrity.

Layout: ``WORKDIR/checkpoints/<step>/{state,meta}``. ``state`` is the whole
:class:`invjax.training.state.TrainState` pytree (params, batch_stats, optimiser state, step, RNG key,
other variable collections and the best-validation copy); ``meta`` is JSON (epoch position,
running epoch sums, best validation error, elapsed time and the config). Orbax writes each step
to a temporary directory and renames it when complete, so a process killed while saving leaves
no half checkpoint under a step name (only a temporary directory that the next writer removes).

Integrity: after each save, ``WORKDIR/checkpoint_manifests/<step>.json`` records the size and
SHA-256 of every file of the step; a step whose files no longer match is unreadable, found
before orbax reads anything.

Reading never modifies anything: :func:`restore_latest` tries the newest step first and, when a
step cannot be read, warns and falls back to the previous one; if checkpoints exist and none can
be read it raises :class:`CheckpointError` naming each step and why. Only :class:`Writer`, which
is opened after every check has passed, moves an unreadable step out of the way (into
``WORKDIR/corrupt_checkpoints/``, never deleting it) so that training can save that step again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import logging as std_logging
import os
import shutil
import threading
import time
from typing import Any

import orbax.checkpoint as ocp
from absl import logging
from etils import epath

from invjax import workdir as workdir_lib

CHECKPOINT_SUBDIR = "checkpoints"


class _QuietReadOnly(std_logging.Filter):
    """Drop orbax's warning that a read-only manager (our probe) is read only."""

    def filter(self, record):
        return "is read only" not in record.getMessage()


class _QuietThreadErrors(std_logging.Filter):
    """Drop orbax's traceback of a failed writer thread: the same error reaches
    :meth:`Writer.save`, which reports it in one message (:class:`SaveError`)."""

    def filter(self, record):
        return "_SignalingThread.run() raised an exception" not in record.getMessage()


logging.get_absl_logger().addFilter(_QuietReadOnly())
logging.get_absl_logger().addFilter(_QuietThreadErrors())

CORRUPT_SUBDIR = "corrupt_checkpoints"
MANIFEST_SUBDIR = "checkpoint_manifests"


class CheckpointError(ValueError):
    """No usable checkpoint where one is needed; the message names each step and the reason."""


class SaveError(OSError):
    """A checkpoint could not be saved (e.g. a full disk); its temporary files are removed and
    the message names the step, the reason and the last good checkpoint, which is kept."""


@contextlib.contextmanager
def _injected_save_fault(step: int, directory: str):
    """Test hook (``INVJAX_TEST_FAULT=enospc_at_save:STEP``): inside orbax's real save of STEP,
    make its file writes through etils.epath (the meta JSON) fail with ENOSPC, as a full disk
    would, after the state arrays are already in orbax's temporary directory."""
    arg = workdir_lib.fault("enospc_at_save")
    if arg is None or int(arg) != step:
        yield
        return
    cls = type(epath.Path(directory))
    original = cls.write_text

    def full(self, *args, **kwargs):
        if not self.parent.name.startswith("meta"):  # orbax metadata files: written as usual
            return original(self, *args, **kwargs)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))

    cls.write_text = full
    try:
        yield
    finally:
        cls.write_text = original


def _root(workdir: str) -> str:
    """A local workdir as an absolute path; a remote one (``gs://...``) as given."""
    if workdir_lib.is_remote(workdir):
        return str(workdir).rstrip("/")
    return os.path.abspath(workdir)


def checkpoint_dir(workdir: str) -> str:
    return str(epath.Path(_root(workdir)) / CHECKPOINT_SUBDIR)


def _manager(directory: str, *, read_only: bool, keep: int | None = None):
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep,
        read_only=read_only,
        create=not read_only,
        # Synchronous: a saved step is complete when save() returns, before the next step
        # could change (or a kill could interrupt) anything.
        enable_async_checkpointing=False,
        cleanup_tmp_directories=not read_only,
        save_interval_steps=0 if read_only else 1,
    )
    return ocp.CheckpointManager(directory, options=options, item_names=("state", "meta"))


def list_steps(workdir: str) -> list[int]:
    """Step numbers with a complete (committed) checkpoint directory, ascending."""
    directory = checkpoint_dir(workdir)
    if not epath.Path(directory).is_dir():
        return []
    mngr = _manager(directory, read_only=True)
    try:
        mngr.reload()
        return sorted(mngr.all_steps())
    finally:
        mngr.close()


def _manifest_path(workdir: str, step: int) -> str:
    return str(epath.Path(_root(workdir)) / MANIFEST_SUBDIR / f"{step}.json")


def _file_digests(step_dir: str) -> dict[str, list]:
    """``{relative path: [size, sha256]}`` of every file of a checkpoint step.

    Through etils.epath, as orbax itself, so that local and remote (``gs://``) steps are read
    the same way; the walk lists names (not paths), which every backend gives alike.
    """
    out = {}

    def walk(directory: epath.Path, rel: str) -> None:
        for child in sorted(directory.iterdir(), key=lambda p: p.name):
            name = f"{rel}{child.name}"
            if child.is_dir():
                walk(child, name + "/")
                continue
            digest, size = hashlib.sha256(), 0
            with child.open("rb") as f:
                for block in iter(lambda f=f: f.read(1 << 20), b""):
                    digest.update(block)
                    size += len(block)
            out[name] = [size, digest.hexdigest()]

    walk(epath.Path(step_dir), "")
    return out


def verify_manifest(workdir: str, step: int) -> str | None:
    """None if the step's files match the manifest written when it was saved (or if there is no
    manifest: a run killed between saving and writing it); else what differs.

    Checking before orbax reads anything catches damaged files early and cheaply (orbax itself
    would notice most damage only deep inside tensorstore, and not a flipped bit in a value).
    """
    path = _manifest_path(workdir, step)
    if not epath.Path(path).exists():
        logging.warning(
            "checkpoint step %d in %s has no integrity manifest (%s: deleted, or the run was "
            "killed between saving the step and recording it): its files cannot be checked",
            step,
            checkpoint_dir(workdir),
            path,
        )
        return None
    try:
        want = json.loads(epath.Path(path).read_text())
    except (OSError, ValueError) as e:
        return f"its manifest {path} is unreadable ({_short(e)})"
    have = _file_digests(str(epath.Path(checkpoint_dir(workdir)) / str(step)))
    for rel, (size, sha) in sorted(want.items()):
        if rel not in have:
            return f"file {rel} is missing"
        if have[rel][0] != size:
            return f"file {rel} has {have[rel][0]} bytes, {size} when saved"
        if have[rel][1] != sha:
            return f"file {rel} differs from when it was saved (sha256)"
    return None


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:200] if text else ''}"


def write_manifest(workdir: str, step: int, kept_steps) -> None:
    """Record the digests of a saved step (atomically where the file system renames atomically)
    and remove the manifests of steps no longer in ``kept_steps`` (those orbax removed)."""
    path = epath.Path(_manifest_path(workdir, step))
    path.parent.mkdir(parents=True, exist_ok=True)
    digests = _file_digests(str(epath.Path(checkpoint_dir(workdir)) / str(step)))
    tmp = epath.Path(str(path) + ".tmp")
    tmp.write_text(json.dumps(digests))
    tmp.replace(path)
    kept = {f"{s}.json" for s in kept_steps}
    for child in path.parent.iterdir():
        if child.name.endswith(".json") and child.name not in kept:
            child.unlink()


@dataclasses.dataclass
class Restored:
    """A readable checkpoint: its step, state pytree, meta dict, and the newer unreadable steps."""

    step: int
    state: Any
    meta: dict
    skipped: list[tuple[int, str]]


def _restore(mngr, workdir: str, step: int, target: Any) -> Restored:
    """One step, checked against its manifest first; raises on any damage or mismatch."""
    damage = verify_manifest(workdir, step)
    if damage is not None:
        raise CheckpointError(damage)
    if target is None:
        target = _local_target(mngr.directory / str(step) / "state")
    args = ocp.args.Composite(state=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore())
    out = mngr.restore(step, args=args)
    meta = dict(out.meta)
    if int(meta.get("step", -1)) != step:
        raise CheckpointError(f"meta step {meta.get('step')!r} != directory step {step}")
    return Restored(step, out.state, meta, [])


def _local_target(state_dir) -> Any:
    """The stored tree's shapes and dtypes on this process's first device.

    Orbax restores without a target only onto the device topology that saved it, so a run saved
    by several processes or devices could not be read by one (a test, a phase-2 run elsewhere).
    """
    import jax  # lazily, like orbax: reading a checkpoint's config needs no devices

    tree = ocp.StandardCheckpointHandler().metadata(epath.Path(state_dir)).tree
    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    return jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device), tree)


def restore_step(workdir: str, step: int, target: Any = None) -> Restored:
    """Restore one given step (see :func:`restore_latest` for ``target``); raises if unreadable."""
    if step not in list_steps(workdir):
        raise CheckpointError(
            f"no checkpoint of step {step} in {checkpoint_dir(workdir)}: steps are "
            f"{list_steps(workdir)}"
        )
    mngr = _manager(checkpoint_dir(workdir), read_only=True)
    try:
        return _restore(mngr, workdir, step, target)
    finally:
        mngr.close()


def restore_latest(workdir: str, target: Any = None) -> Restored | None:
    """Restore the newest readable checkpoint of ``workdir``; None if there is none at all.

    ``target``: an abstract pytree (``jax.ShapeDtypeStruct`` leaves, with shardings) that the
    state must match; None restores the stored tree as it is. A step that fails (files that
    differ from its manifest, damage orbax notices, a tree or shape that differs from
    ``target``) is skipped, with a warning once a readable step is found. Raises
    :class:`CheckpointError` if steps exist but none is readable. Modifies nothing.
    """
    directory = checkpoint_dir(workdir)
    steps = list_steps(workdir)
    if not steps:
        return None
    mngr = _manager(directory, read_only=True)
    skipped: list[tuple[int, str]] = []
    try:
        for step in reversed(steps):
            try:
                restored = _restore(mngr, workdir, step, target)
            except Exception as e:  # noqa: BLE001 (any failure makes the step unusable)
                skipped.append((step, _short(e)))
                continue
            for bad, reason in skipped:
                logging.warning(
                    "checkpoint step %d in %s is unreadable (%s): skipped in favour of step %d",
                    bad,
                    directory,
                    reason,
                    step,
                )
            restored.skipped = skipped
            return restored
    finally:
        mngr.close()
    lines = "; ".join(f"step {s}: {r}" for s, r in skipped)
    raise CheckpointError(
        f"no readable checkpoint in {directory} (steps {steps} all failed: {lines}). Nothing was "
        f"changed. Use a new --workdir to start afresh, or move the damaged steps away."
    )


def read_config(workdir: str) -> dict | None:
    """The config stored with the newest checkpoint whose meta can be read (None if none)."""
    steps = list_steps(workdir)
    if not steps:
        return None
    mngr = _manager(checkpoint_dir(workdir), read_only=True)
    try:
        for step in reversed(steps):
            try:
                out = mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
                return dict(out.meta).get("config")
            except Exception:  # noqa: BLE001 (an unreadable meta: try the previous step)
                continue
    finally:
        mngr.close()
    return None


def load_params(workdir: str) -> dict:
    """The model variables a finished (or running) run stands for, for use in another model.

    Returns ``{'params': ..., 'batch_stats': ..., <other collections>}`` of the newest readable
    checkpoint: the best-validation copy where the run selected one, else the current variables.
    Raises :class:`CheckpointError` if ``workdir`` holds no readable checkpoint.
    """
    restored = restore_latest(workdir)
    if restored is None:
        raise CheckpointError(
            f"no checkpoint in {checkpoint_dir(workdir)} to load variables from: train that run "
            f"first (python -m invjax.main --config=... --workdir={workdir})"
        )
    state = restored.state
    source = state.get("best") or state
    variables = {"params": source["params"], "batch_stats": source.get("batch_stats") or {}}
    variables.update(source.get("extra") or {})
    return variables


def _sync_processes(name: str) -> None:
    """Wait until every JAX process got here (nothing to do in a single-process run)."""
    import jax

    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def _join_new_threads(before: set, deadline: float) -> None:
    """Wait (until ``deadline``) for the threads that are not in ``before`` to end.

    ``threading.enumerate`` also lists a thread whose ``start()`` was called but which has not
    begun to run; joining such a thread raises ``RuntimeError``, so it is looked at again.
    """
    me = threading.current_thread()
    while time.monotonic() < deadline:
        pending = [t for t in set(threading.enumerate()) - before if t is not me]
        if not pending:
            return
        for t in pending:
            try:
                t.join(timeout=max(deadline - time.monotonic(), 0))
            except RuntimeError:  # not running yet
                time.sleep(0.01)


class Writer:
    """Saves checkpoints of one run; opened only after the run passed every check.

    ``set_aside``: unreadable steps found by :func:`restore_latest`; they are moved (not deleted)
    to ``WORKDIR/corrupt_checkpoints/<step>-<time>`` with a warning, so the run can save those
    step numbers again.
    """

    def __init__(self, workdir: str, keep: int, set_aside=(), primary: bool = True):
        self.workdir = _root(workdir)
        self.primary = primary
        self.directory = checkpoint_dir(workdir)
        # Orbax managers meet at barriers that depend on what they find on disk (a missing
        # directory is created behind one, an existing one is read behind another), so no
        # process may change the directory while another still reads it (prepare's probes), and
        # every process creates it itself before its manager looks.
        _sync_processes("invjax_checkpoint_writer_probed")
        if primary:
            for step, reason in set_aside:
                src = epath.Path(self.directory) / str(step)
                if not src.exists():
                    continue
                dst_dir = epath.Path(self.workdir) / CORRUPT_SUBDIR
                dst_dir.mkdir(parents=True, exist_ok=True)
                dst = dst_dir / f"{step}-{int(time.time())}"
                src.rename(dst)
                manifest = epath.Path(_manifest_path(workdir, step))
                if manifest.exists():
                    manifest.rename(dst_dir / f"{dst.name}.manifest.json")
                logging.warning("moved unreadable checkpoint step %d (%s) to %s", step, reason, dst)
        os.makedirs(self.directory, exist_ok=True)
        _sync_processes("invjax_checkpoint_writer_open")
        self._mngr = _manager(self.directory, read_only=False, keep=keep)
        self.last_saved: int | None = self._mngr.latest_step()

    def save(self, step: int, state: Any, meta: dict) -> None:
        """Save ``step`` (complete when this returns); :class:`SaveError` if it cannot be, with
        its temporary directory removed so that nothing blocks or confuses the next start."""
        if step == self.last_saved:
            return
        meta = dict(meta, step=int(step))
        args = ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta))
        threads = set(threading.enumerate())
        try:
            with _injected_save_fault(step, self.directory):
                self._mngr.save(step, args=args, force=True)
                self._mngr.wait_until_finished()
        except Exception as e:  # noqa: BLE001 (tensorstore/orbax wrap OS errors in many types)
            # The other items' writer threads go on after one item failed: let them end (they
            # would write into the directory being removed) before removing it.
            _join_new_threads(threads, deadline=time.monotonic() + 30)
            self._remove_partial(step)
            raise SaveError(self._failure(step, e, committed=False)) from e
        self.last_saved = step
        slow = workdir_lib.fault("slow_save")
        if slow:  # test hook: a window between the commit and the manifest for a second signal
            time.sleep(float(slow))
        if self.primary:
            try:
                self._write_manifest(step)
            except OSError as e:
                with contextlib.suppress(OSError):
                    epath.Path(_manifest_path(self.workdir, step) + ".tmp").unlink()
                raise SaveError(self._failure(step, e, committed=True)) from e

    def _failure(self, step: int, e: BaseException, committed: bool) -> str:
        if committed:
            what = "the step is saved but has no integrity manifest (it loads with a warning)"
        else:
            steps = [s for s in self._mngr.all_steps() if s != step]
            what = "its partial files were removed; " + (
                f"the last good checkpoint (step {max(steps)}) is kept"
                if steps
                else "no earlier checkpoint exists"
            )
        try:
            free = f"; {shutil.disk_usage(self.directory).free / 2**20:.1f} MiB free"
        except OSError:
            free = ""
        return (
            f"cannot save the checkpoint of step {step} in {self.directory} ({_short(e)}{free}): "
            f"{what}. Free some space (or fix the problem) and run the same command to resume."
        )

    def _remove_partial(self, step: int) -> None:
        """Remove orbax's temporary directory of a failed save (never a committed step)."""
        directory = epath.Path(self.directory)
        if not self.primary or not directory.is_dir():
            return
        for child in directory.iterdir():
            if child.name.startswith(f"{step}.orbax-checkpoint-tmp"):
                with contextlib.suppress(OSError):
                    child.rmtree()

    def _write_manifest(self, step: int) -> None:
        write_manifest(self.workdir, step, self._mngr.all_steps())

    def close(self) -> None:
        self._mngr.wait_until_finished()
        self._mngr.close()
