"""The optimiser of a run: ``config.train`` checked, the learning-rate schedule, frozen parameters.

Recipes (paper appendix; the peers' training scripts): SGD with momentum 0.9 (Nesterov for STL-10)
or Adam (Scaled-MNIST), with PyTorch-style L2 weight decay, i.e. ``g <- g + wd * theta`` *before*
the momentum / Adam moments (``optax.add_decayed_weights`` then the optimiser; not AdamW's
decoupled decay), and step schedules ``lr_t = lr * factor^(number of boundaries passed)`` with
boundaries in epochs (PyTorch's ``MultiStepLR``: the first update of epoch ``b`` already uses the
new rate).

Frozen parameters (phase 2 of the paper's multi-stream training): ``train.trainable`` names the
parameter path prefixes that train; every other parameter gets zero updates
(``optax.multi_transform`` with ``optax.set_to_zero``: no weight decay either, so frozen
parameters stay bit-identical).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import numpy as np
import optax
from flax import traverse_util

from invjax.trees import count_params

OPTIMIZERS = ("sgd", "adam")

#: The largest ``train.learning_rate`` accepted. Adam moves every weight by about the learning
#: rate in its first step (its update is ``lr * m / sqrt(v)``, of size ``lr`` whatever the
#: gradient's scale), and SGD by ``lr`` times a cross-entropy gradient of order one; the initial
#: weights are of order ``1 / sqrt(fan_in)`` < 1. Above 10 the first step replaces the
#: initialisation by its own noise and the logits grow by that factor per layer (a rate of 1e30
#: "trained" to a test loss of 1e30), while the paper's recipes use 0.002-0.2.
MAX_LEARNING_RATE = 10.0


def is_int(v) -> bool:
    """An integer (numpy's too), not a bool."""
    return isinstance(v, int | np.integer) and not isinstance(v, bool)


def is_num(v) -> bool:
    """A real number (numpy's too), not a bool."""
    return isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool)


def validate_train_config(tc) -> None:
    """Raise one clear ValueError for the first invalid ``config.train`` value (no compute)."""

    def bad(key, value, valid):
        raise ValueError(f"train.{key}={value!r} is invalid: {valid}")

    if tc.optimizer not in OPTIMIZERS:
        bad("optimizer", tc.optimizer, f"valid optimizers are {list(OPTIMIZERS)}")
    if not is_num(tc.learning_rate) or not 0 < tc.learning_rate <= MAX_LEARNING_RATE:
        bad(
            "learning_rate",
            tc.learning_rate,
            f"it must be a finite number > 0 and at most {MAX_LEARNING_RATE:g} (a larger rate "
            "moves every weight past its initial scale in the first step)",
        )
    if not is_num(tc.momentum) or not 0 <= tc.momentum < 1:
        bad("momentum", tc.momentum, "it must be in [0, 1)")
    if tc.nesterov and (tc.optimizer != "sgd" or tc.momentum == 0):
        bad("nesterov", tc.nesterov, "Nesterov needs optimizer='sgd' and momentum > 0")
    if not is_num(tc.weight_decay) or not 0 <= tc.weight_decay < math.inf:
        bad("weight_decay", tc.weight_decay, "it must be a finite number >= 0")
    for key in ("batch_size", "eval_batch_size", "num_epochs", "eval_every_epochs"):
        if not is_int(tc[key]) or tc[key] < 1:
            bad(key, tc[key], "it must be an integer >= 1")
    for key in ("log_every_steps", "checkpoint_every_steps"):
        if not is_int(tc[key]) or tc[key] < 0:
            bad(key, tc[key], "it must be an integer >= 0")
    every_epochs = tc.get("checkpoint_every_epochs", 1)
    if not is_int(every_epochs) or every_epochs < 1:
        bad("checkpoint_every_epochs", every_epochs, "it must be an integer >= 1")
    if not is_int(tc.keep_checkpoints) or tc.keep_checkpoints < 1:
        bad("keep_checkpoints", tc.keep_checkpoints, "it must be an integer >= 1")
    check_schedule(tc)
    scale = tc.get("epochs_scale", 1.0)
    if scale is not None and scale != 1:
        bad(
            "epochs_scale",
            scale,
            "a scaled run is resolved by invjax.training.plan.resolve(config) (which "
            "invjax.main and invjax.train.train_and_evaluate call) before it is prepared",
        )
    if not is_num(tc.lr_decay_factor) or not 0 < tc.lr_decay_factor < math.inf:
        bad("lr_decay_factor", tc.lr_decay_factor, "it must be a finite number > 0")
    if tc.trainable is not None:
        if isinstance(tc.trainable, str) or not all(
            isinstance(p, str) and p.strip("/") for p in tc.trainable
        ):
            bad(
                "trainable",
                tc.trainable,
                "it must be None (train everything) or a tuple of parameter path prefixes, "
                "e.g. ('head', 'combine')",
            )
    for entry in tc.init_from:
        if (
            isinstance(entry, str)
            or len(entry) != 3
            or not all(isinstance(s, str) for s in entry)
            or not entry[0]
        ):
            bad(
                "init_from",
                tuple(tc.init_from),
                "it must be a tuple of (workdir, source_prefix, target_prefix) string triples",
            )


