"""Winograd's minimal filtering ``F(m x m, k x k)``: a stride-1 ``'SAME'`` correlation as one
batched matrix product per transformed tile point.

For every ``m x m`` block of output pixels the ``n x n`` input tile above it (``n = m + k - 1``)
is transformed, ``V = B^T d B``, the filter once, ``U = G g G^T``, and the block is ``Y = A^T (U
* V) A`` where ``*`` multiplies the ``n^2`` points elementwise over pixels and as a matrix product
over channels: ``M[p] = V[p] U[p]``, ``[tiles, I] x [I, O]`` for each point ``p``. For ``F(2 x 2,
5 x 5)`` that is 36 instead of 100 multiply-adds per block and channel pair (2.8x fewer).

The transforms are small constant matrices applied as explicit sums of strided slices
(:func:`_combine`: zeros skipped, +-1 without a product), which XLA fuses into one loop each
(as ``einsum`` against the 6x6 matrices the input's transform took 2.3x as long:
docs/benchmarks.md, "The E(2) lowerings"). The gradient is written out (:func:`correlation`'s ``custom_vjp``) rather than
traced through the slices: the input's gradient is the same correlation of the output's gradient
with the flipped, transposed filter (the transpose of a ``'SAME'`` correlation with an odd
kernel), the filter's gradient one more product per point, ``dU[p] = V[p]^T dM[p]`` with ``dM =
A dY A^T``, then ``dg = G^T dU G``. The backward pass transforms the input again instead of keeping
``V`` (``n^2 / m^2`` times the input) alive from the forward pass.

Everything here is linear in the input, so a 90-degree rotation or a flip of the image changes
only the rounding: the equivariance tests hold each E(2) layer to float32 rounding under this
lowering (tests/test_e2_lowering.py).
"""

from __future__ import annotations

import functools
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

#: The interpolation points of ``F(2 x 2, k x k)`` per kernel size ``k`` (and the point at
#: infinity): ``k`` finite points each. These keep the error against a float64 correlation within
#: about 8x the direct method's (measured 3.3e-6 against 4.2e-7 of the largest output for ``k =
#: 5``, 256 channels; points 0, +-1, +-2 gave 7.6e-6).
WINOGRAD_POINTS = {
    3: (Fraction(0), Fraction(1), Fraction(-1)),
    5: (Fraction(0), Fraction(1), Fraction(-1), Fraction(1, 2), Fraction(-2)),
}
#: The output tile: ``F(m x m, k x k)`` with ``m = 2``.
WINOGRAD_TILE = 2
#: The most bytes of transformed input tiles one product holds: past it, chunks of images (as
#: ``'im2col'``'s patches, :data:`invjax.ops.conv.IM2COL_MAX_BYTES`).
WINOGRAD_MAX_BYTES = 1 << 30


def _exact_inverse(rows):
    """The inverse of a square matrix of Fractions by Gauss-Jordan elimination (exact)."""
    n = len(rows)
    a = [list(r) + [Fraction(int(i == j)) for j in range(n)] for i, r in enumerate(rows)]
    for col in range(n):
        piv = next(i for i in range(col, n) if a[i][col] != 0)
        a[col], a[piv] = a[piv], a[col]
        a[col] = [v / a[col][col] for v in a[col]]
        for i in range(n):
            if i != col and a[i][col] != 0:
                a[i] = [v - a[i][col] * w for v, w in zip(a[i], a[col], strict=True)]
    return [r[n:] for r in a]


