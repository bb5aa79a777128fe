"""Discrete groups of the paper and their actions on images, filters and features.

Groups
  ``C_N`` (N rotations by multiples of 360/N degrees) and ``D_N`` (the same plus a mirror),
  for any N >= 1; ``D_1`` is a single flip and ``C_1`` the trivial group. An element is a pair
  ``(f, r)``: first mirror ``f`` times, then rotate by ``r * 360/N`` degrees counter-clockwise.
  Its index is ``f * N + r`` (rotations first, then the mirrored rotations). Composition:
  ``(f1, r1)(f2, r2) = (f1 ^ f2, r1 + (-1)**f1 * r2 mod N)`` since ``F R F = R^-1``.

Coordinates
  A pixel ``(i, j)`` of an ``H x W`` image has plane coordinates ``x = j - (W-1)/2`` and
  ``y = (H-1)/2 - i`` (origin at the image centre, y up), so a rotation by 90 degrees maps the
  pixel grid onto itself for every size, even or odd. The mirror is ``x -> -x`` (a horizontal
  flip of the image, as in the usual flip augmentation). The action on images is the left action
  ``(L_g x)(p) = x(g^-1 p)`` of the paper, Section 3.1.

Regular representation
  A regular feature map with C fields is ``[..., C * |G|]``, field-major and group-minor
  (channel ``c * |G| + h``). ``(L_g F)(p, h) = F(g^-1 p, g^-1 h)``.

Scales
  ``L_s x(p) = x(p / s)``: ``s < 1`` shrinks the image about its centre. Scale actions and
  rotations that are not multiples of 90 degrees are interpolated (bilinear or bicubic, zeros
  outside the image); 90-degree rotations and flips are exact index permutations.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

INTERPOLATIONS = ("nearest", "bilinear", "bicubic")


@dataclasses.dataclass(frozen=True)
class Group:
    """A discrete subgroup of O(2): ``C_N`` (``flips=False``) or ``D_N`` (``flips=True``)."""

    n_rotations: int
    flips: bool

    def __post_init__(self):
        if not isinstance(self.n_rotations, int | np.integer) or self.n_rotations < 1:
            raise ValueError(
                f"group order n_rotations={self.n_rotations!r} is invalid: it must be an "
                "integer >= 1 (C_N / D_N with N >= 1)"
            )

    @property
    def name(self) -> str:
        return f"{'D' if self.flips else 'C'}{self.n_rotations}"

    def __repr__(self) -> str:
        return self.name

    @property
    def order(self) -> int:
        return self.n_rotations * (2 if self.flips else 1)

    @property
    def elements(self) -> list[tuple[int, int]]:
        """All ``(f, r)`` pairs in index order."""
        n = self.n_rotations
        return [(f, r) for f in range(2 if self.flips else 1) for r in range(n)]

    def index(self, f: int, r: int) -> int:
        return f * self.n_rotations + r % self.n_rotations

    def element(self, g: int) -> tuple[int, int]:
        return divmod(int(g), self.n_rotations)

    @functools.cached_property
    def mul_table(self) -> np.ndarray:
        """``[|G|, |G|]`` int array: ``mul_table[g, h]`` is the index of ``g h``."""
        n = self.n_rotations
        t = np.zeros((self.order, self.order), np.int32)
        for g, (f1, r1) in enumerate(self.elements):
            for h, (f2, r2) in enumerate(self.elements):
                t[g, h] = self.index(f1 ^ f2, r1 + (-1) ** f1 * r2)
        del n
        return t

    @functools.cached_property
    def inverse(self) -> np.ndarray:
        """``[|G|]`` int array: index of ``g^-1``."""
        return np.array([int(np.flatnonzero(self.mul_table[g] == 0)[0]) for g in range(self.order)])

    def angle(self, g: int) -> float:
        """Rotation angle of element ``g`` in radians (counter-clockwise)."""
        return 2.0 * math.pi * self.element(g)[1] / self.n_rotations

    def matrix(self, g: int) -> np.ndarray:
        """The 2x2 float64 matrix of ``g`` acting on plane coordinates ``(x, y)``."""
        f, _ = self.element(g)
        t = self.angle(g)
        rot = np.array([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]])
        return rot @ np.diag([-1.0, 1.0]) if f else rot

    def is_grid_exact(self, g: int) -> bool:
        """True if ``g`` maps every square pixel grid onto itself (a multiple of 90 degrees)."""
        return (4 * self.element(g)[1]) % self.n_rotations == 0

    def regular_permutation(self, g: int) -> np.ndarray:
        """``[|G|]`` indices ``P`` with ``(L_g F)[h] = F[P[h]]``, i.e. ``P[h] = g^-1 h``."""
        return self.mul_table[self.inverse[g]]


def cyclic(n: int) -> Group:
    return Group(int(n), False)


def dihedral(n: int) -> Group:
    return Group(int(n), True)


def parse_group(spec: str | Group) -> Group:
    """``"C8"``, ``"D4"``, ``"D1"``, ... -> :class:`Group`."""
    if isinstance(spec, Group):
        return spec
    m = re.fullmatch(r"\s*([CcDd])\s*(\d+)\s*", str(spec))
    if not m or int(m.group(2)) < 1:
        raise ValueError(
            f"unknown group {spec!r}: expected 'C<N>' or 'D<N>' with N >= 1, e.g. 'C4', 'D8', 'D1'"
        )
    return Group(int(m.group(2)), m.group(1).upper() == "D")


def as_group_fields(module, *names: str) -> None:
    """Give the fields ``names`` of ``module`` (a frozen dataclass, e.g. a Linen module) as
    :class:`Group` objects: layers and models compute with Groups, and a hand-built one may be
    given ``"D4"``, parsed here once when it is constructed. ``None`` stays ``None``; a tuple is
    parsed element by element."""
    for name in names:
        value = getattr(module, name)
        if isinstance(value, list | tuple):
            value = tuple(parse_group(v) for v in value)
        elif value is not None:
            value = parse_group(value)
        object.__setattr__(module, name, value)


def is_subgroup(sub: Group, group: Group) -> bool:
    """Whether ``sub`` embeds in ``group`` (rotation orders divide, flips only if present)."""
    return group.n_rotations % sub.n_rotations == 0 and (group.flips or not sub.flips)


def intersect(a: Group, b: Group) -> Group:
    """``a`` meet ``b``: ``C_N`` / ``D_N`` share their rotations by multiples of ``360/gcd`` degrees
    and, if both have it, the mirror (every group here mirrors about the same axis)."""
    return Group(math.gcd(a.n_rotations, b.n_rotations), a.flips and b.flips)


def subgroup_embedding(group: Group, sub: Group) -> np.ndarray:
    """``[|H|]`` indices into ``group`` of the elements of ``sub`` (in ``sub``'s order)."""
    if not is_subgroup(sub, group):
        raise ValueError(
            f"{sub.name} is not a subgroup of {group.name}: its rotation order must divide "
            f"{group.n_rotations} and it may contain flips only if {group.name} does"
        )
    step = group.n_rotations // sub.n_rotations
    return np.array([group.index(f, r * step) for f, r in sub.elements], np.int32)


def restriction_indices(group: Group, sub: Group) -> np.ndarray:
    """Channel gather that restricts one regular ``group`` field to ``[G:H]`` regular ``sub`` fields.

    Returns ``idx`` of length ``|G|``: restricted channel ``t * |H| + h`` reads ``group`` channel
    ``idx[t * |H| + h] = emb(h) * t_rep``, where ``t_rep`` runs over representatives of the right
    cosets ``H t``. Under ``h0 in H``, ``F(h0^-1 h t) `` is again in coset ``t``, so each block of
    ``|H|`` channels is a regular ``H`` field.
    """
    emb = subgroup_embedding(group, sub)
    seen: set[int] = set()
    reps = []
    for t in range(group.order):
        if t in seen:
            continue
        reps.append(t)
        seen.update(int(group.mul_table[h, t]) for h in emb)
    return np.array([group.mul_table[h, t] for t in reps for h in emb], np.int32)


def check_chain(groups: Sequence[str | Group]) -> list[Group]:
    """Parse a restriction chain such as ``("D8", "D4", "D1")``; each must embed in the previous."""
    gs = [parse_group(g) for g in groups]
    for a, b in zip(gs, gs[1:], strict=False):
        if not is_subgroup(b, a):
            raise ValueError(
                f"restriction chain {[g.name for g in gs]} is invalid: {b.name} is not a "
                f"subgroup of {a.name}"
            )
    return gs


# The scale sets of the paper's networks (one home: the layers' defaults and the configs import
# them). WRN streams: DISCO's STL-10 WRN, 3 scales of ratio 2**(1/2) ([1, 1.41, 2]). Scaled-MNIST:
# SESN's and DISCO's n_S = 4 scales 2**(i/3) (the paper's text; its Table 7 says 3).
DEFAULT_SCALES = (1.0, 2**0.5, 2.0)
MNIST_SCALES = tuple(2 ** (i / 3) for i in range(4))


def scale_set(n: int, ratio: float = 2 ** (1 / 3)) -> tuple[float, ...]:
    """Discrete scales ``ratio**i`` for ``i < n`` (the paper: ``2**(i/3)`` or ``2**(i/2)``)."""
    if n < 1:
        raise ValueError(f"number of scales n={n} is invalid: it must be >= 1")
    return tuple(float(ratio**i) for i in range(n))


# --------------------------------------------------------------------------- image actions


def plane_coordinates(h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` float64 arrays ``[h, w]`` of pixel centres, origin at the image centre, y up."""
    j, i = np.meshgrid(np.arange(w, dtype=np.float64), np.arange(h, dtype=np.float64))
    return j - (w - 1) / 2.0, (h - 1) / 2.0 - i


def _kernel_taps(order: str):
    if order == "nearest":
        return (0,), None
    if order == "bilinear":
        return (0, 1), lambda t: jnp.maximum(0.0, 1.0 - jnp.abs(t))
    if order == "bicubic":
        a = -0.5  # Keys (1981) cubic convolution; interpolates and reproduces quadratics.

        def cubic(t):
            t = jnp.abs(t)
            near = ((a + 2) * t - (a + 3)) * t * t + 1
            far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
            return jnp.where(t <= 1, near, jnp.where(t < 2, far, 0.0))

        return (-1, 0, 1, 2), cubic
    raise ValueError(f"interpolation {order!r} is unknown: choose one of {INTERPOLATIONS}")


def sample(x, rows, cols, order: str = "bilinear", axes: tuple[int, int] = (-3, -2)):
    """Sample ``x`` at fractional pixel positions ``(rows, cols)`` (each ``[Ho, Wo]``), zeros outside.

    ``x`` has its two spatial axes at ``axes``; the output replaces them by ``[Ho, Wo]``.
    Jit-able; ``rows``/``cols`` may be traced.
    """
    x = jnp.moveaxis(jnp.asarray(x), axes, (0, 1))
    h, w = x.shape[:2]
    taps, kern = _kernel_taps(order)
    rows = jnp.asarray(rows, x.dtype if jnp.issubdtype(x.dtype, jnp.floating) else jnp.float32)
    cols = jnp.asarray(cols, rows.dtype)
    if kern is None:
        r0, c0 = jnp.round(rows), jnp.round(cols)
        base_r, base_c = r0, c0
    else:
        base_r, base_c = jnp.floor(rows), jnp.floor(cols)
    out = 0.0
    for dr in taps:
        ri = base_r + dr
        wr = 1.0 if kern is None else kern(rows - ri)
        rin = (ri >= 0) & (ri <= h - 1)
        ric = jnp.clip(ri, 0, h - 1).astype(jnp.int32)
        for dc in taps:
            ci = base_c + dc
            wc = 1.0 if kern is None else kern(cols - ci)
            valid = rin & (ci >= 0) & (ci <= w - 1)
            cic = jnp.clip(ci, 0, w - 1).astype(jnp.int32)
            wgt = jnp.where(valid, wr * wc, 0.0)
            vals = x[ric, cic]
            out = out + vals * wgt.reshape(wgt.shape + (1,) * (vals.ndim - 2)).astype(vals.dtype)
    return jnp.moveaxis(out, (0, 1), axes)


def affine(x, matrix, order: str = "bilinear", axes: tuple[int, int] = (-3, -2)):
    """``(L x)(p) = x(matrix^-1 p)`` about the image centre, plane coordinates as in the module doc.

    ``matrix`` is 2x2 acting on ``(x, y)``; may be traced (jit-able).
    """
    h, w = x.shape[axes[0]], x.shape[axes[1]]
    px, py = plane_coordinates(h, w)
    m = jnp.asarray(matrix, jnp.float32)
    inv = jnp.linalg.inv(m)
    sx = inv[0, 0] * px + inv[0, 1] * py
    sy = inv[1, 0] * px + inv[1, 1] * py
    cols = sx + (w - 1) / 2.0
    rows = (h - 1) / 2.0 - sy
    return sample(x, rows, cols, order, axes)


def rotate(x, angle: float, order: str = "bilinear", axes: tuple[int, int] = (-3, -2)):
    """Rotate by ``angle`` radians counter-clockwise about the centre; exact for multiples of 90."""
    quarter = angle / (math.pi / 2)
    if isinstance(angle, int | float) and abs(quarter - round(quarter)) < 1e-12:
        return jnp.rot90(jnp.asarray(x), int(round(quarter)) % 4, axes=axes)
    c, s = jnp.cos(angle), jnp.sin(angle)
    return affine(x, jnp.array([[c, -s], [s, c]]), order, axes)


def flip(x, axes: tuple[int, int] = (-3, -2)):
    """The mirror ``x -> -x`` of the plane: reverses the column axis (exact)."""
    return jnp.flip(jnp.asarray(x), axis=axes[1])


def transform(x, group: Group, g: int, order: str = "bilinear", axes: tuple[int, int] = (-3, -2)):
    """``L_g x`` for an element ``g`` of ``group`` acting on the spatial axes only."""
    f, r = group.element(g)
    if f:
        x = flip(x, axes)
    return rotate(x, 2.0 * math.pi * r / group.n_rotations, order, axes)


def transform_regular(x, group: Group, g: int, order: str = "bilinear"):
    """``L_g`` on a regular feature map ``[..., H, W, C * |G|]``: spatial action and channel permutation."""
    y = transform(x, group, g, order)
    c = y.shape[-1] // group.order
    y = y.reshape(y.shape[:-1] + (c, group.order))
    y = jnp.take(y, jnp.asarray(group.regular_permutation(g)), axis=-1)
    return y.reshape(y.shape[:-2] + (c * group.order,))


def scale(x, s, order: str = "bicubic", axes: tuple[int, int] = (-3, -2)):
    """``L_s x(p) = x(p / s)`` about the image centre (``s < 1`` shrinks); same output size."""
    return affine(x, jnp.eye(2) * s, order, axes)


def resize(x, size: tuple[int, int], order: str = "bicubic", axes: tuple[int, int] = (-3, -2)):
    """Resample to ``size`` so that the image keeps its extent (pixel centres aligned as corners=False)."""
    h, w = x.shape[axes[0]], x.shape[axes[1]]
    ho, wo = size
    rows = (np.arange(ho) + 0.5) * (h / ho) - 0.5
    cols = (np.arange(wo) + 0.5) * (w / wo) - 0.5
    rr, cc = np.meshgrid(rows, cols, indexing="ij")
    return sample(x, rr, cc, order, axes)
