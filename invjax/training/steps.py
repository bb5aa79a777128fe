"""The jitted computations of a run: the train step, the eval step, batching and evaluation.

One train step (jitted, data-parallel via :mod:`invjax.parallel`): images (uint8 or float) are
normalised and augmented on the device, the cross-entropy gradient is taken with dropout key
``fold_in(rng, step)``, BatchNorm statistics are updated, and the optimiser applies. The batch
of a step is a pure function of ``(seed, step)`` (:func:`batch_indices`), so a run restored from
any checkpoint repeats exactly the work of an uninterrupted one. Evaluation runs masked
fixed-size batches (:func:`eval_batches`), so every sample counts once with static shapes.
Frozen BatchNorm statistics are the model's business: it runs frozen parts with ``train=False``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from invjax import data as data_lib
from invjax import parallel
from invjax import precision as P
from invjax.training.state import TrainState


def cross_entropy(logits, labels):
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels)


def _stats(x):
    """A channel statistic as a float32 constant, or the traced value as it is."""
    return x if isinstance(x, jax.core.Tracer) else np.asarray(x, np.float32)


def make_train_step(model, tx, augment: str, mean, std) -> Callable:
    """``train_step(state, images, labels) -> (state, {'loss': mean, 'errors': count})``.

    ``mean``, ``std``: float32 ``[C]``, constants of the step, or traced values when the step is
    built inside a jitted function that takes them as arguments (one compiled step serving
    several training subsets, :mod:`invjax.training.many`).
    """
    mean, std = _stats(mean), _stats(std)

    def train_step(state: TrainState, images, labels):
        k_aug, k_drop = jax.random.split(jax.random.fold_in(state.rng, state.step))
        x = data_lib.augment.apply(augment, k_aug, data_lib.to_float(images, mean, std))

        def loss_fn(params):
            variables = {"params": params, "batch_stats": state.batch_stats, **state.extra}
            logits, updates = model.apply(
                variables, x, train=True, rngs={"dropout": k_drop}, mutable=["batch_stats"]
            )
            return cross_entropy(logits, labels).mean(), (logits, updates)

        (loss, (logits, updates)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        opt_updates, opt_state = tx.update(grads, state.opt_state, state.params)
        new = state.replace(
            step=state.step + 1,
            params=optax.apply_updates(state.params, opt_updates),
            batch_stats=updates.get("batch_stats", state.batch_stats),
            opt_state=opt_state,
        )
        errors = jnp.sum(jnp.argmax(logits, -1) != labels)
        return new, {"loss": loss, "errors": errors}

    return train_step


def make_eval_step(model, mean, std) -> Callable:
    """``eval_step(variables, images, labels, mask) -> {'loss': sum, 'errors': count}`` (masked;
    ``mean``, ``std`` as in :func:`make_train_step`)."""
    mean, std = _stats(mean), _stats(std)

    def eval_step(variables, images, labels, mask):
        logits = model.apply(variables, data_lib.to_float(images, mean, std), train=False)
        loss = jnp.sum(jnp.where(mask, cross_entropy(logits, labels), 0.0))
        errors = jnp.sum(mask & (jnp.argmax(logits, -1) != labels))
        return {"loss": loss, "errors": errors}

    return eval_step


def batch_indices(n: int, batch_size: int, seed: int, epoch: int, index: int) -> np.ndarray:
    """Indices of batch ``index`` of ``epoch``: a slice of ``epoch_order(n, seed, epoch)``.

    An epoch has ``ceil(n / batch_size)`` batches; the last one is completed with the first
    samples of the same order (static shapes for jit; every sample is seen once per epoch).
    """
    order = data_lib.epoch_order(n, seed, epoch)
    idx = np.arange(index * batch_size, (index + 1) * batch_size) % n
    return order[idx]


def eval_batches(n: int, batch_size: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(indices, mask)`` of every evaluation batch of a split of ``n`` samples.

    Batches are ``batch_size`` consecutive samples; the last is padded with copies of sample
    ``n - 1`` whose ``mask`` is False, so every sample counts exactly once (static shapes).
    """
    out = []
    for start in range(0, n, batch_size):
        idx = np.arange(start, start + batch_size)
        out.append((np.minimum(idx, n - 1), idx < n))
    return out


