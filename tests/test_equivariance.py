"""invjax.equivariance and invjax.fields: exact elements, the measured error, typed fields."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from invjax import equivariance as E
from invjax import groups as G
from invjax.contract import Exact
from invjax.fields import TRIVIAL, Field, FieldType, check_sequence
from invjax.invariance import transform_family
from invjax.layers.e2 import E2BatchNorm, E2Conv, E2LiftConv, GroupPool, Restrict

KEY = jax.random.PRNGKey(0)


def photo(h=17, w=17, c=3):
    import skimage.data

    img = skimage.data.astronaut()[100 : 100 + 2 * h : 2, 180 : 180 + 2 * w : 2, :c]
    return jnp.asarray(img[None], jnp.float32) / 255.0


@pytest.mark.slow
def test_a_d4_field_into_a_c8_layer_is_one_clear_error():
    """Both have 8 channels per field: only the field type tells them apart."""
    x = photo()
    lift = E2LiftConv(2, "D4")
    y = lift.apply(lift.init(KEY, Field.trivial(x)), Field.trivial(x))
    assert isinstance(y, Field) and y.type == FieldType.regular_type("D4")
    assert y.shape == (1, 17, 17, 16)
    c8 = E2Conv(2, "C8")
    msg = r"E2Conv\(C8\) expects regular C8 fields, got regular D4 fields: the group chain is wrong"
    with pytest.raises(ValueError, match=msg):
        c8.init(KEY, y)
    with pytest.raises(ValueError, match=msg):  # the same, before any compute
        check_sequence([E2LiftConv(2, "D4"), E2Conv(2, "C8")])
    # A plain array is taken on its channel count alone, as before.
    assert c8.apply(c8.init(KEY, y.tensor), y.tensor).shape == (1, 17, 17, 16)


def test_a_typed_chain_gives_the_untyped_result_and_its_types():
    x = photo()
    layers = [E2LiftConv(2, "D8"), Restrict("D8", "D4"), E2BatchNorm("D8"), GroupPool("D4")]
    assert check_sequence(layers) == TRIVIAL
    assert check_sequence(layers[:2]) == FieldType.regular_type("D4")
    typed, plain = Field.trivial(x), x
    for layer in layers:
        v = layer.init(KEY, plain)
        typed, plain = layer.apply(v, typed), layer.apply(v, plain)
        typed = typed.map(nn.relu)
        plain = nn.relu(plain)
    assert typed.type == TRIVIAL
    np.testing.assert_array_equal(typed.tensor, plain)


@pytest.mark.parametrize(
    "layer,field,expected",
    [
        (E2LiftConv(2, "D4"), FieldType.regular_type("D4"), "trivial fields"),
        (GroupPool("C4"), FieldType.regular_type("D2"), "regular C4 fields"),
        (Restrict("D8", "D4"), TRIVIAL, "regular D8 fields"),
        (E2BatchNorm("C8"), FieldType.regular_type("D4"), "a subgroup of C8"),
    ],
)
def test_each_layer_names_what_it_expects(layer, field, expected):
    with pytest.raises(ValueError, match=expected):
        layer.out_type(field)


def test_residual_sums_need_one_type():
    a = Field.regular(jnp.ones((1, 3, 3, 8)), "D4")
    assert (a + a).type == a.type
    with pytest.raises(ValueError, match="cannot add regular C8 fields to regular D4 fields"):
        a + Field.regular(jnp.ones((1, 3, 3, 8)), "C8")


def test_exact_elements_of_layers_follow_their_group_and_the_grid():
    labels = lambda m, s: [e.label for e in E.exact_elements(m, s)]  # noqa: E731
    square, rect = (1, 9, 9, 8), (1, 9, 12, 8)
    assert labels(E2Conv(2, "D4"), square) == [
        "rot90",
        "rot180",
        "rot270",
        "flip",
        "flip_rot90",
        "flip_rot180",
        "flip_rot270",
    ]
    assert labels(E2Conv(2, "C8"), square) == ["rot90", "rot180", "rot270"]
    assert labels(E2Conv(2, "D4"), rect) == ["rot180", "flip", "flip_rot180"]
    assert labels(Restrict("D4", "D1"), square) == ["flip"]
    assert labels(E2Conv(2, "D4", stride=2, downsample="strided"), (1, 8, 8, 8)) == []
    assert labels(E2Conv(2, "D4", stride=2, downsample="strided"), (1, 9, 9, 8)) != []
    assert labels(nn.Conv(3, (3, 3)), square) == []  # no claim, no element


@pytest.mark.slow
def test_check_equivariance_of_a_group_convolution_on_a_photo():
    """C8: exact for its 90-degree elements, not for 45 degrees (interpolated). Other groups,
    sizes and strides: tests/test_properties.py."""
    g = G.parse_group("C8")
    lift = E2LiftConv(3, g)
    x = photo(16, 16)
    feats = lift.apply(lift.init(KEY, x), x)
    conv = E2Conv(2, g, kernel_size=5)
    v = conv.init(jax.random.PRNGKey(1), feats)
    errors = E.check_equivariance(conv, v, feats)
    assert list(errors) == [e.label for e in E.exact_elements(conv, feats.shape)]
    assert errors and max(errors.values()) < 1e-5, errors
    # Every element of the group, exact or not: 45 degrees is interpolated, hence not exact.
    every = E.check_equivariance(conv, v, feats, [(g, i) for i in range(1, g.order)])
    assert max(every[k] for k in errors) < 1e-5
    assert every["rot45"] > 1e-3, every


class _Claims(Exact, nn.Module):
    """A plain convolution that claims D4: the measurement must catch it."""

    @nn.compact
    def __call__(self, x):
        return nn.Conv(4, (3, 3))(x)

    def exact_group(self, input_shape):
        return G.dihedral(4)


def test_a_false_claim_is_measured_as_such():
    x = photo()
    m = _Claims()
    errors = E.check_equivariance(m, m.init(KEY, x), x)
    assert len(errors) == 7 and min(errors.values()) > 1e-2, errors


def test_image_transforms_measure_invariance_of_invariant_outputs():
    from invjax.layers.ii import E2InvariantIntegration

    m = E2InvariantIntegration(4, "D4")
    x = photo(16, 16)
    v = m.init(KEY, x)
    exact = E.check_equivariance(m, v, x, train=False)
    assert len(exact) == 7
    assert max(exact.values()) < 1e-5, exact
    rot45 = E.check_equivariance(m, v, x, transform_family("rot45"), train=False)
    assert set(rot45) == {"rot45", "rot135", "rot225", "rot315"}
    assert all(1e-4 < e < 10 for e in rot45.values()), rot45  # interpolated: not exact
    conv, z = E2Conv(2, "D4"), jnp.ones((1, 5, 5, 8))
    with pytest.raises(ValueError, match="give group elements"):
        E.check_equivariance(conv, conv.init(KEY, z), z, transform_family("flip"))


def test_relative_error():
    a = np.array([[1.0, 0.0], [0.0, 2.0]])
    b = np.array([[1.0, 0.0], [0.0, 1.0]])
    assert E.relative_error(a, b) == pytest.approx(1 / np.sqrt(2))
    assert E.relative_error(a, b, per_sample=True) == pytest.approx(1.0)
    assert E.relative_error(a, b, ord=np.inf) == pytest.approx(1.0)
    assert E.relative_error(b, b) == 0.0
    with pytest.raises(ValueError, match="differ"):
        E.relative_error(a, b[:1])
