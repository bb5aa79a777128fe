"""How a scale convolution is lowered: one policy, chosen per layer when it is traced.

All lowerings compute the same sums (tested with gradients, and the scale-equivariance tests
pass under each); they differ in speed and memory only. :func:`invjax.ops.scale.scale_conv` and
:func:`invjax.ops.scale.scale_lift_conv` take one of :data:`LOWERINGS`:

``'grouped'``            one grouped :func:`invjax.ops.conv.conv2d` over the stacked scales
``'per_scale'``          one direct :func:`~invjax.ops.conv.conv2d` per output scale
``'per_scale_compact'``  the same on only the taps each scale's basis makes non-zero
                         (:func:`invjax.ops.scale.kernel_support`)
``'fft'``                products of spectra (``conv2d``'s ``'fft'`` method)
``'im2col'``             one matrix product over the gathered taps (its ``'im2col'`` method)
``'auto'``               :func:`choose_lowering`'s pick for the layer's shapes and backend

The constants below are the policy's thresholds; the measurements that set each of them, and the
commands that measure them, are in docs/benchmarks.md ("The lowering policy"). Each lowering
honours every precision it is given (:mod:`invjax.precision`) or refuses it with one error
(``'fft'`` takes :data:`invjax.ops.conv.FFT_PRECISIONS`); ``'auto'`` takes ``'fft'`` and
``'im2col'`` only at float32 precisions (:data:`AUTO_FAST_PRECISIONS`), where they were measured.
"""

from __future__ import annotations

import jax
import numpy as np

from invjax.ops.conv import (
    FFT_PRECISIONS,
    IM2COL_MAX_BYTES,
    WINOGRAD_POINTS,
    fft_precision,
)

LOWERINGS = ("auto", "grouped", "per_scale", "per_scale_compact", "fft", "im2col")
#: 'auto' on each backend where the shapes call for nothing else (TPU, unmeasured: 'grouped').
AUTO_LOWERING = {"cpu": "per_scale_compact", "gpu": "per_scale"}
#: The precisions at which 'auto' may take 'fft' or 'im2col' (float32 products on CPU).
AUTO_FAST_PRECISIONS = FFT_PRECISIONS
#: 'auto' on CPU takes 'fft' (or 'im2col' for a lift) for a stride-1 layer whose direct form
#: multiplies at least this many taps per output pixel and scale (:func:`mean_taps`) ...
FFT_MIN_TAPS = 40
#: ... and 'fft' only where the kernel spans at least this share of the map's smaller side.
FFT_MIN_SPAN_RATIO = 0.2
#: 'auto' takes 'im2col' for a lift whose patch rows hold at most this many values (``Cin k^2``)
#: and whose patches for the call's batch fit in :data:`invjax.ops.conv.IM2COL_MAX_BYTES`.
IM2COL_MAX_DEPTH = 256


def resolve_lowering(lowering: str, backend: str | None = None) -> str:
    """``lowering`` itself, or for ``'auto'`` the shape-blind choice for ``backend`` (default
    ``jax.default_backend()``; :data:`AUTO_LOWERING`, ``'grouped'`` elsewhere). A network chooses
    for all its scale layers with its ``scale_lowering`` field; with ``'auto'``,
    :func:`choose_lowering` then refines the choice per layer from its shapes."""
    if lowering not in LOWERINGS:
        raise ValueError(f"lowering={lowering!r} is unknown: choose one of {LOWERINGS}")
    if lowering == "auto":
        return AUTO_LOWERING.get(backend or jax.default_backend(), "grouped")
    return lowering


