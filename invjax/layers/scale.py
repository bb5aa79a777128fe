"""Scale-equivariant Flax Linen layers: thin modules over :mod:`invjax.ops.scale`.

Scale features are ``[B, H, W, S, C]`` (``S`` scales, smallest first). Only the basis
coefficients are parameters; the basis (:mod:`invjax.bases.scale`, 'disco' or 'hermite') is a
constant built once per configuration and closed over. Modules (the paper's Scale-LiftConv,
Scale-Conv, Scale-MaxProj; SESN / DISCO layers):

- :class:`ScaleLiftConv`  ``[B, H, W, Cin] -> [B, H', W', S, features]``
- :class:`ScaleConv`      ``[B, H, W, S, Cin] -> [B, H', W', S, features]``
- :class:`ScaleMaxProjection` ``[B, H, W, S, C] -> [B, H, W, C]``
- :class:`ScaleBatchNorm` per-channel statistics shared by all scales (stays equivariant).

Inference form (:mod:`invjax.export`): the convolutions and the BatchNorm define
``inference_arrays(x)`` (the kernel of all scales expanded once, box-folded; the folded affine
map) and ``inference_call(arrays, x)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from invjax import initialise
from invjax.bases import scale as scale_bases
from invjax.contract import Exportable, Precise
from invjax.groups import DEFAULT_SCALES
from invjax.ops import scale as ops
from invjax.ops.conv import inference_kernel


def _validate(layer: str, features, kernel_size, effective_size, scales, basis, stride):
    if not isinstance(features, int | np.integer) or features < 1:
        raise ValueError(f"{layer}: features={features!r} is invalid: it must be an integer >= 1")
    try:  # the basis module owns the (kernel, effective size, scales) rules
        _, _, sc = scale_bases.check_arguments(kernel_size, effective_size, scales)
    except ValueError as e:
        raise ValueError(f"{layer}: {e}") from None
    if basis not in scale_bases.BASES:
        raise ValueError(f"{layer}: basis={basis!r} is unknown: choose one of {scale_bases.BASES}")
    if stride not in (1, 2):
        raise ValueError(f"{layer}: stride={stride!r} is invalid: choose 1 or 2")
    return sc


def _basis(kind, kernel_size, effective_size, scales, base_sigma) -> np.ndarray:
    """The constant basis ``[S, F, k, k]`` as float32 NumPy (closed over, never a parameter)."""
    return np.asarray(
        scale_bases.basis(kind, kernel_size, effective_size, scales, base_sigma), np.float32
    )


def he_coefficient_init(basis: np.ndarray, fan_in_channels: int):
    """Normal init of coefficients ``[..., F]`` so the expanded filter is He-initialised.

    A dense ``k x k`` filter with He-normal init has expected squared norm ``2`` per output channel
    (``fan_in * 2 / fan_in``). With independent coefficients of variance ``v`` the expanded filter
    at the smallest scale has expected squared norm ``fan_in_channels * v * sum_f |psi_{1,f}|^2``;
    ``v`` is chosen to make that 2 as well.
    """
    energy = float(np.sum(np.square(basis[0], dtype=np.float64)))
    std = math.sqrt(2.0 / (fan_in_channels * energy))

    def init(key, shape, dtype=jnp.float32):
        return std * initialise.normal(key, shape, dtype)

    return init


def _expanded_arrays(layer: nn.Module, x, expand) -> dict:
    """The inference arrays of a scale convolution ``layer``: its filters at every scale expanded
    once by ``expand`` (coefficients x basis), box-folded for ``x``'s grid, and its bias."""
    sc = scale_bases.check_arguments(layer.kernel_size, layer.effective_size, layer.scales)[2]
    psi = _basis(layer.basis, layer.kernel_size, layer.effective_size, sc, layer.base_sigma)
    kernel = expand(layer.get_variable("params", "weight"), jnp.asarray(psi), layer.precision)
    out = {"kernel": inference_kernel(kernel, x.shape, layer.stride)}
    if layer.use_bias:
        out["bias"] = layer.get_variable("params", "bias")
    return out


