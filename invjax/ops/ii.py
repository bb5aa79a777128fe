"""Invariant Integration (II) reductions: pure, jit-able functions (paper Sections 3.4 and 4.1-4.2).

All functions take a feature map ``x`` of shape ``[B, H, W, C]`` (NHWC, after group pooling or scale
max projection) and return invariant features ``[B, C_out]``. Each II flavour comes as a pair:

* a *reference* that does exactly what the equation says (convolve with every transformed kernel,
  then average; or multiply shifted samples, then sum), and
* a *fast* closed form that the layers use, tested to agree with the reference to 1e-5 relative.

Translation range
  The translation average runs over the ``U x V = H x W`` output positions ``t`` of a ``SAME``
  convolution (:func:`invjax.ops.conv.conv2d`, stride 1): the input is zero outside the image and
  every ``t`` of the grid counts once. With the image centred (plane coordinates of
  :mod:`invjax.groups`), the grid and the zero padding are mapped onto themselves by every
  90-degree rotation and flip of a square input, which is why E(2)-II is exact for those elements.

Convolution convention
  ``conv2d`` is a cross-correlation: ``(x * K)(t) = sum_d x(t + d) K(d)`` with taps
  ``d in [-p, p]^2``, ``p = (k - 1) // 2``. The paper writes ``sum_y x(y) psi(y - t)``, which is
  the same with ``d = y - t``.

Fast closed form of the weighted sum (WS), equations (4), (5), (7)
  ``A = 1/(|G| U V) sum_g sum_t sum_y x(y) (L_g psi)(y - t) = sum_y x(y) M(y)`` with the weight map
  ``M(y) = 1/(U V) sum_t Kbar(y - t)`` and the group-symmetrised kernel
  ``Kbar = 1/|G| sum_g L_g psi``. ``M`` is the transposed convolution of a ones image with ``Kbar``
  (:func:`ws_weight_map`). Because ``M(y) = 1/(UV) sum_d Kbar(d) [y - d in grid]``, the same sum
  factorises further into ``A = 1/(UV) sum_d Kbar(d) S_d`` where ``S_d`` is the sum of ``x`` over
  the window of pixels ``y`` with ``y - d`` in the grid (:func:`window_sums`): ``k^2`` box sums and
  one ``[B, k^2 C_in] x [k^2 C_in, C_out]`` matmul. :func:`ws_integrate` uses this form (cheapest);
  :func:`ws_integrate_weight_map` is the literal ``sum_y x(y) M(y)`` and is kept to show, and test,
  that the forms agree. ``Kbar`` is one small einsum of ``psi`` with a constant ``[k^2, k^2]``
  operator (:func:`group_average_operator`), the average over ``g`` of the linear maps
  ``psi -> L_g psi`` built with :func:`invjax.groups.transform` (exact index permutations for
  multiples of 90 degrees, bilinear interpolation with zeros outside the ``k x k`` support otherwise).

Scale-II (Section 4.2)
  The input first passes ``max(x, epsilon)`` (a ReLU clamped to ``epsilon > 0``, default
  :data:`DEFAULT_EPSILON` ``= 1e-6``), so every divisor is positive and logs are finite. Pixels
  outside the image count as ``epsilon`` too (the zero padding is clamped like the image).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from invjax import groups as G
from invjax import precision as P
from invjax.ops.conv import conv2d

DEFAULT_EPSILON = 1e-6
"""Clamp of the Scale-II inputs: small enough not to matter next to post-ReLU activations of order
one (the border of a 28x28 image adds ``~1e-4`` relative at most), large enough that
``log(epsilon)`` and ``epsilon ** order`` stay far from float32 underflow in the log-space path."""


# --------------------------------------------------------------------------- validation


def _check_features(x, what: str = "x"):
    if getattr(x, "ndim", None) != 4:
        raise ValueError(
            f"{what} has shape {getattr(x, 'shape', None)}: II layers take a feature map "
            "[B, H, W, C] (after group pooling / scale max projection)"
        )


def _check_group(group) -> None:
    # The ops compute with Group objects (names are parsed once, where a layer is built).
    if group is not None and not isinstance(group, G.Group):
        raise ValueError(
            f"group={group!r} is invalid: give an invjax.groups.Group (e.g. "
            "invjax.groups.parse_group('D4')) or None for translation-II"
        )


def _check_kernel(kernel, x=None):
    if kernel.ndim != 4 or kernel.shape[0] != kernel.shape[1] or kernel.shape[0] % 2 != 1:
        raise ValueError(
            f"II kernel shape {kernel.shape} is invalid: it must be [k, k, C_in, C_out] with k odd"
        )
    if x is not None and kernel.shape[2] != x.shape[-1]:
        raise ValueError(
            f"II kernel has C_in={kernel.shape[2]} but the input has {x.shape[-1]} channels"
        )


def check_epsilon(epsilon: float) -> float:
    if not (isinstance(epsilon, int | float) and epsilon > 0):
        raise ValueError(f"epsilon={epsilon!r} is invalid: the Scale-II clamp must be a float > 0")
    return float(epsilon)


def clamp(x, epsilon: float = DEFAULT_EPSILON):
    """``max(ReLU(x), epsilon) = max(x, epsilon)``: the Scale-II input non-linearity (Section 4.3)."""
    return jnp.maximum(x, jnp.asarray(epsilon, x.dtype))


# --------------------------------------------------------------------------- group kernels


def transformed_kernels(kernel, group: G.Group | None, interpolation: str = "bilinear"):
    """``[|G|, k, k, I, O]``: ``L_g psi`` for every ``g`` (index order of :class:`Group`).

    Uses :func:`invjax.groups.transform` on the two spatial axes. ``group=None`` means the trivial
    group (translation-II).
    """
    _check_group(group)
    if group is None:
        return kernel[None]
    return jnp.stack(
        [G.transform(kernel, group, g, interpolation, axes=(0, 1)) for g in range(group.order)]
    )


@functools.lru_cache(maxsize=64)
def group_average_operator(group: G.Group | None, kernel_size: int, interpolation: str):
    """``[k^2, k^2]`` float32 NumPy: ``vec(Kbar) = P @ vec(psi)``, ``P = 1/|G| sum_g T_g``.

    ``T_g`` is the linear map ``psi -> L_g psi`` of :func:`transformed_kernels`, obtained by
    transforming the ``k^2`` one-hot kernels (transforms are linear in the kernel values).
    """
    k = kernel_size
    if group is None:
        return np.eye(k * k, dtype=np.float32)
    # A constant even when first asked for inside jax.jit: evaluate the transforms eagerly.
    with jax.ensure_compile_time_eval():
        eye = jnp.eye(k * k, dtype=jnp.float32).reshape(k, k, k * k)  # [k, k, basis]
        stack = [
            np.asarray(G.transform(eye, group, g, interpolation, axes=(0, 1)), np.float64)
            for g in range(group.order)
        ]
    # stack[g][a, b, j] = (L_g e_j)[a, b]  ->  P[(a, b), j]
    return np.mean(stack, axis=0).reshape(k * k, k * k).astype(np.float32)


def symmetrized_kernel(
    kernel, group: G.Group | None, interpolation: str = "bilinear", precision: str | None = None
):
    """``Kbar = 1/|G| sum_g L_g psi``, ``[k, k, I, O]``, via :func:`group_average_operator`."""
    _check_kernel(kernel)
    _check_group(group)
    k = kernel.shape[0]
    if group is None or group.order == 1:
        return kernel
    op = jnp.asarray(group_average_operator(group, k, interpolation), kernel.dtype)
    flat = kernel.reshape(k * k, -1)
    return P.einsum("pq,qn->pn", op, flat, precision).reshape(kernel.shape)


# --------------------------------------------------------------------------- WS: eq. (4), (5)


def window_sums(x, kernel_size: int):
    """``S[b, a, c, i] = sum_{y: y - d in grid} x[b, y, i]`` for taps ``d = (a - p, c - p)``.

    Shapes: ``[B, H, W, C] -> [B, k, k, C]``. Row windows first, then column windows (separable).
    """
    _check_features(x)
    p = (kernel_size - 1) // 2
    h, w = x.shape[1], x.shape[2]

    def spans(n):
        # a correlation tap d reads pixel t + d; t runs over [0, n), so pixels [d, n + d) clipped.
        return [(max(0, d), min(n, n + d)) for d in range(-p, p + 1)]

    rows = jnp.stack([x[:, lo:hi].sum(axis=1) for lo, hi in spans(h)], axis=1)  # [B, k, W, C]
    return jnp.stack([rows[:, :, lo:hi].sum(axis=2) for lo, hi in spans(w)], axis=2)


def ws_weight_map(kernel_bar, h: int, w: int, precision: str | None = None):
    """The weight map ``M(y) = 1/(UV) sum_t Kbar(y - t)``: ``[h, w, I, O]``.

    Computed as the transposed convolution of a ones image with ``Kbar`` (a correlation with the
    spatially flipped kernel), one output channel per ``(I, O)`` pair.
    """
    _check_kernel(kernel_bar)
    k, _, i, o = kernel_bar.shape
    ones = jnp.ones((1, h, w, 1), kernel_bar.dtype)
    flipped = kernel_bar[::-1, ::-1].reshape(k, k, 1, i * o)
    return conv2d(ones, flipped, precision=precision)[0].reshape(h, w, i, o) / (h * w)


def ws_integrate_reference(
    x, kernel, group=None, interpolation: str = "bilinear", precision: str | None = None
):
    """Equations (4)/(5) as written: convolve with every ``L_g psi``, average over ``g`` and ``t``.

    Args:
      x: ``[B, H, W, C_in]``.
      kernel: ``psi``, ``[k, k, C_in, C_out]``.
      group: :class:`invjax.groups.Group`, ``None`` for translation-II.
    Returns:
      ``[B, C_out]``.
    """
    _check_features(x)
    _check_kernel(kernel, x)
    kernels = transformed_kernels(kernel, group, interpolation)
    total = 0.0
    for kg in kernels:  # a Python loop: the literal sum over g, one convolution each
        total = total + conv2d(x, kg, precision=precision).mean(axis=(1, 2))
    return total / kernels.shape[0]


def ws_integrate(
    x, kernel, group=None, interpolation: str = "bilinear", precision: str | None = None
):
    """Fast equations (4)/(5): ``1/(UV) sum_d Kbar(d) S_d`` (module docstring). ``[B, C_out]``."""
    _check_features(x)
    _check_kernel(kernel, x)
    k = kernel.shape[0]
    kbar = symmetrized_kernel(kernel, group, interpolation, precision)
    s = window_sums(x, k)
    h, w = x.shape[1], x.shape[2]
    return P.einsum("bacn,acno->bo", s, kbar.astype(x.dtype), precision) / (h * w)


def ws_integrate_weight_map(
    x, kernel, group=None, interpolation: str = "bilinear", precision: str | None = None
):
    """Fast equations (4)/(5) in the literal weight-map form ``sum_y x(y) M(y)``. ``[B, C_out]``."""
    _check_features(x)
    _check_kernel(kernel, x)
    kbar = symmetrized_kernel(kernel, group, interpolation, precision)
    m = ws_weight_map(kbar.astype(x.dtype), x.shape[1], x.shape[2], precision)
    return P.einsum("bhwn,hwno->bo", x, m, precision)


# --------------------------------------------------------------------------- Scale-II WS: eq. (7)


def scale_ws_reference(x, kernel, epsilon: float = DEFAULT_EPSILON, precision=None):
    """Equation (7) as written: translation-II (conv, then mean over ``t``) / mean of the input.

    The divisor is the mean over all positions *and all input channels* (each output channel of
    the WS reads every input channel, so all of them set its scale, Section 4.3).
    ``[B, H, W, C_in] -> [B, C_out]``.
    """
    epsilon = check_epsilon(epsilon)
    _check_features(x)
    _check_kernel(kernel, x)
    xc = clamp(x, epsilon)
    num = conv2d(xc, kernel, precision=precision).mean(axis=(1, 2))
    return num / xc.mean(axis=(1, 2, 3))[:, None]


def scale_ws_integrate(x, kernel, epsilon: float = DEFAULT_EPSILON, precision=None):
    """Fast equation (7): the translation-II numerator in window-sum form. ``[B, C_out]``."""
    epsilon = check_epsilon(epsilon)
    _check_features(x)
    _check_kernel(kernel, x)
    xc = clamp(x, epsilon)
    return ws_integrate(xc, kernel, precision=precision) / xc.mean(axis=(1, 2, 3))[:, None]


# --------------------------------------------------------------------------- Scale-II monomials


@dataclasses.dataclass(frozen=True)
class MonomialPairs:
    """Static description of ``P`` monomial pairs (dividend ``m_1`` / divisor ``m_2``), eq. (6).

    Attributes (NumPy):
      channels: ``[P, 2, M]`` int, the input channel of each factor.
      offsets: ``[P, 2, M, 2]`` int, ``(row, col)`` correlation offset of each factor in
        ``[-p, p]``: the factor reads ``x(t + offset)``, i.e. the paper's ``d = -offset``.
      exponents: ``[P, 2, M]`` float, the divisor's already normalised so both have equal order.
      kernel_size: ``k`` of the neighbourhood.
    """

    channels: np.ndarray
    offsets: np.ndarray
    exponents: np.ndarray
    kernel_size: int

    @property
    def n_pairs(self) -> int:
        return int(self.channels.shape[0])

    @property
    def orders(self) -> np.ndarray:
        """``[P, 2]``: polynomial order ``sum_i b_i`` of dividend and divisor (equal)."""
        return self.exponents.sum(axis=-1)

    def exponent_kernel(self, n_channels: int) -> np.ndarray:
        """``[k, k, C, 2P]`` float32: the log-monomials as one sparse correlation kernel.

        ``log m(t) = sum_i b_i log x(t + o_i, c_i)``: output channel ``2j + s`` (pair ``j``,
        side ``s``) holds ``b_i`` at tap ``o_i + p`` of channel ``c_i`` (repeats add up).
        """
        k, p = self.kernel_size, (self.kernel_size - 1) // 2
        e = np.zeros((k, k, n_channels, 2 * self.n_pairs), np.float64)
        for j in range(self.n_pairs):
            for s in range(2):
                for c, (dr, dc), b in zip(
                    self.channels[j, s], self.offsets[j, s], self.exponents[j, s]
                ):
                    e[dr + p, dc + p, c, 2 * j + s] += b
        return e.astype(np.float32)


_MAX_REDRAWS = 100


def _monomial_key(channels, offsets, exponents) -> tuple:
    """Translation-free canonical form of one monomial: factors at the same ``(channel, offset)``
    merged (exponents add), offsets relative to the lexicographically smallest one, sorted."""
    merged: dict[tuple[int, int, int], float] = {}
    for c, (dr, dc), b in zip(channels, offsets, exponents):
        key = (int(c), int(dr), int(dc))
        merged[key] = merged.get(key, 0.0) + float(b)
    r0, c0 = min((dr, dc) for _, dr, dc in merged)
    return tuple(sorted((c, dr - r0, dc - c0, round(b, 9)) for (c, dr, dc), b in merged.items()))


def _degenerate_pair(channels, offsets, exponents) -> bool:
    """``True`` if the divisor is the dividend translated: away from the border their translation
    sums are equal and the ratio is the constant 1 (e.g. any single-factor pair on one channel)."""
    return _monomial_key(channels[0], offsets[0], exponents[0]) == _monomial_key(
        channels[1], offsets[1], exponents[1]
    )


MONOMIAL_PLACEMENTS = ("neighbourhood", "pointwise")
MONOMIAL_DIVISORS = ("random", "power")
"""How a pair's divisor ``m_2`` is drawn: ``'random'`` like the dividend (channels, offsets and
exponents, then normalised to the dividend's order), or ``'power'``: ``x_c(t)^K``, the dividend's
first channel at one position raised to the dividend's order ``K`` (eq. 6's exponent
normalisation applied to a one-factor divisor). On one channel Hoelder's inequality bounds the
``'power'`` ratio, ``sum_t prod_i x(t + o_i)^b_i <= sum_t x(t)^K`` (up to the border), so
``A <= 1``; its divisor is positive wherever the map is, the largest support a monomial of order
``K`` can have."""


@functools.lru_cache(maxsize=64)
def draw_monomial_pairs(
    n_pairs: int,
    n_channels: int,
    n_factors: int = 3,
    kernel_size: int = 3,
    max_exponent: int = 2,
    seed: int = 0,
    placement: str = "neighbourhood",
    divisor: str = "random",
) -> MonomialPairs:
    """Draw ``n_pairs`` random monomial pairs of ``n_factors`` factors each (Section 4.3).

    Channels uniform in ``[0, n_channels)``, offsets uniform in the ``k x k`` neighbourhood,
    integer exponents uniform in ``[1, max_exponent]``; the divisor's exponents are then scaled by
    ``sum b_1 / sum b_2`` so both monomials have the same order. A degenerate pair (the divisor
    equal to the dividend up to a translation, whose ratio is the constant 1 away from the
    border) is redrawn; ``ValueError`` if the configuration allows nothing else. Deterministic in
    ``seed``.

    Defaults (3 factors, exponents 1..2, 3 x 3) are our choice: the paper gives none. A factor
    at offset ``o`` reads ``x(t + o)`` whose offset does not shrink with the image, so a monomial
    pair is only approximately scale-invariant, the better the smoother ``x`` is at the scale of
    one pixel; higher orders amplify the mismatch (measured in tests/test_ii_layers.py).

    ``placement='pointwise'``: every offset 0, i.e. the factors are channels at one position,
    ``m(t) = prod_i x_{c_i}(t)^{b_i}`` (a ``1 x 1`` exponent kernel). Then eq. (6) is exactly
    scale-invariant on the continuous plane: for ``x_s(t) = x(t / s)`` each translation integral
    is ``s^2`` times that of ``x`` (substitute ``u = t / s``), so the ratio does not change;
    with offsets ``d_i`` the substitution turns them into ``d_i / s`` instead, a different
    monomial. On the pixel grid only the resampling of ``x`` (and the border) remains. With one
    channel and equal orders every pointwise pair is the constant 1 (``ValueError``).

    ``divisor``: see :data:`MONOMIAL_DIVISORS` (``'power'`` keeps the random draw of the dividend
    and replaces the divisor by ``x_c(t)^K``, stored as ``n_factors`` factors ``x_c(t)^(K / M)``).
    """
    if placement not in MONOMIAL_PLACEMENTS:
        raise ValueError(f"placement={placement!r} is unknown: choose one of {MONOMIAL_PLACEMENTS}")
    if divisor not in MONOMIAL_DIVISORS:
        raise ValueError(f"divisor={divisor!r} is unknown: choose one of {MONOMIAL_DIVISORS}")
    for name, v, lo in (
        ("n_pairs", n_pairs, 1),
        ("n_channels", n_channels, 1),
        ("n_factors", n_factors, 1),
        ("max_exponent", max_exponent, 1),
    ):
        if int(v) != v or v < lo:
            raise ValueError(f"{name}={v!r} is invalid: it must be an integer >= {lo}")
    if kernel_size < 1 or kernel_size % 2 != 1:
        raise ValueError(f"kernel_size={kernel_size!r} is invalid: it must be odd and >= 1")
    rng = np.random.default_rng(seed)
    if placement == "pointwise":
        kernel_size = 1
    p = (kernel_size - 1) // 2

    def draw(n):
        ch = rng.integers(0, n_channels, size=(n, 2, n_factors))
        off = rng.integers(-p, p + 1, size=(n, 2, n_factors, 2))
        ex = rng.integers(1, max_exponent + 1, size=(n, 2, n_factors)).astype(np.float64)
        ex[:, 1] *= ex[:, 0].sum(-1, keepdims=True) / ex[:, 1].sum(-1, keepdims=True)
        if divisor == "power":  # x_c(t)^K: the dividend's first channel, offset 0, order K
            ch[:, 1] = ch[:, 0, :1]
            off[:, 1] = 0
            ex[:, 1] = ex[:, 0].sum(-1, keepdims=True) / n_factors
        return ch, off, ex

    channels, offsets, exponents = draw(n_pairs)
    # Redraw degenerate pairs (divisor = dividend up to a translation: a constant feature) from
    # the same generator, so draws without any are unchanged.
    for j in range(n_pairs):
        for _ in range(_MAX_REDRAWS):
            if not _degenerate_pair(channels[j], offsets[j], exponents[j]):
                break
            (channels[j], offsets[j], exponents[j]) = (a[0] for a in draw(1))
        else:
            raise ValueError(
                f"n_channels={n_channels}, n_factors={n_factors}, kernel_size={kernel_size}, "
                f"max_exponent={max_exponent}, placement={placement!r} leave only degenerate "
                "monomial pairs (divisor equal "
                "to the dividend up to a translation, a constant ratio): allow more channels, "
                "factors or a larger neighbourhood"
            )
    return MonomialPairs(channels, offsets, exponents, int(kernel_size))


def scale_monomial_reference(x, pairs: MonomialPairs, epsilon: float = DEFAULT_EPSILON):
    """Equation (6) as written: ``sum_t prod_i x(t - d_1i)^b_1i / sum_t prod_i x(t - d_2i)^b_2i``.

    Python loops over pairs and factors; the products are formed in the input dtype.
    ``[B, H, W, C] -> [B, P]``.
    """
    epsilon = check_epsilon(epsilon)
    _check_features(x)
    p = (pairs.kernel_size - 1) // 2
    h, w = x.shape[1], x.shape[2]
    xp = clamp(jnp.pad(x, ((0, 0), (p, p), (p, p), (0, 0))), epsilon)
    out = []
    for j in range(pairs.n_pairs):
        sums = []
        for s in range(2):
            prod = 1.0
            for c, (dr, dc), b in zip(
                pairs.channels[j, s], pairs.offsets[j, s], pairs.exponents[j, s]
            ):
                prod = prod * xp[:, p + dr : p + dr + h, p + dc : p + dc + w, c] ** b
            sums.append(prod.sum(axis=(1, 2)))
        out.append(sums[0] / sums[1])
    return jnp.stack(out, axis=-1)


def scale_monomial_log_integrate(
    x, pairs: MonomialPairs, epsilon: float = DEFAULT_EPSILON, precision: str | None = None
):
    """Fast equation (6) in log space: ``log A = LSE_t log m_1(t) - LSE_t log m_2(t)``. ``[B, P]``.

    ``log m(t)`` for all monomials is one correlation of ``log max(x, eps)`` with the sparse
    exponent kernel of :meth:`MonomialPairs.exponent_kernel`. Outside the image counts as
    ``epsilon``: the log map is padded with ``log eps`` by ``p`` pixels and only the central
    ``H x W`` outputs are kept, so the zero padding of ``conv2d`` is never read. Working on
    ``log x`` itself (not shifted) keeps the float32 rounding of the large terms small; the
    log-sum-exp never overflows or underflows, unlike the products of the reference.
    """
    epsilon = check_epsilon(epsilon)
    _check_features(x)
    return monomial_log_ratios(x, pairs.exponent_kernel(x.shape[-1]), epsilon, precision)


def monomial_log_ratios(x, exponents, epsilon: float = DEFAULT_EPSILON, precision=None):
    """:func:`scale_monomial_log_integrate` for an exponent kernel ``[k, k, C, 2P]`` (columns
    ``2j``, ``2j + 1``: dividend and divisor of pair ``j``, e.g. only the unpruned pairs of
    :meth:`MonomialPairs.exponent_kernel`). ``[B, H, W, C] -> [B, P]``."""
    p = (exponents.shape[0] - 1) // 2
    h, w = x.shape[1], x.shape[2]
    logx = jnp.log(clamp(x, epsilon))
    logx = jnp.pad(logx, ((0, 0), (p, p), (p, p), (0, 0)), constant_values=float(np.log(epsilon)))
    e = jnp.asarray(exponents, x.dtype)
    logm = conv2d(logx, e, precision=precision)[:, p : p + h, p : p + w]  # [B, H, W, 2P]
    lse = jax.nn.logsumexp(logm, axis=(1, 2)).reshape(x.shape[0], e.shape[-1] // 2, 2)
    return lse[..., 0] - lse[..., 1]


def channel_monomial_log_ratios(
    x, exponents, epsilon: float = DEFAULT_EPSILON, precision: str | None = None
):
    """Eq. (6) on every channel's map separately, in log space: ``[B, H, W, C] -> [B, C, P]``.

    ``exponents``: ``[k, k, 1, 2P]``, the exponent kernel of ``P`` one-channel pairs
    (:meth:`MonomialPairs.exponent_kernel` with ``n_channels=1``). Entry ``[b, c, j]`` is
    ``log (sum_t m_1j(x_c)(t) / sum_t m_2j(x_c)(t))``: eq. (6) as written, a monomial of one map
    ``x`` with offsets ``d_i`` and no channel index, applied to channel ``c``'s map. The channels
    move into the batch and :func:`monomial_log_ratios` runs once on ``[B C, H, W, 1]``.
    """
    _check_features(x)
    if exponents.ndim != 4 or exponents.shape[2] != 1 or exponents.shape[-1] % 2:
        raise ValueError(
            f"exponents have shape {exponents.shape}: expected one-channel pairs [k, k, 1, 2P]"
        )
    b, h, w, c = x.shape
    flat = jnp.moveaxis(x, -1, 1).reshape(b * c, h, w, 1)
    return monomial_log_ratios(flat, exponents, epsilon, precision).reshape(b, c, -1)


def scale_monomial_channel_reference(x, pairs: MonomialPairs, epsilon: float = DEFAULT_EPSILON):
    """:func:`channel_monomial_log_ratios` as written: :func:`scale_monomial_reference` (the
    products, then the sums, then the ratio) on each channel's map. ``[B, C, P]``, the ratio
    ``A`` (not its log)."""
    if np.any(pairs.channels != 0):
        raise ValueError("per-channel monomials are one-channel pairs: draw them with n_channels=1")
    _check_features(x)
    return jnp.stack(
        [scale_monomial_reference(x[..., c : c + 1], pairs, epsilon) for c in range(x.shape[-1])],
        axis=1,
    )


def scale_monomial_integrate(
    x, pairs: MonomialPairs, epsilon: float = DEFAULT_EPSILON, precision: str | None = None
):
    """Fast equation (6): ``exp`` of :func:`scale_monomial_log_integrate`. ``[B, P]``."""
    return jnp.exp(scale_monomial_log_integrate(x, pairs, epsilon, precision))


MONOMIAL_OUTPUTS = ("ratio", "log")
"""What a monomial II layer outputs: eq. (6)'s ratio ``A``, or ``log A``.

