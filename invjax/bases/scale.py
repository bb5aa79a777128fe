"""Scale-steerable filter bases: SESN's Hermite basis and the DISCO basis.

A basis is a float64 array ``[S, F, k, k]``: for each of the ``S`` scales ``scales[0] < ... <
scales[S-1]`` (relative to the smallest, which is 1) the ``F = effective_size**2`` functions
sampled on the ``k x k`` kernel grid. A scale-equivariant layer learns ``F`` coefficients per
(input, output) channel pair and expands them with one einsum into a filter at every scale, so
the filter at scale ``s`` is (approximately) the filter at scale 1 dilated by ``s``:
``psi_s(p) ~ s^-2 psi_1(p / s)``. For scales ``s_i = r**i`` the layers then satisfy (SESN, DISCO)

    [L_{1/s_i} x] * psi_{s_j}  ~  L_{1/s_i} [x * psi_{s_(i+j)}]     (``*``: correlation),

i.e. downscaling the input by ``s_i`` shifts the outputs ``i`` steps along the scale axis.

Kernel grid: tap ``(a, b)`` (row, column) of a ``k x k`` kernel sits at plane coordinates
``x = b - (k-1)/2``, ``y = (k-1)/2 - a`` (y up), as in :mod:`invjax.groups`.

Hermite (SESN, Sosnovik et al. 2020, basis "A")
  At scale ``s`` the functions are ``psi_nm(x, y) = t^-2 exp(-(x^2+y^2) / 2t^2) He_n(x/t) He_m(y/t)``
  with ``t = base_sigma * s`` (probabilists' Hermite polynomials ``He``, ``n, m < effective_size``,
  function index ``f = n * effective_size + m``), sampled on the support
  ``int(k * s / s_max) // 2 * 2 + 1`` and zero-padded to ``k x k``. Every function is divided by
  its norm at the smallest scale (so the relative size of a function across scales is kept).
  SESN passes the Gaussian widths themselves as its "scales"; here ``scales`` are relative and
  ``base_sigma`` is the width at scale 1. SESN/DISCO used 0.9 with ``effective_size=3``
  (STL-10 WRNs) and 1.5 with ``effective_size=7`` (Scaled-MNIST); the default
  ``0.45 + 0.15 * effective_size`` reproduces both.

DISCO (Sosnovik et al. 2021)
  Shipped as package data made by ``python -m invjax.bases.make_disco`` (see that module for the
  objective and the exact commands; each ``.json`` records its command and losses). At scale 1
  its functions equal the Hermite functions above (same width, on the effective grid); at integer
  scales they are the same functions on the dilated grid, so a downscaling by 2 is exact. At the
  in-between scales the kernels are fitted (least squares). Measured on the camera photo
  (tests/test_layers_scale.py): for k=5 / effective 3 DISCO is far more equivariant than Hermite
  (lift: 7e-3 vs 1.2e-1 at 1.41); for k=15 / effective 7 it is exact at scale 2 but slightly
  worse than Hermite at 1.26 and 1.59 (6.7e-3 vs 5.3e-3), because every pair (s, 2) of its
  objective ends at the sparse dilated deltas.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import math
from collections.abc import Sequence

import numpy as np

BASES = ("hermite", "disco")
# Shipped DISCO bases are matched to the requested scales up to this absolute difference, so that
# the paper's rounded values (1.26, 1.59, 1.41) and exact powers (2**(1/3), ...) both resolve.
SCALE_TOLERANCE = 5e-3


def default_base_sigma(effective_size: int) -> float:
    """Gaussian width at scale 1: 0.9 for ``effective_size=3``, 1.5 for 7 (SESN/DISCO's values)."""
    return 0.45 + 0.15 * effective_size


def check_arguments(kernel_size, effective_size, scales) -> tuple[int, int, tuple[float, ...]]:
    """Validate and normalise ``(kernel_size, effective_size, scales)``; one clear ValueError."""
    if not isinstance(kernel_size, int | np.integer) or kernel_size < 1 or kernel_size % 2 != 1:
        raise ValueError(
            f"kernel_size={kernel_size!r} is invalid: it must be an odd integer >= 1 (e.g. 5, 15)"
        )
    if (
        not isinstance(effective_size, int | np.integer)
        or effective_size < 1
        or effective_size > kernel_size
    ):
        raise ValueError(
            f"effective_size={effective_size!r} is invalid: it must be an integer with "
            f"1 <= effective_size <= kernel_size={kernel_size}"
        )
    try:
        scales_t = tuple(float(s) for s in scales)
    except TypeError as e:
        raise ValueError(f"scales={scales!r} is invalid: expected a sequence of floats") from e
    if (
        not scales_t
        or any(not math.isfinite(s) for s in scales_t)
        or abs(scales_t[0] - 1.0) > 1e-9
        or any(b <= a for a, b in zip(scales_t, scales_t[1:]))
    ):
        raise ValueError(
            f"scales={scales!r} is invalid: expected strictly increasing finite scales starting "
            "at 1.0, e.g. (1.0, 1.41, 2.0)"
        )
    return int(kernel_size), int(effective_size), scales_t


def _hermite_1d(t: np.ndarray, order: int) -> np.ndarray:
    """Probabilists' Hermite polynomial ``He_order(t)``."""
    return np.polynomial.hermite_e.hermeval(t, [0.0] * order + [1.0])


def hermite_grid(size: int, sigma: float, effective_size: int) -> np.ndarray:
    """``[F, size, size]`` float64: ``sigma^-2 exp(-r^2/2sigma^2) He_n(x/sigma) He_m(y/sigma)``.

    Sampled at the integer taps of a ``size x size`` grid centred at 0 (x right, y up);
    ``f = n * effective_size + m``.
    """
    c = np.arange(size, dtype=np.float64) - (size - 1) / 2.0
    g = np.exp(-(c**2) / (2.0 * sigma**2)) / sigma
    # 1D factors: along x (columns) and y (rows; y points up so row a has y = -c[a]).
    fx = np.stack([g * _hermite_1d(c / sigma, n) for n in range(effective_size)])
    fy = np.stack([g * _hermite_1d(-c / sigma, m) for m in range(effective_size)])
    # psi[n, m, row, col] = fy[m, row] * fx[n, col]
    psi = np.einsum("ma,nb->nmab", fy, fx)
    return psi.reshape(effective_size**2, size, size)


def _read_only(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=np.float64)
    a.setflags(write=False)
    return a


@functools.lru_cache(maxsize=64)
def _hermite_cached(kernel_size, effective_size, scales, base_sigma) -> np.ndarray:
    s_max = max(scales)
    out = np.zeros((len(scales), effective_size**2, kernel_size, kernel_size))
    for i, s in enumerate(scales):
        support = int(kernel_size * s / s_max) // 2 * 2 + 1
        pad = (kernel_size - support) // 2
        out[i, :, pad : pad + support, pad : pad + support] = hermite_grid(
            support, base_sigma * s, effective_size
        )
    norm = np.sqrt(np.sum(out[0] ** 2, axis=(-2, -1)))
    return _read_only(out / norm[None, :, None, None])


def hermite_basis(
    kernel_size: int,
    effective_size: int,
    scales: Sequence[float],
    base_sigma: float | None = None,
) -> np.ndarray:
    """SESN's multi-scale Hermite basis ``[S, F, k, k]`` float64 (read-only, cached).

    Args:
      kernel_size: odd ``k``; the largest scale uses the full ``k x k`` grid.
      effective_size: ``F = effective_size**2`` functions (Hermite orders ``n, m < effective_size``).
      scales: relative scales, increasing, starting at 1.0 (e.g. ``groups.scale_set(3, 2**0.5)``).
      base_sigma: Gaussian width at scale 1 (default :func:`default_base_sigma`).
    """
    k, e, sc = check_arguments(kernel_size, effective_size, scales)
    sigma = default_base_sigma(e) if base_sigma is None else float(base_sigma)
    if not (math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"base_sigma={base_sigma!r} is invalid: it must be a positive float")
    return _hermite_cached(k, e, sc, sigma)


# --------------------------------------------------------------------------- DISCO (package data


def _data_dir():
    return importlib.resources.files("invjax.bases") / "data"


def data_file_stem(kernel_size: int, effective_size: int, scales: Sequence[float]) -> str:
    """File name (without extension) of a shipped DISCO basis, e.g. ``disco_k15_e7_s1-1.26-1.59-2``."""
    sc = "-".join(f"{s:.3g}" for s in scales)
    return f"disco_k{kernel_size}_e{effective_size}_s{sc}"


@functools.lru_cache(maxsize=1)
def shipped_disco_configurations() -> tuple[dict, ...]:
    """Metadata (the ``.json`` contents) of every shipped DISCO basis, sorted by kernel size."""
    d = _data_dir()
    metas = []
    if d.is_dir():
        for entry in d.iterdir():
            if entry.name.startswith("disco_") and entry.name.endswith(".json"):
                meta = json.loads(entry.read_text())
                meta["_stem"] = entry.name[: -len(".json")]
                metas.append(meta)
    return tuple(sorted(metas, key=lambda m: (m["kernel_size"], m["effective_size"])))


def _describe(meta: dict) -> str:
    sc = ", ".join(f"{s:.4g}" for s in meta["scales"])
    return (
        f"(kernel_size={meta['kernel_size']}, effective_size={meta['effective_size']}, "
        f"scales=({sc}))"
    )


@functools.lru_cache(maxsize=16)
def _disco_cached(stem: str) -> np.ndarray:
    with (_data_dir() / f"{stem}.npz").open("rb") as fh, np.load(fh) as z:
        return _read_only(z["basis"])


def disco_basis(kernel_size: int, effective_size: int, scales: Sequence[float]) -> np.ndarray:
    """The shipped DISCO basis ``[S, F, k, k]`` float64 (read-only, cached) for this configuration.

    Raises ValueError listing the shipped configurations when there is none for the arguments
    (scales are matched up to ``SCALE_TOLERANCE``).
    """
    k, e, sc = check_arguments(kernel_size, effective_size, scales)
    metas = shipped_disco_configurations()
    for meta in metas:
        if (
            meta["kernel_size"] == k
            and meta["effective_size"] == e
            and len(meta["scales"]) == len(sc)
            and all(abs(a - b) <= SCALE_TOLERANCE for a, b in zip(meta["scales"], sc))
        ):
            return _disco_cached(meta["_stem"])
    shipped = "; ".join(_describe(m) for m in metas) or "none"
    raise ValueError(
        f"no shipped DISCO basis for kernel_size={k}, effective_size={e}, scales={sc}: shipped "
        f"configurations are {shipped}. Make one with `python -m invjax.bases.make_disco` or use "
        "basis='hermite'"
    )


def basis(
    kind: str,
    kernel_size: int,
    effective_size: int,
    scales: Sequence[float],
    base_sigma: float | None = None,
) -> np.ndarray:
    """Dispatch ``kind`` in ``('hermite', 'disco')``; returns ``[S, F, k, k]`` float64."""
    if kind == "hermite":
        return hermite_basis(kernel_size, effective_size, scales, base_sigma)
    if kind == "disco":
        if base_sigma is not None:
            raise ValueError(
                f"base_sigma={base_sigma!r} is only used by basis='hermite'; the DISCO basis is "
                "fixed by its data file"
            )
        return disco_basis(kernel_size, effective_size, scales)
    raise ValueError(f"basis kind {kind!r} is unknown: choose one of {BASES}")