class ScaleLiftConv(Exportable, Precise, nn.Module):
    """Lifting scale convolution ``[B, H, W, Cin] -> [B, H', W', S, features]`` (SESN Z2 -> H).

    ``y[s, o] = sum_i x[i] * sum_f w[i, o, f] psi_{s, f}``: one einsum expands the coefficients
    ``w [Cin, features, F]`` into the filters of all scales, then one convolution (``lowering``).
    """

    features: int
    """Number of output channels ``C_out`` at each scale: the output is ``[B, H', W', S, features]``
    (an integer >= 1)."""
    kernel_size: int = 5
    """Filter size ``k`` in taps (odd): every scale's filter is sampled on the ``k x k`` grid, the
    largest scale's on all of it (5 in the WRN streams, 15 in the Scaled-MNIST networks)."""
    effective_size: int = 3
    """Size of the filter at scale 1, ``1 <= effective_size <= kernel_size``: the basis has
    ``F = effective_size ** 2`` functions, the coefficients per pair of channels."""
    scales: Sequence[float] = DEFAULT_SCALES
    """The ``S`` scales ``s_i``, relative to the smallest: strictly increasing, starting at
    ``1.0``. Default :data:`invjax.groups.DEFAULT_SCALES` ``(1, sqrt 2, 2)``, the WRN streams';
    the Scaled-MNIST networks use ``2 ** (i / 3)``, ``i < 4``."""
    basis: str = "disco"
    """The scale-steerable basis, one of :data:`invjax.bases.scale.BASES`: ``"disco"`` (DISCO's
    fitted basis, shipped data), ``"hermite"`` (SESN's Hermite basis), or the type-B kinds of
    SESN's and DISCO's Scaled-MNIST networks, ``"hermite_b"``, ``"disco_b"``, ``"disco_b_plus"``."""
    stride: int = 1
    """1 (``SAME`` output, ``H x W``) or 2 (output ``ceil(H / 2) x ceil(W / 2)`` by the
    grid-symmetric rule of :mod:`invjax.ops.conv`)."""
    use_bias: bool = False
    """Add a learnt bias ``[features]``, the same at every scale (which keeps the layer
    equivariant)."""
    base_sigma: float | None = None
    """Gaussian width of the Hermite functions at scale 1, in pixels: ``None`` gives
    :func:`invjax.bases.scale.default_base_sigma` (0.9 for ``effective_size=3``) for
    ``"hermite"`` and the named width for the type-B kinds; ``"disco"`` takes none (its basis is
    fixed by its data file)."""
    precision: str | None = None
    """The arithmetic of the basis expansion and the convolution: a mode of
    :mod:`invjax.precision` (``"highest"``, ``"default"``, ``"bf16"``, ``"exact_fast"``, or a CPU
    emulation); ``None``: JAX's default matmul precision."""
    lowering: str = "auto"
    """How the convolution is computed, a name of :data:`invjax.ops.lowering.LOWERINGS`: the lift
    is one convolution, by ``"fft"`` (products of spectra) or ``"im2col"`` (one matrix product
    over the gathered taps), both stride 1, or directly for any other name; ``"auto"`` picks per
    shape and backend (:func:`invjax.ops.scale.lift_lowering`). Speed and memory only: every
    lowering gives the same results."""

    @nn.compact
    def __call__(self, x):
        sc = _validate(
            "ScaleLiftConv",
            self.features,
            self.kernel_size,
            self.effective_size,
            self.scales,
            self.basis,
            self.stride,
        )
        if x.ndim != 4:
            raise ValueError(f"ScaleLiftConv: input shape {x.shape} is invalid: expected [B,H,W,C]")
        if self.lowering not in ops.LOWERINGS:
            raise ValueError(
                f"ScaleLiftConv: lowering={self.lowering!r} is unknown: choose one of "
                f"{ops.LOWERINGS}"
            )
        psi = _basis(self.basis, self.kernel_size, self.effective_size, sc, self.base_sigma)
        cin = x.shape[-1]
        w = self.param("weight", he_coefficient_init(psi, cin), (cin, self.features, psi.shape[1]))
        y = ops.scale_lift_conv(x, w, jnp.asarray(psi), self.stride, self.precision, self.lowering)
        if self.use_bias:
            y = y + self.param("bias", nn.initializers.zeros, (self.features,))
        return y

    def inference_arrays(self, x):
        """``{'kernel': [k', k', Cin, S * features]}`` (and ``'bias' [features]``): the filters of
        all scales expanded once (:func:`invjax.ops.scale.expand_lift_kernel`), the stride-2 box
        folded in where :func:`invjax.ops.conv.conv2d` folds it on ``x`` (``k' = k + 1``)."""
        return _expanded_arrays(self, x, ops.expand_lift_kernel)

    def inference_call(self, arrays, x):
        """The layer from :meth:`inference_arrays`, ``[B, H', W', S, features]``, lowered as the
        training form is (:func:`lowering_choice`)."""
        lowering = lowering_choice(self, x.shape)
        y = ops.apply_lift_kernel(
            x, arrays["kernel"], len(self.scales), self.stride, lowering, self.precision
        )
        return y + arrays["bias"] if "bias" in arrays else y


