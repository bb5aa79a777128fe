"""A run's working directory: checks before compute, one exclusive lock per directory, and the
log of what the libraries say while a run holds it.

Checks (:func:`check`): the ``--workdir`` value must be non-empty and local (``gs://`` and other
remote paths are not supported for training: metrics, results and the lock are written with
the local file system), must not be an existing file, must be creatable (its first existing
ancestor a writable directory) and, if it exists, writable (probed by creating a file, which
also catches read-only mounts and, for root, what permission bits would not). Each failure is a
:class:`WorkdirError` with one line naming the path and what is wrong.

Lock (:class:`Lock`, :func:`acquire`): ``DIR/invjax.lock`` holds ``{"host", "pid", "started"}``
of the process that owns the directory, and an exclusive ``flock`` on it for as long as the
process lives. A second process on the same directory gets :class:`WorkdirBusyError` naming the
holder. The kernel drops a ``flock`` when its process dies (SIGKILL, crash, power loss of a
client on NFSv4 once its lease expires), so a lock file whose lock nobody holds belongs to a dead
run: it is taken over with a warning naming that run. Locks are re-entrant within a process
(a two-phase command holds its directory and every phase-1 stream directory). The file is removed
when the last holder in the process releases it. On a file system without locks (``ENOLCK``,
some NFS set-ups) a warning says that a second run would not be stopped, and the run goes on.

Log (started with the first lock a process takes, ended with its last): while a process holds a
workdir, every log record at WARNING or above goes to ``DIR/invjax.log``, and records of other
libraries (orbax, tensorstore, asyncio, jax) go there only: a full disk inside orbax is then one
``invjax: error:`` line on stderr, with orbax's own account of it in the log. Exceptions that
Python can only report as "ignored" (objects collected after a failed save) go to the log too.

What a folder holds (:func:`read_kind`): ``DIR/run_kind.json``, written when a job starts
(:func:`invjax.train.train_and_evaluate`), says ``{"kind": "run"}`` (one run, its checkpoints in
``DIR``) or ``{"kind": "seeds", "seeds": [...]}`` (the K models of ``--config.seeds``, each in
``DIR/seed_<k>/``), with the command's config file and overrides. A job of the other kind is
refused with the command that fits (:func:`check_kind`), and a command that reads one finished
run refuses the top folder of K models (:func:`refuse_seeds_folder`). Folders written before the
record are told apart by what is in them (``seeds.json`` or ``seed_<k>/``; ``config.json`` or
``checkpoints/``).

The names of a run folder's files are defined here, in the lowest module that writes in it
(:data:`CONFIG_FILE`, :data:`CHECKPOINTS_DIR`, :data:`KIND_FILE`, ...), with their one atomic
JSON write (:func:`write_json_atomic`); :mod:`invjax.run` lists them all and reads a finished run.

A directory that a lock created is removed again when the lock is released if nothing but the
log is in it, so a run refused after taking the lock (e.g. a disk too small for one checkpoint)
leaves no directory behind (its one message on stderr says why).
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import gc
import json
import logging as std_logging
import os
import shutil
import socket
import sys
import time

from absl import logging

LOCK_FILE = "invjax.lock"
LOG_FILE = "invjax.log"
KIND_FILE = "run_kind.json"
RUN, SEEDS = "run", "seeds"  # the kinds of folder (module docstring)
SEED_DIR = "seed_{}"  # model k of a folder of K models
SEEDS_SUMMARY = "seeds.json"
CONFIG_FILE = "config.json"  # the config a run trained (a folder holding it is a run)
# A run's checkpoint steps, their integrity manifests and the steps set aside (invjax.checkpoint).
CHECKPOINTS_DIR = "checkpoints"
MANIFESTS_DIR = "checkpoint_manifests"
CORRUPT_DIR = "corrupt_checkpoints"


class WorkdirError(ValueError):
    """The workdir cannot be used; the message names the path and the problem (one line)."""


class WorkdirBusyError(WorkdirError):
    """Another live process holds the workdir's lock; the message names it."""


def is_remote(path: str) -> bool:
    """``gs://bucket/x``, ``s3://...``: a URL-like path (etils.epath / orbax would handle it)."""
    return "://" in str(path)