def mean_taps(kernel_size: int, support) -> float:
    """Taps per output pixel a direct per-scale convolution multiplies, averaged over scales:
    ``mean_s ceil((k - 2 crop_s) / dil_s)^2`` (:func:`invjax.ops.scale.kernel_support`; ``k^2``
    without one)."""
    if not support:
        return float(kernel_size**2)
    return sum(((kernel_size - 2 * c - 1) // d + 1) ** 2 for c, d in support) / len(support)


def lift_patch_bytes(map_shape, kernel_size: int, channels: int, batch=None) -> int:
    """Bytes of the float32 patches :func:`invjax.ops.conv.im2col_patches` gathers for a lift of
    ``channels`` input channels on ``map_shape`` maps: ``4 B H W k^2 Cin``, for ``batch`` images
    (one where the batch is not known when traced: an exported program's symbolic batch)."""
    b = batch if isinstance(batch, int | np.integer) else 1
    return 4 * b * map_shape[0] * map_shape[1] * kernel_size**2 * channels


def choose_lowering(
    lowering: str,
    *,
    map_shape: tuple[int, int],
    kernel_size: int,
    support=None,
    stride: int = 1,
    precision: str | None = None,
    backend: str | None = None,
    lift_channels: int | None = None,
    batch=None,
) -> str:
    """The lowering a scale convolution uses on ``map_shape = (H, W)`` maps.

    Args:
      lowering: one of :data:`LOWERINGS`; used as given unless it is ``'auto'`` (an explicit
        ``'fft'`` with a precision it cannot honour is one error, before any compute).
      map_shape: the input's ``(H, W)``.
      kernel_size: ``k`` of the ``k x k`` filters.
      support: :func:`invjax.ops.scale.kernel_support` of the basis (None: every tap).
      stride: 1 or 2 (``'fft'`` and ``'im2col'`` need 1).
      precision: the :mod:`invjax.precision` mode of the products.
      backend: default ``jax.default_backend()``.
      lift_channels: for a lifting convolution, its input channels (None: a scale-to-scale one).
      batch: images per call (None or symbolic: unknown, as in an exported program).

    ``'auto'`` on CPU, at stride 1, a precision in :data:`AUTO_FAST_PRECISIONS` and at least
    :data:`FFT_MIN_TAPS` taps per pixel (:func:`mean_taps`): ``'im2col'`` for a lift whose rows
    hold at most :data:`IM2COL_MAX_DEPTH` values and whose patches (:func:`lift_patch_bytes`)
    fit in :data:`~invjax.ops.conv.IM2COL_MAX_BYTES`; else ``'fft'`` where the kernel spans
    :data:`FFT_MIN_SPAN_RATIO` of the map; else :func:`resolve_lowering`'s choice.
    """
    base = resolve_lowering(lowering, backend)
    if lowering == "fft":
        fft_precision(precision)
    if lowering != "auto":
        return base
    backend = backend or jax.default_backend()
    if (
        backend != "cpu"
        or stride != 1
        or precision not in AUTO_FAST_PRECISIONS
        or mean_taps(kernel_size, support) < FFT_MIN_TAPS
    ):
        return base
    if lift_channels is not None and lift_channels * kernel_size**2 <= IM2COL_MAX_DEPTH:
        if lift_patch_bytes(map_shape, kernel_size, lift_channels, batch) <= IM2COL_MAX_BYTES:
            return "im2col"
    if kernel_size >= FFT_MIN_SPAN_RATIO * min(map_shape):
        return "fft"
    return base


#: How an E(2) convolution (:mod:`invjax.layers.e2`) computes its one convolution after the
#: kernel expansion: ``'auto'`` (:func:`choose_e2_lowering`) or one of
#: :data:`invjax.ops.conv.METHODS` (speed and memory only, the same sums).
E2_LOWERINGS = ("auto", "direct", "im2col", "winograd", "fft")
#: 'auto' on CPU takes 'winograd' for a stride-1 E(2) convolution with a kernel of at least
#: this size (and points in :data:`invjax.ops.conv.WINOGRAD_POINTS`) ...
WINOGRAD_MIN_KERNEL = 5
#: ... at least this many input channels (``Ci |G|``) ...
WINOGRAD_MIN_CHANNELS = 256
#: ... on maps whose smaller side has at least this many pixels (below, the per-point products
#: are too short to run at the direct convolution's rate:
#: docs/benchmarks.md, "The E(2) lowerings"). Past WINOGRAD_MAX_BYTES of tiles: chunks.
WINOGRAD_MIN_SIDE = 16
#: Below it, on maps of at least this many pixels a side, 'auto' takes 'im2col' (one matrix
#: product over the gathered taps, in chunks past IM2COL_MAX_BYTES) for a kernel of at least
#: WINOGRAD_MIN_KERNEL taps on at least this many input channels: there its one long product
#: runs faster than the direct convolution and the short per-point products of Winograd.
E2_IM2COL_MIN_SIDE = 8
E2_IM2COL_MIN_CHANNELS = 512
#: At stride 2 (the symmetric or the strided rule), 'auto' takes 'im2col' for such a kernel on
#: at least this many input channels on maps of at least E2_STRIDED_IM2COL_MIN_SIDE pixels a
#: side: the patches are sampled at the output's stride (``k^2 / 4`` times the input, the
#: box-folded ``(k+1)^2 / 4`` on even maps), and their one product runs faster than XLA's strided
#: convolution.
E2_STRIDED_IM2COL_MIN_CHANNELS = 256
E2_STRIDED_IM2COL_MIN_SIDE = 16


def choose_e2_lowering(
    lowering: str,
    *,
    in_channels: int,
    map_shape: tuple[int, int],
    kernel_size: int,
    stride: int = 1,
    dilation: int = 1,
    precision: str | None = None,
    backend: str | None = None,
    lift: bool = False,
    batch=None,
    downsample: str = "symmetric",
) -> str:
    """The :func:`invjax.ops.conv.conv2d` method an E(2) convolution uses.

    Args:
      lowering: one of :data:`E2_LOWERINGS`; used as given unless it is ``'auto'`` (an explicit
        ``'fft'`` or ``'winograd'`` with a precision it cannot honour is one error, before any
        compute; ``conv2d`` refuses a stride or dilation the method cannot take).
      in_channels: the convolution's input channels (``Ci`` for a lift, ``Ci |G|`` otherwise).
      map_shape: the input's ``(H, W)``.
      kernel_size: ``k`` of the ``k x k`` filters.
      stride, dilation, precision: the layer's.
      backend: default ``jax.default_backend()``.
      lift: whether the layer is a lifting convolution (trivial input fields).
      batch: images per call (None or symbolic: unknown).
      downsample: the layer's stride-2 rule (:data:`invjax.ops.conv.DOWNSAMPLE_RULES`).

    ``'auto'`` is ``'direct'`` except on CPU, with no dilation and at a precision in
    :data:`AUTO_FAST_PRECISIONS`. At stride 2 (the ``"symmetric"`` or ``"strided"`` rule; a
    ``"maxpool"`` layer stays direct) it is ``'im2col'`` for a kernel of at least
    :data:`WINOGRAD_MIN_KERNEL` taps a side on at least :data:`E2_STRIDED_IM2COL_MIN_CHANNELS`
    input channels and maps of at least :data:`E2_STRIDED_IM2COL_MIN_SIDE` pixels a side. At
    stride 1 it is ``'im2col'`` for a lift whose rows hold at most
    :data:`IM2COL_MAX_DEPTH` values and whose patches fit :data:`IM2COL_MAX_BYTES`, and
    ``'winograd'`` for a kernel of at least :data:`WINOGRAD_MIN_KERNEL` taps a side on at least
    :data:`WINOGRAD_MIN_CHANNELS` input channels and maps of at least :data:`WINOGRAD_MIN_SIDE`
    pixels a side, and ``'im2col'`` for such a kernel on at least
    :data:`E2_IM2COL_MIN_CHANNELS` channels on smaller maps of at least
    :data:`E2_IM2COL_MIN_SIDE` pixels a side; both whatever the batch (tiles past
    :data:`~invjax.ops.conv.WINOGRAD_MAX_BYTES`, patches past :data:`IM2COL_MAX_BYTES` are
    computed in chunks of images), so the training form and an exported inference form of any
    batch choose alike.
    """
    if lowering not in E2_LOWERINGS:
        raise ValueError(f"lowering={lowering!r} is unknown: choose one of {E2_LOWERINGS}")
    if lowering in ("fft", "winograd"):
        fft_precision(precision, lowering)
    if lowering != "auto":
        return lowering
    backend = backend or jax.default_backend()
    if backend != "cpu" or dilation != 1 or precision not in AUTO_FAST_PRECISIONS:
        return "direct"
    if stride != 1:
        strided_gemm = (
            downsample != "maxpool"
            and kernel_size >= WINOGRAD_MIN_KERNEL
            and in_channels >= E2_STRIDED_IM2COL_MIN_CHANNELS
            and min(map_shape) >= E2_STRIDED_IM2COL_MIN_SIDE
        )
        return "im2col" if strided_gemm else "direct"
    if lift and in_channels * kernel_size**2 <= IM2COL_MAX_DEPTH:
        if lift_patch_bytes(map_shape, kernel_size, in_channels, batch) <= IM2COL_MAX_BYTES:
            return "im2col"
    if (
        kernel_size >= WINOGRAD_MIN_KERNEL
        and kernel_size in WINOGRAD_POINTS
        and in_channels >= WINOGRAD_MIN_CHANNELS
        and min(map_shape) >= WINOGRAD_MIN_SIDE
    ):
        return "winograd"
    if (
        kernel_size >= WINOGRAD_MIN_KERNEL
        and in_channels >= E2_IM2COL_MIN_CHANNELS
        and min(map_shape) >= E2_IM2COL_MIN_SIDE
    ):
        return "im2col"
    return "direct"
