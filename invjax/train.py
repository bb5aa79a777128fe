"""Training and evaluation: the paper's optimisers and schedules, jitted steps, the resumable loop.

Recipes (paper appendix; the peers' training scripts): SGD with momentum 0.9 (Nesterov for STL-10) or Adam
(Scaled-MNIST), with PyTorch-style L2 weight decay, i.e. ``g <- g + wd * theta`` *before* the
momentum / Adam moments (``optax.add_decayed_weights`` then the optimiser; not AdamW's decoupled
decay), and step schedules ``lr_t = lr * factor^(number of boundaries passed)`` with boundaries
in epochs (PyTorch's ``MultiStepLR``: the first update of epoch ``b`` already uses the new rate).

One train step (jitted, data-parallel via :mod:`invjax.parallel`): images (uint8 or float) are
normalised and augmented on the device, the cross-entropy gradient is taken with dropout key
``fold_in(rng, step)``, BatchNorm statistics are updated, and the optimiser applies. The batch
of a step is a pure function of ``(seed, step)`` (:func:`batch_indices`), so a run restored from
any checkpoint repeats exactly the work of an uninterrupted one.

Two-phase multi-stream training: ``train.init_from`` copies variables of finished runs into
sub-trees of the model (:func:`graft`), and ``train.trainable`` names the parameter path
prefixes that train; every other parameter gets zero updates (``optax.multi_transform`` with
``optax.set_to_zero``: no weight decay either, so frozen parameters stay bit-identical). Frozen
BatchNorm statistics are the model's business: it runs frozen parts with ``train=False``.

Epoch-end hooks: a model may define ``epoch_end_hooks(self) -> sequence of hook`` with
``hook(state: TrainState, epochs_done: int, ctx: HookContext) -> TrainState``; they run after
every epoch (``epochs_done`` = epochs completed, 1, 2, ...) before evaluation and checkpointing,
and once with ``epochs_done=0`` before the first step of a fresh run (Scale-II monomial pruning
"after 0, 5 and 10 epochs"). Hooks must be deterministic functions of their arguments.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging
from flax import struct, traverse_util

from invjax import certificate, checkpoint, models, parallel
from invjax import data as data_lib
from invjax import precision as P
from invjax import workdir as workdir_lib
from invjax.logging_utils import METRICS_FILE, Reporter, banner, hparams, read_records

OPTIMIZERS = ("sgd", "adam")
NON_STATE_COLLECTIONS = ("params", "batch_stats", "intermediates")
# Keys a resumed run may change (everything else must match the stored config).
RESUMABLE_KEYS = (
    "multi_host",
    "eval_precision",
    "data.data_dir",
    "train.num_epochs",
    "train.eval_batch_size",
    "train.eval_every_epochs",
    "train.log_every_steps",
    "train.checkpoint_every_steps",
    "train.keep_checkpoints",
)


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or Inf; the message names the step and the kept checkpoint."""


class RunIOError(OSError):
    """Writing in the workdir failed during training (e.g. a full disk); the message names the
    failure and the last good checkpoint, which is kept."""


class Interrupted(Exception):
    """SIGTERM or SIGINT arrived outside a training loop (nothing unsaved is lost)."""

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


# ----------------------------------------------------------------------------- config checks


def _is_int(v) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool)


def validate_train_config(tc) -> None:
    """Raise one clear ValueError for the first invalid ``config.train`` value (no compute)."""

    def bad(key, value, valid):
        raise ValueError(f"train.{key}={value!r} is invalid: {valid}")

    if tc.optimizer not in OPTIMIZERS:
        bad("optimizer", tc.optimizer, f"valid optimizers are {list(OPTIMIZERS)}")
    if not _is_num(tc.learning_rate) or not tc.learning_rate > 0:
        bad("learning_rate", tc.learning_rate, "it must be a number > 0")
    if not _is_num(tc.momentum) or not 0 <= tc.momentum < 1:
        bad("momentum", tc.momentum, "it must be in [0, 1)")
    if tc.nesterov and (tc.optimizer != "sgd" or tc.momentum == 0):
        bad("nesterov", tc.nesterov, "Nesterov needs optimizer='sgd' and momentum > 0")
    if not _is_num(tc.weight_decay) or tc.weight_decay < 0:
        bad("weight_decay", tc.weight_decay, "it must be a number >= 0")
    for key in ("batch_size", "eval_batch_size", "num_epochs", "eval_every_epochs"):
        if not _is_int(tc[key]) or tc[key] < 1:
            bad(key, tc[key], "it must be an integer >= 1")
    for key in ("log_every_steps", "checkpoint_every_steps"):
        if not _is_int(tc[key]) or tc[key] < 0:
            bad(key, tc[key], "it must be an integer >= 0")
    if not _is_int(tc.keep_checkpoints) or tc.keep_checkpoints < 1:
        bad("keep_checkpoints", tc.keep_checkpoints, "it must be an integer >= 1")
    b = tuple(tc.lr_boundaries)
    if not all(_is_num(e) and 0 < e < tc.num_epochs for e in b) or list(b) != sorted(set(b)):
        bad(
            "lr_boundaries",
            b,
            f"it must be increasing epochs strictly between 0 and num_epochs={tc.num_epochs}",
        )
    if not _is_num(tc.lr_decay_factor) or not tc.lr_decay_factor > 0:
        bad("lr_decay_factor", tc.lr_decay_factor, "it must be a number > 0")
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