def winograd_matrices(kernel_size: int, tile: int = WINOGRAD_TILE):
    """``(A^T [m, n], G [n, k], B^T [n, n])`` of the minimal filtering algorithm ``F(m, k)``
    (``n = m + k - 1``) at :data:`WINOGRAD_POINTS`: for every ``d [n]`` and ``g [k]``,
    ``A^T ((G g) * (B^T d)) = y`` with ``y_i = sum_t d_{i + t} g_t``, ``i < m`` (a correlation).
    ``A^T`` and ``G`` evaluate the polynomials at the points (``A^T_ij = a_j^i``, ``G_jt =
    a_j^t``; the point at infinity takes the top coefficients), so the identity is ``V B^T = I``
    with ``V_sj = a_j^s`` (``s < n``): ``B^T = V^-1``, computed exactly in fractions and rounded
    to float64 once."""
    if kernel_size not in WINOGRAD_POINTS:
        raise ValueError(
            f"winograd: kernel size {kernel_size} is invalid: choose one of "
            f"{sorted(WINOGRAD_POINTS)}"
        )
    pts = WINOGRAD_POINTS[kernel_size]
    m, k = tile, kernel_size
    n = m + k - 1
    if len(pts) != n - 1:
        raise ValueError(f"winograd: F({m}, {k}) needs {n - 1} finite points, got {len(pts)}")
    at = [[a**i for a in pts] + [Fraction(int(i == m - 1))] for i in range(m)]
    g = [[a**t for t in range(k)] for a in pts] + [[Fraction(int(t == k - 1)) for t in range(k)]]
    v = [[a**s for a in pts] + [Fraction(int(s == n - 1))] for s in range(n)]
    as_float = lambda rows: np.array([[float(e) for e in r] for r in rows], np.float64)  # noqa: E731
    return as_float(at), as_float(g), as_float(_exact_inverse(v))


def _combine(matrix, parts):
    """``[sum_j matrix[i, j] parts[j] for each row i]``: a small constant matrix applied to a list
    of equally shaped arrays as explicit sums (zero entries skipped, +-1 without a product)."""
    out = []
    for row in np.asarray(matrix):
        acc = None
        for c, part in zip(row, parts, strict=True):
            if c == 0:
                continue
            term = part if c == 1 else -part if c == -1 else part * np.asarray(c, part.dtype)
            acc = term if acc is None else acc + term
        out.append(acc if acc is not None else jnp.zeros_like(parts[0]))
    return out


