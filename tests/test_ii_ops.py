"""Invariant Integration ops: fast closed forms against the references, against float64 NumPy
loops, and bad input. Real images only (scikit-image photos, scikit-learn digits)."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from invjax import groups as G
from invjax.data.digits import digits
from invjax.equivariance import relative_error
from invjax.ops import ii

RTOL = 1e-5  # "the two agree to 1e-5 relative": max |fast - ref| / max |ref|


def rel(a, b) -> float:
    return relative_error(a, b, ord=np.inf)


def kernel(shape, seed=0):
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


@pytest.fixture(scope="module")
def digit_batch():
    images, _ = digits()
    return jnp.asarray(images[:4])  # [4, 28, 28, 1], zero background


@pytest.mark.parametrize("group", [None, "C4", "D4", "C8", "D8"])
def test_ws_fast_and_weight_map_match_reference(photo_batch, group):
    group = group and G.parse_group(group)
    x = jnp.asarray(photo_batch)
    k = kernel((3, 3, 3, 5))
    ref = ii.ws_integrate_reference(x, k, group)
    fast = ii.ws_integrate(x, k, group)
    wmap = ii.ws_integrate_weight_map(x, k, group)
    chex.assert_shape(fast, (2, 5))
    # measured: 1.3e-7 .. 2.6e-7 for every group
    assert rel(fast, ref) < RTOL
    assert rel(wmap, ref) < RTOL


def test_ws_fast_matches_reference_non_square_k5(photo_batch):
    x = jnp.asarray(photo_batch)[:, 3:27]  # 24 x 32: windows differ per axis
    k = kernel((5, 5, 3, 4), seed=1)
    for group in (G.dihedral(4), G.cyclic(8)):
        assert rel(ii.ws_integrate(x, k, group), ii.ws_integrate_reference(x, k, group)) < RTOL


def _brute_force_ws(x, kernels):
    """Equation (5) with float64 loops: 1/(|G| U V) sum_g sum_t sum_y x(y) K_g(y - t)."""
    b, h, w, ci = x.shape
    n, k = kernels.shape[0], kernels.shape[1]
    p = (k - 1) // 2
    out = np.zeros((b, kernels.shape[-1]))
    for g in range(n):
        for ti in range(h):
            for tj in range(w):
                for a in range(k):
                    for c in range(k):
                        yi, yj = ti + a - p, tj + c - p
                        if 0 <= yi < h and 0 <= yj < w:
                            out += x[:, yi, yj, :] @ kernels[g, a, c]
    return out / (n * h * w)


def test_ws_reference_matches_float64_loops(photo32):
    x = np.asarray(photo32, np.float64)[:, 10:17, 8:17]  # 7 x 9 crop keeps the loops short
    k = kernel((3, 3, 3, 2), seed=2)
    group = G.dihedral(8)
    kernels = np.asarray(ii.transformed_kernels(k, group), np.float64)
    want = _brute_force_ws(x, kernels)
    got = ii.ws_integrate(jnp.asarray(x, jnp.float32), k, group)
    assert rel(got, want) < RTOL
    got_ref = ii.ws_integrate_reference(jnp.asarray(x, jnp.float32), k, group)
    assert rel(got_ref, want) < RTOL


def test_group_operator_can_be_built_inside_jit(photo32):
    ii.group_average_operator.cache_clear()  # first request happens while tracing
    x = jnp.asarray(photo32)
    k = kernel((3, 3, 3, 2), seed=7)
    got = jax.jit(lambda x, k: ii.ws_integrate(x, k, G.dihedral(8)))(x, k)
    assert rel(got, ii.ws_integrate_reference(x, k, G.dihedral(8))) < RTOL


def test_symmetrized_kernel_is_invariant_under_the_group():
    k = kernel((3, 3, 2, 3), seed=3)
    for group in (G.cyclic(4), G.dihedral(4), G.dihedral(8)):
        kbar = ii.symmetrized_kernel(k, group)
        np.testing.assert_allclose(
            kbar, ii.transformed_kernels(k, group).mean(0), rtol=1e-5, atol=1e-6
        )
        for g in range(group.order):
            if group.is_grid_exact(g):
                chex.assert_trees_all_close(
                    G.transform(kbar, group, g, axes=(0, 1)), kbar, rtol=1e-6, atol=1e-6
                )


def test_window_sums_and_weight_map_are_consistent(photo32):
    x = np.asarray(photo32, np.float64)
    s = ii.window_sums(jnp.asarray(photo32), 3)
    chex.assert_shape(s, (1, 3, 3, 3))
    # the centre tap reads every pixel; tap (0, 0) misses the last row and the last column
    np.testing.assert_allclose(s[0, 1, 1], x[0].sum((0, 1)), rtol=1e-5)
    np.testing.assert_allclose(s[0, 0, 0], x[0, :-1, :-1].sum((0, 1)), rtol=1e-5)
    m = ii.ws_weight_map(jnp.ones((3, 3, 1, 1)), 6, 5)
    # interior pixels see all 9 taps, corners 4: M = count / (U V)
    np.testing.assert_allclose(m[2, 2, 0, 0], 9 / 30, rtol=1e-6)
    np.testing.assert_allclose(m[0, 0, 0, 0], 4 / 30, rtol=1e-6)


def test_group_average_operator_of_90_degree_groups_is_a_permutation_average():
    op = ii.group_average_operator(G.cyclic(4), 3, "bilinear")
    np.testing.assert_allclose(op.sum(0), np.ones(9), atol=1e-6)  # columns keep the mass
    assert set(np.round(op.ravel() * 4).astype(int)) <= {0, 1, 2, 3, 4}


def test_scale_ws_fast_matches_reference(photo_batch, digit_batch):
    for x in (jnp.asarray(photo_batch), digit_batch):
        k = kernel((3, 3, x.shape[-1], 6), seed=4)
        ref = ii.scale_ws_reference(x, k)
        fast = ii.scale_ws_integrate(x, k)
        chex.assert_shape(fast, (x.shape[0], 6))
        assert rel(fast, ref) < RTOL  # measured 2e-7


def test_monomial_fast_matches_reference(photo_batch, digit_batch):
    for x in (jnp.asarray(photo_batch), digit_batch):
        pairs = ii.draw_monomial_pairs(25, x.shape[-1])
        ref = ii.scale_monomial_reference(x, pairs)
        fast = ii.scale_monomial_integrate(x, pairs)
        chex.assert_shape(fast, (x.shape[0], 25))
        assert np.isfinite(np.asarray(ref)).all()
        assert rel(fast, ref) < RTOL


def test_monomial_reference_matches_float64_numpy(digit_batch):
    x = np.asarray(digit_batch[:2], np.float64)
    pairs = ii.draw_monomial_pairs(6, 1, n_factors=3, max_exponent=3, seed=5)
    eps = ii.DEFAULT_EPSILON
    xp = np.maximum(np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0))), eps)
    want = np.zeros((2, 6))
    for j in range(6):
        sums = []
        for s in range(2):
            prod = np.ones((2, 28, 28))
            for c, (dr, dc), b in zip(
                pairs.channels[j, s], pairs.offsets[j, s], pairs.exponents[j, s]
            ):
                prod *= xp[:, 1 + dr : 29 + dr, 1 + dc : 29 + dc, c] ** b
            sums.append(prod.sum((1, 2)))
        want[:, j] = sums[0] / sums[1]
    assert rel(ii.scale_monomial_integrate(jnp.asarray(x, jnp.float32), pairs), want) < RTOL


def test_monomial_draws_are_deterministic_and_order_balanced():
    a = ii.draw_monomial_pairs(25, 7, seed=11)
    b = ii.draw_monomial_pairs.__wrapped__(25, 7, seed=11)  # bypass the cache
    c = ii.draw_monomial_pairs(25, 7, seed=12)
    np.testing.assert_array_equal(a.channels, b.channels)
    np.testing.assert_array_equal(a.offsets, b.offsets)
    assert not np.array_equal(a.channels, c.channels)
    np.testing.assert_allclose(a.orders[:, 0], a.orders[:, 1])  # equal homogeneous order
    assert a.channels.max() < 7 and np.abs(a.offsets).max() <= 1
    assert a.exponents[:, 0].min() >= 1 and a.exponents[:, 0].max() <= 2
    e = a.exponent_kernel(7)
    chex.assert_shape(e, (3, 3, 7, 50))
    np.testing.assert_allclose(e.sum((0, 1, 2)), a.orders.reshape(-1), rtol=1e-6)


def test_mixed_pool_matches_loops(photo32):
    x = np.asarray(photo32)[:, :14, :14] - 0.4  # negative values check the ReLU
    got = np.asarray(ii.mixed_pool(jnp.asarray(x)))
    chex.assert_shape(got, (1, 2, 2, 3))
    r = np.maximum(x, 0)
    mx = np.stack(
        [[r[0, i : i + 7, j : j + 7].max((0, 1)) for j in range(8)] for i in range(8)]
    )  # [8, 8, C]
    want = np.stack([[mx[i : i + 2, j : j + 2].mean((0, 1)) for j in (0, 4)] for i in (0, 4)])
    np.testing.assert_allclose(got[0], want, rtol=1e-6)
    np.testing.assert_allclose(ii.average_pool(jnp.asarray(x)), x.mean((1, 2)), rtol=1e-6)


def test_gradients_are_finite(digit_batch):
    x = digit_batch[:2] - 0.1  # zeros and negatives: the clamp is active on most pixels
    k = kernel((3, 3, 1, 4), seed=6)
    pairs = ii.draw_monomial_pairs(8, 1)
    fns = {
        "ws_d8": lambda x, k: ii.ws_integrate(x, k, G.dihedral(8)).sum(),
        "scale_ws": lambda x, k: ii.scale_ws_integrate(x, k).sum(),
        "monomial": lambda x, k: ii.scale_monomial_integrate(x, pairs).sum(),
        "mixed": lambda x, k: ii.mixed_pool(x).sum(),
    }
    for name, fn in fns.items():
        gx, gk = jax.jit(jax.grad(fn, argnums=(0, 1)))(x, k)
        assert np.isfinite(np.asarray(gx)).all() and np.isfinite(np.asarray(gk)).all(), name
        assert np.abs(np.asarray(gx)).max() > 0, name


def test_bad_input_raises_clear_errors(photo32):
    x = jnp.asarray(photo32)
    with pytest.raises(ValueError, match=r"\[B, H, W, C\]"):
        ii.ws_integrate(x[0], kernel((3, 3, 3, 2)))
    with pytest.raises(ValueError, match="k odd"):
        ii.ws_integrate(x, kernel((2, 2, 3, 2)))
    with pytest.raises(ValueError, match="C_in=2"):
        ii.ws_integrate(x, kernel((3, 3, 2, 2)))
    with pytest.raises(ValueError, match="epsilon"):
        ii.scale_ws_integrate(x, kernel((3, 3, 3, 2)), epsilon=0.0)
    with pytest.raises(ValueError, match="n_pairs"):
        ii.draw_monomial_pairs(0, 3)
    with pytest.raises(ValueError, match="max_window"):
        ii.mixed_pool(x[:, :6, :6])
    with pytest.raises(ValueError, match="group='D4' is invalid: give an invjax.groups.Group"):
        ii.ws_integrate(x, kernel((3, 3, 3, 2)), "D4")  # names are parsed where layers are built


def test_monomial_draws_redraw_degenerate_pairs():
    # one channel, one factor: every pair is x(t + o)^b / x(t + o')^b, a constant ratio
    with pytest.raises(ValueError, match="only degenerate monomial pairs"):
        ii.draw_monomial_pairs(5, 1, n_factors=1)
    # two factors on one channel in a 3 x 3 neighbourhood: some raw draws are translates of each
    # other (2 of the first 40 raw draws for seed 3); none survives the redraw
    pairs = ii.draw_monomial_pairs(40, 1, n_factors=2, max_exponent=1, seed=3)
    rng = np.random.default_rng(3)  # the raw draw, as draw_monomial_pairs makes it
    raw = (rng.integers(0, 1, (40, 2, 2)), rng.integers(-1, 2, (40, 2, 2, 2)), np.ones((40, 2, 2)))
    raw_bad = [j for j in range(40) if ii._degenerate_pair(*(a[j] for a in raw))]
    assert len(raw_bad) == 2
    np.testing.assert_array_equal(
        np.delete(pairs.offsets, raw_bad, 0), np.delete(raw[1], raw_bad, 0)
    )
    for j in range(pairs.n_pairs):
        assert not ii._degenerate_pair(pairs.channels[j], pairs.offsets[j], pairs.exponents[j])
    assert ii._degenerate_pair(
        np.zeros((2, 2), int), np.array([[[0, 0], [0, 1]], [[1, -1], [1, 0]]]), np.ones((2, 2))
    )


def test_pointwise_monomials_are_exactly_invariant_to_pixel_replication(photo_batch):
    """Scaling by 2 with pixel replication is exact on the grid: every pointwise translation sum
    becomes 4 times itself and eq. (6) does not change (float32 rounding), while monomials with
    3x3 offsets read other neighbours after the scaling (measured: relative change 0.020)."""
    x = jnp.asarray(photo_batch) + 0.05  # a 3-channel photo, strictly positive
    up = jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)
    point = ii.draw_monomial_pairs(8, 3, seed=1, placement="pointwise")
    assert not point.offsets.any() and point.kernel_size == 1
    hood = ii.draw_monomial_pairs(8, 3, seed=1)
    e_point = rel(ii.scale_monomial_integrate(up, point), ii.scale_monomial_integrate(x, point))
    e_hood = rel(ii.scale_monomial_integrate(up, hood), ii.scale_monomial_integrate(x, hood))
    print(f"x2 replication: pointwise {e_point:.2e}, neighbourhood {e_hood:.2e}")
    assert e_point < 1e-5 and e_hood > 100 * e_point
    np.testing.assert_allclose(
        ii.scale_monomial_integrate(x, point), ii.scale_monomial_reference(x, point), rtol=1e-4
    )


def test_pointwise_monomials_under_bicubic_downscaling(photo_batch):
    """Shrinking by s in [0.5, 1) (bicubic, zero fill): only the resampling error remains for
    pointwise monomials; measured mean relative change 0.022 against 0.091 with 3x3 offsets."""
    x = jnp.asarray(photo_batch)
    point = ii.draw_monomial_pairs(8, 3, seed=2, placement="pointwise")
    hood = ii.draw_monomial_pairs(8, 3, seed=2)
    errs = {"pointwise": [], "neighbourhood": []}
    for s in (0.5, 0.6, 0.7, 0.8, 0.9):
        xs = G.scale(x, s, "bicubic")
        for name, pairs in (("pointwise", point), ("neighbourhood", hood)):
            a, b = ii.scale_monomial_integrate(x, pairs), ii.scale_monomial_integrate(xs, pairs)
            errs[name].append(rel(b, a))
    mean = {k: float(np.mean(v)) for k, v in errs.items()}
    print("bicubic shrink, mean relative change:", mean)
    assert mean["pointwise"] < 0.5 * mean["neighbourhood"]


def test_pointwise_monomials_need_two_channels():
    with pytest.raises(ValueError, match="placement='pointwise' leave only degenerate"):
        ii.draw_monomial_pairs(4, 1, placement="pointwise")
    with pytest.raises(ValueError, match="placement='offsets' is unknown"):
        ii.draw_monomial_pairs(4, 3, placement="offsets")


def test_monomial_log_output_is_the_log_of_eq6(digit_batch):
    """``output='log'`` of the layer is ``log A`` of eq. (6), fast and reference; masks still 0."""
    from invjax.layers import ii as L

    x = jnp.asarray(digit_batch)
    key = jax.random.PRNGKey(0)
    ratio = L.ScaleMonomialInvariantIntegration(n_pairs=8)
    v = ratio.init(key, x)
    a = np.asarray(ratio.apply(v, x), np.float64)
    for method in ("fast", "reference"):
        layer = L.ScaleMonomialInvariantIntegration(n_pairs=8, output="log", method=method)
        got = np.asarray(layer.apply(v, x), np.float64)
        np.testing.assert_allclose(got, np.log(a), rtol=1e-4, atol=1e-4)
    mask = {"ii_mask": {"mask": jnp.asarray([1.0, 0.0] * 4)}}
    pruned = L.ScaleMonomialInvariantIntegration(n_pairs=8, output="log").apply(mask, x)
    assert np.all(np.asarray(pruned)[:, 1::2] == 0) and np.all(np.asarray(pruned)[:, ::2] != 0)
    with pytest.raises(ValueError, match=r"output='exp' is unknown: choose one of \('ratio'"):
        L.ScaleMonomialInvariantIntegration(output="exp").init(key, x)