def _first_existing(path: str) -> str:
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def _probe_write(directory: str) -> OSError | None:
    """Create and remove a file in ``directory``: the only reliable writability test."""
    probe = os.path.join(directory, f".invjax-write-test-{os.getpid()}")
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        return e
    return None


def check(workdir: str | None, flag: str = "--workdir") -> str:
    """The absolute path of a usable workdir, else :class:`WorkdirError` (writes nothing that
    stays: the directory is not created)."""
    if workdir is None or not str(workdir).strip():
        raise WorkdirError(
            f"{flag}={workdir or ''} is empty: give a directory for checkpoints, metrics and "
            "results, e.g. --workdir=runs/digits"
        )
    if is_remote(workdir):
        raise WorkdirError(
            f"{flag}={workdir} is a remote path: training writes metrics, results and its lock "
            "with the local file system; train in a local directory (or a mounted bucket) and "
            "copy it"
        )
    path = os.path.abspath(workdir)
    if os.path.exists(path) and not os.path.isdir(path):
        raise WorkdirError(f"{flag}={workdir} is an existing file, not a directory")
    base = _first_existing(path)
    if not os.path.isdir(base):
        raise WorkdirError(f"{flag}={workdir} cannot be created: {base} is a file, not a directory")
    err = _probe_write(base)
    if err is not None:
        what = "is not writable" if base == path else f"cannot be created in {base}"
        raise WorkdirError(f"{flag}={workdir} {what}: {os.strerror(err.errno or 0)}")
    return path


def free_bytes(path: str) -> int:
    """Free space of the file system holding ``path`` (or its first existing ancestor)."""
    return shutil.disk_usage(_first_existing(os.path.abspath(path))).free


def check_space(workdir: str, checkpoint_bytes: int, flag: str = "--workdir") -> None:
    """Stop before compute if the file system cannot hold even one checkpoint (plus 16 MiB for
    metrics and TensorBoard); warn if it cannot hold two (the next save needs room for a new
    step before the oldest one is removed)."""
    free = free_bytes(workdir)
    need = checkpoint_bytes + (16 << 20)
    if free < need:
        raise WorkdirError(
            f"{flag}={workdir}: only {_mib(free)} free on its file system, and one checkpoint of "
            f"this run needs about {_mib(checkpoint_bytes)} (plus 16 MiB of logs): free some "
            "space or choose another --workdir"
        )
    if free < 2 * checkpoint_bytes + (16 << 20):
        logging.warning(
            "%s: only %s free, about %s per checkpoint: saving may run out of space",
            workdir,
            _mib(free),
            _mib(checkpoint_bytes),
        )


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


# ----------------------------------------------------------------------------- kind


def _seed_dirs(path: str) -> list[int]:
    """The seeds k of ``path/seed_<k>/`` folders that hold a run (its ``config.json``)."""
    try:
        names = os.listdir(path)
    except OSError:
        return []
    prefix = SEED_DIR.format("")
    return sorted(
        int(n[len(prefix) :])
        for n in names
        if n.startswith(prefix)
        and n[len(prefix) :].isdigit()
        and os.path.isfile(os.path.join(path, n, CONFIG_FILE))
    )


def read_kind(path: str) -> dict | None:
    """What the folder ``path`` holds: its ``run_kind.json`` (``{"kind": "run" | "seeds",
    ...}``), else what its files say (module docstring), else None (new or empty)."""
    record = _read(os.path.join(path, KIND_FILE))
    if isinstance(record, dict) and record.get("kind") in (RUN, SEEDS):
        return record
    seeds = _seed_dirs(path)
    if seeds or os.path.isfile(os.path.join(path, SEEDS_SUMMARY)):
        return {"kind": SEEDS, "seeds": seeds}
    if os.path.isfile(os.path.join(path, CONFIG_FILE)) or os.path.isdir(
        os.path.join(path, CHECKPOINTS_DIR)
    ):
        return {"kind": RUN}
    return None


