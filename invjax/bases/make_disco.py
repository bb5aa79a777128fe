"""Generate a DISCO scale basis (Sosnovik, Moskalev & Smeulders, BMVC 2021) as package data.

    python -m invjax.bases.make_disco --kernel-size 15 --effective-size 7 --num-scales 4 \\
        --ratio 1.2599210498948732 --out invjax/bases/data
    python -m invjax.bases.make_disco --kernel-size 5 --effective-size 3 --num-scales 3 \\
        --ratio 1.4142135623730951 --out invjax/bases/data

The peers' files (DISCO's own objective, used by the type-B ``disco_b`` kinds)::

    python -m invjax.bases.make_disco --objective disco --kernel-size 15 --effective-size 7 \\
        --num-scales 4 --ratio 1.2599210498948732 --images 32 --out invjax/bases/data
    python -m invjax.bases.make_disco --objective disco --kernel-size 5 --effective-size 3 \\
        --num-scales 3 --ratio 1.4142135623730951 --images 32 --out invjax/bases/data

Objective (DISCO, Section 3)
  Scales ``s_i = ratio**i`` (values within 1e-3 of an integer are snapped to it). At an integer
  scale ``d`` the basis is fixed: the ``effective_size x effective_size`` delta basis dilated by
  ``d`` (scale 1: the plain delta basis), centred in ``k x k``. At the in-between scales the full
  ``k x k`` kernels ``psi_{j,f}`` are free and chosen to minimise, over random images ``x``,

      J = sum_{i < j} mean_{x, p, f} | L_{1/r}[x * psi_{j,f}](p) - ([L_{1/r} x] * psi_{i,f})(p) |^2,
      r = s_j / s_i,

  "convolve at the larger scale, then bicubic-downscale by r" against "bicubic-downscale by r,
  then convolve at the smaller scale", for every pair of scales (as DISCO does; the pairs with
  ``i = 0`` are "downscale then convolve with psi_1"). ``*`` is
  :func:`invjax.ops.conv.conv2d`, ``L_{1/r}`` is :func:`invjax.groups.scale` (bicubic about the
  image centre). ``p`` runs over a central box where neither side sees the frame:
  ``|p| <= N/(2r) - k//2 - 3``. Images: uniform white noise ``N x N`` (DISCO: random images).

  ``J`` is quadratic in the free kernels and separates over the functions ``f``, which differ
  only in the fixed kernels. So it is solved exactly by least squares: per ratio ``r`` the Gram
  matrices of the features ``P = L_{1/r}[x * delta_t]`` and ``Q = [L_{1/r} x] * delta_t`` over
  all taps ``t`` (built with one conv2d against the ``k^2`` one-hot kernels) give the normal
  equations ``H_uu v = -H_uc c`` (float64, scipy), one right-hand side per function. For
  comparison a short Adam run (optax, zero initialisation, fresh noise each step) minimises the
  same ``J`` by stochastic gradients. Both are evaluated on the same held-out noise images; the
  lower ``J`` is shipped.

Post-processing (as DISCO's basis "A")
  The raw basis (delta-parametrised) is mixed by the ``F x F`` matrix of Hermite functions
  sampled on the ``effective_size`` grid (:func:`invjax.bases.scale.hermite_grid`, width
  ``base_sigma``): at scale 1 the function ``f`` becomes exactly that Hermite function on the
  centred effective grid. Every function is then divided by its norm at scale 1. Mixing the
  functions linearly keeps the equivariance residuals in the same span (it is a change of
  coefficients of the layer), so the learnable filter space is unchanged.

Outputs ``OUT/STEM.npz`` (``basis`` [S, F, k, k] float64 as shipped, ``raw`` the delta-parametrised
solution, ``scales``) and ``OUT/STEM.json`` (configuration, exact command, losses and times).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
import os
import sys
import time

import numpy as np
import scipy.linalg

INTEGER_SNAP = 1e-3


# --------------------------------------------------------------------------- configuration


def disco_scales(num_scales: int, ratio: float) -> tuple[float, ...]:
    """``ratio**i`` for ``i < num_scales``, snapping values within 1e-3 of an integer."""
    if num_scales < 1:
        raise ValueError(f"num_scales={num_scales} is invalid: it must be >= 1")
    if not (ratio > 1.0 and math.isfinite(ratio)):
        raise ValueError(f"ratio={ratio} is invalid: it must be a finite float > 1")
    out = []
    for i in range(num_scales):
        s = ratio**i
        out.append(float(round(s)) if abs(s - round(s)) < INTEGER_SNAP else float(s))
    return tuple(out)


def is_integer_scale(s: float) -> bool:
    return abs(s - round(s)) < 1e-9


def dilated_delta_basis(kernel_size: int, effective_size: int, dilation: int) -> np.ndarray:
    """``[F, k, k]`` float64: function ``f = a * effective_size + b`` is a unit tap at row/column
    offsets ``((a - c) * dilation, (b - c) * dilation)`` from the kernel centre, ``c = (e-1)//2``."""
    e, k, d = effective_size, kernel_size, dilation
    if (e - 1) * d + 1 > k:
        raise ValueError(
            f"the delta basis of effective_size={e} dilated by {d} spans {(e - 1) * d + 1} taps "
            f"and does not fit kernel_size={k}"
        )
    out = np.zeros((e * e, k, k))
    c, kc = (e - 1) // 2, (k - 1) // 2
    for a in range(e):
        for b in range(e):
            out[a * e + b, kc + (a - c) * d, kc + (b - c) * d] = 1.0
    return out


