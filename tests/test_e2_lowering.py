"""The lowerings of the E(2) convolutions (conv2d's methods chosen per layer by
invjax.ops.lowering.choose_e2_lowering): every lowering exact under 90-degree rotations and flips
of real photos and equal to the direct form, the choice named in describe_lowerings, explicit
choices honoured, bad choices refused before compute."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from invjax import groups as G
from invjax import precision as P
from invjax.equivariance import relative_error as rel
from invjax.layers.e2 import E2Conv, E2LiftConv, lowering_choice
from invjax.layers.scale import describe_lowerings
from invjax.ops import conv as C
from invjax.ops.lowering import E2_LOWERINGS, choose_e2_lowering

ON_CPU = jax.default_backend() == "cpu"
METHODS = [m for m in E2_LOWERINGS if m != "auto"]


def _normal(seed, shape):
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("k", [3, 5])
@pytest.mark.parametrize("size", [32, 33])
def test_every_lowering_is_exact_on_photos(method, k, size, photo_batch):
    """Lift, group convolution and invariant convolution (D4, stride 1) in each lowering: every
    element of D4 commutes with the layers on two real photos to float32 rounding (bound 1e-5),
    and each lowering's outputs equal the direct lowering's (bound 1e-5)."""
    x = jnp.asarray(photo_batch)
    if size == 33:  # an odd grid: the Winograd tiles then overhang the map by one row
        x = jnp.pad(x, ((0, 0), (0, 1), (0, 1), (0, 0)), mode="edge")
    g = G.parse_group("D4")
    layers = [
        E2LiftConv(3, g, k, lowering=method),
        E2Conv(4, g, k, lowering=method),
        E2Conv(5, g, k, trivial_out=True, lowering=method),
    ]
    direct = [layer.clone(lowering="direct") for layer in layers]
    variables, y, ref = [], x, x
    for i, (layer, d) in enumerate(zip(layers, direct, strict=True)):
        v = layer.init(jax.random.PRNGKey(i), y)
        variables.append(v)
        y, ref = layer.apply(v, y), d.apply(v, ref)
        assert rel(y, ref) < 1e-5, (method, i)
    for e in range(g.order):
        ye = G.transform(x, g, e)
        for layer, v in zip(layers, variables, strict=True):
            ye = layer.apply(v, ye)
        assert rel(ye, G.transform(y, g, e)) < 1e-5, (method, e)


@pytest.mark.parametrize("downsample", C.DOWNSAMPLE_RULES)
@pytest.mark.parametrize("size", [32, 33])
def test_stride_two_im2col_equals_direct(downsample, size, photo_batch):
    """``'im2col'`` at stride 2 (the box-folded 6x6 kernel on an even grid, the plain strided
    5x5 on an odd one, a stride-1 product then 2x2 max pooling under ``"maxpool"``): outputs and
    both gradients equal the direct form's on real photos (bound 1e-5), and a D4 network of a
    lift and a stride-2 invariant convolution keeps every element of D4 exact (bound 1e-5)
    under each grid-symmetric rule."""
    x = jnp.asarray(photo_batch)
    if size == 33:
        x = jnp.pad(x, ((0, 0), (0, 1), (0, 1), (0, 0)), mode="edge")
    g = G.parse_group("D4")
    lift = E2LiftConv(3, g, 5)
    lift_vars = lift.init(jax.random.PRNGKey(0), x)
    z = lift.apply(lift_vars, x)
    layer = E2Conv(4, g, 5, stride=2, downsample=downsample, trivial_out=True, lowering="im2col")
    v = layer.init(jax.random.PRNGKey(1), z)
    direct = layer.clone(lowering="direct")
    y = layer.apply(v, z)
    assert y.shape[1:3] == ((size + 1) // 2,) * 2
    assert rel(y, direct.apply(v, z)) < 1e-5
    probe = _normal(2, y.shape)

    def loss(module):
        return lambda v, z: jnp.sum(module.apply(v, z) * probe)

    grads = jax.grad(loss(layer), (0, 1))(v, z)
    ref = jax.grad(loss(direct), (0, 1))(v, z)
    for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(ref), strict=True):
        assert float(jnp.abs(a - b).max() / jnp.abs(b).max()) < 1e-5
    if downsample == "strided" and size % 2 == 0:
        return  # plain strided samples of an even grid are not symmetric (conv2d's stride rule)
    for e in range(g.order):
        ye = layer.apply(v, lift.apply(lift_vars, G.transform(x, g, e)))
        assert rel(ye, G.transform(y, g, e)) < 1e-5, (downsample, e)


def test_im2col_patches_at_stride_two_sample_the_strided_grid():
    """:func:`conv2d`'s stride-2 ``'im2col'`` gathers the taps of XLA's strided convolution: its
    patches, contracted with a one-hot kernel for each tap, reproduce the direct strided
    correlation with that kernel, for an odd kernel on an odd grid and a folded even one."""
    x = _normal(3, (2, 9, 9, 3))
    patches = C.im2col_patches(x, 5, stride=2)
    assert patches.shape == (2, 5, 5, 5, 5, 3)
    even = C.im2col_patches(_normal(4, (1, 8, 8, 2)), 6, stride=2, padding=2)
    assert even.shape == (1, 4, 4, 6, 6, 2)
    for u, v in [(0, 0), (2, 3), (4, 4)]:
        one_hot = jnp.zeros((5, 5, 3, 3)).at[u, v].set(jnp.eye(3))
        strided = C.conv2d(x, one_hot, stride=2, precision="highest")
        assert float(jnp.abs(patches[:, :, :, u, v] - strided).max()) == 0.0
    with pytest.raises(ValueError, match="kernel_size=6 is invalid without a padding"):
        C.im2col_patches(x, 6, stride=2)


@pytest.mark.parametrize("k", [3, 5])
def test_winograd_gradients_match_direct(k):
    """``'winograd'`` against ``'direct'``: outputs and both gradients (input and kernel) to
    float32 rounding, on a map with a partial tile, and in chunks past its byte bound."""
    x, kern = _normal(0, (5, 9, 10, 6)), _normal(1, (k, k, 6, 4))

    def loss(method):
        return lambda kern, x: jnp.sum(C.conv2d(x, kern, precision="highest", method=method) ** 2)

    for a, b in zip(
        jax.grad(loss("winograd"), (0, 1))(kern, x),
        jax.grad(loss("direct"), (0, 1))(kern, x),
        strict=True,
    ):
        assert float(jnp.abs(a - b).max() / jnp.abs(b).max()) < 1e-5
    small = 4 * 2 * 5 * 5 * (k + 1) ** 2 * 6  # two images' tiles: chunks of half an image -> 1
    assert C.winograd_chunk(x.shape, k, small) == 1
    chunked = C._winograd_correlation(x, kern, "highest", max_bytes=small)
    assert rel(chunked, C.conv2d(x, kern, precision="highest")) < 1e-5
    chunked_grads = jax.grad(
        lambda kern, x: jnp.sum(C._winograd_correlation(x, kern, "highest", small) ** 2), (0, 1)
    )(kern, x)
    for a, b in zip(chunked_grads, jax.grad(loss("direct"), (0, 1))(kern, x), strict=True):
        assert float(jnp.abs(a - b).max() / jnp.abs(b).max()) < 1e-5


@pytest.mark.parametrize("k", [3, 5])
def test_winograd_written_gradient_is_the_transpose(k):
    """The gradient that ``winograd.correlation`` writes out uses ``_tile_gradient`` as the
    transpose of the output transform ``_untile``: it equals JAX's own transpose of that linear
    map (on a partial tile), and the whole written gradient equals the gradient JAX derives by
    tracing the forward pass."""
    from invjax.ops import winograd as W

    n = C.WINOGRAD_TILE + k - 1
    m = _normal(2, (n, n, 2, 5, 4, 3))
    dy = _normal(3, (2, 9, 7, 3))
    (traced,) = jax.vjp(lambda m: W._untile(m, 9, 7, C.WINOGRAD_TILE), m)[1](dy)
    assert rel(W._tile_gradient(dy, k, C.WINOGRAD_TILE), traced) < 1e-6
    x, kern = _normal(4, (2, 9, 7, 5)), _normal(5, (k, k, 5, 3))
    hi = jax.lax.Precision.HIGHEST
    written = jax.vjp(lambda x, g: W.correlation(x, g, hi), x, kern)[1](dy)
    derived = jax.vjp(lambda x, g: W._forward(x, g, hi, C.WINOGRAD_TILE), x, kern)[1](dy)
    for a, b in zip(written, derived, strict=True):
        assert rel(a, b) < 1e-5


@pytest.mark.parametrize("mode", P.ALL)
def test_winograd_honours_or_refuses_each_precision(mode):
    x, kern = _normal(0, (2, 8, 8, 3)), _normal(1, (5, 5, 3, 4))
    if mode in C.FFT_PRECISIONS:
        direct = C.conv2d(x, kern, precision=mode)
        assert rel(C.conv2d(x, kern, precision=mode, method="winograd"), direct) < 1e-5
        assert choose_e2_lowering("winograd", in_channels=3, map_shape=(8, 8), kernel_size=5,
                                  precision=mode) == "winograd"  # fmt: skip
        return
    with pytest.raises(ValueError, match=f"precision='{mode}' is invalid for the Winograd"):
        C.conv2d(x, kern, precision=mode, method="winograd")
    layer = E2Conv(2, "D4", 5, lowering="winograd", precision=mode)
    with pytest.raises(ValueError, match=f"precision='{mode}' is invalid for the Winograd"):
        layer.init(jax.random.PRNGKey(0), jnp.zeros((1, 8, 8, 8)))
    # 'auto' never takes a float32-only lowering for a mode it cannot honour
    auto = choose_e2_lowering("auto", in_channels=640, map_shape=(32, 32), kernel_size=5,
                              precision=mode, backend="cpu")  # fmt: skip
    assert auto == "direct"


def test_bad_lowerings_are_refused_before_compute():
    x = jnp.zeros((1, 8, 8, 8))
    with pytest.raises(ValueError, match="lowering='gemm' is unknown: choose one of"):
        E2Conv(2, "D4", 3, lowering="gemm").init(jax.random.PRNGKey(0), x)
    with pytest.raises(ValueError, match="method='winograd' needs stride 1"):
        E2Conv(2, "D4", 3, stride=2, lowering="winograd").init(jax.random.PRNGKey(0), x)
    with pytest.raises(ValueError, match="winograd: kernel size 7 is invalid: choose one of"):
        C.conv2d(x, jnp.zeros((7, 7, 8, 2)), method="winograd")
    with pytest.raises(ValueError, match="method='winograd' needs stride 1, dilation 1 and"):
        C.conv2d(x, jnp.zeros((3, 3, 8, 2)), dilation=2, method="winograd")


def test_auto_policy_per_layer():
    """``'auto'``: the GEMM (im2col) for a few-channel lift, Winograd for a stride-1 5x5 layer
    of at least 256 channels on maps of at least 16x16 on CPU, the GEMM for one of at least 512
    channels on 8x8 maps and for a stride-2 5x5 layer of at least 256 channels on maps of at
    least 16x16 (not under the max-pooling rule), direct for 3x3, fewer channels, smaller maps,
    other backends; explicit choices used as given."""
    kw = dict(map_shape=(32, 32), kernel_size=5, backend="cpu", precision="default")
    assert choose_e2_lowering("auto", in_channels=3, lift=True, **kw) == "im2col"
    assert choose_e2_lowering("auto", in_channels=640, **kw) == "winograd"
    assert choose_e2_lowering("auto", in_channels=640, stride=2, **kw) == "im2col"
    assert choose_e2_lowering("auto", in_channels=256, stride=2, **kw) == "im2col"
    assert choose_e2_lowering("auto", in_channels=128, stride=2, **kw) == "direct"
    assert choose_e2_lowering("auto", in_channels=640, stride=2, downsample="maxpool", **kw) == (
        "direct"
    )
    assert choose_e2_lowering("auto", in_channels=640, stride=2, **{**kw, "map_shape": (8, 8)}) == (
        "direct"
    )
    assert choose_e2_lowering("auto", in_channels=256, **kw) == "winograd"
    assert choose_e2_lowering("auto", in_channels=128, **kw) == "direct"
    assert (
        choose_e2_lowering("auto", in_channels=640, **{**kw, "map_shape": (16, 16)}) == "winograd"
    )
    eight = {**kw, "map_shape": (8, 8)}
    assert choose_e2_lowering("auto", in_channels=1024, **eight) == "im2col"
    assert choose_e2_lowering("auto", in_channels=1024, batch=4096, **eight) == "im2col"
    assert choose_e2_lowering("auto", in_channels=256, **eight) == "direct"
    assert choose_e2_lowering("auto", in_channels=1024, **{**kw, "map_shape": (4, 4)}) == "direct"
    assert choose_e2_lowering("auto", in_channels=640, **{**kw, "kernel_size": 3}) == "direct"
    assert choose_e2_lowering("auto", in_channels=640, **{**kw, "backend": "gpu"}) == "direct"
    # the batch does not change the choice (training and a symbolic-batch export agree); past
    # the tiles' byte bound the products run in chunks of images
    for batch in (None, 1, 1024):
        assert choose_e2_lowering("auto", in_channels=640, batch=batch, **kw) == "winograd"
    assert C.winograd_chunk((1024, 32, 32, 640), 5) < 1024
    for method in METHODS:
        assert choose_e2_lowering(method, in_channels=640, **kw) == method


@pytest.mark.skipif(not ON_CPU, reason="the CPU policy")
def test_describe_names_each_e2_layers_lowering():
    model = nn.Sequential(
        [
            E2LiftConv(40, "D8", 5, name="lift"),
            E2Conv(40, "D8", 5, name="wide"),
            E2Conv(40, "D8", 5, stride=2, name="down"),
            E2Conv(40, "D8", 5, stride=2, name="down_small"),
            E2Conv(40, "D8", 5, name="small"),
            E2Conv(40, "D8", 5, lowering="im2col", name="chosen"),
        ]
    )
    text = describe_lowerings(model, (4, 16, 16, 3))
    assert text.startswith("E(2) convolutions (cpu): layers_0 lift 3->640 on 16x16 k5: im2col; ")
    assert "layers_2 640->640 on 16x16 k5 stride 2: im2col" in text
    assert "layers_3 640->640 on 8x8 k5 stride 2: direct" in text
    assert "layers_4 640->640 on 4x4 k5: direct" in text
    parts = text.split(": ", 1)[1].split("; ")
    assert [p.rsplit(": ", 1)[1] for p in parts] == [
        "im2col",
        "winograd",
        "im2col",
        "direct",
        "direct",
        "im2col",
    ]
    assert lowering_choice(E2Conv(40, "D8", 5), (4, 32, 32, 640)) == "winograd"
    assert lowering_choice(E2Conv(40, "D8", 5), (4, 8, 8, 640)) == "im2col"
    assert lowering_choice(E2Conv(16, "D8", 5), (4, 8, 8, 256)) == "direct"


def test_init_runs_the_direct_form_and_apply_the_chosen_one():
    """Flax's ``init`` computes the layer's forward pass by the direct convolution (one
    operation) whatever the lowering; ``apply`` by the chosen one; the outputs agree to float32
    rounding, and a lowering the layer cannot take is refused at ``init`` as at ``apply``."""
    x = _normal(6, (2, 16, 16, 8 * 4))  # 4 regular D8 fields
    layer = E2Conv(4, "D8", 5, lowering="winograd")
    init_jaxpr = str(jax.make_jaxpr(lambda x: layer.init(jax.random.PRNGKey(0), x))(x))
    assert "conv_general_dilated" in init_jaxpr and "custom_vjp_call" not in init_jaxpr
    y0, v = layer.init_with_output(jax.random.PRNGKey(0), x)
    apply_jaxpr = str(jax.make_jaxpr(lambda x: layer.apply(v, x))(x))
    assert "custom_vjp_call" in apply_jaxpr and "conv_general_dilated" not in apply_jaxpr
    assert rel(layer.apply(v, x), y0) < 1e-5
    with pytest.raises(ValueError, match="method='winograd' needs stride 1"):
        E2Conv(4, "D8", 5, stride=2, lowering="winograd").init(jax.random.PRNGKey(0), x)
    with pytest.raises(ValueError, match="winograd: kernel size 7 is invalid"):
        E2Conv(4, "D8", 7, lowering="winograd").init(jax.random.PRNGKey(0), x)
