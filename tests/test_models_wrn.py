"""Wide-ResNets of the three families: widths, exact E(2) invariance on photos, Scale-II Delta.

Tiny networks (WRN10-1, halved widths) on 32 x 32 inputs; initialised with the ``rbg`` PRNG
(much faster to compile on CPU than threefry) and evaluated under ``jit``.
"""

from __future__ import annotations

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from invjax import equivariance
from invjax import groups as G
from invjax.equivariance import relative_error as rel
from invjax.models.common import abstract_variables, count_params, divide_width
from invjax.models.wrn import WideResNet, wrn_widths

D4 = G.dihedral(4)


def init(model, x, seed=0):
    return jax.jit(model.init)(jax.random.key(seed, impl="rbg"), x)


def digits32():
    """Two real handwritten digits (scikit-learn), 16 x 16 on a 32 x 32 black background, RGB."""
    from sklearn.datasets import load_digits

    d = jnp.asarray(load_digits().images[[0, 7]].astype(np.float32) / 16.0)[..., None]
    d = jnp.clip(G.resize(d, (16, 16), "bicubic"), 0.0, 1.0)
    return jnp.repeat(jnp.pad(d, ((0, 0), (8, 8), (8, 8), (0, 0))), 3, axis=-1)


SCALES = (0.5, 0.6, 0.7, 0.8, 0.9)


def scale_delta(fn, x):
    """The paper's Delta = 1/S sum_s |psi(x) - psi(L_s x)|^2 / |psi(x)|^2, per sample."""
    y = fn(x)
    vals = [
        jnp.sum((fn(G.scale(x, s, "bicubic")) - y) ** 2, -1) / jnp.sum(y**2, -1) for s in SCALES
    ]
    return np.asarray(jnp.mean(jnp.stack(vals), 0))


def test_widths_follow_the_appendix_tables():
    # Table 10 (CIFAR-10, WRN28-10, D8/D4/D4): 4 / 40 / 113 / 226 fields, 640 trivial.
    assert wrn_widths("e2", 10, G.check_chain(("D8", "D4", "D4"))) == {
        "stem": 4,
        "stages": (40, 113, 226),
        "out": 640,
    }
    # Table 14 (STL-10, WRN16-8, D8/D4/D1): 4 / 32 / 90 / 362, 512 trivial.
    assert wrn_widths("e2", 8, G.check_chain(("D8", "D4", "D1"))) == {
        "stem": 4,
        "stages": (32, 90, 362),
        "out": 512,
    }
    # Table 9 (SVHN, WRN16-4, D8 throughout): 4 / 16 / 32 / 64, 256 trivial.
    assert wrn_widths("e2", 4, (G.dihedral(8),) * 3)["stages"] == (16, 32, 64)
    # Tables 12 / 15: the scale networks have the plain widths.
    assert wrn_widths("scale", 8, stem_width=32) == {
        "stem": 32,
        "stages": (128, 256, 512),
        "out": 512,
    }
    # Constant-parameter streams: C -> ceil(C / sqrt(2)), ceil(C / sqrt(3)).
    w2 = wrn_widths("std", 4, width_divisor=math.sqrt(2))
    assert w2["stages"] == (46, 91, 182) and w2["stem"] == 12
    assert wrn_widths("std", 4, width_divisor=math.sqrt(3))["stages"] == (37, 74, 148)
    assert divide_width(2, math.sqrt(2)) == 2 and divide_width(640, 1.0) == 640


def test_layer_widths_and_kernels_in_the_built_network():
    """WRN16-8 E(2) (STL-10): per-layer shapes as in Table 14, stride 2 in the first stage."""
    m = WideResNet(family="e2", depth=16, widen_factor=8, groups=("D8", "D4", "D1"), first_stride=2)
    v = abstract_variables(m, (1, 96, 96, 3))
    p = v["params"]
    # E2Conv weights are [C_in fields, C_out fields, |G|, basis]; D8 uses 5x5 (11 basis
    # functions), D4 and D1 3x3 (6).
    chex.assert_shape(p["stem"]["weight"], (3, 4, 11))
    chex.assert_shape(p["block1_1"]["conv1"]["weight"], (4, 32, 16, 11))
    chex.assert_shape(p["block2_1"]["conv1"]["weight"], (64, 90, 8, 6))  # 32 D8 -> 64 D4 fields
    chex.assert_shape(p["block3_1"]["conv1"]["weight"], (360, 362, 2, 6))  # 90 D4 -> 360 D1
    chex.assert_shape(p["block3_2"]["conv2"]["weight"], (362, 512, 6))  # trivial output fields
    chex.assert_shape(p["block3_2"]["shortcut"]["weight"], (362, 512, 1))
    assert "shortcut" not in p["block1_2"]
    chex.assert_shape(p["ii"]["kernel"], (3, 3, 512, 512))
    chex.assert_shape(p["classifier"]["kernel"], (512, 10))
    out = jax.eval_shape(
        lambda x: m.init_with_output(jax.random.PRNGKey(0), x)[0],
        jax.ShapeDtypeStruct((2, 96, 96, 3), jnp.float32),
    )
    chex.assert_shape(out, (2, 10))


