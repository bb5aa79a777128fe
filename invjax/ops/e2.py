"""E(2) group convolutions over steerable bases, group pooling and restriction (pure functions).

Regular feature maps are ``[B, H, W, C * |G|]`` with channel ``c * |G| + g``. ``Phi`` is the
transformed basis ``Phi[g, b] = phi_b(g^-1 p)`` of :func:`invjax.bases.e2.transformed_basis`.

Lifting (trivial -> regular), weight ``w[ci, co, b]``:
    ``K[p, ci, (co, g)] = sum_b w[ci, co, b] Phi[g, b, p]``, i.e. ``psi_g = L_g psi``.
Regular -> regular, weight ``w[ci, co, h, b]`` (a free band-limited filter per input group channel):
    ``K[p, (ci, h), (co, g)] = sum_b w[ci, co, g^-1 h, b] Phi[g, b, p]``,
    the discrete form of the G-conv of eq. (2): ``psi_g(p, h) = psi(g^-1 p, g^-1 h)``.
Regular -> trivial (invariant output fields), weight ``w[ci, co, b]``:
    ``K[p, (ci, h), co] = sum_b w[ci, co, b] Phi[h, b, p]``, the kernels with
    ``K(u p, u h) = K(p, h)``.
Each costs one einsum (plus a static gather of the weights) and then one convolution, so a layer
costs what a plain convolution with the expanded channel counts costs.

Shapes are annotated with jaxtyping (``n`` batch, ``g`` = ``|G|``, ``b`` basis functions,
``h2 w2`` the output grid: ``h`` at stride 1, ``ceil(h / 2)`` at stride 2); the tests check
them (tests/test_properties.py).

Equivariance: with :func:`invjax.ops.conv.conv2d`, ``conv(L_u x) = L_u conv(x)`` for every ``u``
that maps the pixel grid onto itself, to float32 rounding; for other angles the error is that of
resampling the input. ``precision``: the arithmetic of every product (:mod:`invjax.precision`).
``method``: how the convolution after the expansion is computed (:func:`invjax.ops.conv.conv2d`'s
methods; the layers choose it per layer with :func:`invjax.ops.lowering.choose_e2_lowering`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from invjax import precision as P
from invjax.groups import Group, restriction_indices
from invjax.ops.conv import conv2d

if TYPE_CHECKING:  # shape annotations (jaxtyping, a test dependency), checked in the tests
    from jax import Array
    from jaxtyping import Float


def expand_lift(
    weight: Float[Array, "ci co b"], phi: Float[np.ndarray, "g b k k"], precision: str | None = None
) -> Float[Array, "k k ci co*g"]:
    """``w [Ci, Co, B]``, ``Phi [G, B, K, K]`` -> HWIO kernel ``[K, K, Ci, Co * G]``."""
    ci, co, _ = weight.shape
    g, _, k, _ = phi.shape
    kern = P.einsum("iob,gbxy->xyiog", weight, jnp.asarray(phi, weight.dtype), precision)
    return kern.reshape(k, k, ci, co * g)


def expand_regular(
    weight: Float[Array, "ci co g b"],
    phi: Float[np.ndarray, "g b k k"],
    group: Group,
    precision: str | None = None,
) -> Float[Array, "k k ci*g co*g"]:
    """``w [Ci, Co, G, B]``, ``Phi [G, B, K, K]`` -> HWIO kernel ``[K, K, Ci * G, Co * G]``."""
    ci, co, g, _ = weight.shape
    k = phi.shape[-1]
    # perm[g, h] = index of g^-1 h: the input group channel h of output g reads w[..., g^-1 h, :].
    perm = np.asarray(group.mul_table[group.inverse])
    w = weight[:, :, perm, :]  # [Ci, Co, G(out g), G(in h), B]
    kern = P.einsum("iogpb,gbxy->xyipog", w, jnp.asarray(phi, weight.dtype), precision)
    return kern.reshape(k, k, ci * g, co * g)


def expand_to_trivial(
    weight: Float[Array, "ci co b"], phi: Float[np.ndarray, "g b k k"], precision: str | None = None
) -> Float[Array, "k k ci*g co"]:
    """``w [Ci, Co, B]``, ``Phi [G, B, K, K]`` -> HWIO kernel ``[K, K, Ci * G, Co]``."""
    ci, co, _ = weight.shape
    g, _, k, _ = phi.shape
    kern = P.einsum("iob,hbxy->xyiho", weight, jnp.asarray(phi, weight.dtype), precision)
    return kern.reshape(k, k, ci * g, co)


def lift_conv(
    x: Float[Array, "n h w ci"],
    weight: Float[Array, "ci co b"],
    phi: Float[np.ndarray, "g b k k"],
    stride: int = 1,
    downsample: str = "symmetric",
    precision: str | None = None,
    method: str = "direct",
) -> Float[Array, "n h2 w2 co*g"]:
    """Trivial ``[B, H, W, Ci]`` -> regular ``[B, H', W', Co * G]``."""
    kernel = expand_lift(weight, phi, precision)
    return conv2d(x, kernel, stride, downsample=downsample, precision=precision, method=method)


def group_conv(
    x: Float[Array, "n h w ci*g"],
    weight: Float[Array, "ci co g b"],
    phi: Float[np.ndarray, "g b k k"],
    group: Group,
    stride: int = 1,
    downsample: str = "symmetric",
    precision: str | None = None,
    method: str = "direct",
) -> Float[Array, "n h2 w2 co*g"]:
    """Regular ``[B, H, W, Ci * G]`` -> regular ``[B, H', W', Co * G]``."""
    kernel = expand_regular(weight, phi, group, precision)
    return conv2d(x, kernel, stride, downsample=downsample, precision=precision, method=method)


def trivial_conv(
    x: Float[Array, "n h w ci*g"],
    weight: Float[Array, "ci co b"],
    phi: Float[np.ndarray, "g b k k"],
    stride: int = 1,
    downsample: str = "symmetric",
    precision: str | None = None,
    method: str = "direct",
) -> Float[Array, "n h2 w2 co"]:
    """Regular ``[B, H, W, Ci * G]`` -> trivial (invariant fields) ``[B, H', W', Co]``."""
    kernel = expand_to_trivial(weight, phi, precision)
    return conv2d(x, kernel, stride, downsample=downsample, precision=precision, method=method)


def group_pool(
    x: Float[Array, "*batch c_g"], group_order: int, reduce: str = "max"
) -> Float[Array, "*batch c"]:
    """``[..., C * G] -> [..., C]``: max (or mean) over each field's ``|G|`` channels."""
    c = x.shape[-1] // group_order
    y = x.reshape(x.shape[:-1] + (c, group_order))
    if reduce == "max":
        return jnp.max(y, axis=-1)
    if reduce == "mean":
        return jnp.mean(y, axis=-1)
    raise ValueError(f"reduce={reduce!r} is invalid: choose 'max' or 'mean'")


