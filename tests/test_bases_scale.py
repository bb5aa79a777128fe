"""Scale bases: SESN Hermite basis against a slow float64 loop, the shipped DISCO bases, and the
DISCO generator's objective (least squares vs Adam vs the direct conv2d evaluation)."""

from __future__ import annotations

import hashlib
import json
import math

import chex
import numpy as np
import pytest

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
