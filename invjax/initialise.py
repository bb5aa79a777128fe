"""A network's variables from one compiled program, equal bit for bit to Flax's eager ``init``.

Called outside ``jax.jit``, ``module.init(rngs, x)`` runs operation by operation and JAX compiles
each one on its own: every parameter shape's random-number kernel and every operation of the
forward pass that ``init`` runs to learn the shapes. For E(2)-WRN16-4 that is about 170 programs
and most of a minute on 2 CPU cores, nearly all of it in XLA's compiler. ``jax.jit(module.init)``
compiles one program in seconds (XLA drops the unused forward pass) but changes values: XLA's
algebraic simplifier folds a parameter's scale into its random-number kernel
(``std * (sqrt(2) * erfinv(u))`` becomes ``(std * sqrt(2)) * erfinv(u)``), one float32 rounding
apart in a share of the E(2) and scale weights, so the same seed would give another network.

:func:`init` keeps eager's values and compiles once. It traces ``module.init`` to a jaxpr, keeps
the operations that some variable depends on (the forward pass goes), and emits each of them
behind an ``optimization_barrier``: XLA then optimises every operation on its own, as eager
dispatch compiles it, never two together. Constants (the bases, Python scalars) pass a barrier
too: eager hands them to each operation as run-time arguments, where XLA would otherwise fold
them at compile time. On CPU the program is compiled at LLVM optimisation level 1: at level 0
``jax.random.normal`` alone already gives other values than eager's (level 2) code; level 1 gives
the same at a fraction of level 2's compile time. ``tests/test_initialise.py`` checks the equality bit
for bit on E(2), scale and multi-stream networks.

:func:`init_variables` is the trainer's initialisation (``invjax.training.state``): inside a
trace (the jitted state of :func:`invjax.training.state.state_factory`, ``jax.eval_shape``) it is
``module.init`` traced as before, so the trainer's program and its values are unchanged; called on
a concrete key it is :func:`init`.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import linen as nn
from jax import lax
from jax.extend import core as jcore

# LLVM optimisation level of the program on CPU: 1 gives the values of eager dispatch (level 2)
# and compiles several times faster; 0 changes values (see the module docstring).
CPU_COMPILER_OPTIONS = {"xla_backend_optimization_level": 1}

# Compiled programs of this process by program text (a rebuilt model, another seed: the key is an
# argument). A few entries suffice; the persistent compilation cache keeps them across processes.
_COMPILED: dict[str, Any] = {}
_COMPILED_MAX = 8


def normal(key, shape, dtype=jnp.float32):
    """``jax.random.normal(key, shape, dtype)``, the same values bit for bit, drawn as one flat
    vector and reshaped: the bits of a draw are a function of each element's flat index, so only
    the compiled kernel differs. XLA:CPU compiles some shapes' kernels pathologically slowly (the
    D8 layer's ``[40, 40, 16, 11]`` coefficients: 12-13 s against 0.5 s flat; docs/benchmarks.md,
    "Against the peer (e2cnn)"); the layers' initialisers draw through this."""
    shape = tuple(shape)
    return jax.random.normal(key, (math.prod(shape),), dtype).reshape(shape)


def live_equations(jaxpr) -> list:
    """The equations of ``jaxpr`` that an output depends on, or that have effects, in order."""
    needed = {v for v in jaxpr.outvars if isinstance(v, jcore.Var)}
    kept = []
    for eqn in reversed(jaxpr.eqns):
        if eqn.effects or any(v in needed for v in eqn.outvars):
            kept.append(eqn)
            needed.update(v for v in eqn.invars if isinstance(v, jcore.Var))
    return kept[::-1]


def _opaque(value, aval):
    """``value`` behind a barrier, as the run-time argument eager dispatch would give it (as is
    where a barrier would change its type, e.g. a weak type)."""
    out = lax.optimization_barrier(value)
    return out if jax.typeof(out) == aval else value


def separated(closed) -> Any:
    """``fn(*args)``: the live equations of the closed jaxpr ``closed`` one by one, each behind an
    optimisation barrier, and its constants and literals too (see the module docstring); returns
    the jaxpr's outputs as a list. Meant to be traced by ``jax.jit``."""
    jaxpr, consts = closed.jaxpr, closed.consts
    eqns = live_equations(jaxpr)

    def fn(*args):
        env = {v: _opaque(c, v.aval) for v, c in zip(jaxpr.constvars, consts)}
        env.update(zip(jaxpr.invars, args))

        def read(v):
            return _opaque(v.val, v.aval) if isinstance(v, jcore.Literal) else env[v]

        for eqn in eqns:
            params = eqn.primitive.get_bind_params(eqn.params)
            out = eqn.primitive.bind(*map(read, eqn.invars), **params)
            outs = list(out) if eqn.primitive.multiple_results else [out]
            if outs:
                outs = lax.optimization_barrier(outs)
            env.update(zip(eqn.outvars, outs))
        return [read(v) for v in jaxpr.outvars]

    return fn


def _is_traced(tree) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(tree))


def _compile(lowered):
    """``lowered.compile`` once per program text and device in this process."""
    device = jax.devices()[0]
    options = CPU_COMPILER_OPTIONS if device.platform == "cpu" else None
    text = f"{device}\n{options}\n{lowered.as_text()}"
    key = hashlib.sha256(text.encode()).hexdigest()
    compiled = _COMPILED.get(key)
    if compiled is None:
        compiled = lowered.compile(options)
        while len(_COMPILED) >= _COMPILED_MAX:
            _COMPILED.pop(next(iter(_COMPILED)))
        _COMPILED[key] = compiled
    return compiled


def init(module: nn.Module, rngs, *args, **kwargs) -> dict:
    """``module.init(rngs, *args, **kwargs)``, equal bit for bit to the eager call on CPU (where
    the tests check it), from one compiled program (see the module docstring).

    ``rngs``: a key or a dict of keys, as for ``init``; ``args``: arrays (their values reach the
    program as arguments); ``kwargs``: static (e.g. ``train=False``). Inside a trace (``jax.jit``,
    ``jax.eval_shape``) it is ``module.init`` itself.
    """
    if _is_traced((rngs, args)):
        return module.init(rngs, *args, **kwargs)

    def call(rngs, *args):
        return module.init(rngs, *args, **kwargs)

    closed, shapes = jax.make_jaxpr(call, return_shape=True)(rngs, *args)
    flat_args = jax.tree_util.tree_leaves((rngs, args))
    compiled = _compile(jax.jit(separated(closed)).lower(*flat_args))
    out = compiled(*flat_args)
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(shapes), out)


def init_variables(model: nn.Module, image_shape, rng) -> dict:
    """The variables of ``model`` for images ``image_shape`` (``[H, W, C]``): ``model.init`` with
    ``rng`` as the ``params`` and ``dropout`` key on one zero image in eval mode, without the
    ``intermediates`` collection. On a concrete key: one program by :func:`init`, with the eager
    ``model.init``'s values. Inside a trace (the trainer's jitted state, ``jax.eval_shape``):
    ``model.init`` traced as it always was, so the trainer's program and values stay."""
    x = jnp.zeros((1, *image_shape), jnp.float32)
    rngs = {"params": rng, "dropout": rng}
    variables = dict(init(model, rngs, x, train=False))
    variables.pop("intermediates", None)
    return variables