def restriction_gather(group: Group, sub: Group, fields: int) -> np.ndarray:
    """Static channel indices turning ``fields`` regular ``group`` fields into ``sub`` fields."""
    idx = restriction_indices(group, sub)
    return (np.arange(fields)[:, None] * group.order + idx[None, :]).reshape(-1)


def restrict(x: Float[Array, "*batch c_g"], group: Group, sub: Group) -> Float[Array, "*batch c_g"]:
    """Regular ``group`` features ``[..., C * |G|]`` -> regular ``sub`` features ``[..., C [G:H] |H|]``.

    A relabelling of channels (no arithmetic), so it commutes exactly with every element of ``sub``.
    """
    fields = x.shape[-1] // group.order
    return jnp.take(x, jnp.asarray(restriction_gather(group, sub, fields)), axis=-1)


def field_moments(x, group_order: int, axes=(0, 1, 2)):
    """Mean and variance per field ``[C]`` over ``axes`` and the field's ``|G|`` channels."""
    c = x.shape[-1] // group_order
    y = x.reshape(x.shape[:-1] + (c, group_order))
    red = tuple(axes) + (y.ndim - 1,)
    mean = jnp.mean(y, axis=red)
    var = jnp.mean(jnp.square(y), axis=red) - jnp.square(mean)
    return mean, jnp.maximum(var, 0.0)


def field_batch_norm(x, mean, var, scale, bias, epsilon: float, group_order: int):
    """``(x - mean) / sqrt(var + epsilon) * scale + bias`` with the per-field ``[C]`` statistics
    and affine map repeated over each field's ``|G|`` channels: ``[..., C * |G|]``, computed as
    one affine map ``x * a + s`` (``a = scale / sqrt(var + epsilon)``, ``s = bias - mean a``)."""
    mul = scale * jax.lax.rsqrt(var + epsilon)
    add = bias - mean * mul
    return x * jnp.repeat(mul, group_order) + jnp.repeat(add, group_order)
