"""Orbax checkpoints of a run: train state, position, RNG and config; resume; integrity.

Layout: ``WORKDIR/checkpoints/<step>/{state,meta}``. ``state`` is the whole
:class:`invjax.training.state.TrainState` pytree (params, batch_stats, optimiser state, step, RNG key,
other variable collections and the best-validation copy); ``meta`` is JSON (epoch position,
running epoch sums, best validation error, elapsed time and the config).

Atomicity is orbax's: a step is written to a temporary directory and renamed when complete, so a
process killed while saving leaves no half checkpoint under a step name. A manager that writes
removes the temporary directories of earlier, interrupted saves when it opens
(``cleanup_tmp_directories``); a save that fails (a full disk) removes its own at once
(:meth:`Writer.save`, finding them with orbax's ``all_temporary_paths``).

Integrity: after each save, ``WORKDIR/checkpoint_manifests/<step>.json`` records the size and
SHA-256 of every file of the step. A step is *verified* only when a well-formed manifest lists
every one of its files and each matches (a file of the step that the manifest does not list, a
manifest that is not a ``{path: [size, sha256]}`` mapping, an empty one: not verified). A step
whose files differ is damaged; a step without a manifest cannot be checked. Neither is loaded by
default: :func:`restore_latest` falls back to the newest verified step with a warning, and if
there is none raises :class:`CheckpointError` naming each step, why, and (for steps without a
manifest) how to load one anyway: ``python -m invjax.checkpoint --workdir=DIR --trust_step=N``
records the step's manifest as its files are now (the ``allow_unverified`` argument loads one
for one call in Python).

A ``<step>.pending`` marker, written before each save and removed with the manifest, tells a
step whose save was interrupted between orbax's atomic commit and its manifest. The marker is
only a name for why the manifest is missing, never a proof of the files: such a step is
unverified like any other step without a manifest (nothing can tell its files from damaged ones
once the run that wrote them is gone), so the run resumes from the step before and the
interrupted step is set aside, kept, for ``--trust_step`` (:func:`is_unrecorded`).

Reading never modifies anything. Only :class:`Writer`, which is opened after every check has
passed, moves the steps that were passed over out of the way (into
``WORKDIR/corrupt_checkpoints/``, never deleting them) so that training can save those step
numbers again.

Command line (``python -m invjax.checkpoint DIR``, or ``--workdir=DIR``): lists the steps and
whether each is verified; ``--trust_step=N`` records a manifest for a step that has none (exit 2
and one line for a step that has one, well-formed or not).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import hashlib
import json
import logging as std_logging
import os
import shutil
import sys
import time
from collections.abc import Sequence
from typing import Any

import orbax.checkpoint as ocp
from absl import logging
from etils import epath

from invjax import workdir as workdir_lib

CHECKPOINT_SUBDIR = workdir_lib.CHECKPOINTS_DIR
CORRUPT_SUBDIR = workdir_lib.CORRUPT_DIR
MANIFEST_SUBDIR = workdir_lib.MANIFESTS_DIR


class _QuietReadOnly(std_logging.Filter):
    """Drop orbax's warning that a read-only manager (our probe) is read only."""

    def filter(self, record):
        return "is read only" not in record.getMessage()


logging.get_absl_logger().addFilter(_QuietReadOnly())


class CheckpointError(ValueError):
    """No usable checkpoint where one is needed; the message names each step and the reason."""


class UnverifiedError(CheckpointError):
    """A step has no integrity manifest, so its files cannot be checked (not loaded by default)."""


class SaveError(OSError):
    """A checkpoint could not be saved (e.g. a full disk); its temporary files are removed and
    the message names the step, the reason and the last good checkpoint, which is kept."""


def _root(workdir: str) -> str:
    """A local workdir as an absolute path; a remote one (``gs://...``) as given."""
    if workdir_lib.is_remote(workdir):
        return str(workdir).rstrip("/")
    return os.path.abspath(workdir)


def checkpoint_dir(workdir: str) -> str:
    return str(epath.Path(_root(workdir)) / CHECKPOINT_SUBDIR)


