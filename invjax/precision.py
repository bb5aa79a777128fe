"""The arithmetic of convolutions and matrix products: a named setting, part of the guarantee.

invjax's E(2) layers are exactly equivariant to the 90-degree rotations and flips of their group
*for exact arithmetic*: a rotated input meets the same filter taps and the same products, only
summed in another order. What a run actually computes depends on the arithmetic of its products,
so the guarantee is stated per precision (the argument and the measurements: docs/precision.md):

``"highest"``
    True float32 products on every backend (``lax.Precision.HIGHEST``). Exact up to float32
    rounding everywhere: the precision of every invariance measurement, exactness test, export
    check and run certificate.
``"default"``
    The backend's fast float32 (``lax.Precision.DEFAULT``). On CPU this is float32 (identical to
    ``"highest"``). On NVIDIA GPUs since Ampere, float32 convolutions and matrix products round
    their operands to TF32 (10-bit mantissa); on TPUs to bfloat16 (one pass). Rounding each
    layer's input turns the last-bit differences that float32 summation order leaves between
    ``f(g x)`` and ``g f(x)`` into whole TF32 / bf16 ulps wherever a value sits next to a rounding
    boundary: not exact on those backends (logits move by about 1e-4).
``"bf16"``
    Mixed precision: each product rounds its operands to bfloat16 and accumulates in float32
    (``preferred_element_type``); everything else stays float32. Not exact, on any backend.
``"exact_fast"``
    Exact in the fast arithmetic: every operand is split elementwise, ``x = x_hi + x_lo`` with
    ``x_hi`` representable in the fast format, and the significant partial products are summed
    in float32. TF32 on GPUs: 3 passes, ``x_hi w_hi + x_hi w_lo + x_lo w_hi`` (CUTLASS's 3xTF32);
    bf16 on TPUs: ``x = x_0 + x_1 + x_2`` and the 6 products of order <= 2 (JAX's
    ``BF16_BF16_F32_X6``). The split is a function of each element alone, so it commutes with
    the grid permutations of the group, and ``x_hi + x_lo`` carries 22 (TF32) or all 24 (bf16 x3)
    mantissa bits: a last-bit difference of an input stays a last-bit difference. Plain float32
    (``HIGHEST``) on backends whose float32 products are already float32 (CPU). Not the GPU
    training default: on an H200 it costs 2.0-2.2x ``default`` on E(2) layer stacks
    (docs/precision.md).

Emulation (CPU proof of the argument, tests and ``benchmarks/precision.py``): ``"<mode>@tf32"``
and ``"<mode>@bf16"`` for ``mode`` in ``default`` / ``exact_fast`` compute what that mode computes
on a backend whose fast format is TF32 (10 explicit mantissa bits) or bfloat16 (7): operands are
rounded to nearest, ties to even (:func:`round_mantissa`), and their products, exact in float32
(at most 2 x 11 significant bits), are summed in float32. ``"exact_fast@bf16x3"`` is the 3-pass
bf16 split (16 bits), which shows why TPUs get 6 passes. The real ``exact_fast`` picks its form
from ``jax.default_backend()`` when traced.

How a setting reaches the products: by construction, never through hidden state. Every layer
that multiplies (:mod:`invjax.layers`) has a ``precision`` attribute (as ``flax.linen.Conv``) that
it passes to :func:`conv` / :func:`einsum` / :func:`dot_general`; every network passes its own
``precision`` field down to all its layers; :func:`configure` returns a network with another
setting (a new module, so a jitted function closing over it is traced and cached apart). ``None``
(the attributes' default) means JAX's own ``jax_default_matmul_precision``, which JAX keys its
compilation cache on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from invjax.contract import Precise, is_nnx, precision_scope

PRECISIONS = ("default", "highest", "bf16", "exact_fast")
#: The precision at which invjax promises exactness on every backend and measures invariance.
EXACT = "highest"
#: Fast formats emulated on CPU: explicit mantissa bits (float32 has 23) and the partial
#: products of ``exact_fast`` in that format (3: two-term split; 6: three-term split).
#: ``bf16x3`` is the 3-pass bf16 form, kept to measure that 6 passes are needed on TPUs.
FAST_FORMATS = {"tf32": (10, 3), "bf16": (7, 6), "bf16x3": (7, 3)}
EMULATED = (
    "default@tf32",
    "exact_fast@tf32",
    "default@bf16",
    "exact_fast@bf16",
    "exact_fast@bf16x3",
)
ALL = PRECISIONS + EMULATED


def check(name, key: str = "precision", allow_none: bool = False) -> str | None:
    """Return ``name`` if it is a precision (or an emulated one), else one clear ValueError."""
    if name is None and allow_none:
        return None
    if not isinstance(name, str) or name not in ALL:
        raise ValueError(
            f"{key}={name!r} is invalid: valid precisions are {list(PRECISIONS)} (CPU emulation "
            f"of a fast format: {list(EMULATED)})"
        )
    return name


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def round_mantissa(x, bits: int):
    """``x`` (float32) rounded to ``bits`` explicit mantissa bits, to nearest, ties to even.

    What converting to TF32 (``bits=10``) or bfloat16 (``bits=7``) does; both keep float32's
    8-bit exponent, so the result is a float32 holding the rounded value. Non-finite values pass.
    Differentiated as the identity (straight through), as a cast to the fast format is: the
    split's parts then carry the whole derivative in ``x_hi`` (``x_lo = x - x_hi`` gets none),
    and the backward passes are the transposed products of the parts.
    """
    x = jnp.asarray(x, jnp.float32)
    drop = 23 - bits
    u = lax.bitcast_convert_type(x, jnp.uint32)
    lsb = (u >> drop) & jnp.uint32(1)
    u = (u + jnp.uint32((1 << (drop - 1)) - 1) + lsb) & jnp.uint32(~((1 << drop) - 1) & 0xFFFFFFFF)
    return jnp.where(jnp.isfinite(x), lax.bitcast_convert_type(u, jnp.float32), x)


@round_mantissa.defjvp
def _round_mantissa_jvp(bits, primals, tangents):
    return round_mantissa(primals[0], bits), jnp.asarray(tangents[0], jnp.float32)


def split(x, terms: int, to_fast):
    """``[x_0, ..., x_{terms-1}]`` with ``x_j = to_fast(x - x_0 - ... - x_{j-1})``.

    Each remainder is exact in float32 (it is smaller than an ulp of the previous term's format),
    so ``sum_j x_j`` equals ``x`` to ``terms x (bits + 1)`` significant bits.
    """
    parts, rest = [], jnp.asarray(x, jnp.float32)
    for _ in range(terms):
        part = to_fast(rest)
        parts.append(part)
        rest = rest - part
    return parts


def _split_product(fn, a, b, passes: int, to_fast, prec, out):
    """``sum_{i + j < order} fn(a_i, b_j)`` of the split operands, smallest terms summed first."""
    terms = {3: 2, 6: 3}[passes]
    sa, sb = split(a, terms, to_fast), split(b, terms, to_fast)
    total = None
    for order in reversed(range(terms)):  # products of order 2 (6 passes), 1, then 0
        for i in range(order + 1):
            y = fn(sa[i], sb[order - i], prec, out)
            total = y if total is None else total + y
    return total


def bilinear(fn, a, b, name: str | None):
    """A bilinear product ``fn(a, b, precision, preferred_element_type)`` (a convolution, a
    dot) in the arithmetic of precision ``name`` (module docstring). Resolved at trace time."""
    if name is None:
        return fn(a, b, None, None)
    mode, _, emulated = check(name).partition("@")
    f32 = jnp.promote_types(a.dtype, jnp.float32)
    if emulated:
        bits, passes = FAST_FORMATS[emulated]
        fast = functools.partial(round_mantissa, bits=bits)
        if mode == "default":
            return fn(fast(a), fast(b), lax.Precision.HIGHEST, None)
        return _split_product(fn, a, b, passes, fast, lax.Precision.HIGHEST, None)
    if mode == "highest":
        return fn(a, b, lax.Precision.HIGHEST, None)
    if mode == "default":
        return fn(a, b, lax.Precision.DEFAULT, None)
    if mode == "bf16":
        y = fn(a.astype(jnp.bfloat16), b.astype(jnp.bfloat16), lax.Precision.DEFAULT, f32)
        return y
    backend = jax.default_backend()
    if backend == "gpu":  # TF32 tensor cores: x_hi is exact in TF32, the hardware rounds x_lo
        tf32 = functools.partial(round_mantissa, bits=FAST_FORMATS["tf32"][0])
        return _split_product(fn, a, b, 3, tf32, lax.Precision.DEFAULT, None)
    if backend == "tpu":  # bf16 passes: three bf16 terms hold all 24 bits of a float32

        def to_bf16(v):
            return v.astype(jnp.bfloat16).astype(jnp.float32)

        return _split_product(
            lambda p, q, prec, out: fn(p.astype(jnp.bfloat16), q.astype(jnp.bfloat16), prec, out),
            a,
            b,
            6,
            to_bf16,
            lax.Precision.DEFAULT,
            f32,
        )
    return fn(a, b, lax.Precision.HIGHEST, None)  # float32 products already


def conv(x, kernel, name: str | None, **kwargs):
    """``lax.conv_general_dilated(x, kernel, **kwargs)`` in precision ``name``."""

    def fn(a, b, prec, out):
        return lax.conv_general_dilated(a, b, precision=prec, preferred_element_type=out, **kwargs)

    return bilinear(fn, x, kernel, name)


def einsum(spec: str, a, b, name: str | None):
    """``jnp.einsum(spec, a, b)`` in precision ``name``."""

    def fn(p, q, prec, out):
        return jnp.einsum(spec, p, q, precision=prec, preferred_element_type=out)

    return bilinear(fn, a, b, name)


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, *, mode):
    """``lax.dot_general`` in invjax precision ``mode`` (the ``dot_general`` of ``nn.Dense``;
    Flax's own ``precision`` argument must be None, the mode decides)."""
    if precision is not None or preferred_element_type is not None:
        raise ValueError("dot_general: the invjax precision mode decides precision and dtype")

    def fn(p, q, prec, out):
        return lax.dot_general(p, q, dimension_numbers, precision=prec, preferred_element_type=out)

    return bilinear(fn, lhs, rhs, mode)


def dense_dot_general(name: str | None):
    """The ``dot_general`` to give ``flax.linen.Dense`` for precision ``name`` (None: Flax's)."""
    return None if name is None else functools.partial(dot_general, mode=check(name))


def configure(model, name: str | None, strict: bool = True):
    """``model`` (a Flax Linen module) computing in precision ``name``: a new module, so a
    function closing over it is traced for this arithmetic.

    - A :class:`invjax.contract.Precise` module (every invjax layer and network, and a
      researcher's module deriving from it): a clone whose ``precision`` field is ``name``, and
      every module-valued field (the streams of a multi-stream network) configured the same way.
    - Any other Linen module (a researcher's wrapper around invjax layers): the same module in a
      subclass whose ``__call__``, ``init`` and ``apply`` construct every invjax layer inside in
      ``name`` (:func:`invjax.contract.precision_scope`) and trace the products of Flax's own
      layers in :func:`jax_default`'s closest setting. Its variables are the wrapper's: the same
      names, the same tree.
    - A Flax NNX module (:mod:`invjax.nnx`): a copy (``flax.nnx.clone``) whose every
      :class:`~invjax.contract.Precise` module has ``precision`` set to ``name``; Flax's own
      layers inside follow JAX's default (:func:`jax_default`, entered by the caller).
    - Flax's own layers (``nn.Dense`` ...) hold no invjax layer and take a lax precision under
      the same field name, and objects that are no Linen module cannot be configured: one clear
      error, or with ``strict=False`` the object itself.
    """
    check(name, allow_none=True)
    if is_nnx(model):
        return _configure_nnx(model, name)
    foreign = not isinstance(model, nn.Module) or type(model).__module__.startswith("flax.")
    if foreign and not isinstance(model, Precise):
        if not strict:
            return model
        raise ValueError(
            f"{type(model).__name__} has no 'precision' attribute: it cannot be computed in "
            f"precision {name!r}"
        )
    subs = {
        f.name: configure(getattr(model, f.name), name, strict)
        for f in dataclasses.fields(model)
        if f.init
        and f.name not in ("parent", "name")
        and isinstance(getattr(model, f.name, None), nn.Module)
    }
    if isinstance(model, Precise):
        return model.clone(precision=name, **subs)
    attrs = {f.name: getattr(model, f.name) for f in dataclasses.fields(model) if f.init}
    attrs.update(subs, parent=None)
    return _scoped_class(type(model), name)(**attrs)


def _configure_nnx(model, name: str | None):
    """:func:`configure` of an NNX module: a copy with every invjax layer inside in ``name``."""
    from flax import nnx  # imported already: the caller holds an NNX module

    model = nnx.clone(model)
    for _, module in nnx.iter_modules(model):
        if isinstance(module, Precise):
            module.precision = name
    return model


@functools.cache
def _scoped_class(cls: type, name: str | None) -> type:
    """``cls`` whose entry points run inside ``name``'s scope (:func:`configure`); one class per
    (class, mode), under the same name, so auto-named variables keep their names."""

    def scoped(method):
        @functools.wraps(method)
        def run(self, *args, **kwargs):
            mode = contextlib.nullcontext() if name is None else jax_default(name)
            with precision_scope(name), mode:
                return method(self, *args, **kwargs)

        return run

    body = {m: scoped(getattr(cls, m)) for m in ("__call__", "init", "init_with_output", "apply")}
    body.update(__module__=cls.__module__, __qualname__=cls.__qualname__, __doc__=cls.__doc__)
    return type(cls.__name__, (cls,), body)


#: JAX's ``default_matmul_precision`` closest to each mode, for products that take no invjax
#: precision (a user's ``flax.linen.Dense``): exact where the mode is exact.
_JAX_DEFAULT = {
    "default": "default",
    "highest": "highest",
    "bf16": "bfloat16",
    "exact_fast": "highest",
}


def jax_default(name: str):
    """Context: JAX's ``default_matmul_precision`` closest to precision ``name`` (``highest`` for
    ``exact_fast`` and the emulations), for modules without a ``precision`` attribute. JAX keys
    its compilation cache on this setting; invjax's own layers take theirs explicitly."""
    mode = check(name).partition("@")[0]
    return jax.default_matmul_precision("highest" if "@" in name else _JAX_DEFAULT[mode])


def is_exact(name: str, backend: str | None = None) -> bool:
    """Whether precision ``name`` keeps the 90-degree/flip guarantee at float32 rounding on
    ``backend`` (default: JAX's default backend), as measured (docs/precision.md).

    ``highest`` everywhere; ``default`` and ``exact_fast`` on CPU (float32 products); the
    emulations of ``exact_fast`` (tested on CPU). ``exact_fast`` on GPUs and TPUs is exact by
    the argument of docs/precision.md; on one H200 it stayed within the bound with a margin of
    3x (at most 3.5e-6), which is not yet enough to promise it for every card. ``bf16`` and
    the emulated ``default@...`` never: rounding each layer's input breaks exactness.
    """
    check(name)
    backend = backend or jax.default_backend()
    if name == "highest" or name.startswith("exact_fast@"):
        return True
    return name in ("default", "exact_fast") and backend == "cpu"


def describe(name: str) -> dict:
    """What a result records of the arithmetic it was computed with."""
    dev = jax.devices()[0]
    return {
        "precision": check(name),
        "backend": jax.default_backend(),
        "device_kind": getattr(dev, "device_kind", str(dev)),
        "device_count": jax.device_count(),
    }