# ----------------------------------------------------------------------------- optimiser


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


def param_paths(params) -> list[str]:
    """``'a/b/kernel'`` strings of every parameter leaf."""
    return [_path(k) for k in traverse_util.flatten_dict(params)]


def _matches(path: str, prefix: str) -> bool:
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
            if not any(_matches(s, p) for s in paths.values()):
                top = sorted({str(k[0]) for k in flat})
                raise ValueError(
                    f"train.trainable prefix {p!r} matches no parameter: parameter paths start "
                    f"with {top} (paths look like {next(iter(paths.values()), '')!r})"
                )
        labels = {
            k: "trainable" if any(_matches(s, p) for p in prefixes) else "frozen"
            for k, s in paths.items()
        }
    return traverse_util.unflatten_dict(labels)


def make_optimizer(tc, steps_per_epoch: int, params=None) -> optax.GradientTransformation:
    """The optimiser of ``config.train`` (see the module docstring); ``params`` for freezing."""
    schedule = lr_schedule(tc.learning_rate, tc.lr_boundaries, tc.lr_decay_factor, steps_per_epoch)
    if tc.optimizer == "sgd":
        inner = optax.sgd(schedule, momentum=tc.momentum or None, nesterov=bool(tc.nesterov))
    else:  # PyTorch's Adam defaults (b1 0.9, b2 0.999, eps 1e-8) are optax's too
        inner = optax.adam(schedule)
    tx = optax.chain(optax.add_decayed_weights(tc.weight_decay), inner)
    if tc.trainable is None:
        return tx
    labels = trainable_labels(params, tuple(tc.trainable))
    return optax.multi_transform({"trainable": tx, "frozen": optax.set_to_zero()}, labels)


# ----------------------------------------------------------------------------- state


class TrainState(struct.PyTreeNode):
    """Everything a step changes, and all a checkpoint needs besides the position in the data.

    step: int32 scalar, updates done. rng: uint32 ``[2]`` base key (step keys are folded in).
    extra: variable collections other than params / batch_stats (e.g. ``ii_mask``), passed to
    the model unchanged by a step (hooks may change them). best: ``{}`` or the variables
    ``{'params', 'batch_stats', 'extra'}`` of the best validation epoch so far.
    """

    step: jax.Array
    params: Any
    batch_stats: Any
    opt_state: Any
    rng: jax.Array
    extra: Any = struct.field(default_factory=dict)
    best: Any = struct.field(default_factory=dict)

    def variables(self) -> dict:
        return {"params": self.params, "batch_stats": self.batch_stats, **self.extra}

    def replace_variables(self, variables) -> TrainState:
        """The state with model variables ``variables`` (e.g. returned by a hook)."""
        params, batch_stats, extra = split_variables(variables)
        return self.replace(params=params, batch_stats=batch_stats, extra=extra)


def split_variables(variables) -> tuple[Any, Any, dict]:
    variables = dict(variables)
    extra = {k: v for k, v in variables.items() if k not in NON_STATE_COLLECTIONS}
    return variables["params"], variables.get("batch_stats", {}), extra


def best_variables(best) -> dict:
    return {"params": best["params"], "batch_stats": best["batch_stats"], **best["extra"]}


def init_variables(model, image_shape, rng) -> dict:
    x = jnp.zeros((1, *image_shape), jnp.float32)
    variables = dict(model.init({"params": rng, "dropout": rng}, x, train=False))
    variables.pop("intermediates", None)
    return variables


def _get_path(tree, prefix: str):
    for key in [k for k in prefix.strip("/").split("/") if k]:
        if not hasattr(tree, "items") or key not in tree:
            return None
        tree = tree[key]
    return tree