def _check_layout(workdir: str) -> None:
    """The run's checkpoint paths, where they exist, must be directories (else one clear
    :class:`CheckpointError`, before any compute, instead of a failed first save)."""
    for sub in (CHECKPOINT_SUBDIR, MANIFEST_SUBDIR, CORRUPT_SUBDIR):
        path = epath.Path(_root(workdir)) / sub
        if path.exists() and not path.is_dir():
            raise CheckpointError(
                f"--workdir={workdir}: {path} is a file, not a directory; invjax keeps its "
                f"{sub.replace('_', ' ')} there: move the file away or choose another --workdir"
            )


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
    """Step numbers with a complete (committed) checkpoint directory, ascending.

    Raises :class:`CheckpointError` if a checkpoint path of the run is a file.
    """
    _check_layout(workdir)
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


def has_manifest(workdir: str, step: int) -> bool:
    return epath.Path(_manifest_path(workdir, step)).exists()


def _pending_path(workdir: str, step: int) -> str:
    return str(epath.Path(_root(workdir)) / MANIFEST_SUBDIR / f"{step}.pending")


def is_unrecorded(workdir: str, step: int) -> bool:
    """True for a step whose save began (its ``<step>.pending`` marker, written before orbax's
    save) but whose manifest was never written: the run stopped between orbax's atomic commit
    and the manifest. Such a step is *not* trusted: the marker says why the manifest is missing,
    not that the files are sound (a stale marker beside a damaged step reads the same), so it is
    unverified like a step whose manifest was deleted, and only ``--trust_step`` certifies it."""
    return not has_manifest(workdir, step) and epath.Path(_pending_path(workdir, step)).exists()


_SHA256_HEX = frozenset("0123456789abcdef")


def _manifest_problem(want: Any) -> str | None:
    """None if ``want`` has a manifest's shape, ``{relative path: [size, sha256 hex]}`` with at
    least one file; else what is wrong with it (a checkpoint step always has files)."""
    if not isinstance(want, dict):
        return f"a JSON {type(want).__name__}, not an object of files"
    if not want:
        return "it lists no files"
    for rel, entry in want.items():
        ok = (
            isinstance(entry, list)
            and len(entry) == 2
            and isinstance(entry[0], int)
            and not isinstance(entry[0], bool)
            and entry[0] >= 0
            and isinstance(entry[1], str)
            and len(entry[1]) == 64
            and set(entry[1]) <= _SHA256_HEX
        )
        if not rel or not ok:
            return f"entry {rel!r}: {json.dumps(entry)[:80]} is not [size, sha256]"
    return None


def verify_manifest(workdir: str, step: int) -> str | None:
    """None if the step is verified (a well-formed manifest lists every file of the step, and
    each has the size and SHA-256 it had when saved); else why not: no manifest (with the
    save's pending marker: an interrupted save), an unreadable or malformed one, a file that is
    missing, not listed, or different.

    Checking before orbax reads anything catches damaged files early and cheaply (orbax itself
    would notice most damage only deep inside tensorstore, and not a flipped bit in a value).
    """
    path = _manifest_path(workdir, step)
    if not epath.Path(path).exists():
        if is_unrecorded(workdir, step):
            return (
                f"its save was interrupted before its integrity manifest was recorded (only "
                f"{_pending_path(workdir, step)} is there), so its files cannot be checked"
            )
        return f"it has no integrity manifest ({path}), so its files cannot be checked"
    try:
        want = json.loads(epath.Path(path).read_text())
    except (OSError, ValueError) as e:
        return f"its manifest {path} is unreadable ({_short(e)})"
    malformed = _manifest_problem(want)
    if malformed is not None:
        return f"its manifest {path} is malformed ({malformed}), so its files cannot be checked"
    have = _file_digests(str(epath.Path(checkpoint_dir(workdir)) / str(step)))
    for rel in sorted(set(want) | set(have)):
        if rel not in have:
            return f"file {rel} is missing"
        if rel not in want:
            return f"file {rel} is not in its manifest {path}, so it cannot be checked"
        size, sha = want[rel]
        if have[rel][0] != size:
            return f"file {rel} has {have[rel][0]} bytes, {size} when saved"
        if have[rel][1] != sha:
            return f"file {rel} differs from when it was saved (sha256)"
    return None


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:200] if text else ''}"


