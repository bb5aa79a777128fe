"""Steerable filter bases for C_N and D_N: Gaussian rings times circular harmonics.

A basis function is ``phi(rho, theta) = exp(-(rho - R)^2 / (2 sigma^2)) * h_m(theta)`` with ring
radius ``R``, angular frequency ``m`` and ``h_m`` one of ``1`` (m = 0), ``cos(m theta)``,
``sin(m theta)``. It is evaluated in closed form, so its transformed copy ``phi(g^-1 p)`` is
exact for every angle: sampling is the only approximation, and for 90-degree rotations and flips
the sampled transformed basis is the permuted sampled basis (the grid maps onto itself).

The functions are the "free filter" form of e2cnn's ``R2Conv`` basis: a regular -> regular kernel
is one band-limited filter per input group channel (``|G| B`` coefficients per pair of fields),
a lifting or to-trivial kernel one filter (``B``). This spans the same kernel space as e2cnn's
irrep-pair basis, so the coefficient counts agree (measured with e2cnn 0.2: ``F=1, sigma=0.45``
gives 8 / 128 / 8 coefficients for D8 3x3 lift / regular / to-trivial, 21 / 336 / 21 for 5x5,
1 / 16 / 1 for 1x1, and ``|G| B`` for D4, D1 and C8 alike).

Settings (e2cnn's ``compute_basis_params``; every function below takes them as keywords):

``rings``
  Ring radii; default ``0, 1, ..., (k-1)//2`` (times ``dilation``).
``sigma``
  Ring width: one float for every ring (the centre ring included, as e2cnn does with a float),
  or one per ring; default (``None``) e2cnn's per-ring rule: 0.6, 0.4 on the outer ring, 0.005
  at the centre (times ``dilation``).
``frequency_cutoff``
  The band-limit rule. ``None``: ``R2Conv``'s default ("manual") rule, per ring 0 at the centre,
  2 on the outer ring, ``min(2r, 2r - (r+1) % 2)`` in between (6 functions for 3x3, 11 for 5x5,
  18 for 7x7). A float ``F``: ``|m| <= F pi r`` at radius ``r``, which is what e2cnn_experiments
  runs (``--F=1.`` is passed to ``R2Conv`` as ``frequencies_cutoff = F pi``): with ``F = 1`` and
  ``sigma = 0.45`` (:data:`E2CNN_EXPERIMENTS`) 8 functions for 3x3, 21 for 5x5, 1 for 1x1.

Functions are normalised to unit L2 norm on the grid; any whose norm is below ``1e-6`` before
normalisation is dropped (e2cnn drops the ones that vanish on the grid).

``transformed_basis(group, k)`` returns ``Phi[g, b] = phi_b(g^-1 p)`` of shape ``[|G|, B, K, K]``
(``K = dilation * (k - 1) + 1``), float64, cached and read-only. The E(2) convolutions expand
their coefficients against it (:mod:`invjax.ops.e2`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from invjax.groups import Group, plane_coordinates

#: e2cnn_experiments' basis (``--F=1. --sigma=0.45`` in every E(2)-WRN run): the paper's configs.
E2CNN_EXPERIMENTS = {"frequency_cutoff": 1.0, "sigma": 0.45}


def default_max_frequency(ring: float, outer: int) -> int:
    """e2cnn's default ("manual") band limit for ring ``ring`` (radius in kernel taps) of a kernel
    whose outer ring is ``outer``."""
    if ring == 0:
        return 0
    return int(min(2 * ring, 2 if ring == outer else 2 * ring - (ring + 1) % 2))


def default_sigma(radius: float, last: bool) -> float:
    """e2cnn's default ring width (in kernel taps): 0.6, 0.4 on the last ring, 0.005 at the
    centre."""
    if radius == 0.0:
        return 0.005
    return 0.4 if last else 0.6


def check_kernel_size(kernel_size: int) -> None:
    if not isinstance(kernel_size, int | np.integer) or kernel_size < 1 or kernel_size % 2 == 0:
        raise ValueError(
            f"kernel_size={kernel_size!r} is invalid: steerable kernels need an odd size >= 1 "
            "(1, 3, 5, 7, ...)"
        )


def _as_tuple(v):
    return tuple(float(a) for a in v) if isinstance(v, Sequence | np.ndarray) else v


def check_settings(kernel_size: int, dilation: int, frequency_cutoff, sigma, rings) -> None:
    """One ValueError naming the bad basis setting and what is valid."""
    check_kernel_size(kernel_size)
    if not isinstance(dilation, int | np.integer) or dilation < 1:
        raise ValueError(f"dilation={dilation!r} is invalid: it must be an integer >= 1")
    if frequency_cutoff is not None and not (
        isinstance(frequency_cutoff, int | float) and frequency_cutoff > 0
    ):
        raise ValueError(
            f"frequency_cutoff={frequency_cutoff!r} is invalid: give None (e2cnn's default rule) "
            "or a number F > 0 (max frequency F pi r at radius r; e2cnn_experiments uses 1.0)"
        )
    max_radius = dilation * (kernel_size - 1) / 2.0 * math.sqrt(2.0)
    n_rings = len(rings) if rings is not None else (kernel_size - 1) // 2 + 1
    if rings is not None and (
        not rings or any(not (0.0 <= float(r) <= max_radius + 1e-12) for r in rings)
    ):
        raise ValueError(
            f"rings={rings!r} is invalid: give radii in [0, {max_radius:.3f}] for a "
            f"{kernel_size}x{kernel_size} kernel (dilation {dilation}), or None for e2cnn's"
        )
    sig = sigma if isinstance(sigma, tuple) else (sigma,) * n_rings
    if sigma is not None and (len(sig) != n_rings or any(not float(v) > 0 for v in sig)):
        raise ValueError(
            f"sigma={sigma!r} is invalid: give one number > 0 (every ring), one per ring "
            f"({n_rings} rings), or None for e2cnn's per-ring default"
        )


@functools.cache
def _basis_spec(kernel_size, dilation, frequency_cutoff, sigma, rings):
    check_settings(kernel_size, dilation, frequency_cutoff, sigma, rings)
    outer = (kernel_size - 1) // 2
    radii = rings if rings is not None else tuple(float(r * dilation) for r in range(outer + 1))
    rows = []
    for i, radius in enumerate(radii):
        r = radius / dilation  # in kernel taps, as e2cnn's manual rule reads it
        if sigma is None:
            ring_sigma = default_sigma(radius, last=i == len(radii) - 1) * dilation
        else:
            ring_sigma = float(sigma[i] if isinstance(sigma, tuple) else sigma)
        if frequency_cutoff is None:
            max_m = default_max_frequency(r, outer)
        else:
            # e2cnn keeps |m| <= fco * radius with fco = F pi (radius in grid pixels).
            max_m = int(math.floor(frequency_cutoff * math.pi * radius + 1e-9))
        for m in range(max_m + 1):
            for phase in (0, 1) if m > 0 else (0,):
                rows.append((float(radius), ring_sigma, m, phase))
    return tuple(rows)


def basis_spec(
    kernel_size: int,
    dilation: int = 1,
    frequency_cutoff: float | None = None,
    sigma=None,
    rings=None,
) -> tuple[tuple[float, float, int, int], ...]:
    """The basis as ``(radius, sigma, frequency, phase)`` rows; phase 0 = cos (or constant), 1 = sin."""
    return _basis_spec(kernel_size, dilation, frequency_cutoff, _as_tuple(sigma), _as_tuple(rings))


def evaluate(spec, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``[B, *x.shape]`` values of the basis functions ``spec`` at plane points ``(x, y)``."""
    rho = np.hypot(x, y)
    theta = np.arctan2(y, x)
    out = []
    for radius, sigma, m, phase in spec:
        radial = np.exp(-((rho - radius) ** 2) / (2.0 * sigma**2))
        angular = np.cos(m * theta) if phase == 0 else np.sin(m * theta)
        # A harmonic of frequency m > 0 has no defined angle at the origin; continuity makes it 0
        # there, which also keeps the sampled basis exactly steerable at the centre pixel.
        angular = np.where(rho < 1e-9, 0.0, angular)
        out.append(radial * (angular if m > 0 else 1.0))
    return np.stack(out)