def write_kind(path: str, kind: str, seeds=None, record: dict | None = None) -> None:
    """Record in ``path`` that it holds a job of ``kind`` (atomically; the command's
    ``record``: its config file and overrides)."""
    info = {"kind": kind, **({"seeds": [int(s) for s in seeds]} if seeds else {})}
    info.update({k: v for k, v in (record or {}).items() if k in ("config_file", "overrides")})
    target = os.path.join(path, KIND_FILE)
    if _read(target) == json.loads(json.dumps(info, default=str)):
        return  # a resumed or reused job leaves its folder's files as they were
    write_json_atomic(target, info)


def write_json_atomic(path: str, obj) -> None:
    """Write ``obj`` as indented JSON to ``path`` whole or not at all: into ``path.tmp``, then
    renamed over ``path`` (a process killed while writing leaves the previous file, never half
    of one; a write that fails, a full disk or a directory in the way, leaves no ``.tmp``).
    Values JSON cannot hold are written as their ``str``. The one way a run's JSON records
    (results, kind, summaries) are written."""
    try:
        with open(path + ".tmp", "w") as f:
            json.dump(obj, f, indent=2, default=str)
        os.replace(path + ".tmp", path)
    finally:
        if os.path.lexists(path + ".tmp"):
            os.remove(path + ".tmp")


def _check_kind_file(path: str, flag: str) -> None:
    """A ``run_kind.json`` that is there but is not a record (garbled, a directory): a
    :class:`WorkdirError` naming it, not silently rewritten."""
    target = os.path.join(path, KIND_FILE)
    if not os.path.lexists(target):
        return
    record = _read(target) if os.path.isfile(target) else None
    seeds = record.get("seeds", []) if isinstance(record, dict) else None
    valid = isinstance(record, dict) and (
        record.get("kind") == RUN
        or record.get("kind") == SEEDS
        and isinstance(seeds, list)
        and all(isinstance(k, int) for k in seeds)
    )
    if not valid:
        raise WorkdirError(
            f"{flag}={path}: {target} is not a record of what the folder holds (expected "
            '{"kind": "run"} or {"kind": "seeds", "seeds": [...]}): restore it, or delete it '
            "(the folder's files then tell its kind) and run the same command again"
        )


def _seeds_text(seeds) -> str:
    return ",".join(str(s) for s in seeds)


def check_kind(path: str, kind: str, seeds=None, flag: str = "--workdir") -> None:
    """Refuse (:class:`WorkdirError`, naming the command that fits) a job of ``kind`` in a
    folder that holds the other kind: a single run in the folder of K models, or K models in a
    single run's folder."""
    _check_kind_file(path, flag)
    held = read_kind(path)
    if held is None or held["kind"] == kind:
        return
    if held["kind"] == SEEDS:
        stored = held.get("seeds") or []
        example = os.path.join(path, SEED_DIR.format(stored[0] if stored else 0))
        raise WorkdirError(
            f"{flag}={path} holds the models of seeds {_seeds_text(stored) or '?'} (a run of "
            f"--config.seeds, {KIND_FILE}): resume them with --config.seeds="
            f"{_seeds_text(stored) or 'K1,K2'}, or give {flag}={example} for the single run of "
            "one seed, or choose a new --workdir"
        )
    raise WorkdirError(
        f"{flag}={path} holds a single run ({KIND_FILE}): resume it without --config.seeds, or "
        f"choose a new --workdir for the models of seeds {_seeds_text(seeds or ())}"
    )


def refuse_seeds_folder(path: str, flag: str = "--workdir") -> None:
    """A command that reads one finished run, given the top folder of K models: WorkdirError
    naming ``DIR/seed_<k>``."""
    held = read_kind(path) if os.path.isdir(path) else None
    if held is not None and held["kind"] == SEEDS:
        stored = held.get("seeds") or []
        raise WorkdirError(
            f"{flag}={path} is the folder of the models of seeds {_seeds_text(stored) or '?'} "
            f"(--config.seeds): give one model's run, {flag}="
            f"{os.path.join(path, SEED_DIR.format('<k>'))} (e.g. "
            f"{os.path.join(path, SEED_DIR.format(stored[0] if stored else 0))})"
        )


# ----------------------------------------------------------------------------- lock


def holder_text(info: dict) -> str:
    """A lock holder as a refused process names it (what :func:`write_holder` stored)."""
    return (
        f"host {info.get('host', '?')}, pid {info.get('pid', '?')}, started "
        f"{info.get('started', '?')}"
    )