class ScaleConv(Exportable, Precise, nn.Module):
    """Scale convolution ``[B, H, W, S, Cin] -> [B, H', W', S, features]`` (SESN H -> H).

    Output scale ``s`` mixes input scales ``s .. s + scale_size - 1`` (zeros past the largest)
    with the filter expanded at scale ``s``.
    """

    features: int
    """Number of output channels ``C_out`` at each scale: the output is ``[B, H', W', S, features]``
    (an integer >= 1)."""
    scale_size: int = 1
    """How many neighbouring input scales each output scale mixes, ``1 <= scale_size <= S``:
    output scale ``s`` reads input scales ``s .. s + scale_size - 1`` (zeros past the largest).
    The coefficients are ``[Cin, features, scale_size, F]``."""
    kernel_size: int = 5
    """Filter size ``k`` in taps (odd): every scale's filter is sampled on the ``k x k`` grid, the
    largest scale's on all of it (5 in the WRN streams, 15 in the Scaled-MNIST networks)."""
    effective_size: int = 3
    """Size of the filter at scale 1, ``1 <= effective_size <= kernel_size``: the basis has
    ``F = effective_size ** 2`` functions, the coefficients per pair of channels."""
    scales: Sequence[float] = DEFAULT_SCALES
    """The ``S`` scales ``s_i``, relative to the smallest: strictly increasing, starting at
    ``1.0``. Default :data:`invjax.groups.DEFAULT_SCALES` ``(1, sqrt 2, 2)``, the WRN streams';
    the Scaled-MNIST networks use ``2 ** (i / 3)``, ``i < 4``."""
    basis: str = "disco"
    """The scale-steerable basis, one of :data:`invjax.bases.scale.BASES`: ``"disco"`` (DISCO's
    fitted basis, shipped data), ``"hermite"`` (SESN's Hermite basis), or the type-B kinds of
    SESN's and DISCO's Scaled-MNIST networks, ``"hermite_b"``, ``"disco_b"``, ``"disco_b_plus"``."""
    stride: int = 1
    """1 (``SAME`` output, ``H x W``) or 2 (output ``ceil(H / 2) x ceil(W / 2)`` by the
    grid-symmetric rule of :mod:`invjax.ops.conv`)."""
    use_bias: bool = False
    """Add a learnt bias ``[features]``, the same at every scale (which keeps the layer
    equivariant)."""
    base_sigma: float | None = None
    """Gaussian width of the Hermite functions at scale 1, in pixels: ``None`` gives
    :func:`invjax.bases.scale.default_base_sigma` (0.9 for ``effective_size=3``) for
    ``"hermite"`` and the named width for the type-B kinds; ``"disco"`` takes none (its basis is
    fixed by its data file)."""
    lowering: str = "auto"
    """How the convolution is computed, a name of :data:`invjax.ops.lowering.LOWERINGS`
    (:func:`invjax.ops.scale.scale_conv`): ``"grouped"``, ``"per_scale"``,
    ``"per_scale_compact"`` (only the taps each scale's basis makes non-zero), ``"fft"``,
    ``"im2col"`` or ``"auto"``, chosen per layer (:func:`invjax.ops.lowering.choose_lowering`):
    on CPU by FFT where the kernel is large against the map, else per scale over each scale's
    non-zero taps; per scale on GPU (measured faster on both), grouped elsewhere. It changes
    speed and memory, not the parameters or the results."""
    precision: str | None = None
    """The arithmetic of the basis expansion and the convolutions: a mode of
    :mod:`invjax.precision` (``"highest"``, ``"default"``, ``"bf16"``, ``"exact_fast"``, or a CPU
    emulation); ``None``: JAX's default matmul precision."""

    @nn.compact
    def __call__(self, x):
        sc = _validate(
            "ScaleConv",
            self.features,
            self.kernel_size,
            self.effective_size,
            self.scales,
            self.basis,
            self.stride,
        )
        if not isinstance(self.scale_size, int | np.integer) or not 1 <= self.scale_size <= len(sc):
            raise ValueError(
                f"ScaleConv: scale_size={self.scale_size!r} is invalid: it must be an integer in "
                f"[1, number of scales={len(sc)}]"
            )
        if self.lowering not in ops.LOWERINGS:
            raise ValueError(
                f"ScaleConv: lowering={self.lowering!r} is unknown: choose one of {ops.LOWERINGS}"
            )
        if x.ndim != 5 or x.shape[3] != len(sc):
            raise ValueError(
                f"ScaleConv: input shape {x.shape} is invalid: expected [B, H, W, S={len(sc)}, C]"
            )
        psi = _basis(self.basis, self.kernel_size, self.effective_size, sc, self.base_sigma)
        cin = x.shape[-1]
        w = self.param(
            "weight",
            he_coefficient_init(psi, cin * self.scale_size),
            (cin, self.features, self.scale_size, psi.shape[1]),
        )
        # psi stays NumPy: the 'per_scale_compact' lowering reads its zero taps
        y = ops.scale_conv(x, w, psi, self.stride, self.lowering, self.precision)
        if self.use_bias:
            y = y + self.param("bias", nn.initializers.zeros, (self.features,))
        return y

    def inference_arrays(self, x):
        """``{'kernel': [k', k', D * Cin, S * features]}`` (and ``'bias'``): the filters of all
        scales expanded once (:func:`invjax.ops.scale.expand_scale_kernel`), box-folded as in
        :meth:`ScaleLiftConv.inference_arrays`."""
        return _expanded_arrays(self, x, ops.expand_scale_kernel)

    def inference_call(self, arrays, x):
        """The layer from :meth:`inference_arrays` (:func:`invjax.ops.scale.apply_scale_kernel`),
        lowered as the training form is: the same lowering on the same taps
        (:func:`invjax.ops.scale.scale_conv_lowering` of the layer's basis)."""
        lowering, support = _scale_conv_lowering(self, x.shape)
        y = ops.apply_scale_kernel(
            x, arrays["kernel"], self.scale_size, self.stride, lowering, self.precision, support
        )
        return y + arrays["bias"] if "bias" in arrays else y


