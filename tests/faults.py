"""Fault injection for the tests, kept out of invjax: the same patches are installed in a test
process (through pytest's ``monkeypatch.setattr``) or in a child process started through this
file, which then runs the module as ``python -m`` would:

    python tests/faults.py FAULT[,FAULT...] -m invjax.main ARGS...

FAULT (``NAME:ARG[:ARG]``):

=============================  ===================================================================
``sigterm_after_step:N``       the process sends itself SIGTERM once training step N has run
``pause_before_manifest:S``    S seconds between orbax's commit of a step and its manifest (a
                               window for a second signal)
``enospc_from_write:STEP:K``   in the save of STEP, the K-th file write under the run's
                               checkpoints (a file opened for writing, a directory made, a
                               rename) and every later one fails with ENOSPC, as on a disk that
                               fills up there; orbax's Python writes and invjax's manifest count,
                               tensorstore's own (C++) writes do not: a real tmpfs covers those
``fill_disk_at_save:STEP:B``   before the save of STEP, a file beside the workdir fills its file
                               system up to B free bytes (a real ENOSPC on a small tmpfs)
``free_bytes:N``               file systems report N free bytes (``shutil.disk_usage``)
``sigterm_in_init:N``          the process sends itself SIGTERM inside the N-th abstract
                               initialisation of a model (``jax.eval_shape`` of a run's checks)
``read_only:DIR``              every write under DIR (a file opened for writing, a directory
                               made, a rename, a removal) fails with EROFS, as on a read-only
                               mount (permission bits do not stop root)
=============================  ===================================================================
"""

from __future__ import annotations

import builtins
import errno
import os
import runpy
import shutil
import signal
import sys
import threading
import time

HERE = os.path.abspath(__file__)
FILLER = "filler"


def command(faults: str, module: str, *args: str) -> list[str]:
    """The argv that runs ``python -m module args`` with ``faults`` installed."""
    return [sys.executable, HERE, faults, "-m", module, *args]


def _wrap_save(patch, before=None, during=None):
    """Wrap :meth:`invjax.checkpoint.Writer.save`: ``before(writer, step)`` runs first and
    ``during(step)`` is a context manager around the save."""
    import contextlib

    from invjax import checkpoint

    original = checkpoint.Writer.save

    def save(self, step, state, meta):
        if before is not None:
            before(self, step)
        with during(step) if during is not None else contextlib.nullcontext():
            return original(self, step, state, meta)

    patch(checkpoint.Writer, "save", save)


class WriteFault:
    """ENOSPC from the K-th write under ``checkpoints/`` or ``checkpoint_manifests/`` of one save
    on; ``seen`` lists every such write of that save as ``(kind, path)``, ``failed`` those that
    were refused."""

    def __init__(self, step: int, k: int):
        self.step, self.k = step, k
        self.active = False
        self.seen: list[tuple[str, str]] = []
        self.failed: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def check(self, kind: str, path) -> None:
        if not self.active or not isinstance(path, str | bytes | os.PathLike):
            return
        p = os.fsdecode(os.fspath(path))
        if f"{os.sep}checkpoints{os.sep}" not in p and f"{os.sep}checkpoint_manifests" not in p:
            return
        with self._lock:
            self.seen.append((kind, p))
            fail = len(self.seen) >= self.k
            if fail:
                self.failed.append((kind, p))
        if fail:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), p)

    def install(self, patch) -> WriteFault:
        import contextlib

        real_open, real_os_open = builtins.open, os.open
        real_mkdir, real_rename, real_replace = os.mkdir, os.rename, os.replace
        writing = os.O_WRONLY | os.O_RDWR | os.O_CREAT

        def fopen(file, mode="r", *args, **kwargs):
            if any(c in mode for c in "wax+"):
                self.check("open", file)
            return real_open(file, mode, *args, **kwargs)

        def osopen(path, flags, *args, **kwargs):
            if flags & writing:
                self.check("open", path)
            return real_os_open(path, flags, *args, **kwargs)

        def mkdir(path, *args, **kwargs):
            self.check("mkdir", path)
            return real_mkdir(path, *args, **kwargs)

        def rename(src, dst, *args, **kwargs):
            self.check("rename", dst)
            return real_rename(src, dst, *args, **kwargs)

        def replace(src, dst, *args, **kwargs):
            self.check("rename", dst)
            return real_replace(src, dst, *args, **kwargs)

        patch(builtins, "open", fopen)
        patch(os, "open", osopen)
        patch(os, "mkdir", mkdir)
        patch(os, "rename", rename)
        patch(os, "replace", replace)

        @contextlib.contextmanager
        def during(step):
            self.active = step == self.step
            try:
                yield
            finally:
                self.active = False

        _wrap_save(patch, during=during)
        return self