@functools.cache
def _normaliser(
    kernel_size: int, dilation: int, frequency_cutoff=None, sigma=None, rings=None
) -> tuple[np.ndarray, np.ndarray]:
    """Indices of kept functions and their norms on the untransformed grid."""
    size = dilation * (kernel_size - 1) + 1
    x, y = plane_coordinates(size, size)
    vals = evaluate(basis_spec(kernel_size, dilation, frequency_cutoff, sigma, rings), x, y)
    norms = np.sqrt((vals**2).sum(axis=(1, 2)))
    keep = np.flatnonzero(norms > 1e-6)
    return keep, norms[keep]


def _check_group(group) -> None:
    # The bases are built for Group objects (names are parsed once, where a layer is built).
    if not isinstance(group, Group):
        raise ValueError(
            f"group={group!r} is invalid: give an invjax.groups.Group, e.g. "
            "invjax.groups.parse_group('D4')"
        )


def transformed_basis(
    group: Group,
    kernel_size: int,
    dilation: int = 1,
    frequency_cutoff: float | None = None,
    sigma=None,
    rings=None,
) -> np.ndarray:
    """``Phi[g, b, i, j] = phi_b(g^-1 p_ij)``: ``[|G|, B, K, K]`` float64 (read-only, cached).

    For grid-exact elements (multiples of 90 degrees, flips) the sampled transformed function is
    taken as the permuted sample of the untransformed one, so the equality holds bit for bit.
    """
    _check_group(group)
    return _transformed_basis(
        group,
        kernel_size,
        dilation,
        frequency_cutoff,
        _as_tuple(sigma),
        _as_tuple(rings),
    )