def winograd_tiles(x, kernel_size: int, tile: int = WINOGRAD_TILE):
    """``[B, H, W, I] -> [n, n, B, T_h, T_w, I]``: the input tiles of every ``tile x tile``
    output block (``T = ceil(H / tile)``, ``n = tile + k - 1``) transformed, ``V = B^T d B``
    (:func:`winograd_matrices`), along each axis as combinations of ``n`` strided slices of the
    zero-padded image. ``(n / tile)^2`` times the input's memory."""
    _, _, bt = winograd_matrices(kernel_size, tile)
    _, h, w, _ = x.shape
    n, p = tile + kernel_size - 1, (kernel_size - 1) // 2
    th, tw = -(-h // tile), -(-w // tile)
    xp = jnp.pad(x, ((0, 0), (p, p + th * tile - h), (p, p + tw * tile - w), (0, 0)))
    rows = _combine(bt, [xp[:, u : u + tile * th : tile] for u in range(n)])  # n x [B, Th, Wp, I]
    return jnp.stack(
        [
            jnp.stack(_combine(bt, [r[:, :, u : u + tile * tw : tile] for u in range(n)]))
            for r in rows
        ]
    )


def _kernel_points(kernel, tile: int):
    """``[k, k, I, O] -> [n, n, I, O]``: the transformed filter ``U = G g G^T``."""
    _, g, _ = winograd_matrices(kernel.shape[0], tile)
    g = jnp.asarray(g, kernel.dtype)
    return jnp.einsum("ak,xl,klco->axco", g, g, kernel, precision=lax.Precision.HIGHEST)


def _untile(m, h: int, w: int, tile: int):
    """``[n, n, B, T_h, T_w, O] -> [B, H, W, O]``: ``Y = A^T M A`` per tile, the ``tile x tile``
    blocks interleaved and cropped to ``H x W``."""
    n = m.shape[0]
    at, _, _ = winograd_matrices(n - tile + 1, tile)
    b, th, tw = m.shape[2:5]
    cols = [_combine(at, [m[x, y] for y in range(n)]) for x in range(n)]  # n x tile
    y = [_combine(at, [cols[x][j] for x in range(n)]) for j in range(tile)]  # y[j][i]
    y = jnp.stack([jnp.stack([y[j][i] for j in range(tile)], 3) for i in range(tile)], 2)
    return y.reshape(b, th * tile, tw * tile, -1)[:, :h, :w]


def _tile_gradient(dy, kernel_size: int, tile: int):
    """``[B, H, W, O] -> [n, n, B, T_h, T_w, O]``: the transpose of :func:`_untile`, ``dM = A dY
    A^T`` per tile (positions past ``H x W`` contribute zeros)."""
    at, _, _ = winograd_matrices(kernel_size, tile)
    _, h, w, _ = dy.shape
    th, tw = -(-h // tile), -(-w // tile)
    dy = jnp.pad(dy, ((0, 0), (0, th * tile - h), (0, tw * tile - w), (0, 0)))
    blocks = [[dy[:, i::tile, j::tile] for j in range(tile)] for i in range(tile)]
    rows = [_combine(at.T, [blocks[i][j] for i in range(tile)]) for j in range(tile)]  # [j][x]
    n = at.shape[1]
    return jnp.stack(
        [jnp.stack(_combine(at.T, [rows[j][x] for j in range(tile)])) for x in range(n)]
    )


def _forward(x, kernel, precision, tile: int):
    v = winograd_tiles(x, kernel.shape[0], tile)
    m = jnp.einsum("xabtsc,xaco->xabtso", v, _kernel_points(kernel, tile), precision=precision)
    return _untile(m, x.shape[1], x.shape[2], tile)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def correlation(x, kernel, precision=None, tile: int = WINOGRAD_TILE):
    """Stride-1 ``'SAME'`` correlation ``y[b, i, j, o] = sum_{u, v, c} x[b, i + u - p, j + v - p,
    c] g[u, v, c, o]`` (``p = (k - 1) / 2``, zero padding) of ``x [B, H, W, I]`` with ``kernel [k,
    k, I, O]`` by ``F(tile x tile, k x k)``; ``precision`` (a ``lax.Precision``) of the products
    per tile point. Its gradient is written out (module docstring)."""
    return _forward(x, kernel, precision, tile)


def _correlation_fwd(x, kernel, precision, tile):
    return _forward(x, kernel, precision, tile), (x, kernel)


def _correlation_bwd(precision, tile, residuals, dy):
    x, kernel = residuals
    k = kernel.shape[0]
    dx = _forward(dy, jnp.transpose(kernel[::-1, ::-1], (0, 1, 3, 2)), precision, tile)
    du = jnp.einsum(
        "xabtsc,xabtso->xaco",
        winograd_tiles(x, k, tile),
        _tile_gradient(dy, k, tile),
        precision=precision,
    )
    _, g, _ = winograd_matrices(k, tile)
    g = jnp.asarray(g, kernel.dtype)
    dk = jnp.einsum("ak,xl,axco->klco", g, g, du, precision=lax.Precision.HIGHEST)
    return dx.astype(x.dtype), dk.astype(kernel.dtype)


correlation.defvjp(_correlation_fwd, _correlation_bwd)


def winograd_chunk(input_shape, kernel_size: int, max_bytes: int = WINOGRAD_MAX_BYTES):
    """The images per product for an input ``[B, H, W, I]``: ``B`` where its transformed float32
    tiles (``4 B T_h T_w n^2 I`` bytes) fit in ``max_bytes`` or ``B`` is symbolic, else the most
    images whose tiles fit in a quarter of it (at least one)."""
    b, h, w, c = input_shape
    n, m = WINOGRAD_TILE + kernel_size - 1, WINOGRAD_TILE
    per_image = 4 * (-(-h // m)) * (-(-w // m)) * n * n * c
    if not isinstance(b, int | np.integer) or b * per_image <= max_bytes:
        return b
    return max(1, max_bytes // (4 * per_image))