def fill_disk(directory: str, leave: int) -> None:
    """Write ``directory/filler`` until its file system has ``leave`` bytes free (or fewer)."""
    st = os.statvfs(directory)
    size = max(st.f_bavail * st.f_frsize - leave, 0)
    try:  # the last block may fail on write, flush or close
        with open(os.path.join(directory, FILLER), "ab") as f:
            f.write(b"\0" * size)
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise


def sigterm_after_step(n: int, patch) -> None:
    import jax
    import numpy as np

    from invjax.training import lockstep, loop, steps

    original = steps.jit_steps
    sent = []

    def jit_steps(*args, **kwargs):
        train, evaluate, raw = original(*args, **kwargs)

        def call(state, *rest):
            out = train(state, *rest)
            # a K-model run's vmapped state holds K step counters: the first to reach n sends
            if not sent and int(np.max(jax.device_get(out[0].step))) == n:
                sent.append(n)
                os.kill(os.getpid(), signal.SIGTERM)
            return out

        return call, evaluate, raw

    # The single and the K-model loops imported the name: patch it where it is called.
    patch(loop, "jit_steps", jit_steps)
    patch(lockstep, "jit_steps", jit_steps)


def sigterm_in_init(n: int, patch) -> None:
    """SIGTERM to this process inside the ``n``-th call of the model initialisation that
    :func:`invjax.training.experiment.prepare` traces abstractly (the checks of each model)."""
    from invjax.training import experiment

    original, calls = experiment.init_variables, [0]

    def init_variables(*args, **kwargs):
        calls[0] += 1
        if calls[0] == n:
            os.kill(os.getpid(), signal.SIGTERM)  # its handler raises inside the trace
        return original(*args, **kwargs)

    patch(experiment, "init_variables", init_variables)


def pause_before_manifest(seconds: float, patch) -> None:
    from invjax import checkpoint

    original = checkpoint.write_manifest

    def write_manifest(*args, **kwargs):
        time.sleep(seconds)
        return original(*args, **kwargs)

    patch(checkpoint, "write_manifest", write_manifest)


def free_bytes(n: int, patch) -> None:
    original = shutil.disk_usage

    def disk_usage(path):
        u = original(path)
        return type(u)(u.total, max(u.total - n, 0), n)

    patch(shutil, "disk_usage", disk_usage)


def read_only(directory: str, patch) -> None:
    root = os.path.join(os.path.abspath(directory), "")
    real_open, real_os_open = builtins.open, os.open
    real = {name: getattr(os, name) for name in ("mkdir", "rename", "replace", "remove", "unlink")}
    writing = os.O_WRONLY | os.O_RDWR | os.O_CREAT

    def check(path) -> None:
        if isinstance(path, str | bytes | os.PathLike):
            p = os.path.abspath(os.fsdecode(os.fspath(path)))
            if os.path.join(p, "").startswith(root):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), p)

    def fopen(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+"):
            check(file)
        return real_open(file, mode, *args, **kwargs)

    def osopen(path, flags, *args, **kwargs):
        if flags & writing:
            check(path)
        return real_os_open(path, flags, *args, **kwargs)

    def wrap(name):
        def call(path, *args, **kwargs):
            check(args[0] if name in ("rename", "replace") else path)
            return real[name](path, *args, **kwargs)

        return call

    patch(builtins, "open", fopen)
    patch(os, "open", osopen)
    for name in real:
        patch(os, name, wrap(name))


def install(spec: str, patch=setattr) -> list:
    """Install the faults of ``spec`` (module docstring) with ``patch(obj, name, value)``;
    returns the :class:`WriteFault` objects (for their ``seen``/``failed`` lists)."""
    out = []
    for item in filter(None, spec.split(",")):
        name, *args = item.split(":")
        if name == "sigterm_after_step":
            sigterm_after_step(int(args[0]), patch)
        elif name == "sigterm_in_init":
            sigterm_in_init(int(args[0]), patch)
        elif name == "pause_before_manifest":
            pause_before_manifest(float(args[0]), patch)
        elif name == "enospc_from_write":
            out.append(WriteFault(int(args[0]), int(args[1])).install(patch))
        elif name == "fill_disk_at_save":
            step, leave = int(args[0]), int(args[1])

            def before(writer, s, step=step, leave=leave):
                if s == step:
                    fill_disk(os.path.dirname(writer.workdir), leave)

            _wrap_save(patch, before=before)
        elif name == "free_bytes":
            free_bytes(int(args[0]), patch)
        elif name == "read_only":
            read_only(":".join(args), patch)
        else:
            raise ValueError(f"unknown fault {name!r} in {spec!r}")
    return out


if __name__ == "__main__":
    spec, flag, module, *rest = sys.argv[1:]
    assert flag == "-m", "usage: python tests/faults.py FAULTS -m MODULE ARGS..."
    sys.path[0] = os.getcwd()  # as `python -m` would: this checkout's invjax, not tests/
    install(spec)
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