def _record_manifest(workdir: str, step: int) -> None:
    """Write ``step``'s manifest as its files are now (atomically where the file system renames
    atomically), then remove its pending marker."""
    path = epath.Path(_manifest_path(workdir, step))
    path.parent.mkdir(parents=True, exist_ok=True)
    digests = _file_digests(str(epath.Path(checkpoint_dir(workdir)) / str(step)))
    tmp = epath.Path(str(path) + ".tmp")
    tmp.write_text(json.dumps(digests))
    tmp.replace(path)
    epath.Path(_pending_path(workdir, step)).unlink(missing_ok=True)


def write_manifest(workdir: str, step: int, kept_steps) -> None:
    """Record the digests of a step just saved and remove the manifests (and pending markers)
    of steps no longer in ``kept_steps`` (those orbax removed)."""
    _record_manifest(workdir, step)
    path = epath.Path(_manifest_path(workdir, step))
    kept = {f"{s}.{ext}" for s in kept_steps for ext in ("json", "pending")}
    for child in path.parent.iterdir():
        if child.name.endswith((".json", ".pending")) and child.name not in kept:
            child.unlink()


def trust_command(workdir: str, step: int) -> str:
    """The command that records ``step``'s manifest (named in the messages about it)."""
    return f"python -m invjax.checkpoint --workdir={workdir} --trust_step={step}"


def trust_step(workdir: str, step: int) -> None:
    """Record a manifest for a step that has none, as its files are now, so that it loads.

    For a user who knows the step is sound (e.g. the run was killed just after saving it: the
    step's pending marker, which is then removed). Raises :class:`CheckpointError` if the step
    does not exist (naming where a step set aside went) or already has a manifest, verified,
    damaged or malformed: a manifest is never replaced, so a damaged step is never trusted.
    """
    steps = list_steps(workdir)
    if step not in steps:
        aside = epath.Path(_root(workdir)) / CORRUPT_SUBDIR
        moved = (
            sorted(
                p.name for p in aside.iterdir() if p.is_dir() and p.name.split("-")[0] == str(step)
            )
            if aside.is_dir()
            else []
        )
        where = (
            f"; it was set aside as {aside / moved[-1]}: move that directory back to "
            f"{epath.Path(checkpoint_dir(workdir)) / str(step)} to trust it"
            if moved
            else ""
        )
        raise CheckpointError(
            f"no checkpoint of step {step} in {checkpoint_dir(workdir)}: steps are {steps}{where}"
        )
    if has_manifest(workdir, step):
        damage = verify_manifest(workdir, step)
        state = "verified" if damage is None else f"not verified: {damage}"
        raise CheckpointError(
            f"checkpoint step {step} in {checkpoint_dir(workdir)} has a manifest ({state}); "
            "only a step without one can be trusted"
        )
    _record_manifest(workdir, step)


@dataclasses.dataclass
class Restored:
    """A readable checkpoint: its step, state pytree, meta dict, and the newer steps passed over
    (``[(step, reason)]``: damaged, unreadable, or without a manifest)."""

    step: int
    state: Any
    meta: dict
    skipped: list[tuple[int, str]]


def _restore(mngr, workdir: str, step: int, target: Any, allow_unverified: bool) -> Restored:
    """One step, checked against its manifest first; raises on any damage or mismatch."""
    if not has_manifest(workdir, step):  # no manifest, or an interrupted save's marker
        if not allow_unverified:
            raise UnverifiedError(verify_manifest(workdir, step))
        logging.warning(
            "loading checkpoint step %d of %s without an integrity manifest (allowed by the "
            "caller): its files cannot be checked",
            step,
            checkpoint_dir(workdir),
        )
    else:
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