def write_holder(fd: int) -> None:
    """Store this process (host, pid, start time) in the lock file open at ``fd``."""
    info = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(info).encode(), 0)
    os.fsync(fd)


def _read(path: str) -> dict:
    try:
        with open(path) as f:
            return json.loads(f.read() or "{}")
    except (OSError, ValueError):
        return {}


class Lock:
    """The exclusive lock of one workdir (module docstring). Use :func:`acquire`."""

    def __init__(self, workdir: str):
        self.workdir = os.path.abspath(workdir)
        self.path = os.path.join(self.workdir, LOCK_FILE)
        self.fd: int | None = None
        self.count = 0
        self.created: list[str] = []  # the directories acquire() made, deepest first

    def _open_locked(self) -> int:
        """An fd of the lock file with our flock on it, the file still being the one at
        ``self.path`` (a releasing process unlinks it: retry on the new one)."""
        for _ in range(100):
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except FileNotFoundError:  # a refused run removed the directory it had created
                os.makedirs(self.workdir, exist_ok=True)
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                    logging.warning(
                        "%s: the file system does not support locks (%s): a second run on this "
                        "workdir would not be stopped",
                        self.workdir,
                        os.strerror(e.errno),
                    )
                    return fd
                os.close(fd)
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                info = _read(self.path)
                raise WorkdirBusyError(
                    f"--workdir={self.workdir} is in use by another run ({holder_text(info)}): "
                    "wait for it to finish or stop it, or choose another --workdir"
                ) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return fd
            os.close(fd)  # we locked a file that its holder had just removed
            time.sleep(0.01)
        raise WorkdirError(f"cannot lock {self.path}: it keeps being replaced")

    def acquire(self) -> Lock:
        if self.count:
            self.count += 1
            return self
        created = _make_dirs(self.workdir)
        try:
            fd = self._open_locked()
        except BaseException:
            _remove_if_unused(created)
            raise
        stale = _read(self.path)
        if stale:
            logging.warning(
                "%s: took over the lock of a run that is no longer running (%s)",
                self.workdir,
                holder_text(stale),
            )
        write_holder(fd)
        self.fd, self.count, self.created = fd, 1, created
        if not _ROUTED:
            _start_routing(os.path.join(self.workdir, LOG_FILE))
        _ROUTED.append(self.workdir)
        return self

    def release(self) -> None:
        if not self.count:
            return
        self.count -= 1
        if self.count:
            return
        _ROUTED.remove(self.workdir)
        if not _ROUTED:
            _stop_routing()
        with contextlib.suppress(OSError):
            os.remove(self.path)  # while still holding it: nobody can take a half-removed lock
        os.close(self.fd)
        self.fd = None
        _HELD.pop(self.workdir, None)
        _remove_if_unused(self.created)


_HELD: dict[str, Lock] = {}