def graft(variables: dict, source: dict, src_prefix: str, dst_prefix: str) -> tuple[dict, int]:
    """Copy ``source`` variables under ``src_prefix`` into ``variables`` under ``dst_prefix``.

    Every collection of ``source`` (params, batch_stats, ...) is copied leaf by leaf where the
    same relative path exists in the target; source leaves the target lacks (e.g. a single-stream
    run's own classifier) are left out. Every *parameter* under ``dst_prefix`` must receive a
    value, and shapes must agree: ValueError otherwise. Returns ``(new variables, leaves
    left out)``. Pure (works on abstract ``ShapeDtypeStruct`` trees too).
    """
    out = {k: dict(traverse_util.flatten_dict(v, sep="/")) for k, v in variables.items()}
    skipped = 0
    dst = dst_prefix.strip("/")
    for col, tree in source.items():
        sub = _get_path(tree, src_prefix)
        if sub is None or not hasattr(sub, "items"):
            if col == "params":
                raise ValueError(f"init_from source has no parameters under {src_prefix!r}")
            continue
        target = out.get(col, {})
        copied = set()
        for rel, leaf in traverse_util.flatten_dict(sub, sep="/").items():
            path = f"{dst}/{rel}" if dst else rel
            if path not in target:
                skipped += 1
                continue
            if tuple(np.shape(leaf)) != tuple(target[path].shape):
                raise ValueError(
                    f"init_from: {col}/{path} has shape {tuple(target[path].shape)} in this model "
                    f"but {tuple(np.shape(leaf))} in the source ({src_prefix!r}/{rel}): the "
                    "source run must use the same architecture for that part"
                )
            target[path] = jnp.asarray(leaf, target[path].dtype)
            copied.add(path)
        if col == "params":
            missing = [p for p in target if _matches(p, dst) and p not in copied]
            if missing:
                raise ValueError(
                    f"init_from: {len(missing)} parameters under {dst_prefix!r} have no value in "
                    f"the source under {src_prefix!r}, e.g. {missing[:3]}"
                )
    new = {k: traverse_util.unflatten_dict(v, sep="/") for k, v in out.items()}
    return new, skipped


def create_state(model, tx, image_shape, seed: int, select_best: bool, sources=()) -> TrainState:
    """A fresh state: ``init`` with ``PRNGKey(seed)``, then the ``init_from`` grafts.

    ``sources``: ``((source variables, src_prefix, dst_prefix), ...)``.
    """
    k_init, k_train = jax.random.split(jax.random.PRNGKey(seed))
    variables = init_variables(model, image_shape, k_init)
    for src, src_prefix, dst_prefix in sources:
        variables, _ = graft(variables, src, src_prefix, dst_prefix)
    params, batch_stats, extra = split_variables(variables)
    best = {}
    if select_best:
        best = {"params": params, "batch_stats": batch_stats, "extra": extra}
    return TrainState(
        step=jnp.zeros((), jnp.int32),
        params=params,
        batch_stats=batch_stats,
        opt_state=tx.init(params),
        rng=k_train,
        extra=extra,
        best=best,
    )


def state_factory(model, tx, image_shape, seed: int, select_best: bool, sources=()):
    """``(make, args)``: ``make(args)`` is :func:`create_state` with the ``init_from`` source
    variables and the seed as *arguments*, so that ``jax.jit(make)(args)`` neither bakes (possibly
    large) checkpoints into the compiled program as constants nor lets XLA constant-fold the
    whole initialisation: with a constant seed every initial parameter is a compile-time
    constant, and XLA's constant folding then evaluates the network's init forward pass inside
    the compiler (measured: 235 s to compile the init of a width-1 E(2)-II WRN16 on 2 CPU cores,
    against 46 s for its train step). ``PRNGKey`` of the int32 seed equals ``PRNGKey(seed)``."""
    prefixes = [(a, b) for _, a, b in sources]
    trees = [t for t, _, _ in sources]

    def make(args):
        trees, seed = args
        srcs = [(t, a, b) for t, (a, b) in zip(trees, prefixes)]
        return create_state(model, tx, image_shape, seed, select_best, srcs)

    return make, (trees, np.int32(seed))


# Compiler options of the state's initialisation on CPU. XLA's CPU backend fully optimises the
# generated code of every parameter's threefry random-number kernel, which dominated start-up
# (measured on 2 cores: 166 s to compile the init of a width-1 E(2)-II WRN16, 8 s at
# optimisation level 0; its train step compiles in 46 s). The init runs once, so its speed does
# not matter; its values differ from an optimised build by float32 rounding (6e-8) and are the
# same in every run.
INIT_CPU_COMPILER_OPTIONS = {
    "xla_backend_optimization_level": 0,
    "xla_llvm_disable_expensive_passes": True,
}


def initial_state(make, args, sharding):
    """``jax.jit(make, out_shardings=sharding)(args)``, compiled cheaply on CPU (see above)."""
    lowered = jax.jit(make, out_shardings=sharding).lower(args)
    options = INIT_CPU_COMPILER_OPTIONS if jax.default_backend() == "cpu" else None
    return lowered.compile(options)(args)


# ----------------------------------------------------------------------------- steps


def cross_entropy(logits, labels):
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels)


def in_precision(fn: Callable, name: str) -> Callable:
    """``fn`` called, and so traced and compiled, under invjax precision ``name``.

    JAX keys its compilation cache on the matmul precision, so each call must be inside the
    scope: a call outside it would trace the function again with the backend's default.
    """

    @functools.wraps(fn)
    def call(*args):
        with P.scope(name):
            return fn(*args)

    return call


