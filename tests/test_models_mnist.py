"""Scaled-MNIST networks (Table 2 / Table 7): parameter counts, Scale-II Delta on real digits."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from invjax import groups as G
from invjax.models.common import abstract_variables, count_params, upsample
from invjax.models.mnist import ScaledMNISTNet

SCALES = (0.5, 0.6, 0.7, 0.8, 0.9)


def digits28():
    """Two real handwritten digits (scikit-learn), 20 x 20 on a 28 x 28 black background."""
    from sklearn.datasets import load_digits

    d = jnp.asarray(load_digits().images[[0, 7]].astype(np.float32) / 16.0)[..., None]
    d = jnp.clip(G.resize(d, (20, 20), "bicubic"), 0.0, 1.0)
    return jnp.pad(d, ((0, 0), (4, 4), (4, 4), (0, 0)))


def scale_delta(fn, x):
    """Delta = 1/S sum_s |psi(x) - psi(L_s x)|^2 / |psi(x)|^2 (Section 5.1), per sample."""
    xs = jnp.concatenate([x] + [G.scale(x, s, "bicubic") for s in SCALES])
    y = fn(xs).reshape(len(SCALES) + 1, x.shape[0], -1)
    d = jnp.sum((y[1:] - y[0]) ** 2, -1) / jnp.sum(y[0] ** 2, -1)
    return np.asarray(d.mean(0))


def test_parameter_counts_match_sesn():
    """CNN, SES-CNN and DISCO have the same count (7 x 7 = 49 basis functions), about 495k as in
    SESN's table; II-DISCO WS adds the 3 x 3 x 95 x 95 Scale-II kernel and replaces the 380-wide
    flattened pooling by 95 features."""
    shape = (1, 28, 28, 1)
    cnn = ScaledMNISTNet(family="std", head="maxpool", kernel_size=7)
    ses = ScaledMNISTNet(basis="hermite", head="maxpool")
    disco = ScaledMNISTNet(basis="disco", head="mixed", spatial_pool="avg")
    ii = ScaledMNISTNet(head="ii")
    counts = [count_params(abstract_variables(m, shape)["params"]) for m in (cnn, ses, disco, ii)]
    assert counts[0] == counts[1] == counts[2] == 494_549
    assert counts[3] == 494_549 - 380 * 256 + 95 * 256 + 9 * 95 * 95
    mono = abstract_variables(ScaledMNISTNet(head="ii_monomials"), shape)
    chex.assert_shape(mono["ii_mask"]["ii"]["mask"], (25,))
    # Table 7: "Scale-II 95 -> 95, Dense1 95 -> 256", one invariant per channel
    chex.assert_shape(mono["params"]["fc1"]["kernel"], (95, 256))
    assert count_params(mono["params"]) == 494_549 - 380 * 256 + 95 * 256


# Measured (tiny widths 4/4/4, two digits, s in {0.5, ..., 0.9}): Scale-II WS 7.9e-4 / 3.1e-3;
# mixed pooling 3.8e-2 / 1.9e-2; SESN's max pooling 4.0e-2 / 2.7e-2. (Scale-II with monomials,
# same setting: 0.19 / 0.54 -- random monomials whose 3 x 3 offsets do not scale with the image
# are only approximately homogeneous; reported, not bounded.)
@pytest.mark.slow
def test_scale_ii_delta_on_digits_beats_pooling():
    x = digits28()
    key = jax.random.key(0, impl="rbg")
    deltas = {}
    for head in ("ii", "mixed"):
        m = ScaledMNISTNet(head=head, widths=(4, 4, 4), hidden=8)
        v = jax.jit(m.init)(key, x)
        deltas[head] = scale_delta(jax.jit(lambda z, m=m, v=v: m.apply(v, z, method="features")), x)
    assert np.all(deltas["ii"] < 1e-2), deltas
    assert np.all(deltas["mixed"] > 3 * deltas["ii"]), deltas


def test_monomial_network_forward_and_train_step():
    x = digits28()
    m = ScaledMNISTNet(
        head="ii_monomials", widths=(4, 4, 4), hidden=8, upsample="bicubic", dropout=0.5
    )
    v = jax.jit(m.init)(jax.random.key(1, impl="rbg"), x)
    chex.assert_shape(v["ii_mask"]["ii"]["mask"], (25,))
    y, state = jax.jit(
        lambda v: m.apply(
            v, x, train=True, rngs={"dropout": jax.random.PRNGKey(0)}, mutable=["batch_stats"]
        )
    )(v)
    chex.assert_shape(y, (2, 10))
    chex.assert_tree_all_finite(y)
    assert set(state["batch_stats"]) == {"bn1", "bn2", "bn3", "bn_fc1"}


@pytest.mark.slow
def test_monomial_network_prunes_25_12_5_at_epoch_ends():
    """The trainer's epoch-end call prunes the monomial pairs 25 -> 12 -> 5 after epochs 5, 10."""
    from invjax.models.mnist import PRUNING_SCHEDULE

    x = digits28()
    m = ScaledMNISTNet(head="ii_monomials", widths=(4, 4, 4), hidden=8, upsample="none")
    v = m.init(jax.random.PRNGKey(0), x)
    assert PRUNING_SCHEDULE == {5: 12, 10: 5}
    other = ScaledMNISTNet(head="ii", widths=(4, 4, 4), hidden=8, upsample="none")
    v_other = other.init(jax.random.PRNGKey(0), x)
    assert other.on_epoch_end(v_other, 5, x) is v_other  # no monomials: nothing to prune
    # what the trainer asks before calling the hook (vmapped models stay stacked where False)
    assert [m.acts_at_epoch_end(e) for e in range(12)] == [e in PRUNING_SCHEDULE for e in range(12)]
    assert not any(other.acts_at_epoch_end(e) for e in range(12))
    assert m.on_epoch_end(v, 0, x) is v  # nothing scheduled after 0 epochs
    kept = []
    for epochs_done in range(12):
        new = m.on_epoch_end(v, epochs_done, x)
        assert (new is v) == (epochs_done not in PRUNING_SCHEDULE)
        v = new
        kept.append(int(np.sum(v["ii_mask"]["ii"]["mask"])))
    assert kept == [25] * 5 + [12] * 5 + [5] * 2
    # Pruning changes only the mask: the parameters are still those of init.
    chex.assert_trees_all_equal(v["params"], m.init(jax.random.PRNGKey(0), x)["params"])


