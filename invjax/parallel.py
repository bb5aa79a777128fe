"""Data parallelism: a ``('data',)`` mesh over every device, batch sharded, state replicated.

One ``jax.jit`` with :class:`jax.sharding.NamedSharding` does what ``pmap`` used to: the global
batch ``[B, ...]`` is split along its leading axis over the mesh, the train state is replicated,
and XLA inserts the all-reduces (gradient mean, BatchNorm statistics over the *global* batch), so
a step computes the same function on 1 or ``n`` devices up to float summation order.

Multi-process (several hosts, or several processes on one host): :func:`initialize_distributed`
calls ``jax.distributed.initialize`` (SLURM, Open MPI and TPU VMs are detected by JAX itself; an
explicit coordinator comes from ``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES`` and
``JAX_PROCESS_ID``). Every process then computes the same global batch *indices* (a pure function
of seed and step) but reads only the rows that its own devices hold: :func:`gather_batch` asks the
batch sharding which index ranges each addressable device owns
(``addressable_devices_indices_map``) and builds the global array with
``jax.make_array_from_callback``, so nothing assumes that ``jax.devices()`` is ordered process by
process or that a process's rows are contiguous.
"""

from __future__ import annotations

import os

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

DATA_AXIS = "data"
_initialized = False


ENV_VARS = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")


def distributed_args(environ=None) -> dict:
    """Explicit ``jax.distributed.initialize`` arguments from the environment; {} if none are set.

    ``JAX_COORDINATOR_ADDRESS=host:port`` with ``JAX_NUM_PROCESSES=n`` and ``JAX_PROCESS_ID=i``
    (``0 <= i < n``) start process ``i`` of ``n`` (e.g. several processes on one machine, on the
    loopback address). With only the address set, JAX detects the rest (SLURM, MPI, TPU VMs).
    ValueError naming the variable for anything else.
    """
    env = os.environ if environ is None else environ
    address = env.get("JAX_COORDINATOR_ADDRESS", "")
    num, pid = env.get("JAX_NUM_PROCESSES", ""), env.get("JAX_PROCESS_ID", "")
    if not (address or num or pid):
        return {}
    if not address or address.rpartition(":")[0] == "" or not address.rpartition(":")[2].isdigit():
        raise ValueError(
            f"JAX_COORDINATOR_ADDRESS={address!r} is invalid: it must be HOST:PORT (e.g. "
            "127.0.0.1:12345), and is needed whenever JAX_NUM_PROCESSES or JAX_PROCESS_ID is set"
        )
    if not (num or pid):
        return {"coordinator_address": address}
    if not num.isdigit() or int(num) < 1:
        raise ValueError(f"JAX_NUM_PROCESSES={num!r} is invalid: it must be an integer >= 1")
    if not pid.isdigit() or int(pid) >= int(num):
        raise ValueError(
            f"JAX_PROCESS_ID={pid!r} is invalid: it must be an integer in [0, {int(num) - 1}] "
            f"(JAX_NUM_PROCESSES={num})"
        )
    return {"coordinator_address": address, "num_processes": int(num), "process_id": int(pid)}


def initialize_distributed(multi_host: bool = False) -> bool:
    """Start multi-process JAX when asked (``multi_host``) or when the environment says so.

    Must run before anything else touches the devices. Returns True if it initialised. The
    environment (:func:`distributed_args`) is checked first, so a bad value stops before JAX
    waits for a coordinator.
    """
    global _initialized
    if _initialized:
        return True
    args = distributed_args()
    if multi_host or args:
        # JAX's preemption service would install its own C handler of SIGTERM here, replacing
        # the run's (invjax.training.signals), and the run would go on to its end. The run's
        # handler keeps SIGTERM (and SIGINT); its processes agree on the stop step themselves
        # (signals.StopVote). orbax reads "no preemption" when the service is off.
        jax.config.update("jax_enable_preemption_service", False)
        jax.distributed.initialize(**args)
        _initialized = True
    return _initialized