``log A`` is exactly invariant where ``A`` is (pointwise pairs; a function of an invariant is
invariant), and with offsets its change per pair is ``A``'s relative change (first order); the
paper's Delta, normalised by ``||log A||`` (small: many pairs have ``A`` near 1), reads worse
than for ``A`` (``tests/test_ii_layers.py``: 0.017 / 0.139 against 1.1e-3 / 2.1e-3 on two
photos, still below average pooling's 0.227). It is what a network should read.

The ratios of order-``n`` monomials of clamped ReLU outputs spread over many decades across
images: the study's Scaled-MNIST network (then without upsampling, pairs layout) on 64
scaled digits at initialisation, inference mode, spans a median 8.1 decades per pair (largest
value 3e25), and every unit of the dense layer reading them is dominated by one image (its
largest standardised value over the batch is the median 7.9 = sqrt(63), one outlier in 64).
Trained on ratios (Adam, 200 steps, N_t = 100) the network learns to ignore them: the test
logits' spread over images falls from 1.5e5 (step 40) to 1e-3 (step 160), one class is predicted.
Measured with the study itself (scaled digits, N_t = 100, seed 0, DISCO / Hermite basis): 89.42% /
89.97% test error with ``A`` (chance), 78.83% / 81.06% with ``log A``.
"""


def check_monomial_output(output: str) -> str:
    if output not in MONOMIAL_OUTPUTS:
        raise ValueError(
            f"monomial output={output!r} is unknown: choose one of {MONOMIAL_OUTPUTS} "
            "(eq. 6's ratio, or its log)"
        )
    return output


# --------------------------------------------------------------------------- pooling baselines


def average_pool(x):
    """Global average pooling (translation-II of order 1 with a one-tap kernel): ``[B, C]``."""
    _check_features(x)
    return x.mean(axis=(1, 2))


def mixed_pool(x, max_window: int = 7, avg_window: int = 2, avg_stride: int = 4):
    """DISCO's "mixed pooling" before its batch norm (ISosnovik/disco, its MNIST models), on a max-projected map.

    ``ReLU -> MaxPool(max_window, stride 1, no padding) -> AvgPool(avg_window, stride avg_stride,
    no padding)``; on the 14 x 14 maps of the Scaled-MNIST networks this leaves 2 x 2 per channel.
    ``[B, H, W, C] -> [B, H', W', C]`` with ``H' = (H - max_window + 1 - avg_window) // avg_stride
    + 1``.
    """
    _check_features(x)
    h, w = x.shape[1], x.shape[2]
    if min(h, w) < max_window + avg_window - 1:
        raise ValueError(
            f"mixed pooling needs H, W >= max_window + avg_window - 1 = "
            f"{max_window + avg_window - 1}; got a {h}x{w} map"
        )
    y = jax.nn.relu(x)
    y = lax.reduce_window(
        y, -jnp.inf, lax.max, (1, max_window, max_window, 1), (1, 1, 1, 1), "VALID"
    )
    y = lax.reduce_window(
        y, 0.0, lax.add, (1, avg_window, avg_window, 1), (1, avg_stride, avg_stride, 1), "VALID"
    )
    return y / (avg_window * avg_window)
