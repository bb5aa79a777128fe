"""Steerable filter bases for C_N and D_N: Gaussian rings times circular harmonics.

A basis function is ``phi(rho, theta) = exp(-(rho - R)^2 / (2 sigma^2)) * h_m(theta)`` with ring
radius ``R``, angular frequency ``m`` and ``h_m`` one of ``1`` (m = 0), ``cos(m theta)``,
``sin(m theta)``. It is evaluated in closed form, so its transformed copy ``phi(g^-1 p)`` is
exact for every angle: sampling is the only approximation, and for 90-degree rotations and flips
the sampled transformed basis is the permuted sampled basis (the grid maps onto itself).

Defaults follow e2cnn (QUVA-Lab/e2cnn, its ring basis): rings at radii ``0 .. (k-1)//2`` (times ``dilation``);
``sigma`` 0.6 per ring, 0.4 on the outer ring, 0.005 at the centre; band limit per ring: 0 at the
centre, 2 on the outer ring, ``min(2r, 2r - (r+1) % 2)`` in between. For k = 3 this gives 6
functions, k = 5 gives 11, k = 7 gives 18. Functions are normalised to unit L2 norm on the grid;
any whose norm is below ``1e-6`` before normalisation is dropped.

``transformed_basis(group, k)`` returns ``Phi[g, b] = phi_b(g^-1 p)`` of shape ``[|G|, B, K, K]``
(``K = dilation * (k - 1) + 1``), float64, cached and read-only. The E(2) convolutions expand
their coefficients against it (:mod:`invjax.ops.e2`).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from invjax.groups import Group, parse_group, plane_coordinates


def default_max_frequency(ring: int, outer: int) -> int:
    """e2cnn's band limit for ring ``ring`` of a kernel whose outer ring is ``outer``."""
    if ring == 0:
        return 0
    if ring == outer:
        return 2
    return min(2 * ring, 2 * ring - (ring + 1) % 2)


def default_sigma(ring: int, outer: int) -> float:
    if ring == 0:
        return 0.005
    return 0.4 if ring == outer else 0.6


def check_kernel_size(kernel_size: int) -> None:
    if not isinstance(kernel_size, int | np.integer) or kernel_size < 1 or kernel_size % 2 == 0:
        raise ValueError(
            f"kernel_size={kernel_size!r} is invalid: steerable kernels need an odd size >= 1 "
            "(1, 3, 5, 7, ...)"
        )


@functools.cache
def basis_spec(kernel_size: int, dilation: int = 1) -> tuple[tuple[float, float, int, int], ...]:
    """The basis as ``(radius, sigma, frequency, phase)`` rows; phase 0 = cos (or constant), 1 = sin."""
    check_kernel_size(kernel_size)
    if dilation < 1:
        raise ValueError(f"dilation={dilation} is invalid: it must be an integer >= 1")
    outer = (kernel_size - 1) // 2
    rows = []
    for ring in range(outer + 1):
        sigma = default_sigma(ring, outer) * dilation
        for m in range(default_max_frequency(ring, outer) + 1):
            for phase in (0, 1) if m > 0 else (0,):
                rows.append((float(ring * dilation), sigma, m, phase))
    return tuple(rows)


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
def _normaliser(kernel_size: int, dilation: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of kept functions and their norms on the untransformed grid."""
    size = dilation * (kernel_size - 1) + 1
    x, y = plane_coordinates(size, size)
    vals = evaluate(basis_spec(kernel_size, dilation), x, y)
    norms = np.sqrt((vals**2).sum(axis=(1, 2)))
    keep = np.flatnonzero(norms > 1e-6)
    return keep, norms[keep]


@functools.cache
def transformed_basis(group: Group | str, kernel_size: int, dilation: int = 1) -> np.ndarray:
    """``Phi[g, b, i, j] = phi_b(g^-1 p_ij)``: ``[|G|, B, K, K]`` float64 (read-only, cached).

    For grid-exact elements (multiples of 90 degrees, flips) the sampled transformed function is
    taken as the permuted sample of the untransformed one, so the equality holds bit for bit.
    """
    group = parse_group(group)
    spec = basis_spec(kernel_size, dilation)
    keep, norms = _normaliser(kernel_size, dilation)
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


def num_basis(kernel_size: int, dilation: int = 1) -> int:
    return len(_normaliser(kernel_size, dilation)[0])


def effective_kernel_size(kernel_size: int, dilation: int = 1) -> int:
    return dilation * (kernel_size - 1) + 1


def reference_basis(group: Group | str, kernel_size: int, dilation: int = 1) -> np.ndarray:
    """Slow, obvious reference for tests: loops over every pixel and element, float64."""
    group = parse_group(group)
    spec = basis_spec(kernel_size, dilation)
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
