"""The scale-equivariant layers as Flax NNX modules, over the same ops as
:mod:`invjax.layers.scale`.

Scale features are ``[B, H, W, S, C]`` (``S`` scales, smallest first). Each module takes its
input's channels ``in_features`` when it is constructed and creates its parameters then; the
settings, their validation, the basis (a constant, never a parameter) and the initialisation are
the Linen layer's, the products :mod:`invjax.ops.scale`'s (the same ``lowering`` choice).
Parameters carry the Linen names: ``weight`` (and ``bias`` with ``use_bias``); the batch norm's
``scale``, ``bias`` and ``mean``, ``var`` (:class:`flax.nnx.BatchStat`).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
from flax import nnx

from invjax.contract import Precise
from invjax.groups import DEFAULT_SCALES
from invjax.layers import scale as linen
from invjax.nnx.e2 import check_in_features
from invjax.ops import scale as ops


class _ScaleConvSettings(Precise, nnx.Module):
    """The settings both scale convolutions share, checked as the Linen layers check them."""

    def __init__(self, layer: str, in_features: int, features: int, settings: dict):
        for key, value in settings.items():
            setattr(self, key, value)
        self.scales = linen._validate(
            layer,
            features,
            self.kernel_size,
            self.effective_size,
            self.scales,
            self.basis,
            self.stride,
        )
        check_in_features(in_features, layer)
        ops.resolve_lowering(self.lowering)  # one clear error for an unknown lowering
        self.features = features

    def psi(self):
        """The constant basis ``[S, F, k, k]`` (float32 NumPy, as the Linen layer's)."""
        return linen._basis(
            self.basis, self.kernel_size, self.effective_size, self.scales, self.base_sigma
        )

    def _bias(self, y):
        return y + self.bias[...] if self.use_bias else y


class ScaleLiftConv(_ScaleConvSettings):
    """Lifting scale convolution ``[B, H, W, Cin] -> [B, H', W', S, features]``
    (:class:`invjax.layers.scale.ScaleLiftConv`): ``y[s, o] = sum_i x[i] * sum_f w[i, o, f]
    psi_{s, f}``.

    Args:
      in_features: ``Cin``.
      features, kernel_size, effective_size, scales, basis, stride, use_bias, base_sigma,
        precision, lowering: as :class:`invjax.layers.scale.ScaleLiftConv`.
      rngs: draws ``weight [Cin, features, F]`` (He-initialised expanded filter).
    """

    def __init__(
        self,
        in_features: int,
        features: int,
        kernel_size: int = 5,
        effective_size: int = 3,
        scales: Sequence[float] = DEFAULT_SCALES,
        basis: str = "disco",
        stride: int = 1,
        use_bias: bool = False,
        base_sigma: float | None = None,
        precision: str | None = None,
        lowering: str = "auto",
        *,
        rngs: nnx.Rngs,
    ):
        settings = dict(
            kernel_size=kernel_size,
            effective_size=effective_size,
            scales=scales,
            basis=basis,
            stride=stride,
            use_bias=use_bias,
            base_sigma=base_sigma,
            precision=precision,
            lowering=lowering,
        )
        super().__init__("ScaleLiftConv", in_features, features, settings)
        psi = self.psi()
        init = linen.he_coefficient_init(psi, in_features)
        self.weight = nnx.Param(init(rngs.params(), (in_features, features, psi.shape[1])))
        if use_bias:
            self.bias = nnx.Param(jnp.zeros((features,)))

    def __call__(self, x):
        if x.ndim != 4:
            raise ValueError(f"ScaleLiftConv: input shape {x.shape} is invalid: expected [B,H,W,C]")
        psi = jnp.asarray(self.psi())
        y = ops.scale_lift_conv(
            x, self.weight[...], psi, self.stride, self.precision, self.lowering
        )
        return self._bias(y)


class ScaleConv(_ScaleConvSettings):
    """Scale convolution ``[B, H, W, S, Cin] -> [B, H', W', S, features]``
    (:class:`invjax.layers.scale.ScaleConv`): output scale ``s`` mixes input scales ``s .. s +
    scale_size - 1``.

    Args:
      in_features: ``Cin``.
      features, scale_size, kernel_size, effective_size, scales, basis, stride, use_bias,
        base_sigma, lowering, precision: as :class:`invjax.layers.scale.ScaleConv`.
      rngs: draws ``weight [Cin, features, scale_size, F]``.
    """

    def __init__(
        self,
        in_features: int,
        features: int,
        scale_size: int = 1,
        kernel_size: int = 5,
        effective_size: int = 3,
        scales: Sequence[float] = DEFAULT_SCALES,
        basis: str = "disco",
        stride: int = 1,
        use_bias: bool = False,
        base_sigma: float | None = None,
        lowering: str = "auto",
        precision: str | None = None,
        *,
        rngs: nnx.Rngs,
    ):
        settings = dict(
            kernel_size=kernel_size,
            effective_size=effective_size,
            scales=scales,
            basis=basis,
            stride=stride,
            use_bias=use_bias,
            base_sigma=base_sigma,
            precision=precision,
            lowering=lowering,
            scale_size=scale_size,
        )
        super().__init__("ScaleConv", in_features, features, settings)
        n = len(self.scales)
        if not isinstance(scale_size, int) or not 1 <= scale_size <= n:
            raise ValueError(
                f"ScaleConv: scale_size={scale_size!r} is invalid: it must be an integer in "
                f"[1, number of scales={n}]"
            )
        psi = self.psi()
        init = linen.he_coefficient_init(psi, in_features * scale_size)
        shape = (in_features, features, scale_size, psi.shape[1])
        self.weight = nnx.Param(init(rngs.params(), shape))
        if use_bias:
            self.bias = nnx.Param(jnp.zeros((features,)))

    def __call__(self, x):
        if x.ndim != 5 or x.shape[3] != len(self.scales):
            raise ValueError(
                f"ScaleConv: input shape {x.shape} is invalid: expected "
                f"[B, H, W, S={len(self.scales)}, C]"
            )
        # the basis stays NumPy: the 'per_scale_compact' lowering reads its zero taps
        y = ops.scale_conv(
            x, self.weight[...], self.psi(), self.stride, self.lowering, self.precision
        )
        return self._bias(y)


class ScaleMaxProjection(nnx.Module):
    """``[B, H, W, S, C] -> [B, H, W, C]``: maximum over scales (no parameters)."""

    def __call__(self, x):
        return ops.scale_max_projection(x)


class ScaleBatchNorm(nnx.Module):
    """Batch norm of ``[B, H, W, S, C]`` with one mean, variance, scale and bias per channel,
    shared by all scales (:class:`invjax.layers.scale.ScaleBatchNorm`).

    Args:
      in_features: ``C``.
      momentum, epsilon: as the Linen layer (``momentum`` in [0, 1), ``epsilon > 0``).
      use_running_average: eval mode (``model.eval()`` sets it); a call may override it.
      rngs: unused (no random initialisation).
    """

    def __init__(
        self,
        in_features: int,
        momentum: float = 0.9,
        epsilon: float = 1e-5,
        use_running_average: bool = False,
        *,
        rngs: nnx.Rngs | None = None,
    ):
        del rngs
        check_in_features(in_features, "ScaleBatchNorm")
        if not 0.0 <= momentum < 1.0 or not epsilon > 0:
            raise ValueError(
                f"ScaleBatchNorm: momentum={momentum} must be in [0, 1) and epsilon={epsilon} > 0"
            )
        self.momentum, self.epsilon = momentum, epsilon
        self.use_running_average = use_running_average
        c = in_features
        self.scale, self.bias = nnx.Param(jnp.ones((c,))), nnx.Param(jnp.zeros((c,)))
        self.mean, self.var = nnx.BatchStat(jnp.zeros((c,))), nnx.BatchStat(jnp.ones((c,)))

    def __call__(self, x, use_running_average: bool | None = None):
        if x.ndim != 5:
            raise ValueError(
                f"ScaleBatchNorm: input shape {x.shape} is invalid: expected [B, H, W, S, C]"
            )
        if use_running_average is None:
            use_running_average = self.use_running_average
        xf = x.astype(jnp.float32)
        if use_running_average:
            mean, var = self.mean[...], self.var[...]
        else:
            mean, var = ops.scale_batch_stats(xf)
            m = self.momentum
            self.mean[...] = m * self.mean[...] + (1.0 - m) * mean
            self.var[...] = m * self.var[...] + (1.0 - m) * var
        y = ops.scale_batch_norm(xf, mean, var, self.scale[...], self.bias[...], self.epsilon)
        return y.astype(x.dtype)
