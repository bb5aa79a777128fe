"""Property-based tests (hypothesis) of the core guarantees, over drawn configurations.

The example-based tests enumerate every group element on fixed photos; these draw the rest: the
group (C_N and D_N, N in {1, 2, 4, 8}), widths, kernel sizes, strides and downsampling rules,
even and odd image sizes, batch sizes and initialisations, for the E(2) and scale layers, the II
layers and small whole networks. Each asserts

* exactness: for every element the module's own group chain makes exact
  (:func:`invjax.equivariance.exact_elements`), the output changes by float32 rounding only
  (relative error below 1e-5 per sample, at the ``highest`` precision);
* the shape and dtype contract, and the jaxtyping annotations of the public ops it calls.

Bounded: profile ``invjax`` (below) draws few examples, deterministically (``derandomize``: the
same examples on every run, so CI is reproducible), with no deadline (compilation dominates).
``HYPOTHESIS_PROFILE=invjax-long`` draws more when exploring locally.
"""

from __future__ import annotations

import inspect
import os
import typing

import chex
import jax
import jax.numpy as jnp
import jaxtyping
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from invjax import equivariance as E
from invjax import groups as G
from invjax.fields import TRIVIAL, Field, FieldType
from invjax.layers import e2 as e2l
from invjax.layers import ii as iil
from invjax.layers import scale as scl
from invjax.ops import e2 as e2_ops
from invjax.ops import scale as scale_ops

_COMMON = dict(
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("invjax", max_examples=4, **_COMMON)
settings.register_profile("invjax-long", max_examples=40, **_COMMON)
PROFILE = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "invjax"))


def bounded(n: int | None = None):
    """The profile, with at most ``n`` examples for the costly properties."""
    return settings(PROFILE, max_examples=min(n or PROFILE.max_examples, PROFILE.max_examples))


EXACT = 1e-5  # relative, per sample: float32 rounding
GROUP_NAMES = [f"{k}{n}" for k in "CD" for n in (1, 2, 4, 8)]
groups_ = st.sampled_from(GROUP_NAMES).map(G.parse_group)
sizes = st.integers(5, 10)  # even and odd
batches = st.integers(1, 2)
seeds = st.integers(0, 2**16)


def photos(batch: int, size: int, channels: int, seed: int) -> jnp.ndarray:
    """``batch`` crops of a real photo, ``[B, size, size, channels]`` in [0, 1]."""
    import skimage.data

    img = skimage.data.astronaut().astype(np.float32) / 255.0
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(batch):
        i, j = rng.integers(0, 512 - 2 * size, 2)
        out.append(img[i : i + 2 * size : 2, j : j + 2 * size : 2, :channels])
    return jnp.asarray(np.stack(out))