def scale_pairs(num_scales: int) -> list[tuple[int, int]]:
    return [(i, j) for i in range(num_scales) for j in range(i + 1, num_scales)]


def crop_half_width(image_size: int, kernel_size: int, r: float) -> int:
    """Half-width (pixels from the centre) of the compared box for ratio ``r``."""
    return int(math.floor(image_size / (2.0 * r) - kernel_size // 2 - 3))


def _crop(y, image_size: int, half: int):
    """Central box ``|p| <= half`` (plane coordinates) of ``[B, N, N, C]``."""
    c = (image_size - 1) / 2.0
    lo, hi = int(math.ceil(c - half)), int(math.floor(c + half))
    return y[:, lo : hi + 1, lo : hi + 1, :]


# --------------------------------------------------------------------------- the objective


def pair_residuals(kernels, images, scales, kernel_size: int):
    """Direct evaluation of the DISCO objective with conv2d and bicubic scaling.

    Args:
      kernels: ``[S, F, k, k]`` (jnp or np).
      images: ``[B, N, N, 1]``.
    Returns:
      list over pairs ``(i, j)`` of ``(mean squared residual, sum |res|^2, sum |L f(x)|^2)``,
      means over images, box pixels and functions.
    """
    import jax.numpy as jnp

    from invjax import groups
    from invjax.ops.conv import conv2d

    n = images.shape[1]
    hwio = jnp.transpose(jnp.asarray(kernels), (0, 2, 3, 1))[:, :, :, None, :]  # [S,k,k,1,F]
    out = []
    for i, j in scale_pairs(len(scales)):
        r = scales[j] / scales[i]
        half = crop_half_width(n, kernel_size, r)
        lfx = groups.scale(conv2d(images, hwio[j]), 1.0 / r, "bicubic")
        flx = conv2d(groups.scale(images, 1.0 / r, "bicubic"), hwio[i])
        lfx, flx = _crop(lfx, n, half), _crop(flx, n, half)
        res = lfx - flx
        out.append((jnp.mean(res**2), jnp.sum(res**2), jnp.sum(lfx**2)))
    return out


def objective(kernels, images, scales, kernel_size: int):
    """``J``: the sum over scale pairs of the mean squared residual."""
    return sum(t[0] for t in pair_residuals(kernels, images, scales, kernel_size))


@functools.lru_cache(maxsize=8)
def _jitted_residuals(scales, kernel_size):
    import jax

    return jax.jit(lambda kern, x: pair_residuals(kern, x, scales, kernel_size))


def evaluate(kernels, images, scales, kernel_size: int) -> dict:
    """``J`` and the relative error ``sum |L f(x) - f(L x)|^2 / sum |L f(x)|^2`` (all pairs)."""
    fn = _jitted_residuals(tuple(scales), kernel_size)
    terms = [tuple(float(v) for v in t) for t in fn(kernels, images)]
    pairs = scale_pairs(len(scales))
    return {
        "loss": sum(t[0] for t in terms),
        "relative_error": sum(t[1] for t in terms) / sum(t[2] for t in terms),
        "relative_error_per_pair": {
            f"{scales[i]:.4g}->{scales[j]:.4g}": t[1] / t[2] for (i, j), t in zip(pairs, terms)
        },
    }


def random_images(seed: int, count: int, image_size: int, dtype=np.float64) -> np.ndarray:
    """Uniform white noise in [0, 1], ``[count, N, N, 1]``."""
    rng = np.random.default_rng(seed)
    return rng.uniform(size=(count, image_size, image_size, 1)).astype(dtype)


# --------------------------------------------------------------------------- least squares


def fixed_kernels(kernel_size, effective_size, scales) -> dict[int, np.ndarray]:
    """Scale index -> ``[F, k, k]`` dilated delta basis, for the integer scales."""
    return {
        i: dilated_delta_basis(kernel_size, effective_size, int(round(s)))
        for i, s in enumerate(scales)
        if is_integer_scale(s)
    }


class QuadraticObjective:
    """``J`` on a fixed set of images as an explicit quadratic form in the kernels.

    With ``z [S k^2, F]`` the stacked kernels (column ``f`` is function ``f``; row block ``i`` the
    flattened ``k x k`` kernel at scale ``i``), ``J(z) = trace(z^T H z)``. ``free`` are the scale
    slots that are optimised, ``fixed`` the integer scales with their dilated delta bases.
    """

    def __init__(self, kernel_size: int, effective_size: int, scales, images: np.ndarray):
        import jax
        import jax.numpy as jnp

        from invjax import groups
        from invjax.ops.conv import conv2d

        k, e, S = kernel_size, effective_size, len(scales)
        kk, F, n = k * k, e * e, images.shape[1]
        self.kernel_size, self.effective_size, self.scales = k, e, tuple(scales)
        self.fixed = fixed_kernels(k, e, scales)
        if 0 not in self.fixed:
            raise ValueError(f"scales={scales} must start at 1.0")
        self.free = [i for i in range(S) if i not in self.fixed]
        onehot = jnp.asarray(np.eye(kk).reshape(k, k, 1, kk), images.dtype)
        pairs = scale_pairs(S)
        ratios = sorted({round(scales[j] / scales[i], 12) for i, j in pairs})

        @jax.jit
        def features(x, r):
            # P = L_{1/r}[x * delta_t], Q = [L_{1/r} x] * delta_t for every tap t (one conv2d).
            p = groups.scale(conv2d(x, onehot), 1.0 / r, "bicubic")
            q = conv2d(groups.scale(x, 1.0 / r, "bicubic"), onehot)
            return p, q

        grams = {}
        for r in ratios:
            half = crop_half_width(n, k, r)
            pp = np.zeros((kk, kk))
            qq, pq = np.zeros_like(pp), np.zeros_like(pp)
            count = 0
            for b in range(images.shape[0]):
                p, q = features(jnp.asarray(images[b : b + 1]), r)
                p = np.asarray(_crop(p, n, half), np.float64).reshape(-1, kk)
                q = np.asarray(_crop(q, n, half), np.float64).reshape(-1, kk)
                pp += p.T @ p
                qq += q.T @ q
                pq += p.T @ q
                count += p.shape[0]
            # Each pair enters J as its mean over images, pixels and functions.
            w = 1.0 / (count * F)
            grams[r] = (w * pp, w * qq, w * pq)

        # sum over pairs of |P psi_j - Q psi_i|^2, over all S kernel slots.
        H = np.zeros((S * kk, S * kk))
        for i, j in pairs:
            pp, qq, pq = grams[round(scales[j] / scales[i], 12)]
            si, sj = slice(i * kk, (i + 1) * kk), slice(j * kk, (j + 1) * kk)
            H[sj, sj] += pp
            H[si, si] += qq
            H[sj, si] -= pq
            H[si, sj] -= pq.T
        self.H = H
        slots = lambda idx: np.array([t for i in idx for t in range(i * kk, (i + 1) * kk)], int)
        self.u, self.c = slots(self.free), slots(sorted(self.fixed))
        self.zc = np.concatenate([self.fixed[i].reshape(F, kk).T for i in sorted(self.fixed)])

    def stack(self, v: np.ndarray) -> np.ndarray:
        """Free unknowns ``v [|free| k^2, F]`` -> raw basis ``[S, F, k, k]`` float64."""
        k, S, F = self.kernel_size, len(self.scales), self.effective_size**2
        raw = np.zeros((S, F, k * k))
        for i, ker in self.fixed.items():
            raw[i] = ker.reshape(F, k * k)
        for t, i in enumerate(self.free):
            raw[i] = np.asarray(v, np.float64)[t * k * k : (t + 1) * k * k].T
        return raw.reshape(S, F, k, k)

    def value(self, raw: np.ndarray) -> float:
        """``J`` of a basis ``[S, F, k, k]`` on these images."""
        S, F = raw.shape[:2]
        z = np.asarray(raw, np.float64).reshape(S, F, -1).transpose(0, 2, 1).reshape(-1, F)
        return float(np.sum(z * (self.H @ z)))

    def solve(self) -> np.ndarray:
        """Exact minimiser from the normal equations ``H_uu v = -H_uc z_c`` (scipy, float64)."""
        F = self.effective_size**2
        if not self.free:
            return self.stack(np.zeros((0, F)))
        rhs = -self.H[np.ix_(self.u, self.c)] @ self.zc
        return self.stack(scipy.linalg.solve(self.H[np.ix_(self.u, self.u)], rhs, assume_a="pos"))

    def adam(self, steps: int, lr: float) -> np.ndarray:
        """Full-batch optax Adam on the same ``J`` from zero kernels, cosine-decayed ``lr``."""
        import jax
        import jax.numpy as jnp
        import optax

        F = self.effective_size**2
        if not self.free:
            return self.stack(np.zeros((0, F)))
        huu = jnp.asarray(self.H[np.ix_(self.u, self.u)])
        g_c = jnp.asarray(self.H[np.ix_(self.u, self.c)] @ self.zc)

        def loss(v):  # J up to the constant z_c^T H_cc z_c
            return jnp.sum(v * (huu @ v)) + 2.0 * jnp.sum(v * g_c)

        opt = optax.adam(optax.cosine_decay_schedule(lr, steps))

        def body(carry, _):
            v, state = carry
            j, g = jax.value_and_grad(loss)(v)
            upd, state = opt.update(g, state, v)
            return (optax.apply_updates(v, upd), state), j

        @jax.jit
        def run(v):
            (v, _), hist = jax.lax.scan(body, (v, opt.init(v)), None, length=steps)
            return v, hist

        v, hist = run(jnp.zeros((len(self.u), F), huu.dtype))
        const = float(np.sum(self.zc * (self.H[np.ix_(self.c, self.c)] @ self.zc)))
        self.adam_history = np.asarray(hist, np.float64) + const  # J before each step
        return self.stack(v)


# --------------------------------------------------------------------------- DISCO's own objective
#
# DISCO's `calculate_disco_basis.py` (ISosnovik/disco, read for its definition): for every scale
# pair i < j with r = s_j / s_i, "pad circularly by k//2, correlate with psi_j, then resize by
# 1/r" against "resize by 1/r, pad circularly, correlate with psi_i", both with PyTorch's
# `F.interpolate(scale_factor=1/r, mode='bicubic', align_corners=False)` (output size
# floor(N / r), source pixel (d + 0.5) r - 0.5 from the image corner, cubic a = -0.75, edge
# pixels repeated), cropped by k//2 + 1 on each side; the loss is the sum over pairs of the
# *unsquared* L2 norm of the residual over images, functions and pixels. DISCO minimises it by
# Adam from a random start on 154 x 154 noise images; here the same objective is built from
# Gram matrices and its minimiser found exactly by iteratively reweighted least squares (each
# pair's squared residual weighted by 1 / its current norm: the stationarity condition of a sum
# of norms).

DISCO_IMAGE_SIZE = 154  # DISCO's random images


def torch_bicubic_matrix(n: int, r: float) -> np.ndarray:
    """``[floor(n / r), n]`` float64: PyTorch's bicubic resize by ``1 / r`` along one axis
    (``align_corners=False``, no antialiasing): output ``d`` reads the source position
    ``(d + 0.5) r - 0.5`` with the cubic-convolution weights (``a = -0.75``) of its four
    neighbours, indices outside ``0..n-1`` clamped to the edge."""
    a = -0.75
    m = int(math.floor(n * (1.0 / r)))
    out = np.zeros((m, n))
    for d in range(m):
        src = (d + 0.5) * r - 0.5
        i0 = math.floor(src)
        t = src - i0
        near = lambda x: ((a + 2) * x - (a + 3)) * x * x + 1  # |x| <= 1
        far = lambda x: ((a * x - 5 * a) * x + 8 * a) * x - 4 * a  # 1 < |x| < 2
        for o, w in enumerate((far(t + 1), near(t), near(1 - t), far(2 - t))):
            out[d, min(max(i0 - 1 + o, 0), n - 1)] += w
    return out


def _disco_features(x: np.ndarray, kernel_size: int, r: float) -> tuple[np.ndarray, np.ndarray]:
    """``(P, Q)`` ``[k*k, pixels]`` for one image ``x [N, N]``: tap ``t`` of "correlate
    circularly, then resize" and of "resize, then correlate circularly", DISCO's crop applied."""
    k, c, crop = kernel_size, kernel_size // 2, kernel_size // 2 + 1
    M = torch_bicubic_matrix(x.shape[0], r)
    m = M.shape[0]
    # Correlating circularly with the unit tap (a, b) reads x[p + (a - c), q + (b - c)]; it folds
    # into M as a roll of M's columns, so all k*k resized shifts come from one product.
    rolled = np.stack([np.roll(M, a - c, axis=1) for a in range(k)])  # [k, m, N]
    left = rolled @ x  # [k, m, N]: rows resized after the row shift
    p = left.reshape(k * m, -1) @ rolled.reshape(k * m, -1).T  # [(a, i), (b, l)]
    p = p.reshape(k, m, k, m).transpose(0, 2, 1, 3)[:, :, crop:-crop, crop:-crop]
    dx = M @ x @ M.T
    q = np.stack([np.roll(dx, (c - a, c - b), axis=(0, 1)) for a in range(k) for b in range(k)])[
        :, crop:-crop, crop:-crop
    ]
    return p.reshape(k * k, -1), q.reshape(k * k, -1)


def disco_objective_direct(kernels, images, scales, kernel_size: int) -> list[float]:
    """DISCO's per-pair residual norms by direct evaluation (circular correlation with
    ``scipy.ndimage``, the resize matrix of :func:`torch_bicubic_matrix`): the reference for
    :class:`DiscoObjective`. ``kernels`` ``[S, F, k, k]``, ``images`` ``[B, N, N]``."""
    import scipy.ndimage

    crop = kernel_size // 2 + 1
    out = []
    for i, j in scale_pairs(len(scales)):
        r = scales[j] / scales[i]
        total = 0.0
        for x in images:
            M = torch_bicubic_matrix(x.shape[0], r)
            dx = M @ x @ M.T
            for f in range(kernels.shape[1]):
                big = scipy.ndimage.correlate(x, kernels[j, f], mode="wrap")
                a = (M @ big @ M.T)[crop:-crop, crop:-crop]
                b = scipy.ndimage.correlate(dx, kernels[i, f], mode="wrap")[crop:-crop, crop:-crop]
                total += float(np.sum((a - b) ** 2))
        out.append(math.sqrt(total))
    return out


class DiscoObjective:
    """DISCO's objective ``sum_p ||res_p||`` over scale pairs ``p``, as per-pair quadratic forms
    ``||res_p||^2 = trace(z^T H_p z)`` in the stacked kernels ``z [S k^2, F]``."""

    def __init__(self, kernel_size: int, effective_size: int, scales, images: np.ndarray):
        k, e, S = kernel_size, effective_size, len(scales)
        kk, F = k * k, e * e
        self.kernel_size, self.effective_size, self.scales = k, e, tuple(scales)
        self.fixed = fixed_kernels(k, e, scales)
        self.free = [i for i in range(S) if i not in self.fixed]
        self.pairs = scale_pairs(S)
        grams = {}
        for r in sorted({scales[j] / scales[i] for i, j in self.pairs}):
            pp = np.zeros((kk, kk))
            qq, pq = np.zeros_like(pp), np.zeros_like(pp)
            for x in images:
                p, q = _disco_features(np.asarray(x, np.float64), k, r)
                pp += p @ p.T
                qq += q @ q.T
                pq += p @ q.T
            grams[r] = (pp, qq, pq)
        self.H = []
        for i, j in self.pairs:
            pp, qq, pq = grams[scales[j] / scales[i]]
            h = np.zeros((S * kk, S * kk))
            si, sj = slice(i * kk, (i + 1) * kk), slice(j * kk, (j + 1) * kk)
            h[sj, sj] += pp
            h[si, si] += qq
            h[sj, si] -= pq
            h[si, sj] -= pq.T
            self.H.append(h)
        slots = lambda idx: np.array([t for i in idx for t in range(i * kk, (i + 1) * kk)], int)
        self.u, self.c = slots(self.free), slots(sorted(self.fixed))
        self.zc = np.concatenate([self.fixed[i].reshape(F, kk).T for i in sorted(self.fixed)])
        self.iterations = []

    def _z(self, raw) -> np.ndarray:
        S, F = len(self.scales), self.effective_size**2
        return np.asarray(raw, np.float64).reshape(S, F, -1).transpose(0, 2, 1).reshape(-1, F)

    def pair_norms(self, raw) -> np.ndarray:
        z = self._z(raw)
        return np.sqrt(np.maximum([np.sum(z * (h @ z)) for h in self.H], 0.0))

    def value(self, raw) -> float:
        return float(np.sum(self.pair_norms(raw)))

    def solve(self, iterations: int = 100, tol: float = 1e-12) -> np.ndarray:
        """The minimiser by iteratively reweighted least squares (weights ``1 / ||res_p||``,
        pairs with a zero residual, between two integer scales, carry no unknowns)."""
        k, S, F = self.kernel_size, len(self.scales), self.effective_size**2
        z = np.zeros((S * k * k, F))
        z[self.c] = self.zc
        weights = np.ones(len(self.H))
        previous = math.inf
        for _ in range(iterations):
            h = sum(w * hp for w, hp in zip(weights, self.H))
            rhs = -h[np.ix_(self.u, self.c)] @ self.zc
            z[self.u] = scipy.linalg.solve(h[np.ix_(self.u, self.u)], rhs, assume_a="pos")
            norms = np.sqrt(np.maximum([np.sum(z * (hp @ z)) for hp in self.H], 0.0))
            value = float(norms.sum())
            self.iterations.append(value)
            weights = 1.0 / np.maximum(norms, 1e-12 * max(norms.max(), 1e-300))
            if previous - value <= tol * value:
                break
            previous = value
        return np.stack([z[i * k * k : (i + 1) * k * k].T.reshape(F, k, k) for i in range(S)])


# --------------------------------------------------------------------------- post-processing


def hermite_rotation(raw: np.ndarray, effective_size: int, base_sigma: float):
    """Mix the raw functions by the Hermite matrix and normalise at scale 1 (DISCO basis "A").

    Returns ``(basis [S, F, k, k], condition number of the mixing matrix)``.
    """
    from invjax.bases.scale import hermite_grid

    e = effective_size
    W = hermite_grid(e, base_sigma, e).reshape(e * e, e * e)  # [g, tap (a, b) row-major]
    out = np.einsum("gf,sfhw->sghw", W, raw)
    norm = np.sqrt(np.sum(out[0] ** 2, axis=(-2, -1)))
    return out / norm[None, :, None, None], float(np.linalg.cond(W))


# --------------------------------------------------------------------------- CLI

OBJECTIVES = ("invjax", "disco")
PEER_PREFIX = "peer_"  # files fitted with DISCO's objective (invjax.bases.scale: disco_b kinds)


def _main_disco(args, given) -> dict:
    """Fit DISCO's own objective (see "DISCO's own objective" above) and write
    ``OUT/peer_STEM.npz`` (``raw`` [S, F, k, k], ``scales``) and ``OUT/peer_STEM.json``."""
    from invjax.bases.scale import check_arguments, data_file_stem

    k, e = args.kernel_size, args.effective_size
    # DISCO's scales are rounded to 2 decimals (its mnist_disco and its basis file names)
    scales = tuple(round(s, 2) for s in disco_scales(args.num_scales, args.ratio))
    check_arguments(k, e, scales)
    fixed_kernels(k, e, scales)
    n = args.image_size or DISCO_IMAGE_SIZE
    if int(n / max(scales)) - 2 * (k // 2 + 1) < 2:
        raise ValueError(f"--image-size={n} is too small for kernel_size={k} and DISCO's crop")
    train = random_images(args.seed, args.images, n)[..., 0]
    held_out = random_images(args.seed + 1, args.eval_images, n)[..., 0]
    print(f"DISCO objective: scales={scales} kernel_size={k} effective_size={e}", flush=True)
    t0 = time.perf_counter()
    obj = DiscoObjective(k, e, scales, train)
    t_gram = time.perf_counter() - t0
    t0 = time.perf_counter()
    raw = obj.solve()
    t_solve = time.perf_counter() - t0
    held = DiscoObjective(k, e, scales, held_out)
    stem = PEER_PREFIX + data_file_stem(k, e, scales)
    os.makedirs(args.out, exist_ok=True)
    npz_path = os.path.join(args.out, stem + ".npz")
    np.savez_compressed(npz_path, raw=raw, scales=np.asarray(scales))
    with open(npz_path, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    ev = evaluate(raw, held_out[..., None], scales, k)
    meta = {
        **_header(args, given, k, e, scales),
        "objective": (
            "DISCO's calculate_disco_basis: sum over scale pairs i<j of the unsquared L2 norm "
            "(over images, functions, pixels) of resize_{1/r}(circular x * psi_j) - circular "
            "(resize_{1/r} x) * psi_i, r = s_j/s_i, PyTorch bicubic (align_corners=False, "
            "a=-0.75, floor(N/r) output), crop k//2+1; uniform noise images; psi fixed "
            "(dilated delta basis) at integer scales; solved by iteratively reweighted least "
            "squares"
        ),
        "irls_values": obj.iterations,
        "train_value": obj.value(raw),
        "held_out_value": held.value(raw),
        "held_out_pair_norms": held.pair_norms(raw).tolist(),
        "held_out_invjax_objective": ev,
        "feature_and_gram_time_s": t_gram,
        "solve_time_s": t_solve,
        "train_images": args.images,
        "held_out_images": args.eval_images,
        "image_size": n,
        "post_processing": "none: the raw delta-parametrised basis; invjax.bases.scale mixes it "
        "(disco_b kinds: type-B Hermite matrix, as DISCO's DISCOBasisB)",
        "npz_sha256": digest,
    }
    with open(os.path.join(args.out, stem + ".json"), "w") as fh:
        json.dump(meta, fh, indent=1)
        fh.write("\n")
    print(
        f"value(train)={meta['train_value']:.6e} value(held-out)={meta['held_out_value']:.6e} "
        f"after {len(obj.iterations)} IRLS steps; features/Gram {t_gram:.1f}s, solve "
        f"{t_solve:.1f}s; wrote {npz_path} ({os.path.getsize(npz_path)} B)",
        flush=True,
    )
    return meta


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m invjax.bases.make_disco", description="Generate a DISCO scale basis."
    )
    parser.add_argument("--kernel-size", type=int, required=True)
    parser.add_argument("--effective-size", type=int, required=True)
    parser.add_argument("--num-scales", type=int, required=True)
    parser.add_argument("--ratio", type=float, required=True)
    parser.add_argument("--out", type=str, required=True, help="output directory")
    parser.add_argument("--images", type=int, default=16, help="noise images for the fit")
    parser.add_argument("--eval-images", type=int, default=4, help="held-out noise images")
    parser.add_argument(
        "--image-size",
        type=int,
        default=None,
        help=f"default 96 (invjax), {DISCO_IMAGE_SIZE} (disco)",
    )
    parser.add_argument(
        "--objective", choices=OBJECTIVES, default="invjax",
        help="invjax: squared residual, bicubic about the centre, least squares (the 'disco' "
        "kind); disco: DISCO's own (unsquared, circular, PyTorch's bicubic), the peers' files",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--adam-steps", type=int, default=2000)
    parser.add_argument("--adam-lr", type=float, default=0.01)
    parser.add_argument("--base-sigma", type=float, default=None, help="Hermite mixing width")
    parser.add_argument("--no-hermite", action="store_true", help="ship the raw delta basis")
    return parser


def _fit(quad: QuadraticObjective, args, held_out, scales, k: int, t_gram: float) -> dict:
    """Both solvers on ``quad`` (closed-form least squares and Adam), each scored on the
    training and held-out images: ``{'least_squares': ..., 'adam': ..., 'winner': name,
    'raw': the winner's basis, 'adam_curve': {step: loss}}``. Ties (Adam converged to the exact
    minimiser) go to the closed form."""
    t0 = time.perf_counter()
    raws = {"least_squares": quad.solve()}
    times = {"least_squares": time.perf_counter() - t0}
    t0 = time.perf_counter()
    raws["adam"] = quad.adam(args.adam_steps, args.adam_lr)
    times["adam"] = time.perf_counter() - t0
    marks = [m for m in (10, 100, 300, 1000) if m < args.adam_steps]
    out = {"adam_curve": {str(m): float(quad.adam_history[m]) for m in marks} if quad.free else {}}
    for name in ("least_squares", "adam"):
        out[name] = {
            "train_loss": quad.value(raws[name]),
            "held_out": evaluate(raws[name], held_out, scales, k),
            "time_s": times[name],
            "time_with_features_s": times[name] + t_gram,
        }
        print(
            f"{name:14s} J(train)={out[name]['train_loss']:.5e} "
            f"J(held-out)={out[name]['held_out']['loss']:.5e} "
            f"rel(held-out)={out[name]['held_out']['relative_error']:.4e} "
            f"time={times[name]:.2f}s (+{t_gram:.2f}s features/Gram)",
            flush=True,
        )
    lsq_j, adam_j = out["least_squares"]["train_loss"], out["adam"]["train_loss"]
    out["winner"] = "adam" if adam_j < lsq_j * (1 - 1e-9) else "least_squares"
    out["raw"] = raws[out["winner"]]
    return out


def _header(args, given, k, e, scales) -> dict:
    """The first keys of a basis' JSON (both objectives): its settings and the command."""
    return {
        "kernel_size": k,
        "effective_size": e,
        "scales": list(scales),
        "ratio": args.ratio,
        "command": "python -m invjax.bases.make_disco " + " ".join(given),
        "arguments": vars(args),
    }


def _metadata(args, given, k, e, scales, t_gram, fit, post, evals, digest) -> dict:
    """The JSON written beside the basis: the command, the objective, both solvers' figures,
    the shipped one, its post-processing and the held-out errors."""
    winner = fit["winner"]
    return {
        **_header(args, given, k, e, scales),
        "objective": (
            "J = sum over scale pairs i<j of mean_{x,p,f} |L_{1/r}[x*psi_j] - [L_{1/r}x]*psi_i|^2, "
            "r = s_j/s_i, uniform noise images, bicubic, box |p| <= N/(2r) - k//2 - 3; psi "
            "fixed (dilated delta basis) at integer scales"
        ),
        "feature_and_gram_time_s": t_gram,
        "least_squares": fit["least_squares"],
        "adam": {
            **fit["adam"],
            "steps": args.adam_steps,
            "lr": args.adam_lr,
            "schedule": "cosine decay",
            "init": "zeros",
            "batch": "full (same Gram matrices as least squares)",
            "train_loss_at_step": fit["adam_curve"],
        },
        "shipped": winner,
        "final_loss": fit[winner]["train_loss"],
        "final_loss_held_out": fit[winner]["held_out"]["loss"],
        "post_processing": post,
        "shipped_basis_held_out": evals["shipped"],
        "hermite_basis_held_out": evals["hermite"],
        "train_images": args.images,
        "held_out_images": args.eval_images,
        "image_size": args.image_size,
        "npz_sha256": digest,
    }


def main(argv=None) -> dict:
    args = _parser().parse_args(argv)
    given = sys.argv[1:] if argv is None else list(argv)
    if args.objective == "disco":
        return _main_disco(args, given)
    args.image_size = args.image_size or 96

    import jax

    jax.config.update("jax_enable_x64", True)  # features and Gram matrices in float64

    from invjax.bases.scale import (
        check_arguments,
        data_file_stem,
        default_base_sigma,
        hermite_basis,
    )

    k, e = args.kernel_size, args.effective_size
    scales = disco_scales(args.num_scales, args.ratio)
    check_arguments(k, e, scales)
    fixed_kernels(k, e, scales)  # raises if a dilated delta basis does not fit
    if crop_half_width(args.image_size, k, max(scales)) < 2:
        raise ValueError(
            f"--image-size={args.image_size} is too small for kernel_size={k} and scale "
            f"{max(scales):.3g}: the compared box would be empty"
        )
    sigma = default_base_sigma(e) if args.base_sigma is None else args.base_sigma
    train = random_images(args.seed, args.images, args.image_size)
    held_out = random_images(args.seed + 1, args.eval_images, args.image_size)
    print(f"scales={scales} kernel_size={k} effective_size={e}", flush=True)

    t0 = time.perf_counter()
    quad = QuadraticObjective(k, e, scales, train)
    t_gram = time.perf_counter() - t0
    fit = _fit(quad, args, held_out, scales, k, t_gram)
    raw = fit["raw"]
    if args.no_hermite:
        shipped, post = raw, "none (raw delta-parametrised basis)"
    else:
        shipped, cond = hermite_rotation(raw, e, sigma)
        post = {
            "hermite_mixing": "basis[s] = W @ raw[s], W[g, tap] = Hermite function g on the "
            "effective grid (invjax.bases.scale.hermite_grid); then every function divided "
            "by its norm at scale 1",
            "base_sigma": sigma,
            "condition_number": cond,
        }
    evals = {
        "shipped": evaluate(shipped, held_out, scales, k),
        "hermite": {
            **evaluate(np.asarray(hermite_basis(k, e, scales)), held_out, scales, k),
            "base_sigma": default_base_sigma(e),
        },
    }
    print(
        f"shipped ({fit['winner']}): rel(held-out)={evals['shipped']['relative_error']:.4e}; "
        f"hermite basis: rel(held-out)={evals['hermite']['relative_error']:.4e}",
        flush=True,
    )

    os.makedirs(args.out, exist_ok=True)
    stem = data_file_stem(k, e, scales)
    npz_path = os.path.join(args.out, stem + ".npz")
    np.savez_compressed(npz_path, basis=shipped, raw=raw, scales=np.asarray(scales))
    with open(npz_path, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    meta = _metadata(args, given, k, e, scales, t_gram, fit, post, evals, digest)
    with open(os.path.join(args.out, stem + ".json"), "w") as fh:
        json.dump(meta, fh, indent=1)
        fh.write("\n")
    print(f"final_loss={meta['final_loss']:.5e}; wrote {npz_path} ({os.path.getsize(npz_path)} B)")
    return meta


if __name__ == "__main__":
    main()