@pytest.mark.parametrize("method", ["nearest", "bicubic"])
def test_upsampling_commutes_with_rotations_and_flips(method):
    x = digits28()
    d4 = G.dihedral(4)
    y = upsample(x, 2, method)
    chex.assert_shape(y, (2, 56, 56, 1))
    for e in (1, 4, 7):
        np.testing.assert_allclose(
            upsample(G.transform(x, d4, e), 2, method), G.transform(y, d4, e), atol=1e-6
        )


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(head="avg"), "head"),
        (dict(family="std", head="ii"), "needs scale features"),
        (dict(upsample="area"), "upsample"),
        (dict(widths=(4, 4)), "three"),
        (dict(dropout=1.0), "dropout"),
    ],
)
def test_bad_configurations(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ScaledMNISTNet(**kwargs)


def test_type_b_networks_keep_the_parameter_counts():
    """The peers' type-B bases (SESN's mnist_ses_vector_56, DISCO's disco_b) have 49 functions
    as type A: the Table 2 configs' counts are unchanged by the switch."""
    shape = (1, 28, 28, 1)
    pairs = [
        (ScaledMNISTNet(basis="hermite", head="maxpool"), "hermite_b"),
        (ScaledMNISTNet(basis="disco", head="mixed", spatial_pool="avg"), "disco_b_plus"),
        (ScaledMNISTNet(basis="disco", head="ii"), "disco_b_plus"),
    ]
    for a, kind in pairs:
        b = a.clone(basis=kind)
        count = [count_params(abstract_variables(m, shape)["params"]) for m in (a, b)]
        assert count[0] == count[1], (kind, count)


@pytest.mark.parametrize("basis", ["disco_b_plus", "hermite_b"])
def test_scale_ii_delta_on_digits_with_the_type_b_bases(basis):
    """Section 5.1's Delta of the Scale-II features on real digits with the peers' bases
    (measured, widths 4/4/4, two digits: Scale-II 1.5e-3 / 3.4e-4 with disco_b_plus, 7.7e-4 /
    1.6e-3 with hermite_b; the mixed pooling head 6.6e-2 / 8.6e-2 and 2.6e-2 / 3.1e-2)."""
    x = digits28()
    m = ScaledMNISTNet(head="ii", basis=basis, widths=(4, 4, 4), hidden=8)
    v = jax.jit(m.init)(jax.random.key(0, impl="rbg"), x)
    delta = scale_delta(jax.jit(lambda z: m.apply(v, z, method="features")), x)
    pool = ScaledMNISTNet(head="mixed", basis=basis, widths=(4, 4, 4), hidden=8)
    vp = jax.jit(pool.init)(jax.random.key(0, impl="rbg"), x)
    delta_pool = scale_delta(jax.jit(lambda z: pool.apply(vp, z, method="features")), x)
    assert np.all(delta < 1e-2), delta
    assert np.all(delta_pool > 3 * delta), (delta, delta_pool)