class ScaleMaxProjection(nn.Module):
    """``[B, H, W, S, C] -> [B, H, W, C]``: maximum over scales (paper: Scale-MaxProj)."""

    @nn.compact
    def __call__(self, x):
        return ops.scale_max_projection(x)


class ScaleBatchNorm(Exportable, nn.Module):
    """Batch norm of ``[B, H, W, S, C]`` with one mean/variance/scale/bias per channel ``C``.

    Statistics are taken over batch, space and all scales, so the same affine map acts at every
    scale and the layer commutes with shifts along the scale axis. Variables follow Flax's
    BatchNorm: ``params`` ``scale``, ``bias``; ``batch_stats`` ``mean``, ``var`` (``[C]`` each).
    """

    momentum: float = 0.9
    """Decay of the running statistics, in ``[0, 1)``, as Flax's:
    ``running = momentum * running + (1 - momentum) * batch``."""
    epsilon: float = 1e-5
    """Added to the variance before the square root (``> 0``):
    ``y = (x - mean) / sqrt(var + epsilon) * scale + bias`` per channel."""

    @nn.compact
    def __call__(self, x, train: bool):
        if x.ndim != 5:
            raise ValueError(
                f"ScaleBatchNorm: input shape {x.shape} is invalid: expected [B, H, W, S, C]"
            )
        if not 0.0 <= self.momentum < 1.0 or not self.epsilon > 0:
            raise ValueError(
                f"ScaleBatchNorm: momentum={self.momentum} must be in [0, 1) and "
                f"epsilon={self.epsilon} > 0"
            )
        c = x.shape[-1]
        gamma = self.param("scale", nn.initializers.ones, (c,))
        beta = self.param("bias", nn.initializers.zeros, (c,))
        ra_mean = self.variable("batch_stats", "mean", lambda: jnp.zeros((c,), jnp.float32))
        ra_var = self.variable("batch_stats", "var", lambda: jnp.ones((c,), jnp.float32))
        if train:
            mean, var = ops.scale_batch_stats(x.astype(jnp.float32))
            if not self.is_initializing():
                m = self.momentum
                ra_mean.value = m * ra_mean.value + (1.0 - m) * mean
                ra_var.value = m * ra_var.value + (1.0 - m) * var
        else:
            mean, var = ra_mean.value, ra_var.value
        y = ops.scale_batch_norm(x.astype(jnp.float32), mean, var, gamma, beta, self.epsilon)
        return y.astype(x.dtype)

    def inference_arrays(self, x):
        """Eval mode as one per-channel affine map ``y = x * a + s`` (``[C]`` each, every scale):
        ``a = gamma / sqrt(var + eps)``, ``s = beta - mean * a``."""
        del x
        var = self.get_variable("batch_stats", "var")
        a = self.get_variable("params", "scale") * jnp.reciprocal(jnp.sqrt(var + self.epsilon))
        s = self.get_variable("params", "bias") - self.get_variable("batch_stats", "mean") * a
        return {"scale": a, "shift": s}

    def inference_call(self, arrays, x):
        """``x * a + s`` (eval mode only)."""
        return (x.astype(jnp.float32) * arrays["scale"] + arrays["shift"]).astype(x.dtype)


