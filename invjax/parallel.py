"""Data parallelism: a ``('data',)`` mesh over every device, batch sharded, state replicated.

One ``jax.jit`` with :class:`jax.sharding.NamedSharding` does what ``pmap`` used to: the global
batch ``[B, ...]`` is split along its leading axis over the mesh, the train state is replicated,
and XLA inserts the all-reduces (gradient mean, BatchNorm statistics over the *global* batch), so
a step computes the same function on 1 or ``n`` devices up to float summation order.

Multi-host: :func:`initialize_distributed` calls ``jax.distributed.initialize()`` (SLURM and
similar clusters are detected by JAX itself); every process then holds the whole in-memory
dataset, computes the same global batch indices, and feeds only its own rows
(:func:`shard_batch`).
"""

from __future__ import annotations

import os

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

DATA_AXIS = "data"
_initialized = False


def initialize_distributed(multi_host: bool = False) -> bool:
    """Start multi-process JAX when asked (``multi_host``) or when the environment says so.

    Must run before anything else touches the devices. Returns True if it initialised.
    """
    global _initialized
    if _initialized:
        return True
    if multi_host or os.environ.get("JAX_COORDINATOR_ADDRESS"):
        jax.distributed.initialize()
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


def shard_batch(array: np.ndarray, mesh: Mesh) -> jax.Array:
    """Host array ``[B, ...]`` (the same global batch on every process) -> sharded jax.Array."""
    sharding = batch_sharding(mesh)
    if jax.process_count() == 1:
        return jax.device_put(array, sharding)
    per = array.shape[0] // jax.process_count()
    start = jax.process_index() * per
    return jax.make_array_from_process_local_data(
        sharding, np.ascontiguousarray(array[start : start + per]), array.shape
    )


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