@functools.cache
def _transformed_basis(group, kernel_size, dilation, frequency_cutoff, sigma, rings):
    spec = basis_spec(kernel_size, dilation, frequency_cutoff, sigma, rings)
    keep, norms = _normaliser(kernel_size, dilation, frequency_cutoff, sigma, rings)
    size = dilation * (kernel_size - 1) + 1
    x, y = plane_coordinates(size, size)
    base = evaluate(spec, x, y)[keep] / norms[:, None, None]
    out = np.empty((group.order,) + base.shape)
    for g in range(group.order):
        if group.is_grid_exact(g):
            f, r = group.element(g)
            quarter = (4 * r) // group.n_rotations
            v = base[:, :, ::-1] if f else base
            out[g] = np.rot90(v, quarter, axes=(1, 2))
        else:
            inv = np.linalg.inv(group.matrix(g))
            xs = inv[0, 0] * x + inv[0, 1] * y
            ys = inv[1, 0] * x + inv[1, 1] * y
            out[g] = evaluate(spec, xs, ys)[keep] / norms[:, None, None]
    out.setflags(write=False)
    return out


def cache_clear() -> None:
    """Forget every cached basis (benchmarks time a cold build)."""
    for fn in (_basis_spec, _normaliser, _transformed_basis):
        fn.cache_clear()


def num_basis(
    kernel_size: int, dilation: int = 1, frequency_cutoff=None, sigma=None, rings=None
) -> int:
    sig, rng = _as_tuple(sigma), _as_tuple(rings)
    return len(_normaliser(kernel_size, dilation, frequency_cutoff, sig, rng)[0])


def effective_kernel_size(kernel_size: int, dilation: int = 1) -> int:
    return dilation * (kernel_size - 1) + 1


def reference_basis(
    group: Group,
    kernel_size: int,
    dilation: int = 1,
    frequency_cutoff=None,
    sigma=None,
    rings=None,
) -> np.ndarray:
    """Slow, obvious reference for tests: loops over every pixel and element, float64."""
    _check_group(group)
    spec = basis_spec(kernel_size, dilation, frequency_cutoff, sigma, rings)
    size = effective_kernel_size(kernel_size, dilation)
    c = (size - 1) / 2.0
    raw = np.zeros((len(spec), size, size))
    for b, (radius, sigma, m, phase) in enumerate(spec):
        for i in range(size):
            for j in range(size):
                px, py = j - c, c - i
                rho, th = math.hypot(px, py), math.atan2(py, px)
                ang = 1.0 if m == 0 else (math.cos(m * th) if phase == 0 else math.sin(m * th))
                if m > 0 and rho < 1e-9:
                    ang = 0.0
                raw[b, i, j] = math.exp(-((rho - radius) ** 2) / (2 * sigma**2)) * ang
    norms = np.sqrt((raw**2).sum(axis=(1, 2)))
    keep = norms > 1e-6
    out = np.zeros((group.order, int(keep.sum()), size, size))
    for g in range(group.order):
        ginv = np.linalg.inv(group.matrix(g))
        kb = 0
        for b, (radius, sigma, m, phase) in enumerate(spec):
            if not keep[b]:
                continue
            for i in range(size):
                for j in range(size):
                    px, py = ginv @ np.array([j - c, c - i])
                    rho, th = math.hypot(px, py), math.atan2(py, px)
                    ang = 1.0 if m == 0 else (math.cos(m * th) if phase == 0 else math.sin(m * th))
                    if m > 0 and rho < 1e-9:
                        ang = 0.0
                    out[g, kb, i, j] = (
                        math.exp(-((rho - radius) ** 2) / (2 * sigma**2)) * ang / norms[b]
                    )
            kb += 1
    return out
