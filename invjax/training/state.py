"""The training state: what a step changes, its initialisation and the ``init_from`` grafts.

:class:`TrainState` holds the step, parameters, BatchNorm statistics, optimiser state, base key,
the model's other variable collections and the best-validation variables. A fresh state is
``model.init`` with ``PRNGKey(seed)`` (:func:`invjax.models.common.init_variables`), then the
variables of finished runs copied into sub-trees (:func:`graft`: phase 2 of multi-stream
training starts from the phase-1 stream checkpoints), built in one jitted, cheaply compiled
call (:func:`state_factory`, :func:`initial_state`).
"""

from __future__ import annotations

import weakref
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct, traverse_util

from invjax.initialise import init_variables
from invjax.training.optimizer import under_prefix

NON_STATE_COLLECTIONS = ("params", "batch_stats", "intermediates")


class TrainState(struct.PyTreeNode):
    """Everything a step changes, and all a checkpoint needs besides the position in the data.

    step: int32 scalar, updates done. rng: uint32 ``[2]`` base key (step keys are folded in).
    extra: variable collections other than params / batch_stats (e.g. ``ii_mask``), passed to
    the model unchanged by a step (the model's ``on_epoch_end`` may change them). best: ``{}``
    or the variables ``{'params', 'batch_stats', 'extra'}`` of the best validation epoch so far.
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
        """The state with model variables ``variables`` (e.g. from the model's ``on_epoch_end``)."""
        params, batch_stats, extra = split_variables(variables)
        return self.replace(params=params, batch_stats=batch_stats, extra=extra)


def split_variables(variables) -> tuple[Any, Any, dict]:
    variables = dict(variables)
    extra = {k: v for k, v in variables.items() if k not in NON_STATE_COLLECTIONS}
    return variables["params"], variables.get("batch_stats", {}), extra


def best_variables(best) -> dict:
    return {"params": best["params"], "batch_stats": best["batch_stats"], **best["extra"]}


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
    run's own classifier) are left out. ``dst_prefix`` must hold parameters, every *parameter*
    under it must receive a value, and shapes must agree: ValueError otherwise. Returns
    ``(new variables, leaves left out)``. Pure (works on abstract ``ShapeDtypeStruct`` trees too).
    """
    out = {k: dict(traverse_util.flatten_dict(v, sep="/")) for k, v in variables.items()}
    skipped = 0
    dst = dst_prefix.strip("/")
    if not any(under_prefix(p, dst) for p in out.get("params", {})):
        top = sorted({p.split("/")[0] for p in out.get("params", {})})
        raise ValueError(
            f"init_from: this model has no parameters under {dst_prefix!r}: its parameter paths "
            f"start with {top}"
        )
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
            missing = [p for p in target if under_prefix(p, dst) and p not in copied]
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
    the compiler, which takes longer than compiling the train step (docs/benchmarks.md,
    "Start-up time"). ``PRNGKey`` of the int32 seed equals ``PRNGKey(seed)``."""
    prefixes = [(a, b) for _, a, b in sources]
    trees = [t for t, _, _ in sources]

    def make(args):
        trees, seed = args
        srcs = [(t, a, b) for t, (a, b) in zip(trees, prefixes)]
        return create_state(model, tx, image_shape, seed, select_best, srcs)

    return make, (trees, np.int32(seed))


# Compiler options of the state's initialisation on CPU. XLA's CPU backend fully optimises the
# generated code of every parameter's threefry random-number kernel, which dominates start-up
# (docs/benchmarks.md, "Start-up time"). The init runs once, so its speed does not matter; its
# values differ from an optimised build by float32 rounding and are the same in every run.
INIT_CPU_COMPILER_OPTIONS = {
    "xla_backend_optimization_level": 0,
    "xla_llvm_disable_expensive_passes": True,
}


# Compiled initialisations of this process by program text: the models of one
# --config.seeds command (invjax.training.many) differ only in the seed argument, so they share
# one compilation even with the persistent compilation cache off. A few entries suffice.
_COMPILED: dict[str, Any] = {}
_COMPILED_MAX = 4


# The same by factory and argument shapes: a factory shared by K models (invjax.training
# .lockstep) is traced once, not once per model.
_BY_MAKE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def initial_state(make, args, sharding):
    """``jax.jit(make, out_shardings=sharding)(args)``, compiled cheaply on CPU (see above),
    once per program text in a process, and traced once per ``make`` and argument shapes."""
    mesh = getattr(sharding, "mesh", None)  # a compiled program is bound to its devices
    where = str(sharding) if mesh is None else [d.id for d in np.asarray(mesh.devices).flat]
    leaves, tree = jax.tree.flatten(args)
    shapes = (str(where), str(tree), tuple((np.shape(a), np.result_type(a).str) for a in leaves))
    traced = _BY_MAKE.setdefault(make, {})
    compiled = traced.get(shapes)
    if compiled is None:
        lowered = jax.jit(make, out_shardings=sharding).lower(args)
        compiled = traced[shapes] = _compiled(lowered, where)
    return compiled(args)


def _compiled(lowered, where):
    key = f"{where}\n{lowered.as_text()}"
    compiled = _COMPILED.get(key)
    if compiled is None:
        options = INIT_CPU_COMPILER_OPTIONS if jax.default_backend() == "cpu" else None
        compiled = lowered.compile(options)
        while len(_COMPILED) >= _COMPILED_MAX:
            _COMPILED.pop(next(iter(_COMPILED)))
        _COMPILED[key] = compiled
    return compiled