def _scale_conv_lowering(layer: ScaleConv, x_shape):
    """``(lowering, support)`` of :class:`ScaleConv` ``layer`` on an input of ``x_shape``
    (:func:`invjax.ops.scale.scale_conv_lowering` with the layer's constant basis)."""
    sc = scale_bases.check_arguments(layer.kernel_size, layer.effective_size, layer.scales)[2]
    psi = _basis(layer.basis, layer.kernel_size, layer.effective_size, sc, layer.base_sigma)
    return ops.scale_conv_lowering(layer.lowering, x_shape, psi, layer.stride, layer.precision)


def lowering_choice(layer: nn.Module, x_shape) -> str:
    """The lowering :class:`ScaleLiftConv` or :class:`ScaleConv` ``layer`` uses on an input of
    ``x_shape`` (``[B, H, W, Cin]`` or ``[B, H, W, S, Cin]``) on this backend, in its training
    form and in its inference form alike: the policy of :mod:`invjax.ops.lowering` with the
    layer's kernel, its basis' non-zero taps (scale convolutions; the lift uses its full kernel,
    its input channels and the batch), stride and precision."""
    if isinstance(layer, ScaleConv):
        return _scale_conv_lowering(layer, x_shape)[0]
    if isinstance(layer, ScaleLiftConv):
        return ops.lift_lowering(
            layer.lowering, x_shape, layer.kernel_size, layer.stride, layer.precision
        )
    raise ValueError(f"lowering_choice: {type(layer).__name__} is not a scale convolution")


def describe_lowerings(model: nn.Module, x_shape, **call_kwargs) -> str:
    """How each scale and E(2) convolution of ``model`` is lowered on this backend for inputs of
    ``x_shape`` (traced abstractly: ``jax.eval_shape`` of ``model.init``, no compute): one line
    per family, e.g. ``scale convolutions (cpu): conv1 lift 1->32 on 56x56 k15: fft;``
    ``conv2 32->63 on 28x28 k15: fft`` and ``E(2) convolutions (cpu):``
    ``conv1 lift 3->24 on 32x32 k5: im2col; ...`` (:func:`invjax.layers.e2.lowering_choice`), joined by ``"\n  "``; ``""`` for a
    model without any. ``call_kwargs`` go to the model's ``__call__`` (e.g. ``train=False``)."""
    from invjax.layers import e2 as e2_layers  # the E(2) layers import nothing of this module

    found = {"scale": [], "E(2)": []}
    e2_kinds = (e2_layers.E2LiftConv, e2_layers.E2Conv)

    def record(next_fun, args, kwargs, context):
        layer = context.module
        if context.method_name == "__call__" and isinstance(
            layer, (ScaleLiftConv, ScaleConv, *e2_kinds)
        ):
            x = args[0]
            x = getattr(x, "tensor", x)  # an E(2) layer may be called on a typed Field
            e2 = isinstance(layer, e2_kinds)
            lift = isinstance(layer, ScaleLiftConv | e2_layers.E2LiftConv)
            choice = (e2_layers.lowering_choice if e2 else lowering_choice)(layer, x.shape)
            out = layer.features
            name = layer.name
            if e2:  # channels out, and the path: E(2) blocks reuse their layers' names
                out *= 1 if getattr(layer, "trivial_out", False) else layer.group.order
                name = "/".join(layer.path) or name
            found["E(2)" if e2 else "scale"].append(
                f"{name} {'lift ' if lift else ''}{x.shape[-1]}->{out} on "
                f"{x.shape[1]}x{x.shape[2]} k{layer.kernel_size}"
                f"{'' if layer.stride == 1 else ' stride 2'}: {choice}"
            )
        return next_fun(*args, **kwargs)

    x = jax.ShapeDtypeStruct(tuple(x_shape), jnp.float32)
    with nn.intercept_methods(record):
        key = jax.random.PRNGKey(0)
        jax.eval_shape(lambda x: model.init({"params": key, "dropout": key}, x, **call_kwargs), x)
    lines = [
        f"{family} convolutions ({jax.default_backend()}): " + "; ".join(items)
        for family, items in found.items()
        if items
    ]
    return "\n  ".join(lines)
