"""Scale-equivariant convolution, projection and batch statistics (pure functions, no Flax).

Layout: scale features are ``[B, H, W, S, C]`` (``S`` scales, smallest first; channel last).
A basis is ``[S, F, k, k]`` (:mod:`invjax.bases.scale`). Filters are expanded from learnable
coefficients by one einsum and applied by :func:`invjax.ops.conv.conv2d`: the lifting layer is one
convolution with ``S`` times the output channels; the scale-to-scale layer is either one grouped
convolution (``feature_group_count=S``) or ``S`` plain per-scale convolutions, each over the
full ``k x k`` grid or over only the taps its scale's basis can make non-zero; or both layers
multiply spectra, or gather the taps for one matrix product (``conv2d``'s ``'fft'`` and
``'im2col'`` methods), whichever the backend runs faster for the shapes at hand (``lowering``:
the policy of :mod:`invjax.ops.lowering`; :func:`scale_conv_lowering`, :func:`lift_lowering`).
All lowerings compute the same sums.

Equations (SESN, Sosnovik et al. 2020; DISCO, 2021; the paper's Section 3.2 uses these layers)
  Lifting (Z2 -> H):   ``y[s, o] = sum_i x[i] * kappa_s[i, o]``,
                        ``kappa_s[i, o] = sum_f w[i, o, f] psi_{s, f}``.
  Scale conv (H -> H): ``y[s, o] = sum_{d < scale_size} sum_i x[s + d, i] * kappa_s[i, o, d]``,
                        ``kappa_s[i, o, d] = sum_f w[i, o, d, f] psi_{s, f}``, with ``x[s'] = 0``
                        for ``s' >= S`` (as SESN: this truncation breaks equivariance at the
                        largest scales when ``scale_size > 1``).
  ``*`` is the (cross-)correlation of :func:`conv2d`. Downscaling the input by ``s_i`` shifts the
  outputs ``i`` steps towards the smaller scales (``y[s]`` of ``L_{1/s_i} x`` ~ ``L_{1/s_i}
  y[s + i]`` of ``x``), up to the basis' discretisation error.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from invjax import precision as P
from invjax.ops.conv import conv2d, fft_output, fft_precision, fft_spectra
from invjax.ops.lowering import (  # noqa: F401  (the policy's names, also reachable from here)
    AUTO_LOWERING,
    LOWERINGS,
    choose_lowering,
    mean_taps,
    resolve_lowering,
)

if TYPE_CHECKING:  # shape annotations (jaxtyping, a test dependency), checked in the tests
    from jax import Array
    from jaxtyping import Float


def scale_conv_lowering(
    lowering: str, x_shape, basis, stride: int = 1, precision: str | None = None, backend=None
):
    """``(lowering, support)`` of a scale convolution of ``basis [S, F, k, k]`` on an input of
    ``x_shape`` ``[B, H, W, S, Cin]``: :func:`invjax.ops.lowering.choose_lowering` on the taps the
    basis makes non-zero (:func:`kernel_support`), and that support where the chosen lowering
    applies filters on it (``'per_scale_compact'``, ``'im2col'``; stride 1, a concrete basis),
    else None. The training form (:func:`scale_conv`) and the inference form
    (:meth:`invjax.layers.scale.ScaleConv.inference_call`) both lower by it."""
    support = kernel_support(basis)
    chosen = choose_lowering(
        lowering,
        map_shape=tuple(x_shape[1:3]),
        kernel_size=basis.shape[-1],
        support=support,
        stride=stride,
        precision=precision,
        backend=backend,
    )
    if chosen not in ("per_scale_compact", "im2col") or stride != 1:
        support = None
    return chosen, support


def lift_lowering(
    lowering: str, x_shape, kernel_size: int, stride: int = 1, precision=None, backend=None
) -> str:
    """The lowering of a lifting convolution with ``k x k`` filters on an input of ``x_shape``
    ``[B, H, W, Cin]``: :func:`invjax.ops.lowering.choose_lowering` on the full kernel (the
    lift's one product uses every tap), its input channels and batch."""
    return choose_lowering(
        lowering,
        map_shape=tuple(x_shape[1:3]),
        kernel_size=kernel_size,
        stride=stride,
        precision=precision,
        backend=backend,
        lift_channels=x_shape[-1],
        batch=x_shape[0],
    )


def kernel_support(basis) -> tuple[tuple[int, int], ...] | None:
    """Per scale ``s``, ``(crop, dilation)``: every tap where some function of ``basis[s]`` is
    non-zero lies in the centred box ``[crop, k - crop)`` of the ``k x k`` grid, at row and
    column offsets from the box's corner that are multiples of ``dilation``. A filter expanded
    at scale ``s`` is then ``kern[crop:k-crop:dilation, crop:k-crop:dilation]`` applied with
    taps ``dilation`` pixels apart (:func:`invjax.ops.conv.conv2d`), the same sums without the
    zero products. ``basis``: ``[S, F, k, k]``, concrete (NumPy); None for a traced one (the
    taps are then unknown and every filter keeps the full grid).

    The shipped DISCO basis (k 5, effective 3; scales 1, sqrt 2, 2) gives ``((1, 1), (0, 1),
    (0, 2))``: 3x3 at scale 1 (its functions live on the effective grid), the full 5x5 at
    sqrt 2, a 3x3 dilated by 2 at scale 2 (the same functions on the dilated grid).
    """
    try:
        b = np.asarray(basis)
    except jax.errors.TracerArrayConversionError:
        return None
    k = b.shape[-1]
    out = []
    for s in range(b.shape[0]):
        rows, cols = np.nonzero(np.any(b[s] != 0, axis=0))
        if rows.size == 0:  # an all-zero filter: nothing to skip that matters
            out.append((0, 1))
            continue
        crop = int(min(rows.min(), cols.min(), k - 1 - rows.max(), k - 1 - cols.max()))
        offsets = np.concatenate([rows - crop, cols - crop]).tolist()
        out.append((crop, max(1, math.gcd(k - 2 * crop - 1, *offsets))))
    return tuple(out)


def _check_basis(basis, n_funcs: int, where: str):
    if basis.ndim != 4 or basis.shape[2] != basis.shape[3]:
        raise ValueError(f"{where}: basis shape {basis.shape} is invalid: expected [S, F, k, k]")
    if basis.shape[1] != n_funcs:
        raise ValueError(
            f"{where}: weight has {n_funcs} basis coefficients but the basis has "
            f"{basis.shape[1]} functions (basis shape {basis.shape})"
        )


def expand_lift_kernel(weight, basis, precision: str | None = None):
    """``[Cin, Cout, F]`` x ``[S, F, k, k]`` -> HWIO ``[k, k, Cin, S * Cout]`` (scale-major outputs)."""
    _check_basis(basis, weight.shape[-1], "expand_lift_kernel")
    S, _, k, _ = basis.shape
    cin, cout = weight.shape[:2]
    kern = P.einsum("iof,sfhw->hwiso", weight, basis.astype(weight.dtype), precision)
    return kern.reshape(k, k, cin, S * cout)


def scale_lift_conv(
    x: Float[Array, "n h w ci"],
    weight: Float[Array, "ci co f"],
    basis: Float[Array, "s f k k"],
    stride: int = 1,
    precision: str | None = None,
    lowering: str = "auto",
) -> Float[Array, "n h2 w2 s co"]:
    """Lifting scale convolution ``[B, H, W, Cin] -> [B, H', W', S, Cout]``.

    Args:
      x: ``[B, H, W, Cin]`` images or planar features.
      weight: ``[Cin, Cout, F]`` coefficients.
      basis: ``[S, F, k, k]``.
      stride: 1 or 2 (:func:`conv2d`'s grid-symmetric rule).
      precision: the arithmetic of the products (:mod:`invjax.precision`).
      lowering: ``'fft'`` or ``'im2col'`` (:func:`conv2d`'s methods; stride 1), any other of
        :data:`LOWERINGS` for the one direct :func:`conv2d`, or ``'auto'``
        (:func:`lift_lowering`).
    """
    if x.ndim != 4 or weight.ndim != 3 or x.shape[-1] != weight.shape[0]:
        raise ValueError(
            f"scale_lift_conv: x {x.shape} and weight {weight.shape} are incompatible: expected "
            "x [B, H, W, Cin] and weight [Cin, Cout, F]"
        )
    S, k = basis.shape[0], basis.shape[-1]
    try:
        lowering = lift_lowering(lowering, x.shape, k, stride, precision)
    except ValueError as e:
        raise ValueError(f"scale_lift_conv: {e}") from None
    kern = expand_lift_kernel(weight, basis, precision)
    return apply_lift_kernel(x, kern, S, stride, lowering, precision)


def apply_lift_kernel(x, kern, scales: int, stride: int, lowering: str, precision=None):
    """The convolution of :func:`scale_lift_conv` with its expanded kernel ``kern [k, k, Cin, S *
    Cout]`` (:func:`expand_lift_kernel`, or box-folded by
    :func:`invjax.ops.conv.inference_kernel`) and a resolved ``lowering`` (not ``'auto'``):
    ``[B, H, W, Cin] -> [B, H', W', S, Cout]``."""
    method = _method(lowering, stride, "scale_lift_conv")
    y = conv2d(x, kern, stride, precision=precision, method=method)
    return y.reshape(y.shape[:3] + (scales, kern.shape[-1] // scales))


def _method(lowering: str, stride: int, where: str) -> str:
    """:func:`conv2d`'s method for a resolved ``lowering``; one error for 'auto' or a stride
    that the FFT and im2col forms cannot take."""
    if lowering == "auto" or lowering not in LOWERINGS:
        raise ValueError(f"{where}: lowering={lowering!r} must be resolved: one of {LOWERINGS[1:]}")
    if lowering in ("fft", "im2col"):
        if stride != 1:
            raise ValueError(f"{where}: lowering={lowering!r} needs stride 1 (stride={stride})")
        return lowering
    return "direct"


def expand_scale_kernel(weight, basis, precision: str | None = None):
    """``[Cin, Cout, D, F]`` x ``[S, F, k, k]`` -> HWIO ``[k, k, D * Cin, S * Cout]``.

    Grouped layout for ``feature_group_count = S``: group ``s`` reads input channels
    ``(d, i)`` (``d``-major) and writes outputs ``s * Cout + o``.
    """
    _check_basis(basis, weight.shape[-1], "expand_scale_kernel")
    S, _, k, _ = basis.shape
    cin, cout, D = weight.shape[:3]
    kern = P.einsum("iodf,sfhw->hwdiso", weight, basis.astype(weight.dtype), precision)
    return kern.reshape(k, k, D * cin, S * cout)


def stack_scale_neighbours(x, scale_size: int):
    """``[B, H, W, S, C] -> [B, H, W, S * scale_size * C]``: for each output scale ``s`` the input
    scales ``s, ..., s + scale_size - 1`` (zeros past the largest), channel ``(s, d, c)``."""
    B, H, W, S, C = x.shape
    if scale_size == 1:
        return x.reshape(B, H, W, S * C)
    xp = jnp.pad(x, ((0, 0),) * 3 + ((0, scale_size - 1), (0, 0)))
    idx = jnp.arange(S)[:, None] + jnp.arange(scale_size)[None, :]  # [S, D]
    return xp[:, :, :, idx, :].reshape(B, H, W, S * scale_size * C)


def scale_conv(
    x, weight, basis, stride: int = 1, lowering: str = "auto", precision: str | None = None
):
    """Scale-to-scale convolution ``[B, H, W, S, Cin] -> [B, H', W', S, Cout]``.

    Output scale ``s`` mixes input scales ``s .. s + scale_size - 1`` with the filter expanded at
    scale ``s``. The filters of all scales come from one einsum; they are applied by

    - ``lowering='grouped'``: one grouped :func:`conv2d` (``feature_group_count=S``) over the
      stacked neighbouring scale slices (zeros past the largest scale);
    - ``lowering='per_scale'``: ``S`` plain :func:`conv2d` calls, output scale ``s`` reading the
      ``D_s = min(scale_size, S - s)`` existing input scales (``D_s * Cin -> Cout`` channels), so
      the zero slices are skipped rather than multiplied;
    - ``lowering='per_scale_compact'``: the same, each filter cropped (and dilated) to the taps
      its scale's basis can make non-zero (:func:`kernel_support`), so the zero taps are
      skipped too; stride 2 and a traced ``basis`` keep the full grid;
    - ``lowering='fft'``: per frequency, the spectra of the input scales times the filters'
      spectra (:func:`invjax.ops.conv.fft_spectra`), one inverse FFT per output (stride 1);
    - ``lowering='im2col'``: as ``'per_scale_compact'``, each per-scale convolution as one
      matrix product over its gathered taps (:func:`conv2d`'s ``'im2col'`` method, stride 1;
      'auto' never picks it here: the rows hold ``D_s * Cin`` times the taps);
    - ``lowering='auto'`` (default): per backend and shape, :func:`scale_conv_lowering`.

    All compute the same sums and agree to float32 rounding (tested, with gradients).

    Args:
      x: ``[B, H, W, S, Cin]``.
      weight: ``[Cin, Cout, scale_size, F]``.
      basis: ``[S, F, k, k]`` with the same ``S`` as ``x`` (NumPy, so that
        ``'per_scale_compact'`` can read its zero taps).
      stride: 1 or 2.
      lowering: one of :data:`LOWERINGS`.
      precision: the arithmetic of the products (:mod:`invjax.precision`).
    """
    if x.ndim != 5 or weight.ndim != 4 or x.shape[-1] != weight.shape[0]:
        raise ValueError(
            f"scale_conv: x {x.shape} and weight {weight.shape} are incompatible: expected "
            "x [B, H, W, S, Cin] and weight [Cin, Cout, scale_size, F]"
        )
    S = basis.shape[0]
    if x.shape[3] != S:
        raise ValueError(f"scale_conv: x has {x.shape[3]} scales but the basis has {S}")
    D = weight.shape[2]
    if D < 1:
        raise ValueError(f"scale_conv: scale_size={D} is invalid: it must be >= 1")
    try:
        lowering, support = scale_conv_lowering(lowering, x.shape, basis, stride, precision)
    except ValueError as e:
        raise ValueError(f"scale_conv: {e}") from None
    kern = expand_scale_kernel(weight, basis, precision)
    return apply_scale_kernel(x, kern, D, stride, lowering, precision, support)


def apply_scale_kernel(
    x,
    kern,
    scale_size: int,
    stride: int = 1,
    lowering: str = "grouped",
    precision=None,
    support: tuple[tuple[int, int], ...] | None = None,
):
    """The convolution of :func:`scale_conv` with its expanded kernel ``kern [k, k, D * Cin,
    S * Cout]`` (:func:`expand_scale_kernel`, or box-folded by
    :func:`invjax.ops.conv.inference_kernel`): ``[B, H, W, S, Cin] -> [B, H', W', S, Cout]``.
    ``lowering`` and ``support``: as :func:`scale_conv_lowering` gives them (``lowering``
    resolved, not ``'auto'``; ``support``: apply scale ``s``'s filter on those taps only, None:
    on the full grid)."""
    S, D, cin = x.shape[3], scale_size, x.shape[-1]
    cout = kern.shape[-1] // S
    method = _method(lowering, stride, "apply_scale_kernel")
    if support is not None and (stride != 1 or len(support) != S or lowering == "grouped"):
        raise ValueError(
            f"apply_scale_kernel: support={support} needs stride 1, a per-scale lowering and "
            f"one entry per scale (stride={stride}, lowering={lowering!r}, S={S})"
        )
    if lowering == "fft":
        return _scale_conv_fft(x, kern, D, precision)
    if lowering == "grouped":
        y = conv2d(stack_scale_neighbours(x, D), kern, stride, S, precision=precision)
        return y.reshape(y.shape[:3] + (S, cout))
    k = kern.shape[0]
    kern = kern.reshape(k, k, D, cin, S, cout)
    B, H, W = x.shape[:3]
    outs = []
    for s in range(S):
        d_s = min(D, S - s)
        xs = x[:, :, :, s : s + d_s].reshape(B, H, W, d_s * cin)  # channel (d, i), d-major
        crop, dil = (0, 1) if support is None else support[s]
        kern_s = kern[crop : k - crop : dil, crop : k - crop : dil, :d_s, :, s]
        kern_s = kern_s.reshape(kern_s.shape[:2] + (d_s * cin, cout))
        outs.append(conv2d(xs, kern_s, stride, precision=precision, dilation=dil, method=method))
    return jnp.stack(outs, axis=3)


def _scale_conv_fft(x, kern, scale_size: int, precision=None):
    """:func:`apply_scale_kernel` by FFT: ``Y_s(f) = sum_{d, i} X_{s + d, i}(f) K_{d, i, s}(f)``
    per frequency ``f`` (``X_{s'} = 0`` for ``s' >= S``), then one inverse FFT per output.
    ``x [B, H, W, S, Cin]``, ``kern [k, k, D * Cin, S * Cout]``. Each input scale is transformed
    once for all the output scales that read it (where :func:`conv2d`'s ``'fft'`` method per
    output scale would transform it ``D`` times); the products in :func:`conv2d`'s FFT
    arithmetic (:func:`invjax.ops.conv.fft_precision`)."""
    B, H, W, S, cin = x.shape
    D, k = scale_size, kern.shape[0]
    cout = kern.shape[-1] // S
    xf, kf, n = fft_spectra(x, kern.reshape(k, k, D, cin, S, cout))
    if D > 1:  # [B, f_h, f_w, S, D, Cin]: input scales s .. s + D - 1, zeros past the largest
        xf = jnp.pad(xf, ((0, 0),) * 3 + ((0, D - 1), (0, 0)))
        xf = xf[:, :, :, jnp.arange(S)[:, None] + jnp.arange(D)[None, :]]
    else:
        xf = xf[:, :, :, :, None]
    yf = jnp.einsum("bhwsdi,hwdiso->bhwso", xf, kf, precision=fft_precision(precision))
    return fft_output(yf, n, H, W)


def scale_max_projection(x):
    """``[B, H, W, S, C] -> [B, H, W, C]``: maximum over the scale axis (invariant to its shift)."""
    if x.ndim != 5:
        raise ValueError(f"scale_max_projection: x shape {x.shape} is invalid: expected 5D")
    return jnp.max(x, axis=3)


def scale_batch_stats(x):
    """Per-channel mean and (biased) variance over batch, space and scales of ``[B, H, W, S, C]``.

    Sharing the statistics of a channel across its scales keeps batch norm scale-equivariant: the
    normalisation is the same affine map at every scale, so it commutes with the scale shift.
    """
    mean = jnp.mean(x, axis=(0, 1, 2, 3))
    var = jnp.mean(jnp.square(x - mean), axis=(0, 1, 2, 3))
    return mean, var


def scale_batch_norm(x, mean, var, gamma, beta, epsilon: float = 1e-5):
    """``gamma * (x - mean) / sqrt(var + epsilon) + beta`` per channel (shapes ``[C]``)."""
    inv = gamma * jnp.reciprocal(jnp.sqrt(var + epsilon))
    return (x - mean) * inv + beta
