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

Hermite type B (SESN's ``steerable_B``; every peer Scaled-MNIST network)
  At scale ``s`` a set of Gaussian widths ``t_j = base_sigma * s / mult**j`` (``j = 0, 1, ...``),
  each with the Hermite functions of total order ``n + m <= max_order`` (15 for order 4),
  taken in that order until there are ``F = effective_size**2`` (49: three full widths and four
  functions of the fourth), on the same support as type A (:func:`hermite_b_grid`). The widths
  overlap, so the span is smaller than ``F``: on SESN's 7 x 7 smallest support rank 45 of 49
  (:func:`numerical_rank`). Kinds (:data:`TYPE_B`, the peers' Scaled-MNIST networks):
  ``hermite_b`` SESN's ``mnist_ses_vector_56`` (width 2.0 at scale 1, mult 1.5, max order 4,
  kernel 15, scales ``2**(i/3)``: SESN's widths 2.0, 2.52, 3.17, 4.0); ``disco_b`` and
  ``disco_b_plus`` DISCO's ``disco_b`` mixing of the shipped DISCO basis (width 1.9, max order
  4, mult 1.5 without and 1.9 with scale augmentation, DISCO's ``exp_mnist.sh``).

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
  The type-B kinds ``disco_b*`` mix a second shipped fit, ``peer_disco_*``, made with DISCO's
  own objective (``make_disco --objective disco``: unsquared residual norms, circular padding,
  PyTorch's corner-anchored bicubic resize, DISCO's rounded scales); it agrees with DISCO's
  published bases at the in-between scales (docs/differences.md).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.resources
import json
import math
from collections.abc import Sequence

import numpy as np

BASES = ("hermite", "disco", "hermite_b", "disco_b", "disco_b_plus")
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


def hermite_b_grid(
    size: int, sigma: float, max_order: int, mult: float, num_funcs: int
) -> np.ndarray:
    """``[num_funcs, size, size]`` float64: Hermite type B at the widths ``sigma / mult**j``.

    For ``j = 0, 1, ...`` and, within a width ``t``, for ``n = 0..max_order`` (order along x,
    columns) and ``m = 0..max_order - n`` (along y, rows, y up): ``t^-2 exp(-r^2/2t^2)
    He_n(x/t) He_m(y/t)``; the first ``num_funcs`` of that sequence (SESN's and DISCO's order,
    whose first array axis is this y with the sign of odd ``m`` flipped, since they sample
    rows downwards).
    """
    per_width = (max_order + 1) * (max_order + 2) // 2
    widths = [sigma / mult**j for j in range(math.ceil(num_funcs / per_width))]
    c = np.arange(size, dtype=np.float64) - (size - 1) / 2.0
    funcs = []
    for t in widths:
        g = np.exp(-(c**2) / (2.0 * t**2)) / t
        for n in range(max_order + 1):
            fx = g * _hermite_1d(c / t, n)
            for m in range(max_order + 1 - n):
                fy = g * _hermite_1d(-c / t, m)
                funcs.append(np.outer(fy, fx))  # [row, col] = fy(row) * fx(col)
    return np.stack(funcs[:num_funcs])


def numerical_rank(functions: np.ndarray, dtype=np.float32) -> int:
    """Rank of ``[F, k, k]`` functions as the peers compute it (``np.linalg.matrix_rank`` of the
    float32 ``[F, k*k]`` matrix, DISCO's ``_calculate_rank``)."""
    f = np.asarray(functions)
    return int(np.linalg.matrix_rank(f.reshape(len(f), -1).astype(dtype)))


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


@dataclasses.dataclass(frozen=True)
class TypeB:
    """A named type-B basis: the functions it mixes (``'hermite'``: sampled directly, SESN;
    ``'disco'``: the shipped DISCO basis's delta-parametrised solution, DISCO) and the widths."""

    source: str
    base_sigma: float  # Gaussian width at scale 1 (the peers' "min scale")
    mult: float
    max_order: int = 4
    peer: str = ""


TYPE_B: dict[str, TypeB] = {
    "hermite_b": TypeB("hermite", 2.0, 1.5, 4, "SESN mnist_ses_vector_56"),
    "disco_b": TypeB("disco", 1.9, 1.5, 4, "DISCO mnist_disco, exp_mnist.sh (Scale-MNIST)"),
    "disco_b_plus": TypeB("disco", 1.9, 1.9, 4, "DISCO mnist_disco, exp_mnist.sh (Scale-MNIST +)"),
}


@functools.lru_cache(maxsize=64)
def _hermite_b_cached(kernel_size, effective_size, scales, sigma, mult, max_order) -> np.ndarray:
    s_max = max(scales)
    num = effective_size**2
    out = np.zeros((len(scales), num, kernel_size, kernel_size))
    for i, s in enumerate(scales):
        support = int(kernel_size * s / s_max) // 2 * 2 + 1
        if support < 3:
            raise ValueError(
                f"kernel_size={kernel_size} gives scale {s:.4g} a support of {support} tap(s): "
                "type B needs at least 3 (a larger kernel_size or fewer scales)"
            )
        pad = (kernel_size - support) // 2
        out[i, :, pad : pad + support, pad : pad + support] = hermite_b_grid(
            support, sigma * s, max_order, mult, num
        )
    norm = np.sqrt(np.sum(out[0] ** 2, axis=(-2, -1)))
    return _read_only(out / norm[None, :, None, None])


def hermite_b_basis(
    kernel_size: int,
    effective_size: int,
    scales: Sequence[float],
    base_sigma: float = 2.0,
    mult: float = 1.5,
    max_order: int = 4,
) -> np.ndarray:
    """SESN's type-B Hermite basis ``[S, F, k, k]`` float64 (read-only, cached).

    At scale ``s`` (support ``int(k * s / s_max) // 2 * 2 + 1``, zero-padded to ``k``) the
    ``F = effective_size**2`` functions of :func:`hermite_b_grid` with widths
    ``base_sigma * s / mult**j``; each divided by its norm at the smallest scale. Defaults:
    SESN's ``mnist_ses_vector_56``.
    """
    k, e, sc = check_arguments(kernel_size, effective_size, scales)
    sigma, mult, order = _check_type_b(base_sigma, mult, max_order)
    return _hermite_b_cached(k, e, sc, sigma, mult, order)


def _check_type_b(base_sigma, mult, max_order) -> tuple[float, float, int]:
    if not (isinstance(base_sigma, int | float) and math.isfinite(base_sigma) and base_sigma > 0):
        raise ValueError(f"base_sigma={base_sigma!r} is invalid: it must be a positive float")
    if not (isinstance(mult, int | float) and math.isfinite(mult) and mult > 1):
        raise ValueError(f"mult={mult!r} is invalid: type B needs a width ratio > 1 (e.g. 1.5)")
    if isinstance(max_order, bool) or not isinstance(max_order, int) or max_order < 0:
        raise ValueError(f"max_order={max_order!r} is invalid: it must be an integer >= 0")
    return float(base_sigma), float(mult), int(max_order)


# --------------------------------------------------------------------------- DISCO (package data


def _data_dir():
    return importlib.resources.files("invjax.bases") / "data"


def data_file_stem(kernel_size: int, effective_size: int, scales: Sequence[float]) -> str:
    """File name (without extension) of a shipped DISCO basis, e.g. ``disco_k15_e7_s1-1.26-1.59-2``."""
    sc = "-".join(f"{s:.3g}" for s in scales)
    return f"disco_k{kernel_size}_e{effective_size}_s{sc}"


#: File prefixes of the shipped DISCO fits: invjax's objective (the ``disco`` kind) and DISCO's
#: own (``peer_``: the ``disco_b`` kinds), see :mod:`invjax.bases.make_disco`.
DISCO_FITS = {"invjax": "disco_", "peer": "peer_disco_"}


@functools.lru_cache(maxsize=2)
def shipped_disco_configurations(fit: str = "invjax") -> tuple[dict, ...]:
    """Metadata (the ``.json`` contents) of every shipped DISCO basis of one ``fit``
    (:data:`DISCO_FITS`), sorted by kernel size."""
    d = _data_dir()
    metas = []
    if d.is_dir():
        for entry in d.iterdir():
            if entry.name.startswith(DISCO_FITS[fit]) and entry.name.endswith(".json"):
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
    return _disco_cached(_shipped_disco_stem(k, e, sc))


def _shipped_disco_stem(k: int, e: int, sc: tuple[float, ...], fit: str = "invjax") -> str:
    metas = shipped_disco_configurations(fit)
    for meta in metas:
        if (
            meta["kernel_size"] == k
            and meta["effective_size"] == e
            and len(meta["scales"]) == len(sc)
            and all(abs(a - b) <= SCALE_TOLERANCE for a, b in zip(meta["scales"], sc))
        ):
            return meta["_stem"]
    shipped = "; ".join(_describe(m) for m in metas) or "none"
    raise ValueError(
        f"no shipped DISCO basis ({fit} fit) for kernel_size={k}, effective_size={e}, "
        f"scales={sc}: shipped configurations are {shipped}. Make one with `python -m "
        f"invjax.bases.make_disco{' --objective disco' if fit == 'peer' else ''}` or use "
        "basis='hermite'"
    )


@functools.lru_cache(maxsize=16)
def _disco_raw(stem: str) -> np.ndarray:
    with (_data_dir() / f"{stem}.npz").open("rb") as fh, np.load(fh) as z:
        return _read_only(z["raw"])


@functools.lru_cache(maxsize=16)
def _disco_b_cached(stem, effective_size, sigma, mult, max_order) -> np.ndarray:
    raw = _disco_raw(stem)  # [S, F, k, k]; raw[s, a * e + b]: tap (row a, column b) of the grid
    e = effective_size
    w = hermite_b_grid(e, sigma, max_order, mult, e * e).reshape(e * e, e * e)
    out = np.einsum("gf,sfhw->sghw", w, raw)
    norm = np.sqrt(np.sum(out[0] ** 2, axis=(-2, -1)))
    return _read_only(out / norm[None, :, None, None])


def disco_b_basis(
    kernel_size: int,
    effective_size: int,
    scales: Sequence[float],
    base_sigma: float = 1.9,
    mult: float = 1.5,
    max_order: int = 4,
) -> np.ndarray:
    """DISCO's ``disco_b`` basis ``[S, F, k, k]`` float64 (read-only, cached).

    The delta-parametrised DISCO basis fitted with DISCO's own objective (the shipped
    ``peer_disco_*`` files, ``python -m invjax.bases.make_disco --objective disco``: at scale 1
    the ``effective_size**2`` unit taps, dilated at integer scales, fitted in between) mixed by the
    ``F x F`` matrix of type-B Hermite functions on the effective grid
    (:func:`hermite_b_grid` at width ``base_sigma``), each divided by its norm at scale 1. At
    scale 1 the functions are exactly that type-B grid; the mixing keeps the raw basis's
    equivariance residuals in the same span. Defaults: DISCO's ``exp_mnist.sh`` Scale-MNIST.
    """
    k, e, sc = check_arguments(kernel_size, effective_size, scales)
    sigma, mult, order = _check_type_b(base_sigma, mult, max_order)
    return _disco_b_cached(_shipped_disco_stem(k, e, sc, "peer"), e, sigma, mult, order)


def basis(
    kind: str,
    kernel_size: int,
    effective_size: int,
    scales: Sequence[float],
    base_sigma: float | None = None,
) -> np.ndarray:
    """Dispatch ``kind`` in :data:`BASES`; returns ``[S, F, k, k]`` float64.

    For the type-B kinds (:data:`TYPE_B`) ``base_sigma`` overrides the named width at scale 1.
    """
    if kind == "hermite":
        return hermite_basis(kernel_size, effective_size, scales, base_sigma)
    if kind == "disco":
        if base_sigma is not None:
            raise ValueError(
                f"base_sigma={base_sigma!r} is only used by basis='hermite'; the DISCO basis is "
                "fixed by its data file"
            )
        return disco_basis(kernel_size, effective_size, scales)
    if kind in TYPE_B:
        t = TYPE_B[kind]
        sigma = t.base_sigma if base_sigma is None else base_sigma
        make = hermite_b_basis if t.source == "hermite" else disco_b_basis
        return make(kernel_size, effective_size, scales, sigma, t.mult, t.max_order)
    raise ValueError(f"basis kind {kind!r} is unknown: choose one of {BASES}")
