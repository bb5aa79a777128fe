"""The arithmetic of convolutions and matrix products: one named setting, part of the guarantee.

invjax's E(2) layers are exactly equivariant to the 90-degree rotations and flips of their group
*for exact arithmetic*: a rotated input meets the same filter taps and the same products, only
summed in another order. What a run actually computes depends on the backend's float32
arithmetic, so the guarantee is stated per precision:

``"highest"``
    True float32 products on every backend (``jax.default_matmul_precision("highest")``).
    Exact up to float32 rounding everywhere: the precision of every invariance measurement,
    exactness test, export check and run certificate.
``"default"``
    The backend's own default. On CPU this is float32 (identical to ``"highest"``). On NVIDIA
    GPUs since Ampere, float32 convolutions and matrix products run on tensor cores in TF32
    (10-bit mantissa) and cuDNN may pick convolution algorithms (Winograd, FFT) whose rounding is
    not symmetric under rotations of the grid: the logits of a rotated image then change by about
    1e-4 (measured in the README). Fastest float32 mode; not exact on GPUs.
``"bf16"``
    Mixed precision: parameters, optimiser state, normalisation statistics and everything outside
    convolutions stay float32; each convolution rounds its input and its (expanded) filter to
    bfloat16 and accumulates in float32 (``preferred_element_type``). Not exact: the rounding of
    each layer's input amplifies float32 summation-order differences (:func:`is_exact`). On GPUs
    XLA may keep a convolution in float32 instead (it is allowed excess precision by default,
    ``xla_allow_excess_precision``), so the rounding is an upper bound there, not a promise.

The setting applies at trace time: :func:`scope` sets JAX's default matmul precision (which also
keys JAX's compilation cache, so functions traced under different settings are compiled apart)
and the convolution dtype that :func:`invjax.ops.conv.conv2d` reads through :func:`conv_dtype`.
"""

from __future__ import annotations

import contextlib
import contextvars

import jax
import jax.numpy as jnp

#: name -> (jax default_matmul_precision value, convolution compute dtype or None)
_MODES = {
    # Named explicitly (not left unset), so that "default" also undoes an enclosing setting.
    "default": ("default", None),
    "highest": ("highest", None),
    # "bfloat16" for the other products (basis expansion, dense layers): on GPU that is the
    # default TF32 path, on TPU one bf16 pass; it also gives traces of this mode their own key.
    "bf16": ("bfloat16", jnp.bfloat16),
}
PRECISIONS = tuple(_MODES)
#: The precision at which invjax promises exactness on every backend and measures invariance.
EXACT = "highest"
_conv_dtype: contextvars.ContextVar = contextvars.ContextVar("invjax_conv_dtype", default=None)


def check(name, key: str = "precision") -> str:
    """Return ``name`` if it is a precision, else raise one message naming ``key`` and the valid."""
    if not isinstance(name, str) or name not in _MODES:
        raise ValueError(f"{key}={name!r} is invalid: valid precisions are {list(PRECISIONS)}")
    return name


@contextlib.contextmanager
def scope(name: str):
    """Trace (and run) everything inside with the arithmetic of precision ``name``."""
    matmul, dtype = _MODES[check(name)]
    token = _conv_dtype.set(dtype)
    try:
        with jax.default_matmul_precision(matmul):
            yield
    finally:
        _conv_dtype.reset(token)


def conv_dtype():
    """The dtype convolutions compute in under the current :func:`scope` (None: the input's)."""
    return _conv_dtype.get()


def is_exact(name: str, backend: str | None = None) -> bool:
    """Whether precision ``name`` keeps the 90-degree/flip guarantee at float32 rounding on
    ``backend`` (default: JAX's default backend), as measured (README, "Precision").

    Only true float32 products are exact: any rounding of a layer's input to fewer bits (TF32 on
    GPUs, bfloat16 passes on TPUs, ``"bf16"`` everywhere) turns the last-bit differences that
    float32 summation order leaves between ``f(g x)`` and ``g f(x)`` into whole low-precision
    ulps wherever a value sits next to a rounding boundary; layer after layer these grow to about
    1e-4 at the logits (measured on CPU with ``"bf16"`` as on GPUs with ``"default"``).
    """
    check(name)
    backend = backend or jax.default_backend()
    return name == "highest" or (name == "default" and backend == "cpu")


def describe(name: str) -> dict:
    """What a result records of the arithmetic it was computed with."""
    dev = jax.devices()[0]
    return {
        "precision": check(name),
        "backend": jax.default_backend(),
        "device_kind": getattr(dev, "device_kind", str(dev)),
        "device_count": jax.device_count(),
    }