def _tidy(epoch: float):
    """An epoch computed in floating point: the integer it is meant to be (0.3 * 200 ->
    60), else the float (a boundary inside an epoch, which :func:`lr_schedule` rounds to a step)."""
    r = round(epoch)
    return int(r) if abs(epoch - r) <= 1e-9 * max(1.0, abs(epoch)) else float(epoch)


def scaled_epochs(num_epochs: int, scale: float) -> int:
    """A stage's epochs under ``train.epochs_scale``: ``max(1, round(num_epochs * scale))``
    (halves rounded up)."""
    return num_epochs if scale == 1 else max(1, math.floor(num_epochs * scale + 0.5))


def check_schedule(tc) -> None:
    """One clear ValueError for a bad ``train.lr_boundaries`` / ``train.lr_boundary_fractions``.

    The rule: ``lr_boundaries`` are epochs and, when not None, they are the schedule;
    ``lr_boundary_fractions`` (fractions of ``num_epochs``) are the schedule when
    ``lr_boundaries`` is None (the paper's configs give theirs so, and a changed
    ``num_epochs`` keeps its shape).
    """
    b, f = tc.lr_boundaries, tc.get("lr_boundary_fractions")
    if b is None and f is None:
        raise ValueError(
            "train.lr_boundaries=None and train.lr_boundary_fractions=None: give the schedule "
            "in epochs (train.lr_boundaries, () = a constant rate) or as fractions of the run"
        )
    if b is not None:
        b = tuple(b) if isinstance(b, tuple | list) else b
        if (
            not isinstance(b, tuple)
            or not all(is_num(e) and 0 < e < tc.num_epochs for e in b)
            or list(b) != sorted(set(b))
        ):
            raise ValueError(
                f"train.lr_boundaries={b!r} is invalid: it must be increasing epochs strictly "
                f"between 0 and num_epochs={tc.num_epochs} (or None, with the schedule in "
                "train.lr_boundary_fractions)"
            )
        return
    f = tuple(f) if isinstance(f, tuple | list) else f
    if not isinstance(f, tuple) or not all(is_num(e) and 0 < e < 1 for e in f):
        bad = True
    else:
        bad = list(f) != sorted(set(f))
    if bad:
        raise ValueError(
            f"train.lr_boundary_fractions={f!r} is invalid: it must be increasing fractions of "
            "train.num_epochs strictly between 0 and 1, e.g. (0.5, 0.75) (() = a constant rate)"
        )


def boundaries_in_epochs(tc) -> tuple:
    """The schedule's boundaries of ``config.train`` in epochs (:func:`check_schedule`'s rule):
    ``lr_boundaries``, or ``lr_boundary_fractions`` times ``num_epochs``."""
    if tc.lr_boundaries is not None:
        return tuple(tc.lr_boundaries)
    return tuple(_tidy(f * tc.num_epochs) for f in tc.lr_boundary_fractions)


def check_epochs_scale(scale, key: str = "train.epochs_scale") -> float:
    """``train.epochs_scale`` checked: a finite number > 0 (None = 1)."""
    if scale is None:
        return 1.0
    if not is_num(scale) or not 0 < scale < math.inf:
        raise ValueError(
            f"{key}={scale!r} is invalid: it must be a finite number > 0 (every stage trains "
            "max(1, round(its num_epochs * scale)) epochs; 0.25 = a quarter of the run)"
        )
    return float(scale)


def resolve_train(tc, scale: float = 1.0):
    """A copy of ``config.train`` as it trains: ``num_epochs`` scaled by ``scale``
    (:func:`scaled_epochs`), ``lr_boundaries`` the schedule in epochs of that run (fractions
    times its epochs; boundaries given in epochs keep their share of the run), and the keys
    ``epochs_scale`` and ``lr_boundary_fractions`` dropped (they are spent; a run stores this
    resolved section, so runs that predate the keys keep their stored configs).
    Raises :func:`check_schedule`'s ValueError."""
    if not is_int(tc.num_epochs) or tc.num_epochs < 1:
        raise ValueError(
            f"train.num_epochs={tc.num_epochs!r} is invalid: it must be an integer >= 1"
        )
    check_schedule(tc)
    out = tc.copy_and_resolve_references()
    epochs = scaled_epochs(tc.num_epochs, scale)
    with out.unlocked():
        if tc.lr_boundaries is None:
            out.lr_boundaries = tuple(_tidy(f * epochs) for f in tc.lr_boundary_fractions)
        elif epochs != tc.num_epochs:
            out.lr_boundaries = tuple(_tidy(b * epochs / tc.num_epochs) for b in tc.lr_boundaries)
        out.num_epochs = epochs
        for key in ("epochs_scale", "lr_boundary_fractions"):
            if key in out:
                del out[key]
    return out