def make_mesh(devices=None) -> Mesh:
    """A 1-D mesh named ``'data'`` over ``devices`` (default: all devices of all processes)."""
    devices = jax.devices() if devices is None else list(devices)
    return Mesh(np.asarray(devices), (DATA_AXIS,))


def replicated(mesh: Mesh) -> NamedSharding:
    """Every device holds the whole array (train state, scalars)."""
    return NamedSharding(mesh, P())


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """The leading (batch) axis split over the ``'data'`` axis; the other axes whole."""
    return NamedSharding(mesh, P(DATA_AXIS))


def check_batch_size(batch_size: int, mesh: Mesh, name: str = "train.batch_size") -> int:
    """A global batch must split evenly over the devices (and processes): ValueError if not."""
    n = mesh.devices.size
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"{name}={batch_size!r} is invalid: it must be a positive integer")
    if batch_size % n:
        lo = batch_size // n * n
        hint = f"{lo} or {lo + n}" if lo else f"{n}"
        raise ValueError(
            f"{name}={batch_size} cannot be split over the {n} devices of the mesh: use a "
            f"multiple of {n} (e.g. {hint})"
        )
    return batch_size


def per_device_batch(batch_size: int, mesh: Mesh) -> int:
    """``batch_size`` rounded up to a multiple of the mesh's devices: the evaluation batch, whose
    padding rows are masked (:func:`invjax.training.steps.eval_batches`), so any requested size
    fits any device count (500 on 8 devices: 504, 63 per device)."""
    n = mesh.devices.size
    return -(-int(batch_size) // n) * n


def local_rows(batch_size: int, mesh: Mesh) -> list[tuple[int, int]]:
    """The ``[start, stop)`` row ranges of a global batch that this process's devices hold.

    Asked of the sharding itself (any device order, any number of devices per process); ranges
    held by several local devices are listed once, sorted.
    """
    index_map = batch_sharding(mesh).addressable_devices_indices_map((batch_size,))
    rows = {idx[0].indices(batch_size)[:2] for idx in index_map.values()}
    return sorted(rows)


def gather_batch(source, indices: np.ndarray, mesh: Mesh) -> jax.Array:
    """The global batch ``source[indices]`` ``[B, ...]`` sharded over the mesh, read per process.

    ``source``: an array-like indexed by integer arrays (an in-memory NumPy split, a memory map);
    ``indices``: the global batch's ``B`` row numbers, the same on every process. Each process
    reads ``source`` only at the rows of its own devices (:func:`local_rows`), once per device.
    """
    indices = np.asarray(indices)
    shape = (indices.shape[0], *np.shape(source)[1:])
    sharding = batch_sharding(mesh)
    return jax.make_array_from_callback(
        shape, sharding, lambda index: np.asarray(source[indices[index[0]]])
    )


def shard_batch(array: np.ndarray, mesh: Mesh) -> jax.Array:
    """Host array ``[B, ...]`` (the same global batch on every process) -> sharded jax.Array.

    Each device takes its own rows (:func:`gather_batch` with ``indices = 0..B-1``).
    """
    return gather_batch(array, np.arange(np.shape(array)[0]), mesh)


def replicate(tree, mesh: Mesh):
    """Put a pytree of (host or device) arrays on every device of the mesh."""
    return jax.device_put(tree, replicated(mesh))


def jit_train_step(fn, mesh: Mesh):
    """``fn(state, images, labels) -> (state, metrics)`` jitted: state replicated, batch sharded."""
    rep, bat = replicated(mesh), batch_sharding(mesh)
    return jax.jit(fn, in_shardings=(rep, bat, bat), out_shardings=(rep, rep))


def jit_eval_step(fn, mesh: Mesh):
    """``fn(variables, images, labels, mask) -> metrics`` jitted: batch sharded, sums replicated."""
    rep, bat = replicated(mesh), batch_sharding(mesh)
    return jax.jit(fn, in_shardings=(rep, bat, bat, bat), out_shardings=rep)