def evaluate(eval_step, variables, split, batch_size: int, mesh) -> tuple[float, float]:
    """Mean loss and error (percent) of ``variables`` on a split; NaN for an empty split.

    Each process reads only its devices' rows of every batch (:func:`parallel.gather_batch`);
    the masked sums are reduced over all devices by the step. ``batch_size`` is rounded up to a
    multiple of the devices (:func:`parallel.per_device_batch`): the extra rows are masked.
    """
    n = len(split)
    batch_size = parallel.per_device_batch(batch_size, mesh)
    if n == 0:
        return math.nan, math.nan
    outs = []
    for idx, mask in eval_batches(n, batch_size):
        outs.append(
            eval_step(
                variables,
                parallel.gather_batch(split.images, idx, mesh),
                parallel.gather_batch(split.labels, idx, mesh),
                parallel.shard_batch(mask, mesh),
            )
        )
    outs = jax.device_get(outs)
    loss = sum(float(o["loss"]) for o in outs) / n
    errors = sum(int(o["errors"]) for o in outs)
    return loss, 100.0 * errors / n


def jit_steps(model, tx, augment: str, mesh, precision: str, eval_precision: str):
    """``(train, evaluate)``: the jitted steps of a network with the training split's channel
    statistics as *arguments*:

        train(state, images, labels, mean, std) -> (state, metrics)
        evaluate(variables, images, labels, mask, mean, std) -> masked sums

    Their programs depend on the network, the optimiser and the shapes only, not on which
    images a run trains on (a single run's steps used to hold ``mean``/``std`` as constants):
    one compilation serves every model of a ``--config.seeds`` command, and JAX's persistent
    compilation cache serves runs of other seeds and realisations. State and statistics
    replicated, batches sharded (:mod:`invjax.parallel`). Each step closes over the network
    configured for its arithmetic (:func:`invjax.precision.configure`): the precision is part of
    the traced function, not of the calling context.
    """
    # A network without invjax's precision field (a user's own module) follows JAX's closest
    # default instead, set around every call (JAX keys its compilation cache on it).
    train_model = P.configure(model, precision, strict=False)
    eval_model = P.configure(model, eval_precision, strict=False)

    def train(state, images, labels, mean, std):
        return make_train_step(train_model, tx, augment, mean, std)(state, images, labels)

    def evaluate(variables, images, labels, mask, mean, std):
        return make_eval_step(eval_model, mean, std)(variables, images, labels, mask)

    rep, bat = parallel.replicated(mesh), parallel.batch_sharding(mesh)
    train_jit = jax.jit(train, in_shardings=(rep, bat, bat, rep, rep), out_shardings=(rep, rep))
    eval_jit = jax.jit(evaluate, in_shardings=(rep, bat, bat, bat, rep, rep), out_shardings=rep)
    return under_precision(train_jit, precision), under_precision(eval_jit, eval_precision), train


def under_precision(fn: Callable, name: str) -> Callable:
    """``fn`` called (so traced and compiled) under JAX's default precision closest to ``name``:
    what decides the products of modules that take no ``precision`` attribute."""

    def call(*args):
        with P.jax_default(name):
            return fn(*args)

    return call


def with_stats(train, evaluate, mean, std, mesh):
    """``(train_step(state, images, labels), eval_step(variables, images, labels, mask))``:
    :func:`jit_steps`' steps with one split's ``mean``/``std`` (float32 ``[C]``) put in."""
    mean = parallel.replicate(np.asarray(mean, np.float32), mesh)
    std = parallel.replicate(np.asarray(std, np.float32), mesh)
    return (
        lambda state, images, labels: train(state, images, labels, mean, std),
        lambda variables, images, labels, mask: evaluate(
            variables, images, labels, mask, mean, std
        ),
    )