def restore_step(
    workdir: str, step: int, target: Any = None, allow_unverified: bool = False
) -> Restored:
    """Restore one given step (see :func:`restore_latest` for the arguments); raises if it is
    unreadable, damaged, or (unless ``allow_unverified``) without a manifest."""
    steps = list_steps(workdir)
    if step not in steps:
        raise CheckpointError(
            f"no checkpoint of step {step} in {checkpoint_dir(workdir)}: steps are {steps}"
        )
    mngr = _manager(checkpoint_dir(workdir), read_only=True)
    try:
        return _restore(mngr, workdir, step, target, allow_unverified)
    finally:
        mngr.close()


def restore_latest(
    workdir: str, target: Any = None, allow_unverified: bool = False
) -> Restored | None:
    """Restore the newest verified checkpoint of ``workdir``; None if there is none at all.

    ``target``: an abstract pytree (``jax.ShapeDtypeStruct`` leaves, with shardings) that the
    state must match; None restores the stored tree as it is. A step that fails (no manifest,
    unless ``allow_unverified``; files that differ from its manifest; damage orbax notices; a
    tree or shape that differs from ``target``) is skipped, with a warning once a usable step is
    found. Raises :class:`CheckpointError` if steps exist but none is usable; its message says
    how to load a step without a manifest anyway. Modifies nothing.
    """
    directory = checkpoint_dir(workdir)
    steps = list_steps(workdir)
    if not steps:
        return None
    mngr = _manager(directory, read_only=True)
    skipped: list[tuple[int, str]] = []
    unverified: list[int] = []
    try:
        for step in reversed(steps):
            try:
                restored = _restore(mngr, workdir, step, target, allow_unverified)
            except UnverifiedError as e:
                skipped.append((step, str(e)))
                unverified.append(step)
                continue
            except CheckpointError as e:  # invjax's own reason (a damaged step), in full
                skipped.append((step, str(e)))
                continue
            except Exception as e:  # noqa: BLE001 (any failure makes the step unusable)
                skipped.append((step, _short(e)))
                continue
            for bad, reason in skipped:
                logging.warning(
                    "checkpoint step %d in %s is not used (%s): resuming from step %d instead",
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
    how = (
        f" To load a step without a manifest anyway, record its manifest as its files are now: "
        f"{trust_command(workdir, unverified[0])}, then run the same command again."
        if unverified
        else ""
    )
    raise CheckpointError(
        f"no readable checkpoint in {directory} (steps {steps} all failed: {lines}). Nothing was "
        f"changed.{how} Or use a new --workdir to start afresh, or move the steps away."
    )


def read_config(workdir: str) -> dict | None:
    """The config stored with the newest verified checkpoint whose meta can be read, else (no
    step verified) with the newest readable one, for the messages about it; None if none.

    Steps are checked newest first and the first verified one answers, so a run whose newest
    step is sound hashes only that step here."""
    steps = list_steps(workdir)
    if not steps:
        return None
    mngr = _manager(checkpoint_dir(workdir), read_only=True)

    def meta_config(step):
        try:
            out = mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
            return True, dict(out.meta).get("config")
        except Exception:  # noqa: BLE001 (an unreadable meta: try the previous step)
            return False, None

    try:
        unverified = []
        for step in reversed(steps):
            if verify_manifest(workdir, step) is not None:
                unverified.append(step)
                continue
            ok, config = meta_config(step)
            if ok:
                return config
        for step in unverified:
            ok, config = meta_config(step)
            if ok:
                return config
    finally:
        mngr.close()
    return None


def load_params(workdir: str, allow_unverified: bool = False) -> dict:
    """The model variables a finished (or running) run stands for, for use in another model.

    Returns ``{'params': ..., 'batch_stats': ..., <other collections>}`` of the newest verified
    checkpoint (``allow_unverified``: also one without a manifest): the best-validation copy
    where the run selected one, else the current variables. Raises :class:`CheckpointError` if
    ``workdir`` holds no usable checkpoint.
    """
    restored = restore_latest(workdir, allow_unverified=allow_unverified)
    if restored is None:
        raise CheckpointError(
            f"no checkpoint in {checkpoint_dir(workdir)} to load variables from: train that run "
            f"first (python -m invjax.main --config=... --workdir={workdir})"
        )
    variables, _ = reported_variables(restored.state, restored.meta)
    return variables


def reported_variables(state, meta: dict) -> tuple[dict, dict]:
    """The model a checkpoint stands for and how it was chosen: ``(variables, info)``.

    ``state``: a restored train-state tree (a dict, :func:`restore_latest` without a target);
    ``meta``: its meta. The best-validation copy where the run selects one
    (``info['selected_by'] = 'best validation'``, ``info['model_epoch']`` its epoch), else the
    current variables (``'last epoch'``, the checkpoint's epoch); ``variables`` is
    ``{'params', 'batch_stats', <other collections>}``. The trainer's final evaluation reports
    the same model.
    """
    best = state.get("best") or {}
    source = best or state
    variables = {"params": source["params"], "batch_stats": source.get("batch_stats") or {}}
    variables.update(source.get("extra") or {})
    if best:
        info = {"selected_by": "best validation", "model_epoch": meta.get("best_epoch")}
    else:
        info = {"selected_by": "last epoch", "model_epoch": meta.get("epoch")}
    return variables, info


def _sync_processes(name: str) -> None:
    """Wait until every JAX process got here (nothing to do in a single-process run)."""
    import jax

    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


class Writer:
    """Saves checkpoints of one run; opened only after the run passed every check.

    ``set_aside``: the steps :func:`restore_latest` passed over (damaged, unreadable, or without
    a manifest); they are moved (not deleted) to ``WORKDIR/corrupt_checkpoints/<step>-<time>``
    with a warning, so the run can save those step numbers again.
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
                self._set_aside(step, reason)
        os.makedirs(self.directory, exist_ok=True)
        _sync_processes("invjax_checkpoint_writer_open")
        self._mngr = _manager(self.directory, read_only=False, keep=keep)
        self.last_saved: int | None = self._mngr.latest_step()

    def _set_aside(self, step: int, reason: str) -> None:
        src = epath.Path(self.directory) / str(step)
        if not src.exists():
            return
        dst_dir = epath.Path(self.workdir) / CORRUPT_SUBDIR
        dst_dir.mkdir(parents=True, exist_ok=True)
        dst = dst_dir / f"{step}-{int(time.time())}"
        src.rename(dst)
        manifest = epath.Path(_manifest_path(self.workdir, step))
        if manifest.exists():
            manifest.rename(dst_dir / f"{dst.name}.manifest.json")
        marker = epath.Path(_pending_path(self.workdir, step))
        if marker.exists():  # the next save of this step number writes its own
            marker.rename(dst_dir / f"{dst.name}.pending")
        logging.warning("moved checkpoint step %d (%s) to %s", step, reason, dst)

    def save(self, step: int, state: Any, meta: dict) -> None:
        """Save ``step`` and record its manifest (complete when this returns).

        :class:`SaveError` if it cannot be: whatever of the step was written is removed, so the
        directory holds only the earlier, verified steps and nothing that blocks the next start.
        """
        if step == self.last_saved:
            return
        meta = dict(meta, step=int(step))
        args = ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta))
        failure = None
        try:
            if self.primary:  # tells a kill between orbax's commit and the manifest (is_unrecorded)
                marker = epath.Path(_pending_path(self.workdir, step))
                marker.parent.mkdir(parents=True, exist_ok=True)
                marker.write_text("")
            self._mngr.save(step, args=args, force=True)
            self._mngr.wait_until_finished()
        except Exception as e:  # noqa: BLE001 (tensorstore/orbax wrap OS errors in many types)
            self._discard(step)
            failure = self._failure(step, e)
        if failure is not None:
            # Raised without orbax's exception attached: its traceback holds the failed save's
            # asyncio tasks, which would otherwise be collected only at exit and then print
            # "Task exception was never retrieved" after the run's last line. Collected now,
            # Python's report of them goes where the logs go (the run's log, invjax.workdir).
            gc.collect()
            raise SaveError(failure)
        if self.primary:
            try:
                write_manifest(self.workdir, step, self._mngr.all_steps())
            except OSError as e:
                try:
                    epath.Path(_manifest_path(self.workdir, step) + ".tmp").unlink(missing_ok=True)
                except OSError:
                    pass
                self._discard(step)
                raise SaveError(self._failure(step, e)) from e
        self.last_saved = step

    def _discard(self, step: int) -> None:
        """Remove what a failed save of ``step`` left: orbax's temporary directories (found as
        orbax finds them), the step itself if orbax committed it before the failure (its
        manifest could not be written), and its pending marker.

        The synchronous save raises at the first failed item while another item's write may
        still be finishing in orbax's threads (which it does not expose), so a removal that
        races with such a write is repeated until nothing is left, for at most 10 s.
        """
        if not self.primary:
            return
        deadline = time.monotonic() + 10
        while True:
            try:
                left = ocp.path.step.all_temporary_paths(self.directory)
                for tmp in left:
                    tmp.get().rmtree()
                if not left:
                    break
            except OSError:
                pass  # a file appeared or vanished while removing: look again
            if time.monotonic() > deadline:
                logging.warning("could not remove the temporary files of step %d", step)
                break
            time.sleep(0.05)
        import jax

        self._mngr.reload()
        if step in self._mngr.all_steps():
            if jax.process_count() > 1:  # orbax's delete is collective: the step keeps its
                return  # marker, unverified; the next start resumes before it and sets it aside
            try:
                self._mngr.delete(step)  # its deletion, like its save, through orbax
            except (OSError, ValueError) as e:
                logging.warning("could not remove unrecorded step %d: %s", step, _short(e))
                return
        try:
            epath.Path(_pending_path(self.workdir, step)).unlink(missing_ok=True)
        except OSError:
            pass

    def _failure(self, step: int, e: BaseException) -> str:
        steps = [s for s in list_steps(self.workdir) if s != step and has_manifest(self.workdir, s)]
        kept = (
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
            f"its partial files were removed; {kept}. Free some space (or fix the problem) and "
            "run the same command to resume."
        )

    def close(self) -> None:
        self._mngr.wait_until_finished()
        self._mngr.close()


# ----------------------------------------------------------------------------- command line


def _describe_steps(workdir: str) -> list[str]:
    lines = []
    for step in list_steps(workdir):
        problem = verify_manifest(workdir, step)
        if problem is None:
            lines.append(f"step {step}: verified")
            continue
        how = (
            f"; --trust_step={step} records its manifest if you know the step is sound"
            if not has_manifest(workdir, step)
            else ""
        )
        lines.append(f"step {step}: {problem} (not loaded{how})")
    return lines


class _OneLineParser(argparse.ArgumentParser):
    """Usage errors as the one ``invjax.checkpoint: error: ...`` line (exit 2), not argparse's
    usage block."""

    def error(self, message):
        print(f"invjax.checkpoint: error: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _OneLineParser(
        prog="python -m invjax.checkpoint",
        description="List a run's checkpoints and whether each is verified; --trust_step=N "
        "records the manifest of a step that has none, so that it loads.",
    )
    parser.add_argument("dir", nargs="?", default=None, help="the run's directory (or --workdir)")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--trust_step", type=int, default=None)
    args = parser.parse_args(argv)
    if (args.dir is None) == (args.workdir is None):
        parser.error("give the run's directory once: as DIR or as --workdir=DIR")
    args.workdir = args.workdir if args.workdir is not None else args.dir
    try:
        if not epath.Path(checkpoint_dir(args.workdir)).is_dir():
            raise CheckpointError(f"{checkpoint_dir(args.workdir)} holds no checkpoints")
        if args.trust_step is not None:
            with workdir_lib.locked([args.workdir]):
                trust_step(args.workdir, args.trust_step)
            print(f"recorded the manifest of step {args.trust_step}: it loads from now on")
        print("\n".join(_describe_steps(args.workdir)))
    except (CheckpointError, workdir_lib.WorkdirError, OSError) as e:
        print(f"invjax.checkpoint: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