def lr_schedule(
    learning_rate: float, boundaries: Sequence[float], factor: float, steps_per_epoch: int
) -> optax.Schedule:
    """``lr * factor^k`` where ``k`` = boundaries (in epochs) reached by the update ``count``.

    ``count`` is the number of updates done before this one (optax's convention), so the update
    with ``count = b * steps_per_epoch``, the first of epoch ``b``, uses the decayed rate, as
    PyTorch's ``MultiStepLR`` stepped at epoch ends. ``optax.piecewise_constant_schedule``
    switches at ``count >= boundary`` too (its indicator is ``sign(boundary - count) > 0``).
    It multiplies the factors one by one in float32, so after three or more decays the rate can
    be one float32 ulp from ``lr * factor^k`` (measured over every config: only STL-10's fourth
    stage, relative 1.2e-7).
    """
    scales: dict[int, float] = {}
    for e in boundaries:  # two fractional epochs may round to one step: factor^2 there
        b = round(e * steps_per_epoch)
        scales[b] = scales.get(b, 1.0) * float(factor)
    return optax.piecewise_constant_schedule(float(learning_rate), scales)


def _path(keys) -> str:
    return "/".join(str(k) for k in keys)


def under_prefix(path: str, prefix: str) -> bool:
    """``path`` (``a/b/c``) lies under ``prefix`` in whole components (``""`` holds every path)."""
    prefix = prefix.strip("/")
    return prefix == "" or path == prefix or path.startswith(prefix + "/")


def trainable_labels(params, prefixes: Sequence[str] | None):
    """Label pytree (``'trainable'`` / ``'frozen'``) for ``optax.multi_transform``.

    A parameter trains if its path starts with one of ``prefixes`` (whole path components:
    ``'head'`` matches ``head/Dense_0/kernel``, not ``header/...``). ``None`` trains everything.
    A prefix that matches no parameter is an error naming the valid top-level names.
    """
    flat = traverse_util.flatten_dict(params)
    paths = {k: _path(k) for k in flat}
    if prefixes is None:
        labels = {k: "trainable" for k in flat}
    else:
        for p in prefixes:
            if not any(under_prefix(s, p) for s in paths.values()):
                top = sorted({str(k[0]) for k in flat})
                raise ValueError(
                    f"train.trainable prefix {p!r} matches no parameter: parameter paths start "
                    f"with {top} (paths look like {next(iter(paths.values()), '')!r})"
                )
        labels = {
            k: "trainable" if any(under_prefix(s, p) for p in prefixes) else "frozen"
            for k, s in paths.items()
        }
    return traverse_util.unflatten_dict(labels)


def make_optimizer(tc, steps_per_epoch: int, params=None) -> optax.GradientTransformation:
    """The optimiser of ``config.train`` (see the module docstring); ``params`` for freezing."""
    schedule = lr_schedule(
        tc.learning_rate, boundaries_in_epochs(tc), tc.lr_decay_factor, steps_per_epoch
    )
    if tc.optimizer == "sgd":
        inner = optax.sgd(schedule, momentum=tc.momentum or None, nesterov=bool(tc.nesterov))
    else:  # PyTorch's Adam defaults (b1 0.9, b2 0.999, eps 1e-8) are optax's too
        inner = optax.adam(schedule)
    tx = optax.chain(optax.add_decayed_weights(tc.weight_decay), inner)
    if tc.trainable is None:
        return tx
    labels = trainable_labels(params, tuple(tc.trainable))
    return optax.multi_transform({"trainable": tx, "frozen": optax.set_to_zero()}, labels)


def count_trainable(params, prefixes: Sequence[str] | None) -> int:
    """Number of parameter entries that train under ``prefixes`` (:func:`trainable_labels`;
    None: all of them, :func:`invjax.trees.count_params`)."""
    if prefixes is None:
        return count_params(params)
    labels = jax.tree.leaves(trainable_labels(params, tuple(prefixes)))
    leaves = jax.tree.leaves(params)
    return sum(int(np.prod(p.shape)) for p, lab in zip(leaves, labels) if lab == "trainable")