def make_train_step(model, tx, augment: str, mean, std) -> Callable:
    """``train_step(state, images, labels) -> (state, {'loss': mean, 'errors': count})``."""
    mean = np.asarray(mean, np.float32)
    std = np.asarray(std, np.float32)

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
    """``eval_step(variables, images, labels, mask) -> {'loss': sum, 'errors': count}`` (masked)."""
    mean = np.asarray(mean, np.float32)
    std = np.asarray(std, np.float32)

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
    the masked sums are reduced over all devices by the step.
    """
    n = len(split)
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


# ----------------------------------------------------------------------------- hooks


@dataclasses.dataclass
class HookContext:
    """What an epoch-end hook may use: the model, and a fixed normalised batch of training images
    (``float32 [B, H, W, C]``, not augmented: the first ``batch_size`` training images)."""

    model: Any
    images: Any
    mesh: Any


def epoch_end_hooks(model) -> list[Callable]:
    hooks = getattr(model, "epoch_end_hooks", None)
    if hooks is None:
        return []
    return list(hooks() if callable(hooks) else hooks)


# ----------------------------------------------------------------------------- the run


def _flat_config(config) -> dict:
    d = (
        json.loads(config.to_json_best_effort())
        if hasattr(config, "to_json_best_effort")
        else config
    )
    return {".".join(map(str, k)): v for k, v in traverse_util.flatten_dict(d).items()}


def _config_text(config) -> str:
    """The config as a Markdown table for TensorBoard's TEXT tab."""
    rows = [f"| {k} | {v!r} |" for k, v in sorted(_flat_config(config).items())]
    return "\n".join(["| key | value |", "|---|---|", *rows])


def check_resume_config(stored: dict | None, config, workdir: str) -> None:
    """A workdir's checkpoints may only be resumed by the same experiment (RESUMABLE_KEYS aside)."""
    if stored is None:
        return
    old, new = _flat_config(stored), _flat_config(config)
    old.setdefault("precision", "default")  # runs from before the setting trained like this
    diff = [
        k
        for k in sorted(set(old) | set(new))
        if old.get(k) != new.get(k) and k not in RESUMABLE_KEYS
    ]
    if diff:
        shown = ", ".join(f"{k}: {old.get(k)!r} stored, {new.get(k)!r} now" for k in diff[:5])
        raise ValueError(
            f"--workdir={workdir} holds checkpoints of a different experiment ({shown}"
            f"{', ...' if len(diff) > 5 else ''}). Resume it with its own config (saved in "
            f"{os.path.join(workdir, 'config.json')}) or choose a new --workdir. Only "
            f"{list(RESUMABLE_KEYS)} may change on resume."
        )


@dataclasses.dataclass
class Experiment:
    """A validated run, ready to compute: built by :func:`prepare`, run by :func:`run`."""

    config: Any
    workdir: str
    dataset: Any
    model: Any
    mesh: Any
    tx: Any
    steps_per_epoch: int
    num_steps: int
    sources: list | None  # None: prepared with load_sources=False (cannot run)
    restored: checkpoint.Restored | None
    num_params: int
    num_trainable: int
    precision: str = "default"  # arithmetic of the train steps (invjax.precision)
    eval_precision: str = P.EXACT  # arithmetic of evaluation and of the certificate
    state_bytes: int = 0  # of one checkpoint's arrays (the start-up free-space check)


def _abstract(tree, sharding):
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding), tree)


