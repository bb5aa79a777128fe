"""The Flax NNX layers (invjax.nnx): each computes what its Linen layer computes from the same
parameters, on real photos; an NNX network is exact under 90-degree rotations and flips; one
optax step through nnx.Optimizer moves every parameter."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from flax.core import unfreeze
from flax.traverse_util import flatten_dict

from invjax import equivariance, fields, groups
from invjax import nnx as N
from invjax import precision as P
from invjax.contract import Exact, Precise, Typed
from invjax.layers import e2 as le2
from invjax.layers import heads as lheads
from invjax.layers import ii as lii
from invjax.layers import scale as lscale

# Linen names its inner batch norm BatchNorm_0; the NNX MixedPooling holds it as `bn`.
RENAME = {"BatchNorm_0": "bn"}


def load_linen(model: nnx.Module, variables) -> None:
    """Copy a Linen layer's variables (every collection) into ``model``; the two must hold the
    same variables under the same names."""
    flat = {}
    for tree in unfreeze(variables).values():
        for path, value in flatten_dict(tree).items():
            flat[tuple(RENAME.get(k, k) for k in path)] = value
    state = nnx.state(model)
    leaves = list(nnx.to_flat_state(state))
    assert {path for path, _ in leaves} == set(flat)
    for path, var in leaves:
        assert var[...].shape == flat[path].shape, path
        var.set_value(jnp.asarray(flat[path]))
    nnx.update(model, state)


def linen_state(model: nnx.Module) -> dict:
    return {p: np.asarray(v[...]) for p, v in nnx.to_flat_state(nnx.state(model))}


@pytest.fixture(scope="module")
def maps(photo_batch):
    """Real feature maps from the photos: regular D4 fields, scale features, invariant maps."""
    x = jnp.asarray(photo_batch)  # [2, 32, 32, 3]
    lift = le2.E2LiftConv(4, "D4", kernel_size=5)
    d4 = lift.apply(lift.init(jax.random.PRNGKey(3), x), x)  # [2, 32, 32, 32]
    slift = lscale.ScaleLiftConv(4)
    sc = slift.apply(slift.init(jax.random.PRNGKey(4), x[:, :16, :16]), x[:, :16, :16])
    pooled = nn.relu(le2.GroupPool("D4").apply({}, d4))  # [2, 32, 32, 4]
    return {"photo": x, "d4": d4, "scale": sc, "pooled": pooled}


def _cases(m):
    """``(Linen layer, NNX layer, input, Linen call kwargs, NNX call kwargs)`` per public layer."""
    r = nnx.Rngs(0)
    x, d4, sc, pooled = m["photo"], m["d4"], m["scale"], m["pooled"]
    feats = {
        "e2": lii.AveragePooling().apply({}, d4),
        "scale": sc.mean(axis=(1, 2, 3)),
        "std": x.mean(axis=(1, 2)),
    }
    widths = {k: v.shape[-1] for k, v in feats.items()}
    return {
        "E2LiftConv": (le2.E2LiftConv(4, "D4", 5), N.E2LiftConv(3, 4, "D4", 5, rngs=r), x),
        "E2Conv": (le2.E2Conv(3, "D4", stride=2), N.E2Conv(32, 3, "D4", stride=2, rngs=r), d4),
        "E2Conv_trivial": (
            le2.E2Conv(5, "D4", trivial_out=True),
            N.E2Conv(32, 5, "D4", trivial_out=True, rngs=r),
            d4,
        ),
        "GroupPool": (le2.GroupPool("D4", "mean"), N.GroupPool("D4", "mean"), d4),
        "Restrict": (le2.Restrict("D4", "C4"), N.Restrict("D4", "C4"), d4),
        "E2BatchNorm_train": (le2.E2BatchNorm("D4"), N.E2BatchNorm(32, "D4"), d4, {"train": True}),
        "E2BatchNorm_eval": (
            le2.E2BatchNorm("D4"),
            N.E2BatchNorm(32, "D4", use_running_average=True),
            d4,
        ),
        "ScaleLiftConv": (
            lscale.ScaleLiftConv(4, use_bias=True),
            N.ScaleLiftConv(3, 4, use_bias=True, rngs=r),
            x[:, :16, :16],
        ),
        "ScaleConv": (
            lscale.ScaleConv(3, scale_size=2),
            N.ScaleConv(4, 3, scale_size=2, rngs=r),
            sc,
        ),
        "ScaleMaxProjection": (lscale.ScaleMaxProjection(), N.ScaleMaxProjection(), sc),
        "ScaleBatchNorm_train": (lscale.ScaleBatchNorm(), N.ScaleBatchNorm(4), sc, {"train": True}),
        "ScaleBatchNorm_eval": (
            lscale.ScaleBatchNorm(),
            N.ScaleBatchNorm(4, use_running_average=True),
            sc,
            {"train": False},
        ),
        "E2InvariantIntegration": (
            lii.E2InvariantIntegration(6, "D4"),
            N.E2InvariantIntegration(4, 6, "D4", rngs=r),
            pooled,
        ),
        "RotationInvariantIntegration": (
            lii.RotationInvariantIntegration(6, 8, method="reference"),
            N.RotationInvariantIntegration(4, 6, 8, method="reference", rngs=r),
            pooled,
        ),
        "TranslationInvariantIntegration": (
            lii.TranslationInvariantIntegration(6, 5),
            N.TranslationInvariantIntegration(4, 6, 5, rngs=r),
            pooled,
        ),
        "ScaleInvariantIntegration": (
            lii.ScaleInvariantIntegration(6),
            N.ScaleInvariantIntegration(4, 6, rngs=r),
            pooled,
        ),
        "ScaleMonomialInvariantIntegration": (
            lii.ScaleMonomialInvariantIntegration(7, seed=2),
            N.ScaleMonomialInvariantIntegration(7, seed=2),
            pooled,
        ),
        "ScaleMonomialInvariantIntegration_channels": (
            lii.ScaleMonomialInvariantIntegration(5, layout="channels", output="log"),
            N.ScaleMonomialInvariantIntegration(5, layout="channels", output="log"),
            pooled,
        ),
        "MixedPooling_train": (
            lii.MixedPooling(),
            N.MixedPooling(4, rngs=r),
            pooled,
            {"train": True},
        ),
        "MixedPooling_eval": (
            lii.MixedPooling(),
            N.MixedPooling(4, use_running_average=True, rngs=r),
            pooled,
        ),
        "AveragePooling": (lii.AveragePooling(), N.AveragePooling(), pooled),
        "StreamCombination_map_e2": (
            lheads.StreamCombination("map_e2"),
            N.StreamCombination(widths, "map_e2", rngs=r),
            feats,
        ),
        "StreamCombination_map_all": (
            lheads.StreamCombination("map_all", 8),
            N.StreamCombination(widths, "map_all", 8, rngs=r),
            feats,
        ),
        "StreamCombination_concat": (
            lheads.StreamCombination("concat"),
            N.StreamCombination(widths, "concat", rngs=r),
            feats,
        ),
    }


CASES = [
    "E2LiftConv", "E2Conv", "E2Conv_trivial", "GroupPool", "Restrict", "E2BatchNorm_train",
    "E2BatchNorm_eval", "ScaleLiftConv", "ScaleConv", "ScaleMaxProjection", "ScaleBatchNorm_train",
    "ScaleBatchNorm_eval", "E2InvariantIntegration", "RotationInvariantIntegration",
    "TranslationInvariantIntegration", "ScaleInvariantIntegration",
    "ScaleMonomialInvariantIntegration", "ScaleMonomialInvariantIntegration_channels",
    "MixedPooling_train", "MixedPooling_eval", "AveragePooling", "StreamCombination_map_e2",
    "StreamCombination_map_all", "StreamCombination_concat",
]  # fmt: skip


def test_every_public_layer_has_an_nnx_module_of_the_same_name():
    public = {
        name
        for mod in (le2, lscale, lii, lheads)
        for name, obj in vars(mod).items()
        if isinstance(obj, type) and issubclass(obj, nn.Module) and obj.__module__ == mod.__name__
    }
    assert public <= set(N.__all__), public - set(N.__all__)
    assert {c.split("_")[0] for c in CASES} == public
    for name in public:  # the same abilities of the contract as the Linen layer
        linen = next(getattr(m, name) for m in (le2, lscale, lii, lheads) if hasattr(m, name))
        for ability in (Exact, Typed, Precise):
            assert issubclass(getattr(N, name), ability) == issubclass(linen, ability), name


@pytest.mark.parametrize("case", CASES)
def test_nnx_layer_computes_what_the_linen_layer_computes(case, maps):
    linen, module, x, *kw = _cases(maps)[case]
    kw = kw[0] if kw else {}
    variables = linen.init(jax.random.PRNGKey(7), x, **kw)
    variables = unfreeze(variables)
    if "ii_mask" in variables:  # a pruned pair, so the mask is exercised
        variables["ii_mask"]["mask"] = variables["ii_mask"]["mask"].at[1].set(0.0)
    load_linen(module, variables)
    mutable = [c for c in variables if c != "params"] if kw.get("train") else False
    want = linen.apply(variables, x, mutable=mutable, **kw)
    if mutable:
        want, updated = want
    got = module(x)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    if mutable:  # the batch statistics move the same way
        after = {k: v for k, v in linen_state(module).items() if k[-1] in ("mean", "var")}
        ref = {
            tuple(RENAME.get(p, p) for p in path): np.asarray(v)
            for path, v in flatten_dict(unfreeze(updated["batch_stats"])).items()
        }
        assert after.keys() == ref.keys() and after
        for k in ref:
            np.testing.assert_array_equal(after[k], ref[k])


def test_fields_and_the_group_chain_carry_over(maps):
    r = nnx.Rngs(0)
    x = fields.Field.trivial(maps["photo"])
    y = N.E2LiftConv(3, 2, "D4", rngs=r)(x)
    assert isinstance(y, fields.Field) and y.type == fields.FieldType.regular_type("D4")
    z = N.Restrict("D4", "C4")(y)
    assert z.type == fields.FieldType.regular_type("C4")
    with pytest.raises(ValueError, match=r"E2Conv\(C8\) expects regular C8 fields, got regular C4"):
        N.E2Conv(16, 2, "C8", rngs=r)(z)
    layers = [N.E2LiftConv(3, 2, "D4", rngs=r), N.Restrict("D4", "C4"), N.GroupPool("C4")]
    assert fields.check_sequence(layers) == fields.TRIVIAL
    with pytest.raises(ValueError, match="in_features=30 is not a multiple of the group order 8"):
        N.E2Conv(30, 2, "D4", rngs=r)
    with pytest.raises(ValueError, match="lowering='nope' is unknown"):
        N.ScaleConv(4, 3, lowering="nope", rngs=r)


class D4Net(Exact, nnx.Module):
    """A small D4 network: lift, batch norm, group convolution, E(2)-II over D4, a classifier."""

    def __init__(self, rngs: nnx.Rngs):
        self.lift = N.E2LiftConv(3, 3, "D4", kernel_size=5, rngs=rngs)
        self.bn = N.E2BatchNorm(24, "D4")
        self.conv = N.E2Conv(24, 4, "D4", stride=2, rngs=rngs)
        self.pool = N.GroupPool("D4")
        self.ii = N.E2InvariantIntegration(4, 8, "D4", rngs=rngs)
        self.out = nnx.Linear(8, 10, rngs=rngs)

    def __call__(self, images):
        x = self.bn(self.lift(fields.Field.trivial(images))).map(nnx.relu)
        return self.out(self.ii(nnx.relu(self.pool(self.conv(x)).tensor)))

    def exact_group(self, input_shape):
        return groups.dihedral(4)


def test_an_nnx_network_is_exact_under_rotations_and_flips(photo_batch):
    model = D4Net(nnx.Rngs(0))
    model.train()
    model(jnp.asarray(photo_batch))  # running statistics of real photos, not the initial ones
    model.eval()
    errors = equivariance.check_equivariance(model, None, photo_batch)
    assert sorted(errors) == sorted(
        ["rot90", "rot180", "rot270", "flip", "flip_rot90", "flip_rot180", "flip_rot270"]
    )
    assert max(errors.values()) < 1e-5, errors
    # the measurement is not blind: a 45-degree rotation of the photos is far from exact
    rot45 = ("rot45", lambda x: groups.transform(x, groups.cyclic(8), 1))
    assert equivariance.check_equivariance(model, None, photo_batch, [rot45])["rot45"] > 1e-3
    # one layer alone, on its own field type (Typed), fed regular D4 fields
    layer = N.E2Conv(24, 2, "D4", rngs=nnx.Rngs(1))
    d4 = model.lift(jnp.asarray(photo_batch))
    assert max(equivariance.check_equivariance(layer, None, d4).values()) < 1e-5
    with pytest.raises(ValueError, match="pass variables=None"):
        equivariance.check_equivariance(layer, {"params": {}}, d4)


def test_precision_configure_sets_every_invjax_layer_of_an_nnx_network():
    model = D4Net(nnx.Rngs(0))
    fast = P.configure(model, "bf16")
    modes = {
        type(m).__name__: m.precision for _, m in nnx.iter_modules(fast) if isinstance(m, Precise)
    }
    assert modes == {"E2LiftConv": "bf16", "E2Conv": "bf16", "E2InvariantIntegration": "bf16"}
    assert model.lift.precision is None  # a copy: the original keeps its mode
    assert fast.out.precision is None  # Flax's own layer keeps its lax precision
    np.testing.assert_array_equal(fast.lift.weight[...], model.lift.weight[...])


class TwoStreamNet(nnx.Module):
    """Every kind of parameterised NNX layer on one path to the loss: an E(2) and a scale stream
    combined by the head, then a classifier."""

    def __init__(self, rngs: nnx.Rngs):
        self.e2 = nnx.List([N.E2LiftConv(3, 2, "C4", rngs=rngs), N.E2BatchNorm(8, "C4"),
                   N.GroupPool("C4"), N.E2InvariantIntegration(2, 6, "C4", rngs=rngs)])  # fmt: skip
        self.scale = nnx.List([N.ScaleLiftConv(3, 3, rngs=rngs), N.ScaleBatchNorm(3),
                      N.ScaleConv(3, 3, rngs=rngs), N.ScaleMaxProjection()])  # fmt: skip
        self.scale_ii = N.ScaleInvariantIntegration(3, 4, rngs=rngs)
        self.head = N.StreamCombination({"e2": 6, "scale": 4}, "map_e2", rngs=rngs)
        self.out = nnx.Linear(6, 10, rngs=rngs)

    def __call__(self, images):
        a = images
        for layer in self.e2:
            a = layer(a)
        s = images
        for layer in self.scale:
            s = nnx.relu(layer(s))
        return self.out(self.head({"e2": a, "scale": self.scale_ii(s)}))


def test_one_optax_step_through_nnx_optimizer_moves_every_parameter(photo_batch):
    digits = jnp.asarray(photo_batch[:, :16, :16])
    labels = jnp.array([3, 7])
    model = TwoStreamNet(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.sgd(0.05), wrt=nnx.Param)
    before = linen_state(model)

    def loss_fn(m):
        return optax.softmax_cross_entropy_with_integer_labels(m(digits), labels).mean()

    @nnx.jit
    def step(m, opt):
        loss, grads = nnx.value_and_grad(loss_fn)(m)
        opt.update(m, grads)
        return loss, grads

    loss0, grads = step(model, optimizer)
    grads = dict(nnx.to_flat_state(grads))
    assert grads and all(bool(jnp.all(jnp.isfinite(g[...]))) for g in grads.values())
    assert all(float(jnp.abs(g[...]).max()) > 0 for g in grads.values()), (
        "a parameter got no gradient"
    )
    after = linen_state(model)
    moved = {p for p in before if not np.array_equal(before[p], after[p])}
    assert set(grads) <= moved  # every parameter, and the batch statistics, moved
    assert {p for p in moved if p[-1] in ("mean", "var")}
    assert float(loss_fn(model)) < float(loss0)
