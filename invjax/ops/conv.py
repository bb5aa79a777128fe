"""Plain 2D convolution with a downsampling rule that keeps the pixel grid symmetric.

:func:`conv2d` is the one entry point of invjax's convolutions: every convolution of its layers
and networks (the standard WRN's, E(2), scale, II) calls it, so its validation, its precision
(:mod:`invjax.precision`) and the stride rule below hold for all of them. It computes each
convolution by one of :data:`METHODS`: ``'direct'`` (XLA's convolution; every stride, grouping
and downsampling rule), ``'im2col'`` (one matrix product over the gathered taps; an ungrouped
correlation at stride 1 or 2, every downsampling rule), or, for a stride-1 ungrouped ``'SAME'``
correlation, ``'fft'`` (products of spectra) or ``'winograd'`` (minimal filtering,
:mod:`invjax.ops.winograd`); all compute the same sums (tested with gradients). What holds
beside it: the scale convolution's FFT form
(:func:`invjax.ops.scale.apply_scale_kernel`) transforms each input scale once for all output
scales with the helpers below (:func:`fft_spectra`, :func:`fft_output`, at :func:`fft_precision`)
instead of calling :func:`conv2d` per output scale; and the trainer's smoke-test model
(:class:`invjax.models.simple.SimpleCNN`, no grid claim) runs Flax's ``nn.Conv`` through
:func:`invjax.precision.conv`.

Precision: ``'direct'`` and ``'im2col'`` compute in every mode of :mod:`invjax.precision` (the
emulations round inputs and filters elementwise; a gathered patch holds the input's values).
``'fft'`` multiplies spectra, which no rounding of inputs and filters reproduces: it computes in
float32 (complex64) for :data:`FFT_PRECISIONS` (``'default'`` in the backend's fast float32) and
refuses ``'bf16'`` and the ``@tf32`` / ``@bf16`` emulations with one error.

Memory: ``'im2col'``'s patches are ``k^2`` times its input (``k^2 / 4`` at stride 2); one product
takes at most :data:`IM2COL_MAX_BYTES` of them, a larger batch runs in chunks of images (a batch
size known when traced; an exported program's symbolic batch runs as one product).

Stride rule (exactness of 90-degree rotations and flips under stride 2)
  A stride-2 convolution keeps the input samples ``0, 2, 4, ...``. On an *odd* grid of size ``H``
  these are symmetric about the centre ``(H-1)/2``, so a plain stride-2 convolution with an odd
  kernel and padding ``(k-1)/2`` commutes with every symmetry of the square. On an *even* grid
  they are not (``-15.5 ... 14.5`` for ``H = 32``). There we fold a 2x2 box filter into the
  kernel: the ``k x k`` kernel becomes ``(k+1) x (k+1)`` and the output sample ``i`` sits at
  input position ``2i + 0.5``, which is symmetric (``-15 ... 15``). This equals a stride-1
  convolution followed by 2x2 average pooling, at the cost of one strided convolution with a
  kernel one tap wider. Outputs have ``ceil(H / 2)`` rows either way.

Downsampling rules (``downsample``; a per-family setting of the networks)
  ``"symmetric"`` the rule above (default; E(2) networks, and wherever a guarantee needs it).
  ``"strided"``   the plain strided convolution, samples ``0, 2, 4, ...`` (the WRN paper's and
                  e2cnn's own): not symmetric on even grids, so 90-degree exactness is lost there.
  ``"maxpool"``   a stride-1 convolution followed by 2x2 max pooling (DISCO's WRN). The 2x2 blocks
                  of an even grid map onto each other under the square's symmetries, so this rule
                  is grid-symmetric too (it costs a full-resolution convolution).
  On odd grids all three are the plain strided convolution (already symmetric).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from invjax import precision as precision_lib
from invjax.ops import winograd
from invjax.ops.winograd import (  # noqa: F401  (re-exported: conv2d's methods in one place)
    WINOGRAD_MAX_BYTES,
    WINOGRAD_POINTS,
    WINOGRAD_TILE,
    winograd_chunk,
    winograd_matrices,
    winograd_tiles,
)

DIMENSION_NUMBERS = ("NHWC", "HWIO", "NHWC")
DOWNSAMPLE_RULES = ("symmetric", "strided", "maxpool")
#: How :func:`conv2d` computes a convolution (module docstring).
METHODS = ("direct", "im2col", "fft", "winograd")
#: The precisions the ``'fft'`` method honours (None: JAX's default, as :func:`conv2d`'s).
FFT_PRECISIONS = (None, "default", "highest", "exact_fast")
#: The most bytes of gathered patches an ``'im2col'`` convolution holds (1 GiB): one product
#: where the batch's patches fit, else chunks of images whose patches take a quarter of it (a
#: gradient holds the forward's, the backward's and its transpose's chunk and the remainder's at
#: once). The Scaled-MNIST lift (1 channel, 15 x 15 taps on 56 x 56) gathers 2.8 MB per image,
#: 361 MB at batch 128: one product up to batch 380, chunks of 95 images beyond.
IM2COL_MAX_BYTES = 1 << 30


def check_downsample(downsample: str) -> None:
    if downsample not in DOWNSAMPLE_RULES:
        raise ValueError(f"downsample={downsample!r} is unknown: choose one of {DOWNSAMPLE_RULES}")


def max_pool2(x, axes=(1, 2)):
    """2x2 max pooling with stride 2 over ``axes`` (even sizes): ``[..., H, W, ...]`` halved."""
    dims = [1] * x.ndim
    for a in axes:
        dims[a] = 2
    return lax.reduce_window(x, -jnp.inf, lax.max, tuple(dims), tuple(dims), "VALID")


def fold_box(kernel):
    """``[k, k, I, O] -> [k+1, k+1, I, O]``: the kernel convolved with a 2x2 box of weight 1/4."""
    p = jnp.pad(kernel, ((1, 1), (1, 1), (0, 0), (0, 0)))
    return 0.25 * (p[1:, 1:] + p[:-1, 1:] + p[1:, :-1] + p[:-1, :-1])


def folds_box(input_shape, stride: int, downsample: str) -> bool:
    """Whether :func:`conv2d` folds the 2x2 box into the kernel on a map of ``input_shape``
    (``[B, H, W, ...]``): stride 2, the ``"symmetric"`` rule and an even grid."""
    h, w = input_shape[1], input_shape[2]
    return stride == 2 and downsample == "symmetric" and (h % 2 == 0 or w % 2 == 0)


def inference_kernel(kernel, input_shape, stride: int, downsample: str = "symmetric"):
    """The kernel :func:`conv2d` applies to a map of ``input_shape``: ``kernel`` with the 2x2 box
    folded in where :func:`folds_box` (``[k+1, k+1, I, O]``), else ``kernel``. Passing the result
    to :func:`conv2d` computes the same convolution without folding at every call."""
    return fold_box(kernel) if folds_box(input_shape, stride, downsample) else kernel


def conv2d(
    x,
    kernel,
    stride: int = 1,
    feature_group_count: int = 1,
    downsample: str = "symmetric",
    precision: str | None = None,
    dilation: int = 1,
    method: str = "direct",
):
    """Grid-symmetric convolution of NHWC ``x`` with an HWIO ``kernel`` of odd size, computed by
    ``method`` (module docstring).

    Args:
      x: ``[B, H, W, I * groups]``.
      kernel: ``[k, k, I, O]``, ``k`` odd; or even where :func:`folds_box` holds: then it is
        already box-folded (:func:`inference_kernel`) and is applied as it is.
      stride: 1 (``SAME`` output ``H x W``) or 2 (output ``ceil(H/2) x ceil(W/2)``, see module doc).
      feature_group_count: as in ``lax.conv_general_dilated``.
      downsample: the stride-2 rule on even grids, one of :data:`DOWNSAMPLE_RULES`.
      precision: the arithmetic of the products (:mod:`invjax.precision`; None: JAX's default).
      dilation: stride 1 only: the taps sit ``dilation`` pixels apart (``rhs_dilation``), so an
        odd ``k``-kernel spans ``dilation (k - 1) + 1`` pixels, centred as the undilated kernel
        of that span (a sparse kernel applied without its zero taps, e.g.
        :func:`invjax.ops.scale.kernel_support`).
      method: one of :data:`METHODS`; ``'im2col'``, ``'fft'`` and ``'winograd'`` take one
        group, ``'fft'`` and ``'winograd'`` also only stride 1, no dilation and
        :data:`FFT_PRECISIONS` (``'winograd'`` only the kernel sizes of
        :data:`WINOGRAD_POINTS`).
    Returns:
      ``[B, H', W', O]``.
    """
    k = kernel.shape[0]
    if stride not in (1, 2):
        raise ValueError(f"stride={stride} is invalid: invjax convolutions take stride 1 or 2")
    check_downsample(downsample)
    if not isinstance(dilation, int) or dilation < 1 or (dilation > 1 and stride != 1):
        raise ValueError(f"dilation={dilation!r} is invalid: an integer >= 1, and 1 with stride 2")
    if method != "direct":
        check_method(method, stride, feature_group_count, dilation, precision)
    folded = k % 2 == 0 and folds_box(x.shape, stride, downsample)
    if kernel.shape[0] != kernel.shape[1] or (k % 2 != 1 and not folded):
        raise ValueError(
            f"kernel size {kernel.shape[:2]} is invalid for method={method!r}: it must be square "
            "and odd (even only when box-folded by inference_kernel for a stride-2 symmetric "
            "convolution)"
        )
    if method == "winograd":
        return _winograd_correlation(x, kernel, precision)
    if method == "fft":
        return _fft_correlation(x, kernel, precision)
    p = dilation * ((k - 1) // 2)  # a folded (k+1)-kernel keeps the padding of its k-kernel
    h, w = x.shape[1], x.shape[2]
    pool = False
    if stride == 2 and (h % 2 == 0 or w % 2 == 0):
        if h % 2 != w % 2:
            raise ValueError(
                f"stride 2 on a {h}x{w} grid is not supported: height and width must both be "
                "even or both be odd"
            )
        if downsample == "symmetric" and not folded:
            kernel = fold_box(kernel)
        elif downsample == "maxpool":
            stride, pool = 1, True
    if method == "im2col":
        y = _im2col_product(x, kernel, precision, dilation, stride, p)
    else:
        # Every mode rounds or splits input and filter elementwise, which commutes with the
        # grid permutations of 90-degree rotations and flips (invjax.precision,
        # docs/precision.md).
        y = precision_lib.conv(
            x,
            kernel,
            precision,
            window_strides=(stride, stride),
            padding=((p, p), (p, p)),
            rhs_dilation=(dilation, dilation),
            dimension_numbers=DIMENSION_NUMBERS,
            feature_group_count=feature_group_count,
        )
    return max_pool2(y) if pool else y


def im2col_patches(x, kernel_size: int, dilation: int = 1, stride: int = 1, padding=None):
    """``[B, H, W, I] -> [B, H', W', k, k, I]``: for every output pixel of a ``'SAME'``-padded
    correlation the input values under its taps, ``patches[b, i, j, u, v] = x[b, s i + d u - p,
    s j + d v - p]`` (zero outside the image), with stride ``s``, taps ``d = dilation`` apart and
    ``p = padding`` (default ``d (k - 1) // 2``), so ``H' = (H + 2p - d (k - 1) - 1) // s + 1``:
    ``H`` for stride 1 and odd ``k``; ``ceil(H / 2)`` for stride 2 with an odd ``k``, or with a
    box-folded even ``k`` (:func:`fold_box`) and its odd kernel's padding. Copies only (exact);
    ``k^2 / s^2`` times the input's memory. One gather from the padded image by precomputed flat
    indices: on CPU about 3x faster than stacking the ``k^2`` shifted slices."""
    if padding is None:
        if kernel_size % 2 != 1:
            raise ValueError(
                f"im2col_patches: kernel_size={kernel_size} is invalid without a padding: it "
                "must be odd"
            )
        padding = dilation * ((kernel_size - 1) // 2)
    b, h, w, c = x.shape
    p, span = padding, dilation * (kernel_size - 1) + 1
    hp, wp = h + 2 * p, w + 2 * p
    h_out, w_out = (hp - span) // stride + 1, (wp - span) // stride + 1
    flat = jnp.pad(x, ((0, 0), (p, p), (p, p), (0, 0))).reshape(b, hp * wp, c)
    taps = dilation * np.arange(kernel_size)
    offsets = (taps[:, None] * wp + taps[None, :]).reshape(-1)  # tap (u, v), row-major
    rows, cols = stride * np.arange(h_out), stride * np.arange(w_out)
    pixels = (rows[:, None] * wp + cols[None, :]).reshape(-1)
    index = (pixels[:, None] + offsets[None, :]).reshape(-1).astype(np.int32)
    gathered = jnp.take(flat, index, axis=1)  # every index is in bounds
    return gathered.reshape(b, h_out, w_out, kernel_size, kernel_size, c)


def check_method(method: str, stride: int, groups: int, dilation: int, precision) -> None:
    """One clear error where ``method`` cannot compute the convolution asked for."""
    if method not in METHODS:
        raise ValueError(f"conv2d: method={method!r} is unknown: choose one of {METHODS}")
    spectral = method in ("fft", "winograd")
    if (spectral and stride != 1) or groups != 1 or (spectral and dilation != 1):
        raise ValueError(
            f"conv2d: method={method!r} needs "
            f"{'stride 1, dilation 1 and ' if spectral else ''}feature_group_count 1 "
            f"(stride={stride}, feature_group_count={groups}, dilation={dilation}); "
            "method='direct' takes them"
        )
    if spectral:
        fft_precision(precision, method)


def _im2col_rows(x, kernel, precision, dilation: int, stride: int = 1, padding=None):
    """``[b, H, W, I] -> [b, H', W', O]`` as one product ``[b H' W', k^2 I] x [k^2 I, O]``
    (:func:`im2col_patches`); as a 2-D product because XLA:CPU runs it ~1.3x faster than the same
    contraction over 6-D arrays."""
    k, c, o = kernel.shape[0], kernel.shape[2], kernel.shape[-1]
    patches = im2col_patches(x, k, dilation, stride, padding)
    b, h_out, w_out = patches.shape[:3]
    rows = patches.reshape(b * h_out * w_out, k * k * c)
    y = precision_lib.einsum("nt,to->no", rows, kernel.reshape(k * k * c, o), precision)
    return y.reshape(b, h_out, w_out, o)


def im2col_chunk(input_shape, kernel_size: int, max_bytes: int = IM2COL_MAX_BYTES, stride: int = 1):
    """The images per ``'im2col'`` product for an input of ``input_shape`` ``[B, H, W, I]``:
    ``B`` where its float32 patches (``4 B H' W' k^2 I`` bytes, ``H' = ceil(H / stride)``) fit
    in ``max_bytes`` or ``B`` is not known when traced (a symbolic batch), else the most images
    whose patches fit in a quarter of ``max_bytes`` (at least one; :data:`IM2COL_MAX_BYTES` says
    why)."""
    b, h, w, c = input_shape
    per_image = 4 * -(-h // stride) * -(-w // stride) * kernel_size**2 * c
    if not isinstance(b, int | np.integer) or b * per_image <= max_bytes:
        return b
    return max(1, max_bytes // (4 * per_image))


def _im2col_product(
    x, kernel, precision, dilation: int, stride: int = 1, padding=None, max_bytes=IM2COL_MAX_BYTES
):
    """:func:`conv2d`'s ``'im2col'`` method: chunks of :func:`im2col_chunk` images
    (:func:`_chunked`)."""
    chunk = im2col_chunk(x.shape, kernel.shape[0], max_bytes, stride)
    rows = functools.partial(
        _im2col_rows,
        kernel=kernel,
        precision=precision,
        dilation=dilation,
        stride=stride,
        padding=padding,
    )
    return _chunked(rows, x, chunk)


def _chunked(rows_fn, x, chunk):
    """``rows_fn`` over the images of ``x`` in chunks of ``chunk``, one after the other
    (``lax.map``; each chunk's gathered rows are computed again in the backward pass, so a
    gradient holds one chunk's at a time), the remainder as one more call; one call where
    ``chunk`` is the whole batch."""
    b = x.shape[0]
    if chunk == b:
        return rows_fn(x)
    n = b // chunk
    rows = jax.checkpoint(rows_fn)
    full = jax.lax.map(rows, x[: n * chunk].reshape((n, chunk) + x.shape[1:]))
    y = full.reshape((n * chunk,) + full.shape[2:])
    if n * chunk == b:
        return y
    return jnp.concatenate([y, rows(x[n * chunk :])], axis=0)


def conv2d_im2col(x, kernel, precision: str | None = None, dilation: int = 1):
    """Stride-1 ``'SAME'`` correlation of NHWC ``x [B, H, W, I]`` with an HWIO ``kernel [k, k, I,
    O]`` (odd ``k``) as one matrix product: ``y[b, i, j, o] = sum_{u, v, c} patches[b, i, j, u,
    v, c] kernel[u, v, c, o]`` (:func:`im2col_patches`): :func:`conv2d` with ``method='im2col'``.
    The same sums as the direct method, in one GEMM of ``[B H W, k^2 I] x [k^2 I, O]`` (in chunks
    of images past :data:`IM2COL_MAX_BYTES` of patches) instead of XLA's direct convolution,
    which on CPU is slow for few input channels and a large kernel (the lift of
    :func:`invjax.ops.scale.scale_lift_conv`, 1 channel and 15 x 15 taps:
    :func:`invjax.ops.lowering.choose_lowering`)."""
    return conv2d(x, kernel, precision=precision, dilation=dilation, method="im2col")


def fft_length(size: int, kernel_size: int) -> int:
    """The FFT length along an axis of ``size`` pixels for a ``'SAME'`` correlation with an odd
    ``kernel_size``: the smallest ``n >= max(size + (kernel_size - 1) // 2, kernel_size)`` with
    no prime factor above 7.

    Why ``size + p`` (``p = (k - 1) // 2``) and not the ``size + k - 1`` of a full linear
    convolution: a circular correlation of length ``n`` reads input index ``(i + t - p) mod n``
    for output ``i < size`` and tap ``t < k``; indices below 0 wrap to ``>= n - p >= size`` and
    indices ``size .. size + p - 1`` stay below ``n``, so every wrapped read lands on the zero
    padding and the kept outputs equal the zero-padded correlation.
    """
    n = max(size + (kernel_size - 1) // 2, kernel_size)
    while True:
        m = n
        for f in (2, 3, 5, 7):
            while m % f == 0:
                m //= f
        if m == 1:
            return n
        n += 1


def circular_kernel(kernel, n_h: int, n_w: int):
    """``[k, k, ...] -> [n_h, n_w, ...]``: the correlation taps of ``kernel`` as the kernel of a
    circular convolution of lengths ``n_h x n_w``: tap ``t`` (centre ``p = (k - 1) // 2``) sits at
    ``(p - t) mod n``, so ``y[i] = sum_j x[j] c[(i - j) mod n] = sum_t x[i + t - p] kernel[t]``."""
    k = kernel.shape[0]
    p = (k - 1) // 2
    pad = ((0, n_h - k), (0, n_w - k)) + ((0, 0),) * (kernel.ndim - 2)
    return jnp.roll(jnp.pad(kernel[::-1, ::-1], pad), (-p, -p), axis=(0, 1))


def fft_spectra(x, kernel):
    """The real FFTs over space of an NHWC input ``x [B, H, W, ...]`` and of its ``[k, k, ...]``
    correlation kernel (:func:`circular_kernel`), both at :func:`fft_length`: ``(X [B, n_h,
    n_w // 2 + 1, ...], K [n_h, n_w // 2 + 1, ...], (n_h, n_w))``. Multiplying them per
    frequency and :func:`fft_output` give the ``'SAME'`` correlation of :func:`conv2d`."""
    k = kernel.shape[0]
    n = (fft_length(x.shape[1], k), fft_length(x.shape[2], k))
    xf = jnp.fft.rfft2(x, s=n, axes=(1, 2))
    kf = jnp.fft.rfft2(circular_kernel(kernel, *n), axes=(0, 1))
    return xf, kf, n


def fft_output(yf, n, h: int, w: int):
    """``[B, n_h, n_w // 2 + 1, ...]`` spectrum -> the real ``[B, h, w, ...]`` it holds (the
    kept corner of the circular result, see :func:`fft_length`)."""
    return jnp.fft.irfft2(yf, s=n, axes=(1, 2))[:, :h, :w]


def fft_precision(name: str | None, method: str = "fft"):
    """The ``lax.Precision`` of the complex products of the ``'fft'`` method (and of the
    transformed tiles' products of the ``'winograd'`` one: ``method``) in invjax precision
    ``name``: float32 (``HIGHEST``) for ``'highest'`` and ``'exact_fast'`` (exact products are
    exact in every fast arithmetic), the backend's fast float32 (``DEFAULT``) for ``'default'``,
    JAX's own for None; one clear error for the modes it cannot honour (module docstring)."""
    if name not in FFT_PRECISIONS:
        precision_lib.check(name)
        what, label = ("spectra in complex64", "FFT")
        if method == "winograd":
            what, label = ("transformed tiles in float32", "Winograd")
        raise ValueError(
            f"precision={name!r} is invalid for the {label} lowering: it multiplies {what}, "
            "which no rounding of inputs and filters to a fast format reproduces; "
            f"it computes in {list(FFT_PRECISIONS)} (the direct and im2col lowerings compute "
            "in every precision)"
        )
    return {"default": lax.Precision.DEFAULT, None: None}.get(name, lax.Precision.HIGHEST)


def _fft_correlation(x, kernel, precision):
    """:func:`conv2d`'s ``'fft'`` method: ``y = F^-1(sum_i F(x)_i F(c)_io)``."""
    xf, kf, n = fft_spectra(x, kernel)
    yf = jnp.einsum("bhwi,hwio->bhwo", xf, kf, precision=fft_precision(precision))
    return fft_output(yf, n, x.shape[1], x.shape[2])


def conv2d_fft(x, kernel, precision: str | None = None):
    """Stride-1 ``'SAME'`` correlation of NHWC ``x [B, H, W, I]`` with an HWIO ``kernel [k, k, I,
    O]`` (odd ``k``) through real FFTs: ``y = F^-1(sum_i F(x)_i F(c)_io)``, ``c`` the
    :func:`circular_kernel`; :func:`conv2d` with ``method='fft'``. The same sums as the direct
    method (stride 1, no dilation) up to float32 rounding (relative errors about 1e-6, tested
    with gradients), in ``O(n^2 log n)`` per plane instead of ``k^2`` products per pixel: faster
    on CPU where the kernel is large against the map
    (:func:`invjax.ops.lowering.choose_lowering`). ``precision``: one of
    :data:`FFT_PRECISIONS` (:func:`fft_precision`)."""
    return conv2d(x, kernel, precision=precision, method="fft")


def _winograd_correlation(x, kernel, precision, max_bytes: int = WINOGRAD_MAX_BYTES):
    """:func:`conv2d`'s ``'winograd'`` method (:func:`invjax.ops.winograd.correlation`), in chunks
    of :func:`~invjax.ops.winograd.winograd_chunk` images as ``'im2col'`` runs its
    (:func:`_chunked`)."""
    k = kernel.shape[0]
    winograd_matrices(k)  # one clear error for a kernel size without points
    chunk = winograd_chunk(x.shape, k, max_bytes)
    lax_precision = fft_precision(precision, "winograd")
    return _chunked(lambda z: winograd.correlation(z, kernel, lax_precision), x, chunk)
