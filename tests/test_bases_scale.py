"""Scale bases: SESN Hermite basis against a slow float64 loop, the shipped DISCO bases, and the
DISCO generator's objective (least squares vs Adam vs the direct conv2d evaluation)."""

from __future__ import annotations

import hashlib
import json
import math

import chex
import numpy as np
import pytest

from invjax import groups as G
from invjax.bases import make_disco as md
from invjax.bases import scale as B

MNIST = (15, 7, (1.0, 2 ** (1 / 3), 2 ** (2 / 3), 2.0))  # Scaled-MNIST (DISCO)
WRN = (5, 3, (1.0, 2**0.5, 2.0))  # WRN streams (DISCO STL-10)


def _hermite_poly(n: int, t: float) -> float:
    """Probabilists' Hermite polynomial by its recurrence ``He_{n+1} = t He_n - n He_{n-1}``."""
    a, b = 1.0, t
    if n == 0:
        return a
    for m in range(1, n):
        a, b = b, t * b - m * a
    return b


def _hermite_reference(k, e, scales, sigma):
    """SESN's basis "A", one pixel at a time in float64."""
    s_max = max(scales)
    out = np.zeros((len(scales), e * e, k, k))
    for i, s in enumerate(scales):
        support = int(k * s / s_max) // 2 * 2 + 1
        pad = (k - support) // 2
        t = sigma * s
        for n in range(e):
            for m in range(e):
                for a in range(support):
                    for b in range(support):
                        x = b - (support - 1) / 2  # column -> x (right)
                        y = (support - 1) / 2 - a  # row -> y (up)
                        out[i, n * e + m, pad + a, pad + b] = (
                            t**-2
                            * math.exp(-(x * x + y * y) / (2 * t * t))
                            * _hermite_poly(n, x / t)
                            * _hermite_poly(m, y / t)
                        )
    norms = np.sqrt((out[0] ** 2).sum(axis=(1, 2)))
    return out / norms[None, :, None, None]


@pytest.mark.parametrize("k,e,scales", [MNIST, WRN, (7, 3, (1.0, 1.5))])
def test_hermite_matches_slow_reference(k, e, scales):
    got = B.hermite_basis(k, e, scales)
    chex.assert_shape(got, (len(scales), e * e, k, k))
    assert got.dtype == np.float64
    ref = _hermite_reference(k, e, scales, B.default_base_sigma(e))
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    # Normalised by the norm at the smallest scale; larger scales keep their relative size.
    np.testing.assert_allclose(np.sqrt((got[0] ** 2).sum(axis=(1, 2))), 1.0, rtol=1e-12)
    # SESN support: at scale 1 of MNIST only the central 7x7 is non-zero.
    if (k, e) == (15, 7):
        assert np.all(got[0, :, :4] == 0) and np.all(got[0, :, :, 11:] == 0)


def test_base_sigma_defaults_are_the_peers_values():
    assert B.default_base_sigma(3) == pytest.approx(0.9)  # SESN/DISCO STL-10 WRN
    assert B.default_base_sigma(7) == pytest.approx(1.5)  # SESN/DISCO Scaled-MNIST
    a = B.hermite_basis(5, 3, (1.0, 2.0), base_sigma=1.2)
    np.testing.assert_allclose(a, _hermite_reference(5, 3, (1.0, 2.0), 1.2), rtol=1e-12)


def test_bases_are_cached_and_read_only():
    a = B.hermite_basis(5, 3, [1.0, 2.0])
    assert B.hermite_basis(5, 3, (1.0, 2.0)) is a
    with pytest.raises(ValueError):
        a[0, 0, 0, 0] = 1.0
    d = B.disco_basis(*WRN)
    assert B.basis("disco", *WRN) is d
    with pytest.raises(ValueError):
        d[...] = 0.0


@pytest.mark.parametrize(
    "args,match",
    [
        ((4, 3, (1.0, 2.0)), "kernel_size=4"),
        ((5, 7, (1.0, 2.0)), "effective_size=7"),
        ((5, 3, (1.5, 2.0)), "starting at 1.0"),
        ((5, 3, (1.0, 2.0, 1.5)), "strictly increasing"),
        ((5, 3, ()), "scales"),
    ],
)
def test_bad_arguments_raise(args, match):
    with pytest.raises(ValueError, match=match):
        B.hermite_basis(*args)