def _make_dirs(path: str) -> list[str]:
    """``os.makedirs(path)``; returns the directories it created, deepest first."""
    missing = []
    while not os.path.exists(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    if missing:
        os.makedirs(missing[0], exist_ok=True)
    return missing


def _remove_if_unused(created: list[str]) -> None:
    """Remove the directories a lock created (deepest first) that hold nothing but the log."""
    for directory in created:
        with contextlib.suppress(OSError):
            if os.listdir(directory) == [LOG_FILE]:
                os.remove(os.path.join(directory, LOG_FILE))
            os.rmdir(directory)  # fails, and keeps it, if anything else is in it


def acquire(workdir: str) -> Lock:
    """Lock ``workdir`` for this process (re-entrant; creates the directory). Raises
    :class:`WorkdirBusyError` naming the holder if another live process has it."""
    key = os.path.abspath(workdir)
    lock = _HELD.get(key) or Lock(key)
    lock.acquire()
    _HELD[key] = lock
    return lock


# ----------------------------------------------------------------------------- log

_ROUTED: list[str] = []  # the workdirs held, in order: the log is the first one's
_ROUTING: dict = {}
_LAST_LOG: list = [None]  # the log file handler of the latest routing (see _log_unraisable)
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


class _OursOnly(std_logging.Filter):
    """Keep a stderr handler to invjax's own records; the rest are in the run's log."""

    def filter(self, record):
        return record.pathname.startswith(_PACKAGE_DIR) or record.name.startswith("invjax")


class _RunLog(std_logging.FileHandler):
    """The run's log file. On a full disk it loses records quietly: a log that cannot be
    written must not add tracebacks of its own to the one message."""

    def handleError(self, record):  # noqa: N802 (logging's name)
        del record

    def close(self):
        with contextlib.suppress(OSError):
            super().close()


def _writes_to_stderr(handler) -> bool:
    stream = getattr(getattr(handler, "python_handler", handler), "stream", None)
    return stream is not None and stream in (sys.stderr, sys.__stderr__)


def _log_unraisable(unraisable) -> None:
    """``sys.unraisablehook`` while routing: the report goes to the run's log file directly (a
    thread of a failed save may report while routing ends, so not through the stderr handlers)."""
    exc = (unraisable.exc_type, unraisable.exc_value, unraisable.exc_traceback)
    args = (unraisable.err_msg or "Exception ignored in", unraisable.object)
    record = std_logging.LogRecord(
        "python.unraisable", std_logging.ERROR, __file__, 0, "%s: %r", args, exc
    )
    _LAST_LOG[0].handle(record)


def _start_routing(path: str) -> None:
    """Send log records (WARNING and above) to ``path`` and other libraries' only there."""
    root = std_logging.getLogger()
    file = _RunLog(path, delay=True)  # no file until something is logged
    file.setLevel(std_logging.WARNING)
    file.setFormatter(
        std_logging.Formatter(
            "%(asctime)s %(levelname)s %(name)s %(pathname)s:%(lineno)d] %(message)s"
        )
    )
    ours = _OursOnly()
    filtered = [h for h in root.handlers if _writes_to_stderr(h)]
    added = None
    if not root.handlers:  # Python's last-resort stderr output stops once a handler exists
        added = std_logging.StreamHandler(sys.stderr)
        added.setLevel(std_logging.WARNING)
        filtered.append(added)
        root.addHandler(added)
    for h in filtered:
        h.addFilter(ours)
    root.addHandler(file)
    _LAST_LOG[0] = file
    _ROUTING.update(file=file, ours=ours, filtered=filtered, added=added, hook=sys.unraisablehook)
    sys.unraisablehook = _log_unraisable


def _stop_routing() -> None:
    # What a failed save left (coroutines, event loops, futures) is collected now, so that
    # what Python says about it goes to the log and not after the run's last line.
    gc.collect()
    root = std_logging.getLogger()
    if sys.unraisablehook is _log_unraisable:  # not replaced since (invjax.main's last word)
        sys.unraisablehook = _ROUTING["hook"]
    for h in _ROUTING["filtered"]:
        h.removeFilter(_ROUTING["ours"])
    if _ROUTING["added"] is not None:
        root.removeHandler(_ROUTING["added"])
    root.removeHandler(_ROUTING["file"])
    _ROUTING["file"].close()
    _ROUTING.clear()


# Signal handlers must not raise inside lock bookkeeping (a lock file created but not recorded
# would outlive the run): they consult in_critical() and only record the signal there; the
# callables in PENDING_CHECKS (invjax.training.signals registers its StopRequest's) then raise
# it once the lock is recorded, where the release below is sure to run.
_CRITICAL = [0]
PENDING_CHECKS: list = []


def in_critical() -> bool:
    return _CRITICAL[0] > 0


@contextlib.contextmanager
def _critical():
    _CRITICAL[0] += 1
    try:
        yield
    finally:
        _CRITICAL[0] -= 1


@contextlib.contextmanager
def locked(workdirs):
    """Hold the locks of every directory in ``workdirs`` (in order) inside the block."""
    held = []
    try:
        for w in dict.fromkeys(os.path.abspath(w) for w in workdirs):
            with _critical():
                held.append(acquire(w))
            for check in PENDING_CHECKS:
                check()
        yield held
    finally:
        with _critical():
            for lock in reversed(held):
                lock.release()


def holds(workdir: str) -> bool:
    lock = _HELD.get(os.path.abspath(workdir))
    return bool(lock and lock.count)