# Measured on the two photo crops (max over elements): D4 net 4.6e-7, D8/D4/D1 net 3.6e-7 (flip),
# D8 net 5.3e-7, pool head 3.9e-7; elements outside the last group: 1e-2 .. 1e-1.
@pytest.mark.slow
@pytest.mark.parametrize(
    "groups,head,first_stride",
    [
        (("D4", "D4", "D4"), "ii", 1),
        (("D8", "D4", "D1"), "ii", 2),
        (("D8", "D8", "D8"), "ii", 1),
        (("D8", "D4", "D4"), "pool", 1),
    ],
)
def test_e2_network_exactly_invariant_on_photos(groups, head, first_stride, photo_batch):
    x = jnp.asarray(photo_batch)
    m = WideResNet(
        family="e2",
        depth=10,
        widen_factor=1,
        groups=groups,
        head=head,
        first_stride=first_stride,
        width_divisor=2.0,
    )
    v = init(m, x)
    # All eight D4 images in one batch: one compilation, logits and features together.
    xs = jnp.concatenate([G.transform(x, D4, e) for e in range(8)])
    both = jax.jit(lambda xx: m.apply(v, xx, method=lambda mod, z: (mod(z), mod.features(z))))
    ys, fs = both(xs)
    chex.assert_shape(ys, (16, 10))
    ys, fs = ys.reshape(8, 2, -1), fs.reshape(8, 2, -1)
    # Indices in D4 of the elements the network's own group chain makes exact.
    labels = {e.label for e in equivariance.exact_elements(m, x.shape)}
    inv = [0] + [e for e in range(1, 8) if equivariance.element_label(D4, e) in labels]
    want = {
        ("D4", "D4", "D4"): list(range(8)),
        ("D8", "D4", "D1"): [0, 4],  # identity and the mirror
        ("D8", "D8", "D8"): list(range(8)),
    }.get(groups, list(range(8)))
    assert inv == want
    for e in range(1, 8):
        err_logits, err_feats = rel(ys[e], ys[0]), rel(fs[e], fs[0])
        if e in inv:
            assert err_logits <= 1e-5 and err_feats <= 1e-5, (e, err_logits, err_feats)
        else:
            # Not in the last group: the network is not invariant, and the test can tell.
            assert err_feats > 1e-3, (e, err_feats)


def test_odd_input_with_stride_two_stays_exact(photo32):
    """33 x 33 -> 17 -> 9: odd grids keep the plain stride-2 samples symmetric (conv2d's rule)."""
    x = jnp.pad(jnp.asarray(photo32), ((0, 0), (0, 1), (0, 1), (0, 0)), mode="edge")
    m = WideResNet(family="e2", depth=10, widen_factor=1, groups=("D4",) * 3, width_divisor=2.0)
    v = init(m, x)
    xs = jnp.concatenate([x, G.transform(x, D4, 1), G.transform(x, D4, 5)])
    ys = jax.jit(lambda xx: m.apply(v, xx))(xs)
    assert rel(ys[1], ys[0]) <= 1e-5 and rel(ys[2], ys[0]) <= 1e-5


@pytest.mark.slow
def test_scale_ii_network_delta_measured_and_bounded():
    """Scale-II WS vs average pooling on the same scale-equivariant body (random weights).

    Measured Delta over s in {0.5, ..., 0.9} on two digits: II 0.0147 / 0.0144, pooling 0.179 /
    0.157 (the pooled features are homogeneous of degree 2 in s, not invariant).
    """
    x = digits32()
    m = WideResNet(family="scale", depth=10, widen_factor=1, width_divisor=2.0)
    v = init(m, x)
    pool = m.clone(head="pool")
    vp = {
        col: {k: t for k, t in tree.items() if k not in ("ii", "ii_bn", "classifier")}
        for col, tree in v.items()
    }
    d_ii = scale_delta(jax.jit(lambda xx: m.apply(v, xx, method="features")), x)
    d_pool = scale_delta(jax.jit(lambda xx: pool.apply(vp, xx, method="features")), x)
    assert np.all(d_ii < 0.03), d_ii
    assert np.all(d_pool > 5 * d_ii), (d_pool, d_ii)


@pytest.mark.slow
def test_train_mode_updates_stats_and_uses_dropout(photo_batch):
    x = jnp.asarray(photo_batch)
    m = WideResNet(
        family="std", depth=10, widen_factor=1, dropout=0.5, head="ii", width_divisor=2.0
    )
    v = init(m, x)
    step = jax.jit(
        lambda v, key: m.apply(v, x, train=True, rngs={"dropout": key}, mutable=["batch_stats"])
    )
    y1, s1 = step(v, jax.random.PRNGKey(1))
    y2, _ = step(v, jax.random.PRNGKey(2))
    assert rel(y1, y2) > 1e-3  # dropout is active in training
    before = v["batch_stats"]["block1_1"]["bn1"]["mean"]
    after = s1["batch_stats"]["block1_1"]["bn1"]["mean"]
    assert float(jnp.abs(after - before).max()) > 0
    evaluate = jax.jit(lambda v: m.apply(v, x))
    np.testing.assert_array_equal(evaluate(v), evaluate(v))  # eval mode is deterministic
    assert count_params(v["params"]) > 0


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(family="conv"), "family"),
        (dict(depth=15), "depth"),
        (dict(family="e2", groups=("D4", "D8", "D8")), "not a subgroup"),
        (dict(family="e2", groups=("D4", "D4")), "one group per stage"),
        (dict(head="max"), "head"),
        (dict(first_stride=3), "first_stride"),
        (dict(width_divisor=0.5), "width_divisor"),
        (dict(relift=(True,)), "relift"),
    ],
)
def test_bad_configurations_fail_before_compute(kwargs, match):
    with pytest.raises(ValueError, match=match):
        WideResNet(**kwargs)


def test_wrong_input_rank():
    m = WideResNet(family="std", depth=10, widen_factor=1)
    with pytest.raises(ValueError, match="NHWC"):
        m.init(jax.random.PRNGKey(0), jnp.zeros((32, 32, 3)))