def test_unknown_kind_and_unshipped_disco_raise():
    with pytest.raises(ValueError, match="unknown"):
        B.basis("gabor", *WRN)
    with pytest.raises(ValueError, match=r"shipped configurations are .*kernel_size=15"):
        B.disco_basis(7, 3, (1.0, 2.0))
    with pytest.raises(ValueError, match="only used by basis='hermite'"):
        B.basis("disco", *WRN, base_sigma=1.0)


@pytest.mark.parametrize("k,e,scales", [MNIST, WRN])
def test_shipped_disco_structure(k, e, scales):
    """Scale 1: the Hermite functions on the effective grid; scale 2: the same on the grid dilated
    by 2 (DISCO's integer scales), with the norms of scale 1; rounded scales resolve too."""
    d = B.disco_basis(k, e, scales)
    chex.assert_shape(d, (len(scales), e * e, k, k))
    assert d.dtype == np.float64 and np.all(np.isfinite(d))
    assert B.disco_basis(k, e, [round(s, 2) for s in scales]) is d
    w = B.hermite_grid(e, B.default_base_sigma(e), e)
    w = w / np.sqrt((w**2).sum(axis=(1, 2)))[:, None, None]
    c, h = (k - 1) // 2, (e - 1) // 2
    np.testing.assert_allclose(d[0, :, c - h : c + h + 1, c - h : c + h + 1], w, atol=1e-12)
    np.testing.assert_allclose(np.abs(d[0]).sum(), np.abs(w).sum(), rtol=1e-12)  # zero elsewhere
    dil = slice(c - 2 * h, c + 2 * h + 1, 2)
    np.testing.assert_allclose(d[-1, :, dil, dil], w, atol=1e-12)
    np.testing.assert_allclose(np.abs(d[-1]).sum(), np.abs(w).sum(), rtol=1e-12)


@pytest.mark.parametrize("k,e,scales", [MNIST, WRN])
def test_shipped_disco_records(k, e, scales):
    meta = next(m for m in B.shipped_disco_configurations() if m["kernel_size"] == k)
    stem = meta["_stem"]
    path = B._data_dir() / f"{stem}.npz"
    data = path.read_bytes()
    assert len(data) < 1_000_000
    assert hashlib.sha256(data).hexdigest() == meta["npz_sha256"]
    assert meta["command"].startswith("python -m invjax.bases.make_disco --kernel-size")
    assert f"--kernel-size {k} --effective-size {e} --num-scales {len(scales)}" in meta["command"]
    np.testing.assert_allclose(meta["scales"], scales, atol=1e-12)
    # The least-squares solution is the exact minimiser; Adam (same objective) may only tie.
    ls, adam = meta["least_squares"]["train_loss"], meta["adam"]["train_loss"]
    assert ls <= adam * (1 + 1e-9)
    assert meta["final_loss"] == min(ls, adam) or meta["final_loss"] == ls
    assert json.loads(json.dumps(meta))  # plain JSON


def _noise(seed, n=32, count=2):
    return md.random_images(seed, count, n, np.float32)


@pytest.mark.slow
def test_generator_least_squares_is_the_minimum_of_the_direct_objective():
    """The quadratic form equals the objective evaluated with conv2d + bicubic scaling, the
    normal-equation solution beats Adam and random perturbations, and generalises to new noise."""
    k, e, scales = 5, 3, md.disco_scales(3, 2**0.5)
    train = _noise(0)
    quad = md.QuadraticObjective(k, e, scales, train)
    raw = quad.solve()
    chex.assert_shape(raw, (3, 9, 5, 5))
    direct = float(md.objective(raw, train, scales, k))
    # measured: agree to 2e-7 (float32 features; the Gram matrices are float64)
    assert quad.value(raw) == pytest.approx(direct, rel=1e-5)
    adam = quad.adam(300, 0.01)  # measured J: Adam 0.0466 after 300 steps, least squares 0.0435
    assert quad.value(raw) <= quad.value(adam) * (1 + 1e-7)
    rng = np.random.default_rng(0)
    for _ in range(3):
        bumped = raw.copy()
        bumped[1] += 1e-2 * rng.normal(size=bumped[1].shape)
        assert quad.value(bumped) > quad.value(raw)
    # integer scales are the fixed (dilated) delta bases
    np.testing.assert_array_equal(raw[0], md.dilated_delta_basis(5, 3, 1))
    np.testing.assert_array_equal(raw[2], md.dilated_delta_basis(5, 3, 2))
    # held-out noise: the fit generalises (measured J 0.0435 train, 0.0481 held-out)
    held = md.evaluate(raw, _noise(1), scales, k)
    assert held["loss"] < 1.3 * quad.value(raw)
    assert held["relative_error_per_pair"]["1->2"] < 1e-12  # exact at the integer ratio


