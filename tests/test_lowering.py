"""The lowerings of the convolutions (invjax.ops.conv methods, invjax.ops.lowering's policy):
every precision honoured or refused, the inference form lowered as the training form, and
im2col's memory bound."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from invjax import precision as P
from invjax.bases import scale as B
from invjax.layers import scale as L
from invjax.ops import conv as C
from invjax.ops import scale as ops

WRN = (5, 3, (1.0, 2**0.5, 2.0))  # DISCO k 5: 'per_scale_compact' on CPU
MNIST = (15, 7, (1.0, 2 ** (1 / 3), 2 ** (2 / 3), 2.0))  # DISCO k 15: 'fft' / 'im2col' on CPU
ON_CPU = jax.default_backend() == "cpu"


def _normal(seed, shape):
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


def _rel(a, b) -> float:
    return float(jnp.abs(a - b).max() / jnp.abs(b).max())


@pytest.mark.parametrize("mode", P.ALL)
def test_each_method_honours_or_refuses_each_precision(mode):
    """``'direct'`` and ``'im2col'`` compute the same products in every mode (the emulations
    round each patch value as the direct form rounds the input), so they agree to float32
    rounding in each mode while the fast formats move the result away from ``'highest'``;
    ``'fft'`` agrees where it can honour the mode and refuses the others before computing."""
    x, kern = _normal(0, (2, 9, 10, 3)), _normal(1, (5, 5, 3, 4))
    exact = C.conv2d(x, kern, precision="highest")
    direct = C.conv2d(x, kern, precision=mode)
    im2col = C.conv2d(x, kern, precision=mode, method="im2col")
    assert _rel(im2col, direct) <= 5e-6, mode
    fast = mode == "bf16" or mode.startswith("default@")
    if fast:  # the mode was computed, not float32 in its place
        assert _rel(direct, exact) > 1e-4 and _rel(im2col, exact) > 1e-4, mode
    else:
        assert _rel(direct, exact) <= 5e-6, mode
    if mode in C.FFT_PRECISIONS:
        assert _rel(C.conv2d(x, kern, precision=mode, method="fft"), direct) <= 5e-6, mode
        return
    with pytest.raises(ValueError, match=f"precision='{mode}' is invalid for the FFT lowering"):
        C.conv2d(x, kern, precision=mode, method="fft")
    with pytest.raises(ValueError, match=f"precision='{mode}' is invalid for the FFT lowering"):
        C.conv2d_fft(x, kern, mode)
    # the scale ops and layers refuse an explicit 'fft' in that mode with the same error
    psi = np.asarray(B.disco_basis(*MNIST), np.float32)
    with pytest.raises(ValueError, match=f"scale_conv: precision='{mode}' is invalid"):
        ops.scale_conv(jnp.zeros((1, 8, 8, 4, 2)), jnp.zeros((2, 3, 1, 49)), psi, 1, "fft", mode)
    lift = L.ScaleLiftConv(3, 15, 7, MNIST[2], lowering="fft", precision=mode)
    with pytest.raises(ValueError, match="scale_lift_conv: precision="):
        lift.init(jax.random.PRNGKey(0), jnp.zeros((1, 8, 8, 1)))


def test_method_errors_name_the_value():
    x, kern = jnp.zeros((1, 8, 8, 4)), jnp.zeros((3, 3, 2, 4))
    with pytest.raises(ValueError, match="method='bogus' is unknown"):
        C.conv2d(x, jnp.zeros((3, 3, 4, 4)), method="bogus")
    with pytest.raises(ValueError, match="method='im2col' needs feature_group_count 1"):
        C.conv2d(x, kern, feature_group_count=2, method="im2col")
    with pytest.raises(
        ValueError, match="method='fft' needs stride 1, dilation 1 and feature_group_count 1"
    ):
        C.conv2d(x, jnp.zeros((3, 3, 4, 4)), dilation=2, method="fft")
    with pytest.raises(ValueError, match="precision='fp8' is invalid: valid precisions"):
        C.conv2d(x, jnp.zeros((3, 3, 4, 4)), precision="fp8", method="fft")


def _signature(fn, *args):
    """What a lowering leaves in a trace: the convolutions' kernel shapes and dilations, the
    FFTs and the gathers (im2col's patches)."""
    text = str(jax.make_jaxpr(fn)(*args))
    convs = sorted(
        (tuple(eq.invars[1].aval.shape), eq.params["rhs_dilation"])
        for eq in jax.make_jaxpr(fn)(*args).jaxpr.eqns
        if str(eq.primitive) == "conv_general_dilated"
    )
    return convs, text.count("fft_type="), text.count("gather[")


@pytest.mark.parametrize(
    "kind,config,size,expect",
    [
        ("conv", WRN, 12, "per_scale_compact"),  # 3x3, 5x5 and a 3x3 dilated by 2
        ("conv", MNIST, 14, "fft"),
        ("lift", MNIST, 16, "im2col"),
        ("conv", WRN, 12, "grouped"),
    ],
)
def test_inference_form_runs_the_training_forms_lowering(kind, config, size, expect):
    """:meth:`inference_call` lowers as ``__call__`` does: the same lowering
    (:func:`invjax.layers.scale.lowering_choice`) on the same taps, so the traces hold the same
    convolutions (kernel shapes, dilations), FFTs and gathers; and the same numbers."""
    k, e, scales = config
    S = len(scales)
    lowering = "grouped" if expect == "grouped" else "auto"
    if kind == "lift":
        layer = L.ScaleLiftConv(6, k, e, scales, lowering=lowering)
        x = _normal(2, (2, size, size, 1))
    else:
        layer = L.ScaleConv(6, 1, k, e, scales, lowering=lowering)
        x = _normal(2, (2, size, size, S, 3))
    v = layer.init(jax.random.PRNGKey(0), x)
    if ON_CPU:
        assert L.lowering_choice(layer, x.shape) == expect
    arrays = layer.apply(v, x, method=lambda m, z: m.inference_arrays(z))

    def inference(a, z):
        return layer.apply(v, a, z, method=lambda m, a, z: m.inference_call(a, z))

    trained = _signature(lambda z: layer.apply(v, z), x)
    assert _signature(inference, arrays, x) == trained
    if expect == "per_scale_compact":
        assert ((3, 3, 3, 6), (2, 2)) in trained[0]
    assert _rel(inference(arrays, x), layer.apply(v, x)) <= 5e-6


def test_im2col_chunks_past_its_byte_bound():
    """Past :data:`invjax.ops.conv.IM2COL_MAX_BYTES` the product runs over chunks of images
    (here 7 chunks of 2 images and a remainder of 1), with the same outputs and gradients as the
    direct convolution, and the compiled gradient holds a few chunks' patches (the forward's,
    the backward's and its transpose, the remainder's: measured 7.9 images' worth at batch 15),
    not the batch's (33 images' worth unchunked)."""
    x, kern = _normal(3, (15, 9, 10, 2)), _normal(4, (5, 5, 2, 3))
    per_image = 4 * 9 * 10 * 25 * 2
    assert C.im2col_chunk(x.shape, 5, 8 * per_image + 1) == 2
    assert C.im2col_chunk(x.shape, 5, 15 * per_image) == 15
    assert C.im2col_chunk((128, 56, 56, 1), 15) == 128  # the Scaled-MNIST lift: 361 MB
    assert C.im2col_chunk((380, 56, 56, 1), 15) == 380  # 1.07 GB: one product
    assert C.im2col_chunk((1024, 56, 56, 1), 15) == 95  # 2.9 GB: chunks of 95 images

    def loss(f):
        return jax.value_and_grad(lambda z, w: jnp.sum(jnp.sin(f(z, w))), argnums=(0, 1))

    chunked = loss(lambda z, w: C._im2col_product(z, w, None, 1, max_bytes=8 * per_image + 1))
    direct = loss(lambda z, w: C.conv2d(z, w))
    (a, ga), (b, gb) = chunked(x, kern), direct(x, kern)
    assert abs(float(a - b)) <= 1e-5 * abs(float(b))
    for u, w in zip(ga, gb, strict=True):
        assert _rel(u, w) <= 5e-6
    whole = loss(lambda z, w: C._im2col_product(z, w, None, 1, max_bytes=15 * per_image))
    temp = {
        name: jax.jit(f).lower(x, kern).compile().memory_analysis().temp_size_in_bytes
        for name, f in (("chunked", chunked), ("whole", whole))
    }
    assert temp["chunked"] <= 10 * per_image < 15 * per_image <= temp["whole"], temp


def test_export_of_a_network_with_im2col_and_fft_lowerings():
    """The Scaled-MNIST lift (1 channel, 15 x 15 taps: 'im2col' on CPU) and a 15 x 15 scale
    convolution ('fft') export with a symbolic batch (the policy cannot know the batch there: it
    decides on one image's patches) and the program computes the network's numbers."""
    from invjax.export import export

    k, e, scales = MNIST

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x, train: bool = False):
            y = L.ScaleLiftConv(4, k, e, scales)(x)
            y = L.ScaleConv(5, 1, k, e, scales)(jax.nn.relu(y))
            return jnp.mean(y, axis=(1, 2, 3))

    net, x = Net(), _normal(5, (3, 16, 16, 1))
    v = net.init(jax.random.PRNGKey(0), x)
    if ON_CPU:
        assert L.describe_lowerings(net, x.shape) == (
            "scale convolutions (cpu): ScaleLiftConv_0 lift 1->4 on 16x16 k15: im2col; "
            "ScaleConv_0 4->5 on 16x16 k15: fft"
        )
    ex = export(net, v, (16, 16, 1))
    assert _rel(ex(x), net.apply(v, x)) <= 1e-5
    if ON_CPU:
        counts = ex.op_counts()
        assert counts.get("fft", 0) >= 3 and "convolution" not in counts, counts