def prepare(config, workdir: str, load_sources: bool = True) -> Experiment:
    """Check everything and load what is on disk; no training compute. ValueError if bad input.

    Order: config values, dataset (N_t, shapes), model on the dataset's image shape (abstractly),
    optimiser and trainable prefixes, init_from sources, then the workdir's checkpoints (config
    match, readability). Nothing in ``workdir`` is written.

    ``load_sources=False`` checks everything but the ``init_from`` sources (runs that do not
    exist yet, e.g. phase 1 of :mod:`invjax.experiment`); such an experiment cannot be run.
    """
    for section in ("data", "model", "train"):
        if section not in config:
            raise ValueError(f"config has no {section!r} section: start from configs/base.py")
    seed = config.seed
    if not _is_int(seed) or not 0 <= seed < 2**31:
        raise ValueError(f"seed={seed!r} is invalid: it must be an integer in [0, 2**31)")
    tc = config.train
    validate_train_config(tc)
    precision = P.check(config.get("precision", "default"), "precision")
    eval_precision = P.check(config.get("eval_precision", P.EXACT), "eval_precision")
    mesh = parallel.make_mesh()
    parallel.check_batch_size(tc.batch_size, mesh, "train.batch_size")
    parallel.check_batch_size(tc.eval_batch_size, mesh, "train.eval_batch_size")

    data_lib.check_config(config.data)
    ds = data_lib.load(config.data)
    if tc.select_best and len(ds.val) == 0:
        raise ValueError(
            "train.select_best=True needs a validation split, but data.val_fraction="
            f"{config.data.val_fraction} leaves none: set data.val_fraction > 0 or "
            "train.select_best=False"
        )
    num_classes = config.model.get("num_classes")
    if num_classes is None:
        with config.unlocked():
            config.model.num_classes = ds.num_classes
    elif num_classes != ds.num_classes:
        raise ValueError(
            f"model.num_classes={num_classes} but dataset {ds.name!r} has {ds.num_classes} "
            "classes: leave model.num_classes unset (None) or set it to the dataset's"
        )
    model = models.build(config.model)
    x = jax.ShapeDtypeStruct((2, *ds.image_shape), jnp.float32)
    try:  # abstractly: shapes only, no compute
        variables = jax.eval_shape(
            functools.partial(init_variables, model, ds.image_shape), jax.random.PRNGKey(0)
        )
        logits = jax.eval_shape(lambda v, x: model.apply(v, x, train=False), variables, x)
    except ValueError:
        raise  # the model's own message about its config or input
    except Exception as e:  # noqa: BLE001 (shape errors surface as TypeError etc. deep in JAX)
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ValueError(
            f"model {config.model.name!r} cannot take images of shape {x.shape} (dataset "
            f"{ds.name!r}, [N, H, W, C]): {type(e).__name__}: {first}"
        ) from e
    if tuple(logits.shape) != (2, ds.num_classes):
        raise ValueError(
            f"model {config.model.name!r} maps images {(2, *ds.image_shape)} to logits of shape "
            f"{tuple(logits.shape)}, expected {(2, ds.num_classes)}"
        )
    steps_per_epoch = -(-len(ds.train) // tc.batch_size)
    tx = make_optimizer(tc, steps_per_epoch, variables["params"])

    sources = []
    for src_dir, src_prefix, dst_prefix in tc.init_from if load_sources else ():
        src = checkpoint.load_params(src_dir)
        sources.append((src, src_prefix, dst_prefix))
        variables, skipped = graft(variables, src, src_prefix, dst_prefix)  # checks shapes
        logging.info(
            "init_from %s: %r -> %r (%d leaves left out)", src_dir, src_prefix, dst_prefix, skipped
        )

    make, trees = state_factory(model, tx, ds.image_shape, seed, bool(tc.select_best), sources)
    abstract_state = _abstract(jax.eval_shape(make, trees), parallel.replicated(mesh))
    check_resume_config(checkpoint.read_config(workdir), config, workdir)
    restored = checkpoint.restore_latest(workdir, abstract_state)
    params = variables["params"]
    num_params = sum(int(np.prod(p.shape)) for p in jax.tree.leaves(params))
    if tc.trainable is None:
        num_trainable = num_params
    else:
        labels = jax.tree.leaves(trainable_labels(params, tuple(tc.trainable)))
        num_trainable = sum(
            int(np.prod(p.shape))
            for p, lab in zip(jax.tree.leaves(params), labels)
            if lab == "trainable"
        )
    return Experiment(
        config=config,
        workdir=workdir,
        dataset=ds,
        model=model,
        mesh=mesh,
        tx=tx,
        steps_per_epoch=steps_per_epoch,
        num_steps=steps_per_epoch * tc.num_epochs,
        sources=sources if load_sources or not tc.init_from else None,
        restored=restored,
        num_params=num_params,
        num_trainable=num_trainable,
        state_bytes=sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(abstract_state)),
        precision=precision,
        eval_precision=eval_precision,
    )


def describe(exp: Experiment, resumed_step: int | None = None) -> str:
    """The start-up banner of an experiment (:func:`invjax.logging_utils.banner`)."""
    ds, tc = exp.dataset, exp.config.train
    return banner(
        workdir=exp.workdir,
        devices=list(exp.mesh.devices.flat),
        processes=jax.process_count(),
        model=str(exp.config.model.name),
        num_params=exp.num_params,
        num_trainable=exp.num_trainable,
        dataset=ds.name,
        sizes={"train": len(ds.train), "val": len(ds.val), "test": len(ds.test)},
        image_shape=ds.image_shape,
        augment=ds.augment,
        num_steps=exp.num_steps,
        steps_per_epoch=exp.steps_per_epoch,
        batch_size=int(tc.batch_size),
        optimizer=str(tc.optimizer),
        learning_rate=float(tc.learning_rate),
        precision=f"train {exp.precision}, evaluation {exp.eval_precision} "
        f"({'exact' if P.is_exact(exp.eval_precision) else 'not exact'} on this backend)",
        resumed_step=resumed_step,
    )


def _fresh_meta() -> dict:
    return {
        "epoch_sums": [0.0, 0.0, 0],
        "best_val_error": None,
        "best_epoch": None,
        "wall_time_s": 0.0,
        "records": [],
    }


