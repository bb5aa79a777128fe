"""One compiled initialisation (invjax.initialise) equals Flax's eager ``init`` bit for bit.

Eager ``init`` compiles every operation on its own; ``initialise.init`` compiles one program with
every operation behind an optimisation barrier. The single layers show that the check can fail:
plain ``jax.jit(init)`` changes the E(2) and scale weights by float32 roundings. Inside a trace
``init_variables`` is the trainer's ``model.init`` unchanged (the same program text).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from invjax import initialise
from invjax.configs import models as model_configs
from invjax.layers.e2 import E2Conv, E2LiftConv
from invjax.layers.scale import ScaleConv, ScaleLiftConv
from invjax.models import build
from invjax.training.state import init_variables


def eager_variables(model, image_shape, rng):
    """The trainer's initialisation as it was written before :mod:`invjax.initialise`."""
    x = jnp.zeros((1, *image_shape), jnp.float32)
    variables = dict(model.init({"params": rng, "dropout": rng}, x, train=False))
    variables.pop("intermediates", None)
    return variables


def differing_leaves(a, b) -> list[str]:
    """Paths of the leaves of ``a`` and ``b`` that differ in any bit (or dtype)."""
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    leaves_b = jax.tree_util.tree_leaves(b)
    out = []
    for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), leaves_b):
        x, y = np.asarray(x), np.asarray(y)
        if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
            out.append(jax.tree_util.keystr(path))
    return out


class E2Pair(nn.Module):
    """A D4 lift and a D4 group convolution: their weights are ``std * normal``."""

    @nn.compact
    def __call__(self, x, train: bool = False):
        return E2Conv(6, "D4", 5)(E2LiftConv(6, "D4", 5)(x))


class ScalePair(nn.Module):
    """A scale lift and a scale convolution (SESN's Hermite basis)."""

    @nn.compact
    def __call__(self, x, train: bool = False):
        return ScaleConv(6, kernel_size=5)(ScaleLiftConv(6, kernel_size=5)(x))


@pytest.mark.parametrize("module", [E2Pair, ScalePair], ids=["e2", "scale"])
def test_layers_compiled_equal_eager_where_plain_jit_does_not(module):
    model, shape, rng = module(), (17, 17, 3), jax.random.PRNGKey(5)
    eager = eager_variables(model, shape, rng)
    assert differing_leaves(eager, initialise.init_variables(model, shape, rng)) == []
    # Why the barriers: one jitted program folds the weight's scale into the normal draw.
    x = jnp.zeros((1, *shape), jnp.float32)
    plain = jax.jit(lambda r: model.init({"params": r, "dropout": r}, x, train=False))(rng)
    assert differing_leaves(eager, plain)


def tiny(name: str):
    """The registry's network ``name`` at tiny width (WRN10-1, stem 4; the MNIST net 4/4/4)."""
    c = model_configs.get(name).copy_and_resolve_references()
    if c.name == "wrn":
        c.depth, c.widen_factor, c.stem_width = 10, 1, 4
    elif c.name == "mnist":
        c.widths, c.hidden = (4, 4, 4), 8
    return build(c)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, shape",
    [
        ("svhn_e2_ii", (32, 32, 3)),
        ("svhn_scale_ii", (32, 32, 3)),
        ("mnist_ii_disco_ws", (28, 28, 1)),
    ],
)
def test_networks_compiled_equal_eager_bit_for_bit(name, shape):
    model = tiny(name)
    for seed in (0, 1):
        rng = jax.random.PRNGKey(seed)
        eager = eager_variables(model, shape, rng)
        assert differing_leaves(eager, init_variables(model, shape, rng)) == [], (name, seed)


def test_seeds_share_one_compilation_and_typed_keys_work():
    model, shape = E2Pair(), (13, 13, 1)
    first = initialise.init_variables(model, shape, jax.random.PRNGKey(0))
    n = len(initialise._COMPILED)
    second = initialise.init_variables(model, shape, jax.random.PRNGKey(1))
    assert len(initialise._COMPILED) == n  # the key is an argument, not a constant
    assert differing_leaves(first, second)  # and it is used
    typed = jax.random.key(2)
    assert (
        differing_leaves(
            eager_variables(model, shape, typed), initialise.init_variables(model, shape, typed)
        )
        == []
    )


def test_traced_initialisation_is_the_trainers_program_unchanged():
    """Under jit (the trainer's state) and eval_shape it is ``model.init`` as before: the same
    program text, so the trainer's initial values and compilation-cache entries stay."""
    model, shape, rng = E2Pair(), (13, 13, 1), jax.random.PRNGKey(0)
    new = jax.jit(lambda r: init_variables(model, shape, r)).lower(rng).as_text()
    old = jax.jit(lambda r: eager_variables(model, shape, r)).lower(rng).as_text()
    assert new == old
    abstract = jax.eval_shape(lambda r: init_variables(model, shape, r), rng)
    assert jax.tree_util.tree_structure(abstract) == jax.tree_util.tree_structure(
        eager_variables(model, shape, rng)
    )


def test_forward_pass_is_left_out_of_the_program():
    """Only what a variable depends on is compiled: not the network's output."""

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x, train: bool = False):
            y = nn.Dense(3)(x)
            return jnp.tanh(y) @ jnp.ones((3, 3))

    closed = jax.make_jaxpr(lambda r, x: Net().init(r, x))(jax.random.PRNGKey(0), jnp.ones((1, 2)))
    kept = initialise.live_equations(closed.jaxpr)
    names = {e.primitive.name for e in kept}
    assert "tanh" not in names and "dot_general" not in names
    assert len(kept) < len(closed.jaxpr.eqns)


@pytest.mark.parametrize("shape", [(3, 4, 16, 11), (5, 7), (2, 3, 5, 1), (9,)])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_flat_normal_draw_equals_the_shaped_draw(shape, dtype):
    """The layers' initialisers draw ``initialise.normal`` (one flat vector, reshaped: a far
    cheaper kernel for XLA:CPU to compile on some shapes); its values are
    ``jax.random.normal``'s for the same key, shape and dtype bit for bit, under both
    threefry modes."""
    key = jax.random.PRNGKey(7)
    for partitionable in (True, False):
        with jax.threefry_partitionable(partitionable):
            flat = initialise.normal(key, shape, dtype)
            ref = jax.random.normal(key, shape, dtype)
        assert flat.shape == ref.shape and flat.dtype == ref.dtype
        np.testing.assert_array_equal(np.asarray(flat), np.asarray(ref))