def test_shipped_disco_beats_hermite_on_noise_for_the_wrn_basis():
    """Relative equivariance error on held-out noise of the k=5 bases (measured: DISCO 0.037,
    Hermite 0.11; the .json records the same comparison for both shipped files)."""
    k, e, scales = WRN
    x = _noise(7, n=48, count=2)
    disco = md.evaluate(B.disco_basis(k, e, scales), x, scales, k)["relative_error"]
    herm = md.evaluate(B.hermite_basis(k, e, scales), x, scales, k)["relative_error"]
    assert disco < 0.06 and herm > 0.08 and disco < 0.5 * herm


def test_generator_rejects_bad_configurations():
    with pytest.raises(ValueError, match="ratio"):
        md.disco_scales(3, 1.0)
    with pytest.raises(ValueError, match="does not fit"):
        md.dilated_delta_basis(5, 5, 2)
    assert md.disco_scales(4, 1.2599) == (1.0, 1.2599, 1.2599**2, 2.0)  # 1.99990 snaps to 2


# --------------------------------------------------------------------------- type B (the peers')


def _peer_type_b(size, widths, effective_size, mult, max_order):
    """The peers' type B in their own layout ``[F, S, k, k]``, first array axis sampled as
    ``linspace(-(n//2), n//2, n)`` downwards, functions enumerated as their
    ``np.indices([M+1, M+1])`` with ``order_x + order_y <= M`` (the first axis's order inner)."""
    num = effective_size**2
    out = np.zeros((num, len(widths), size, size))
    for i, w in enumerate(widths):
        n = int(size * w / max(widths)) // 2 * 2 + 1
        u = np.linspace(-(n // 2), n // 2, n)
        funcs = []
        for j in range(math.ceil(num / ((max_order + 1) * (max_order + 2) // 2))):
            t = w / mult**j
            g = np.exp(-(u**2) / (2 * t**2)) / t
            oy, ox = np.indices([max_order + 1, max_order + 1])
            keep = ox + oy <= max_order
            for a, b in zip(ox[keep], oy[keep]):
                he_a = np.polynomial.hermite_e.hermeval(u / t, [0] * a + [1])
                he_b = np.polynomial.hermite_e.hermeval(u / t, [0] * b + [1])
                funcs.append(np.outer(g * he_a, g * he_b))
        p = (size - n) // 2
        out[:, i, p : p + n, p : p + n] = np.stack(funcs[:num])
    return out / np.sqrt((out[:, :1] ** 2).sum(axis=(2, 3), keepdims=True))


def _first_axis_orders(effective_size, max_order):
    """Order along the peers' first array axis of each type-B function (sign flips where odd)."""
    oy, ox = np.indices([max_order + 1, max_order + 1])
    keep = ox + oy <= max_order
    per = list(ox[keep])
    return np.array((per * effective_size**2)[: effective_size**2])


def test_hermite_b_is_sesn_mnist_ses_vector_56_function_for_function():
    """SESN's mnist_ses_vector_56: widths 2.0 * 2**(i/3) rounded as SESN (2.0, 2.52, 3.17, 4.0),
    mult 1.5, max order 4, kernel 15, 49 functions; invjax samples y upwards, so the functions
    with an odd order along the peers' first (row) axis change sign."""
    widths = [round(2.0 * 2 ** (i / 3), 2) for i in range(4)]
    assert widths == [2.0, 2.52, 3.17, 4.0]
    got = B.hermite_b_basis(15, 7, tuple(w / 2.0 for w in widths), 2.0, 1.5, 4)
    chex.assert_shape(got, (4, 49, 15, 15))  # invjax [S, F, k, k]; the peers' [F, S, k, k]
    peer = _peer_type_b(15, widths, 7, 1.5, 4)
    sign = (-1.0) ** _first_axis_orders(7, 4)
    np.testing.assert_allclose(
        got, np.transpose(peer * sign[:, None, None, None], (1, 0, 2, 3)), atol=1e-12
    )


def test_hermite_b_facts_sizes_supports_ranks():
    psi = B.basis("hermite_b", 15, 7, G.MNIST_SCALES)
    chex.assert_shape(psi, (4, 49, 15, 15))
    # support per scale: int(15 s / 2) // 2 * 2 + 1 = 7, 9, 11, 15 taps
    for i, support in enumerate((7, 9, 11, 15)):
        rows = np.flatnonzero(np.abs(psi[i]).sum(axis=(0, 2)) > 0)
        assert (rows.min(), rows.max()) == ((15 - support) // 2, (15 + support) // 2 - 1)
    # 3 full widths of 15 functions and 4 of the fourth: the span at scale 1 (7 x 7) is 45
    assert [B.numerical_rank(p) for p in psi] == [45, 47, 47, 47]
    assert B.numerical_rank(psi[0], np.float64) == 45
    # type A (invjax's former Scaled-MNIST basis) spans all 49 at every scale
    assert [B.numerical_rank(p) for p in B.basis("hermite", 15, 7, G.MNIST_SCALES)] == [49] * 4
    # the 46th..49th functions are the fourth width 2 / 1.5**3 with orders (0, 0..3)
    t = 2.0 / 1.5**3
    grid = B.hermite_b_grid(7, 2.0, 4, 1.5, 49)
    np.testing.assert_allclose(grid[45:], B.hermite_grid(7, t, 4)[:4], atol=1e-12)


@pytest.mark.parametrize("kind,mult,rank", [("disco_b", 1.5, 45), ("disco_b_plus", 1.9, 44)])
def test_disco_b_facts_and_exact_integer_scale(kind, mult, rank):
    """DISCO's disco_b (min scale 1.9, max order 4; mult 1.5 / 1.9 in exp_mnist.sh): 49
    functions, rank 45 / 44 of 49 (float32, as DISCO's _calculate_rank); at scale 1 the type-B
    grid on the 7 x 7 effective taps, at scale 2 the same values on every other tap."""
    assert (B.TYPE_B[kind].base_sigma, B.TYPE_B[kind].mult) == (1.9, mult)
    psi = B.basis(kind, 15, 7, G.MNIST_SCALES)
    chex.assert_shape(psi, (4, 49, 15, 15))
    assert [B.numerical_rank(p) for p in psi] == [rank] * 4
    w = B.hermite_b_grid(7, 1.9, 4, mult, 49)
    norm = np.sqrt((w**2).sum(axis=(1, 2)))[:, None, None]
    np.testing.assert_allclose(psi[0, :, 4:11, 4:11], w / norm, atol=1e-12)
    np.testing.assert_allclose(psi[3, :, 1:14:2, 1:14:2], w / norm, atol=1e-12)
    assert np.abs(psi[3]).sum() == pytest.approx(np.abs(psi[3, :, 1:14:2, 1:14:2]).sum())
    # support per scale: 7 x 7 taps, the full 15 x 15 fitted kernels, the 13 x 13 dilated grid
    rows = [np.flatnonzero(np.abs(p).sum(axis=(0, 2)) > 0) for p in psi]
    support = [int(r.max() - r.min() + 1) for r in rows]
    assert support == [7, 15, 15, 13]


def test_type_b_bases_scale_equivariance_on_a_real_photo():
    """sum |L_{1/r}[x * psi_j] - [L_{1/r} x] * psi_i|^2 / sum |L_{1/r}[x * psi_j]|^2 over the
    scale pairs, x a 96 x 96 grey crop of the camera photo (bicubic scaling). DISCO's scale 1 ->
    2 is exact (dilated taps); the in-between pairs and SESN's type B are approximate (measured:
    disco_b_plus 0.0028, hermite_b 0.0079; type A: disco 0.0076, hermite 0.0062)."""
    import skimage.data

    x = skimage.data.camera()[64:448:4, 96:480:4].astype(np.float32)[None, :, :, None] / 255.0
    sc = tuple(G.MNIST_SCALES)
    err = {k: md.evaluate(B.basis(k, 15, 7, sc), x, sc, 15) for k in ("hermite_b", "disco_b_plus")}
    assert err["disco_b_plus"]["relative_error_per_pair"]["1->2"] < 1e-10
    assert err["disco_b_plus"]["relative_error"] < 0.006
    assert err["hermite_b"]["relative_error"] < 0.015


# --------------------------------------------------------------------------- DISCO's own objective


def test_torch_bicubic_matrix_is_corner_anchored_cubic_convolution():
    """PyTorch's bicubic resize (align_corners=False, a = -0.75): output d reads (d + 0.5) r - 0.5
    from the corner; at r = 2 every interior output averages taps 2d-1..2d+2 with weights
    (-3/32, 19/32, 19/32, -3/32); floor(n / r) outputs; constants are kept (edge clamped)."""
    m = md.torch_bicubic_matrix(20, 2.0)
    assert m.shape == (10, 20)
    np.testing.assert_allclose(m.sum(1), 1.0, atol=1e-15)
    np.testing.assert_allclose(m[4, 7:11], [-3 / 32, 19 / 32, 19 / 32, -3 / 32], atol=1e-15)
    assert np.count_nonzero(m[4]) == 4
    np.testing.assert_allclose(m[0, :3], [0.5, 19 / 32, -3 / 32])  # tap -1 clamped onto 0
    assert md.torch_bicubic_matrix(154, 1.26).shape == (122, 154)
    m = md.torch_bicubic_matrix(50, 1.41)
    np.testing.assert_allclose(m.sum(1), 1.0, atol=1e-14)
    # r = 4/3: output 1 reads source 1.5 (taps 0..3, the half-way weights); output 4 reads
    # 5.5 (taps 4..7): corner-anchored, so the pattern repeats every 3 outputs
    m = md.torch_bicubic_matrix(30, 4 / 3)
    np.testing.assert_allclose(m[1, 0:4], [-3 / 32, 19 / 32, 19 / 32, -3 / 32], atol=1e-14)
    np.testing.assert_allclose(m[4, 4:8], m[1, 0:4], atol=1e-14)


def test_disco_objective_gram_form_equals_direct_evaluation():
    rng = np.random.default_rng(1)
    images = rng.uniform(size=(2, 40, 40))
    scales = (1.0, 1.41, 2.0)
    obj = md.DiscoObjective(5, 3, scales, images)
    raw = rng.normal(size=(3, 9, 5, 5))
    np.testing.assert_allclose(
        obj.pair_norms(raw), md.disco_objective_direct(raw, images, scales, 5), rtol=1e-10
    )


def test_disco_objective_irls_is_its_minimum():
    """The IRLS solution: the fixed integer scales untouched, no perturbation and not the
    squared-residual (invjax objective) fit do better on DISCO's sum of norms."""
    rng = np.random.default_rng(2)
    images = rng.uniform(size=(3, 48, 48))
    scales = (1.0, 1.41, 2.0)
    obj = md.DiscoObjective(5, 3, scales, images)
    raw = obj.solve()
    np.testing.assert_array_equal(raw[0], md.dilated_delta_basis(5, 3, 1))
    np.testing.assert_array_equal(raw[2], md.dilated_delta_basis(5, 3, 2))
    best = obj.value(raw)
    assert obj.iterations[-1] == pytest.approx(best) and obj.iterations[0] >= best
    for _ in range(5):
        pert = raw.copy()
        pert[1] += 1e-3 * rng.normal(size=pert[1].shape)
        assert obj.value(pert) > best
    # invjax's own fit (squared residual, bicubic about the centre) is worse on this objective
    assert obj.value(B._disco_raw(B._shipped_disco_stem(*WRN))) > best


@pytest.mark.parametrize("k,e,scales", [MNIST, WRN])
def test_shipped_peer_disco_fits(k, e, scales):
    """The disco_b kinds read raw bases fitted with DISCO's own objective (make_disco
    --objective disco): DISCO's rounded scales, unit taps at integer scales, and on held-out
    noise a lower DISCO objective than invjax's own fit (which minimises another one)."""
    metas = B.shipped_disco_configurations("peer")
    meta = next(m for m in metas if m["kernel_size"] == k)
    assert meta["command"].startswith("python -m invjax.bases.make_disco --objective disco")
    assert meta["scales"] == [round(s, 2) for s in scales]
    raw = B._disco_raw(B._shipped_disco_stem(k, e, tuple(scales), "peer"))
    chex.assert_shape(raw, (len(scales), e * e, k, k))
    np.testing.assert_array_equal(raw[0], md.dilated_delta_basis(k, e, 1))
    np.testing.assert_array_equal(raw[-1], md.dilated_delta_basis(k, e, 2))
    assert meta["held_out_value"] > 0 and len(meta["irls_values"]) >= 2
    if k == 5:  # cheap enough to recompute here
        x = md.random_images(1, 2, 154)[..., 0]
        obj = md.DiscoObjective(k, e, tuple(meta["scales"]), x)
        ours = B._disco_raw(B._shipped_disco_stem(k, e, tuple(scales)))
        assert obj.value(raw) < obj.value(ours)