def _finite_record(rec: dict) -> dict:
    """A metrics record as ``metrics.jsonl`` holds it (NaN/Inf as null)."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in rec.items()}


def restore_metrics(workdir: str, restored: checkpoint.Restored) -> list[dict]:
    """Make ``metrics.jsonl`` agree with the checkpoint a run resumes from; returns the records
    up to its step (what the run's later checkpoints carry on).

    Since the checkpoint's meta holds every evaluation record up to its step, a deleted or
    damaged ``metrics.jsonl`` is rebuilt from it, with a message (the earlier file, if any, is
    kept as ``metrics.jsonl.bak``). A checkpoint written before records were stored cannot
    rebuild a deleted file: a warning says that it will hold the epochs from now on only; where
    the file exists, its records are taken as the history.
    """
    path = os.path.join(workdir, METRICS_FILE)
    records = restored.meta.get("records")
    have = read_records(path, restored.step)
    if records is None:
        if have is None:
            logging.warning(
                "%s is missing and the checkpoint of step %d holds no records to rebuild it: it "
                "will hold the evaluations from step %d on only",
                path,
                restored.step,
                restored.step,
            )
        return have or []
    if have == records:
        return records
    if have is None:
        note = "was missing"
    else:
        note = f"disagreed with the checkpoint (kept as {path}.bak)"
        os.replace(path, path + ".bak")
    with open(path + ".tmp", "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in records))
    os.replace(path + ".tmp", path)
    print(
        f"invjax: {path} {note}: rebuilt from the checkpoint of step {restored.step} "
        f"({len(records)} records)",
        file=sys.stderr,
        flush=True,
    )
    return records


class _Loop:
    """The training loop of one :class:`Experiment`; :func:`run` is its entry point.

    ``meta`` (checkpointed as JSON with each step) carries what is not an array: the running
    sums of the current epoch (so a resumed epoch reports the same train loss), the best
    validation error and epoch, and the wall time spent so far.
    """

    def __init__(self, exp: Experiment, stop: StopRequest | None = None):
        self.t_init = time.perf_counter()
        self.first_step_s = None  # loop start -> first finished step (compilation included)
        self.exp, self.tc, self.ds, self.mesh = exp, exp.config.train, exp.dataset, exp.mesh
        self.stop = stop or StopRequest()
        self.primary = jax.process_index() == 0
        self.spe, self.bsz = exp.steps_per_epoch, self.tc.batch_size
        images = self.ds.train.images[: min(self.bsz, len(self.ds.train))]
        self.ctx = HookContext(
            exp.model, data_lib.to_float(images, self.ds.mean, self.ds.std), self.mesh
        )
        self.hooks = epoch_end_hooks(exp.model)
        if exp.restored is not None:
            self.state, self.meta = exp.restored.state, exp.restored.meta
            if self.primary:
                self.meta["records"] = restore_metrics(exp.workdir, exp.restored)
        else:
            make, trees = state_factory(
                exp.model,
                exp.tx,
                self.ds.image_shape,
                exp.config.seed,
                bool(self.tc.select_best),
                exp.sources,
            )
            state = initial_state(make, trees, parallel.replicated(self.mesh))
            self.state, self.meta = self.run_hooks(state, 0), _fresh_meta()
        self.step = self.step0 = int(jax.device_get(self.state.step))
        self.sums = list(self.meta["epoch_sums"])
        self.writer = checkpoint.Writer(
            exp.workdir,
            self.tc.keep_checkpoints,
            exp.restored.skipped if exp.restored else (),
            primary=self.primary,
        )
        self.reporter = Reporter(
            exp.workdir,
            start_step=self.step,
            total_steps=exp.num_steps,
            steps_per_epoch=self.spe,
            log_every_steps=self.tc.log_every_steps or self.spe,
            enabled=self.primary,
            learning_rate=lr_schedule(
                self.tc.learning_rate, self.tc.lr_boundaries, self.tc.lr_decay_factor, self.spe
            ),
        )
        self.train_step = in_precision(
            parallel.jit_train_step(
                make_train_step(exp.model, exp.tx, self.ds.augment, self.ds.mean, self.ds.std),
                self.mesh,
            ),
            exp.precision,
        )
        self.eval_step = in_precision(
            parallel.jit_eval_step(make_eval_step(exp.model, self.ds.mean, self.ds.std), self.mesh),
            exp.eval_precision,
        )
        self.t_start = time.perf_counter()
        self.elapsed0 = float(self.meta["wall_time_s"])

    def run_hooks(self, state, epochs_done: int):
        for hook in self.hooks:
            state = hook(state, epochs_done, self.ctx)
        return parallel.replicate(state, self.mesh) if self.hooks else state

    def consume(self, step: int, metrics) -> None:
        """Fetch one step's metrics; stop on a NaN/Inf loss before anything saves that state."""
        m = jax.device_get(metrics)
        if self.first_step_s is None:
            self.first_step_s = time.perf_counter() - self.t_init
        loss, errors = float(m["loss"]), int(m["errors"])
        if not math.isfinite(loss):
            kept = self.writer.last_saved
            raise NonFiniteLossError(
                f"training loss is {loss} at step {step} (epoch {(step - 1) // self.spe + 1}): "
                "stopped. "
                + (
                    f"The last good checkpoint (step {kept}) is kept in {self.writer.directory}."
                    if kept is not None
                    else "No checkpoint had been saved yet."
                )
                + " Lower train.learning_rate or check the data."
            )
        self.sums[0] += loss * self.bsz
        self.sums[1] += errors
        self.sums[2] += self.bsz
        self.reporter.step_done(step, loss, errors, self.bsz)

    def record(self, split: str, loss: float, error: float, **extra) -> None:
        rec = {
            "step": self.step,
            "epoch": self.step // self.spe,
            "split": split,
            "loss": loss,
            "error": error,
        }
        rec = _finite_record({**rec, **extra})
        if not extra.get("final"):  # the checkpoint carries the history (restore_metrics)
            self.meta.setdefault("records", []).append(rec)
        self.reporter.record(rec)

    def evaluate(self, variables, split) -> tuple[float, float]:
        return evaluate(self.eval_step, variables, split, self.tc.eval_batch_size, self.mesh)

    def epoch_end(self) -> None:
        """Hooks, the epoch's train record, validation and best-model selection."""
        done = self.step // self.spe
        self.state = self.run_hooks(self.state, done)
        s = self.sums
        self.record("train", s[0] / max(s[2], 1), 100.0 * s[1] / max(s[2], 1))
        self.sums = [0.0, 0.0, 0]
        last = self.step == self.exp.num_steps
        if not len(self.ds.val) or (done % self.tc.eval_every_epochs and not last):
            return
        loss, err = self.evaluate(self.state.variables(), self.ds.val)
        self.record("val", loss, err)
        best = self.meta["best_val_error"]
        if self.tc.select_best and (best is None or err < best):
            self.meta.update(best_val_error=err, best_epoch=done)
            st = self.state
            self.state = st.replace(
                best={"params": st.params, "batch_stats": st.batch_stats, "extra": st.extra}
            )

    def save(self) -> None:
        self.meta.update(
            epoch_sums=list(self.sums),
            wall_time_s=self.elapsed0 + time.perf_counter() - self.t_start,
            epoch=self.step // self.spe,
            config=json.loads(self.exp.config.to_json_best_effort()),
        )
        self.writer.save(self.step, self.state, self.meta)

    def train(self) -> None:
        tc, ds, n = self.tc, self.ds, len(self.ds.train)
        resumed = self.step if self.exp.restored is not None else None
        self.reporter.message(describe(self.exp, resumed))
        if self.exp.restored is None:  # a resumed run has these from its first start
            self.reporter.text("config", _config_text(self.exp.config))
        else:
            self.reporter.message(
                f"resuming from the checkpoint of step {self.step} in {self.writer.directory}"
            )
        if self.stop.signum is not None:  # arrived while compiling: no step to finish
            self.stop_here(None)
        pending = None
        signal_at = workdir_lib.fault("sigterm_at_step")  # test hook: a signal at a known step
        while self.step < self.exp.num_steps:
            idx = batch_indices(n, self.bsz, self.exp.config.seed, *divmod(self.step, self.spe))
            self.state, metrics = self.train_step(
                self.state,
                parallel.gather_batch(ds.train.images, idx, self.mesh),
                parallel.gather_batch(ds.train.labels, idx, self.mesh),
            )
            self.step += 1
            if signal_at is not None and self.step == int(signal_at):
                os.kill(os.getpid(), signal.SIGTERM)
            if pending is not None:  # one step behind, so the device runs ahead of this check
                self.consume(*pending)
            pending = (self.step, metrics)
            epoch_end = self.step % self.spe == 0
            every = tc.checkpoint_every_steps
            if epoch_end or (every and self.step % every == 0):
                self.consume(*pending)
                pending = None
                if epoch_end:
                    self.epoch_end()
                self.save()
            if self.stop.signum is not None:
                self.stop_here(pending)
        if self.stop.signum is not None:  # after the last step: its checkpoint is saved
            self.stop_here(None)

    def stop_here(self, pending) -> None:
        """On SIGTERM/SIGINT: check the step, save a checkpoint at this position, raise Stopped."""
        if pending is not None:
            self.consume(*pending)
        saved = self.step != self.step0
        if saved:
            self.save()  # a no-op if this step was just saved (epoch end, interval)
        name = signal.Signals(self.stop.signum).name
        where = f"after step {self.step} of {self.exp.num_steps} (epoch {self.step / self.spe:.2f})"
        raise Stopped(
            self.stop.signum,
            f"stopped by {name} {where}: "
            + (
                f"checkpoint saved in {self.writer.directory}"
                if saved
                else f"nothing to save (no step had run since step {self.step0})"
            )
            + "; run the same command to resume",
        )

    def finish(self) -> dict:
        """Evaluate the reported model (best validation epoch or last) on val and test."""
        exp, ds, tc = self.exp, self.ds, self.tc
        final = best_variables(self.state.best) if tc.select_best else self.state.variables()
        val_loss, val_err = self.evaluate(final, ds.val)
        test_loss, test_err = self.evaluate(final, ds.test)
        model_epoch = self.meta["best_epoch"] if tc.select_best else self.step // self.spe
        label = {
            "model_epoch": model_epoch,
            "selected_by": "best validation" if tc.select_best else "last epoch",
        }
        for split, loss, err in (("val", val_loss, val_err), ("test", test_loss, test_err)):
            if math.isfinite(loss):
                self.record(split, loss, err, final=True, **label)
        finite = lambda v: v if math.isfinite(v) else None
        now = time.perf_counter()
        results = {
            "test_error": test_err,
            "test_loss": test_loss,
            "val_error": finite(val_err),
            "val_loss": finite(val_loss),
            "params": exp.num_params,
            "trainable_params": exp.num_trainable,
            "n_train": len(ds.train),
            "n_val": len(ds.val),
            "n_test": len(ds.test),
            "seed": exp.config.seed,
            "dataset": ds.name,
            "model": exp.config.model.name,
            "epochs": self.step // self.spe,
            "steps": self.step,
            "batch_size": self.bsz,
            "selected_epoch": self.meta["best_epoch"] if tc.select_best else self.step // self.spe,
            # All segments of a resumed run (up to their last checkpoint) plus this one.
            "wall_time_s": self.elapsed0 + now - self.t_start,
            # Training images per second of this process, compilation and evaluation included.
            "first_step_s": self.first_step_s,
            "images_per_s": (self.step - self.step0) * self.bsz / max(now - self.t_start, 1e-9),
            "devices": int(self.mesh.devices.size),
            "device_kind": jax.devices()[0].device_kind,
            "precision": exp.precision,
            "eval_precision": exp.eval_precision,
            "certificate": self.certificate(final),
        }
        self.reporter.finish(
            hparams(_flat_config(exp.config)),
            {"final/test_error": test_err, "final/val_error": val_err},
        )
        if self.primary:
            path = os.path.join(exp.workdir, "results.json")
            with open(path + ".tmp", "w") as f:
                json.dump(results, f, indent=2)
            os.replace(path + ".tmp", path)
        return results

    def certificate(self, variables) -> dict:
        """The final model's measured invariance (:mod:`invjax.certificate`) on test images."""
        images = self.ds.test.images[: certificate.N_IMAGES]
        images = images.astype(np.float32) / (255.0 if images.dtype == np.uint8 else 1.0)
        # Replicated arrays of a multi-process run are not fully addressable: each process
        # measures its own local copy.
        local = jax.tree.map(
            lambda a: a.addressable_data(0) if isinstance(a, jax.Array) else a, variables
        )
        return certificate.certify(
            self.exp.model,
            jax.device_get(local),
            self.exp.config.model,
            images,
            self.ds.mean,
            self.ds.std,
            (self.exp.eval_precision, P.EXACT, self.exp.precision),
        )

    def close(self) -> None:
        self.reporter.close()
        self.writer.close()


def run(exp: Experiment) -> dict:
    """Train (resuming where the checkpoints say), evaluate, write results; returns them."""
    if exp.sources is None:
        raise ValueError(
            "this experiment was prepared without its init_from sources (load_sources=False): "
            "prepare it again once they exist"
        )
    primary = jax.process_index() == 0
    with contextlib.ExitStack() as stack:
        if primary:  # re-entrant: invjax.main holds it already
            stack.enter_context(workdir_lib.locked([exp.workdir]))
        os.makedirs(exp.workdir, exist_ok=True)
        request = _SIGNALS.request or stack.enter_context(stop_on_signals())
        try:
            return _run_loop(exp, request, primary)
        except checkpoint.SaveError:
            raise  # its message names the step, the reason and the kept checkpoint
        except OSError as e:
            kept = checkpoint.list_steps(exp.workdir)
            raise RunIOError(
                f"cannot write in {exp.workdir} ({_short_os_error(e)}): stopped. "
                + (
                    f"The last good checkpoint (step {kept[-1]}) is kept; "
                    if kept
                    else "No checkpoint had been saved; "
                )
                + "free some space (or fix the problem) and run the same command to resume."
            ) from e


def _short_os_error(e: OSError) -> str:
    if e.errno is not None and e.strerror:
        where = f": {e.filename}" if e.filename else ""
        return f"[Errno {e.errno}] {e.strerror}{where}"
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


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


def _run_loop(exp: Experiment, request: StopRequest, primary: bool) -> dict:
    if primary:
        with open(os.path.join(exp.workdir, "config.json"), "w") as f:
            f.write(exp.config.to_json_best_effort(indent=2) + "\n")
    request.defer = True
    try:
        if request.signum is not None:  # arrived while this run was being prepared
            raise Interrupted(request.signum)
        loop = _Loop(exp, request)
        try:
            loop.train()
            return loop.finish()
        finally:
            loop.close()  # flushes metrics.jsonl and TensorBoard, also when stopping
    finally:
        request.defer = False


def train_and_evaluate(config, workdir: str) -> dict:
    """Contract 1 minus the command line: validate, train (or resume), evaluate, write results."""
    return run(prepare(config, workdir))
