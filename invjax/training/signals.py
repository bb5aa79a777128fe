"""SIGTERM and SIGINT: a training loop finishes its step, saves a checkpoint there and stops.

:class:`StopRequest` is the handler; :func:`handle_signals` installs one for a whole command
(``invjax.main``), :func:`stop_on_signals` for one block. Outside a loop a signal raises
:class:`Interrupted` at once (nothing unsaved); inside, the loop raises :class:`Stopped` after
saving (``invjax.main`` exits with status 128 + the signal number).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading

from invjax import workdir as workdir_lib


class Interrupted(BaseException):
    """SIGTERM or SIGINT arrived outside a training loop (nothing unsaved is lost).

    A ``BaseException``, as ``KeyboardInterrupt`` is: it is raised wherever the signal finds
    the process, and the handlers that turn any ``Exception`` into a finding (a model that
    cannot take the images, a checkpoint step that cannot be read) must not report a signal as
    one."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Stopped(Exception):
    """A training loop stopped on SIGTERM/SIGINT after saving a checkpoint at its position.

    ``status`` is the documented exit status of ``invjax.main``: 128 + the signal number (143
    for SIGTERM, 130 for SIGINT), the shell's convention for a process ended by that signal.
    """

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.signum = signum
        self.status = 128 + signum


class StopRequest:
    """The SIGTERM/SIGINT handler of a training process.

    Outside a loop (``defer`` False) the first signal raises :class:`Interrupted` at once: data
    loading or compilation has nothing to save. Inside a loop it only records the signal; the
    loop finishes its step, saves a checkpoint there and raises :class:`Stopped`. Any further
    signal is ignored with a note, so a second Ctrl-C cannot cut the save short (orbax's
    temporary-directory commit would keep a kill from corrupting it; SIGKILL still works).
    """

    def __init__(self):
        self.signum: int | None = None
        self.defer = False

    def __call__(self, signum, frame):
        del frame
        if self.signum is not None:
            print(
                f"invjax: {signal.Signals(signum).name} again: already stopping and saving; "
                "please wait (SIGKILL abandons the save; the previous checkpoint is kept)",
                file=sys.stderr,
                flush=True,
            )
            return
        self.signum = signum
        if not self.defer and not workdir_lib.in_critical():
            raise Interrupted(signum)

    def raise_if_pending(self) -> None:
        """Raise :class:`Interrupted` for a signal recorded in a lock's critical section."""
        if self.signum is not None and not self.defer:
            raise Interrupted(self.signum)


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def stop_on_signals(request: StopRequest | None = None):
    """Install ``request`` (a new :class:`StopRequest` if None) for SIGTERM and SIGINT inside
    the block, restoring the previous handlers after; a no-op outside the main thread (Python
    delivers signals there only)."""
    request = request or StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for s in STOP_SIGNALS:
        signal.signal(s, request)
    workdir_lib.PENDING_CHECKS.append(request.raise_if_pending)
    try:
        yield request
    finally:
        workdir_lib.PENDING_CHECKS.remove(request.raise_if_pending)
        for s, h in previous.items():
            signal.signal(s, h)


class _Signals:
    """The :class:`StopRequest` installed for the whole process (:func:`handle_signals`)."""

    request: StopRequest | None = None


_SIGNALS = _Signals()


@contextlib.contextmanager
def handle_signals():
    """SIGTERM/SIGINT handling for a whole command (``invjax.main``): one :class:`StopRequest`
    that every :func:`run` inside the block uses (a two-phase command runs several)."""
    with stop_on_signals() as request:
        _SIGNALS.request = request
        try:
            yield request
        finally:
            _SIGNALS.request = None


def command_request() -> StopRequest | None:
    """The :class:`StopRequest` of the enclosing :func:`handle_signals` block, if any."""
    return _SIGNALS.request


class StopVote:
    """The processes of one multi-process run agree on the step where a signal stops them.

    A signal may reach the processes at different steps (or only one of them: a node's own
    SIGTERM); a process that stopped and saved alone would leave the others waiting in their
    next collective, and a checkpoint is a collective save of every process's shards at one
    step. So after every step each process votes its ``request.signum`` (0 when none) and
    every process stops where the largest vote says: :meth:`step` reads the vote of the previous
    step (dispatched then, so reading it waits for nothing that the step's metrics did not
    wait for already) and dispatches this step's; :meth:`now` votes and reads at once (before
    the first step and after the last). Either returns True in every process at the same call,
    and sets a process's unset ``request.signum`` to the agreed signal (so every process says
    and exits the same). A signal stops the run one step later than in one process, where no
    vote is needed (the request is read directly).

    Why not orbax's ``CheckpointManager.reached_preemption`` (JAX's preemption sync manager):
    it learns of SIGTERM from a handler that ``jax.distributed.initialize`` installs and the
    run's own SIGTERM/SIGINT handler (:class:`StopRequest`) replaces, and it does not cover
    SIGINT.
    """

    def __init__(self, request: StopRequest, mesh):
        import jax

        self.request = request
        self.multi = jax.process_count() > 1
        self.pending = None
        if self.multi:
            import jax.numpy as jnp
            from jax.sharding import NamedSharding
            from jax.sharding import PartitionSpec as P

            self._jax = jax
            self._votes = NamedSharding(mesh, P(mesh.axis_names))  # one vote per device
            self._n = mesh.devices.size
            self._local = len(self._votes.addressable_devices)
            self._max = jax.jit(jnp.max, out_shardings=NamedSharding(mesh, P()))

    def _dispatch(self):
        import numpy as np

        mine = np.full((self._local,), self.request.signum or 0, np.int32)
        votes = self._jax.make_array_from_process_local_data(self._votes, mine, (self._n,))
        return self._max(votes)

    def _agree(self, result) -> bool:
        import numpy as np

        signum = int(np.asarray(result.addressable_data(0)))
        if signum and self.request.signum is None:
            self.request.signum = signum
        return bool(signum)

    def step(self) -> bool:
        """After a step: stop here? (the votes of the previous step, the same in every process)"""
        if not self.multi:
            return self.request.signum is not None
        previous, self.pending = self.pending, self._dispatch()
        return previous is not None and self._agree(previous)

    def now(self) -> bool:
        """Before the first or after the last step: stop? (this call's votes, and any pending)"""
        if not self.multi:
            return self.request.signum is not None
        previous, self.pending = self.pending, None
        stop = previous is not None and self._agree(previous)
        return self._agree(self._dispatch()) or stop