def typechecked(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with its jaxtyping annotations checked: every annotated argument
    and the result against one memo of named dimensions (``ci`` of ``x`` and of ``weight`` ...)."""
    names = {"Array": jax.Array, "Float": jaxtyping.Float, "np": np}
    hints = typing.get_type_hints(fn, localns=names)
    bound = inspect.signature(fn).bind(*args, **kwargs)
    arrays = [
        (name, value, hints[name])
        for name, value in bound.arguments.items()
        if isinstance(hints.get(name), type) and issubclass(hints[name], jaxtyping.AbstractArray)
    ]
    # Plain names first: a product such as ``ci*g`` needs both bound (from other arguments).
    arrays.sort(key=lambda a: any(op in a[2].dim_str for op in "*+-"))
    with jaxtyping.jaxtyped("context"):
        for name, value, hint in arrays:
            assert isinstance(value, hint), (fn.__name__, name, np.shape(value), hint)
        out = fn(*args, **kwargs)
        assert isinstance(out, hints["return"]), (fn.__name__, out.shape, hints["return"])
    return out


def random_variables(module, x, seed: int, **kwargs):
    """Variables of ``module`` with random values (any initialisation is one a model can reach:
    normal parameters and statistics, positive variances), drawn by NumPy from the abstract
    ``init`` (``jax.eval_shape``): nothing is compiled to draw them."""
    from flax import traverse_util

    shapes = jax.eval_shape(lambda z: module.init(jax.random.PRNGKey(0), z, **kwargs), x)
    rng = np.random.default_rng(seed)
    flat = traverse_util.flatten_dict(dict(shapes))
    for path, leaf in flat.items():
        if path[-1] == "var":
            flat[path] = jnp.asarray(rng.uniform(0.5, 1.5, leaf.shape), leaf.dtype)
        else:
            flat[path] = jnp.asarray(0.3 * rng.normal(size=leaf.shape), leaf.dtype)
    return traverse_util.unflatten_dict(flat)


def abstract_typechecked(fn, arrays: tuple, *static):
    """:func:`typechecked` on abstract ``arrays`` (``jax.eval_shape``: traced, not compiled),
    the non-array arguments ``static`` after them; returns the output's shape and dtype."""
    return jax.eval_shape(lambda *a: typechecked(fn, *a, *static), *arrays)


def out_size(size: int, stride: int) -> int:
    return -(-size // stride)


def assert_exact(errors: dict, expected_labels: list[str]):
    assert list(errors) == expected_labels
    assert all(e < EXACT for e in errors.values()), errors


@bounded()
@given(
    group=groups_,
    width=st.integers(1, 2),
    channels=st.integers(1, 3),
    kernel=st.sampled_from([1, 3, 5]),
    stride=st.sampled_from([1, 2]),
    downsample=st.sampled_from(["symmetric", "maxpool", "strided"]),
    size=sizes,
    batch=batches,
    trivial_out=st.booleans(),
    seed=seeds,
)
def test_e2_layers_are_exact_for_their_grid_elements(
    group, width, channels, kernel, stride, downsample, size, batch, trivial_out, seed
):
    x = photos(batch, size, channels, seed)
    lift = e2l.E2LiftConv(width, group, kernel, stride, downsample=downsample)
    v = random_variables(lift, x, seed)
    y = jax.jit(lift.apply)(v, Field.trivial(x))
    h = out_size(size, stride)
    assert y.type == FieldType.regular_type(group)
    chex.assert_shape(y.tensor, (batch, h, h, width * group.order))
    chex.assert_type(y.tensor, jnp.float32)
    # The op under the layer honours its annotated contract (with the layer's own shapes).
    out = abstract_typechecked(
        e2_ops.lift_conv, (x, v["params"]["weight"]), lift.basis(group), stride, downsample
    )
    assert out.shape == y.shape
    labels = [e.label for e in E.exact_elements(lift, x.shape)]
    if stride == 2 and downsample == "strided" and size % 2 == 0:
        assert labels == []  # plain stride 2 on an even grid: no claim
    else:
        assert len(labels) == E.exact_group(lift, x.shape).order - 1
        assert_exact(E.check_equivariance(lift, v, x), labels)

    conv = e2l.E2Conv(width + 1, group, kernel, trivial_out=trivial_out)
    w = random_variables(conv, y.tensor, seed + 1)
    z = jax.jit(conv.apply)(w, y)
    chex.assert_shape(z.tensor, (batch, h, h, (width + 1) * (1 if trivial_out else group.order)))
    assert z.type == (TRIVIAL if trivial_out else y.type)
    phi = conv.basis(group)
    arrays = (y.tensor, w["params"]["weight"])
    if trivial_out:
        out = abstract_typechecked(e2_ops.trivial_conv, arrays, phi)
    else:
        out = abstract_typechecked(e2_ops.group_conv, arrays, phi, group)
    assert out.shape == z.shape
    assert_exact(
        E.check_equivariance(conv, w, y.tensor),
        [e.label for e in E.exact_elements(conv, y.tensor.shape)],
    )


def subgroups(group: G.Group) -> list[G.Group]:
    n = group.n_rotations
    return [
        G.Group(d, f)
        for d in (1, 2, 4, 8)
        if n % d == 0
        for f in (False, True)
        if group.flips or not f
    ]


@bounded()
@given(data=st.data(), size=sizes, fields=st.integers(1, 3), batch=batches, seed=seeds)
def test_restriction_and_group_pooling_are_exact(data, size, fields, batch, seed):
    group = data.draw(st.sampled_from([G.parse_group(n) for n in GROUP_NAMES if n != "C1"]))
    sub = data.draw(st.sampled_from(subgroups(group)))
    x = jax.random.normal(jax.random.PRNGKey(seed), (batch, size, size, fields * group.order))
    restrict = e2l.Restrict(group, sub)
    y = jax.jit(restrict.apply)({}, Field.regular(x, group))
    assert y.type == FieldType.regular_type(sub)
    chex.assert_shape(y.tensor, x.shape)
    abstract_typechecked(e2_ops.restrict, (x,), group, sub)
    # A restriction is a relabelling: every channel kept, once.
    np.testing.assert_array_equal(np.sort(np.asarray(y.tensor), -1), np.sort(np.asarray(x), -1))
    assert_exact(
        E.check_equivariance(restrict, {}, x),
        [e.label for e in E.exact_elements(restrict, x.shape)],
    )
    pool = e2l.GroupPool(group, data.draw(st.sampled_from(["max", "mean"])))
    p = jax.jit(pool.apply)({}, Field.regular(x, group))
    chex.assert_shape(p.tensor, (batch, size, size, fields))
    abstract_typechecked(e2_ops.group_pool, (x,), group.order, pool.reduce)
    assert p.type == TRIVIAL
    assert_exact(
        E.check_equivariance(pool, {}, x), [e.label for e in E.exact_elements(pool, x.shape)]
    )


@bounded()
@given(
    group=groups_,
    features=st.integers(1, 4),
    channels=st.integers(1, 3),
    kernel=st.sampled_from([1, 3, 5]),
    size=sizes,
    batch=batches,
    seed=seeds,
)
def test_e2_invariant_integration_is_exactly_invariant(
    group, features, channels, kernel, size, batch, seed
):
    x = photos(batch, size, channels, seed)
    layer = iil.E2InvariantIntegration(features, group, kernel)
    v = random_variables(layer, x, seed)
    out = jax.jit(layer.apply)(v, x)
    chex.assert_shape(out, (batch, features))
    chex.assert_type(out, jnp.float32)
    chex.assert_tree_all_finite(out)
    labels = [e.label for e in E.exact_elements(layer, x.shape)]
    assert len(labels) == G.intersect(group, G.dihedral(4)).order - 1
    assert_exact(E.check_equivariance(layer, v, x), labels)
    pooled = iil.AveragePooling()
    assert_exact(
        E.check_equivariance(pooled, {}, x), [e.label for e in E.exact_elements(pooled, x.shape)]
    )


@bounded()
@given(
    features=st.integers(1, 3),
    channels=st.integers(1, 2),
    n_scales=st.integers(1, 3),
    kernel=st.sampled_from([3, 5, 7]),
    stride=st.sampled_from([1, 2]),
    size=st.integers(6, 11),
    batch=batches,
    shift=st.tuples(st.integers(-2, 2), st.integers(-2, 2)),
    seed=seeds,
)
def test_scale_layers_keep_their_contract_and_commute_with_translations(
    features, channels, n_scales, kernel, stride, size, batch, shift, seed
):
    """Scale equivariance is approximate (interpolated); exact are the shapes, the dtype and the
    translations: an image that is zero within a margin, shifted, gives the shifted output."""
    scales = G.scale_set(n_scales)
    eff = max(1, kernel - 2)
    lift = scl.ScaleLiftConv(features, kernel, eff, scales, basis="hermite", stride=stride)
    conv = scl.ScaleConv(features + 1, 1, kernel, eff, scales, basis="hermite")
    x = photos(batch, size, channels, seed)
    v = random_variables(lift, x, seed)
    y = jax.jit(lift.apply)(v, x)
    h = out_size(size, stride)
    chex.assert_shape(y, (batch, h, h, n_scales, features))
    chex.assert_type(y, jnp.float32)
    psi = jnp.asarray(scl._basis("hermite", kernel, eff, scales, None))
    out = abstract_typechecked(scale_ops.scale_lift_conv, (x, v["params"]["weight"], psi), stride)
    assert out.shape == y.shape
    w = random_variables(conv, y, seed + 1)
    z = jax.jit(conv.apply)(w, y)
    chex.assert_shape(z, (batch, h, h, n_scales, features + 1))
    chex.assert_shape(scl.ScaleMaxProjection().apply({}, z), (batch, h, h, features + 1))

    # Translations (stride 1): zero margins wider than the receptive field plus the shift.
    margin = 2 * (kernel // 2) + 2
    canvas = jnp.pad(x, ((0, 0), (margin, margin), (margin, margin), (0, 0)))
    moved = jnp.roll(canvas, shift, axis=(1, 2))
    lift1 = scl.ScaleLiftConv(features, kernel, eff, scales, basis="hermite")
    v1 = random_variables(lift1, canvas, seed)

    @jax.jit
    def net(img):
        return conv.apply(w, jax.nn.relu(lift1.apply(v1, img)))

    both = net(jnp.concatenate([canvas, moved]))
    want = jnp.roll(both[:batch], shift, axis=(1, 2))
    assert E.relative_error(both[batch:], want, per_sample=True) < EXACT


def _chain(data) -> tuple[str, str, str]:
    """A restriction chain of three groups, each a subgroup of the one before."""
    first = data.draw(st.sampled_from(["C4", "C8", "D2", "D4", "D8"]))
    chain = [G.parse_group(first)]
    for _ in range(2):
        chain.append(data.draw(st.sampled_from(subgroups(chain[-1]))))
    return tuple(g.name for g in chain)


@bounded(3)
@given(
    data=st.data(),
    head=st.sampled_from(["ii", "pool"]),
    first_stride=st.sampled_from([1, 2]),
    downsample=st.sampled_from(["symmetric", "maxpool", "strided"]),
    size=st.sampled_from([9, 12, 16]),
    batch=batches,
    seed=seeds,
)
def test_small_e2_networks_are_exact_for_their_group_chain(
    data, head, first_stride, downsample, size, batch, seed
):
    from invjax.models.wrn import WideResNet

    groups = _chain(data)
    model = WideResNet(
        family="e2",
        depth=10,
        widen_factor=1,
        groups=groups,
        head=head,
        first_stride=first_stride,
        downsample=downsample,
        width_divisor=4.0,
        stem_width=4,
    )
    x = photos(batch, size, 3, seed)
    v = random_variables(model, x, seed, train=False)
    logits = jax.eval_shape(lambda a: model.apply(v, a, train=False), x)
    chex.assert_shape(logits, (batch, 10))
    chex.assert_type(logits, jnp.float32)
    labels = [e.label for e in E.exact_elements(model, x.shape)]
    last = G.parse_group(groups[-1])
    sizes_at_stride2 = [size] if first_stride == 2 else []
    s = out_size(size, first_stride)
    sizes_at_stride2 += [s, out_size(s, 2)]
    if downsample == "strided" and any(n % 2 == 0 for n in sizes_at_stride2):
        assert labels == []
    else:
        assert len(labels) == G.intersect(last, G.dihedral(4)).order - 1
    assert_exact(E.check_equivariance(model, v, x, train=False), labels)


def test_the_profile_is_bounded():
    """The profile keeps this file within its share of the suite's 15 minutes."""
    profile = settings.get_profile("invjax")
    assert profile.max_examples <= 4 and profile.deadline is None and profile.derandomize


@pytest.mark.parametrize("name", ["lift_conv", "group_conv", "trivial_conv"])
def test_a_wrong_shape_fails_the_annotation_check(name):
    """The annotation check can fail: channels that are no multiple of the group order."""
    d4 = G.dihedral(4)
    layer = e2l.E2Conv(2, d4)
    phi = layer.basis(d4)
    x = jnp.ones((1, 5, 5, 12))  # 12 channels: ci * 8 has no integer ci
    args = {
        "lift_conv": (jnp.ones((1, 5, 5, 3)), jnp.ones((2, 2, phi.shape[1])), phi),
        "group_conv": (x, jnp.ones((1, 2, 8, phi.shape[1])), phi, d4),
        "trivial_conv": (x, jnp.ones((1, 2, phi.shape[1])), phi),
    }[name]
    with pytest.raises(AssertionError):
        typechecked(getattr(e2_ops, name), *args)


def test_subgroups_and_meets():
    assert [g.name for g in subgroups(G.dihedral(4))] == ["C1", "D1", "C2", "D2", "C4", "D4"]
    assert G.intersect(G.dihedral(8), G.cyclic(4)).name == "C4"
    assert G.intersect(G.dihedral(8), G.dihedral(2)).name == "D2"
    assert G.intersect(G.cyclic(8), G.dihedral(1)).name == "C1"
