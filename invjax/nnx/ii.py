"""The Invariant Integration layers as Flax NNX modules, over the same ops as
:mod:`invjax.layers.ii`.

Every layer maps a feature map ``[B, H, W, C]`` (after group pooling or scale max projection) to
invariant features ``[B, C_out]``. The settings, their checks, the initialisation
(``kernel_init``, default LeCun-normal) and the computation of each ``method`` are the Linen
layer's; a WS layer takes its input's channels ``in_features`` when it is constructed and
creates ``kernel [k, k, in_features, features]`` (a :class:`flax.nnx.Param`) then.

The monomial layer's pruning mask is a :class:`MonomialMask` variable ``mask [n_pairs]`` (the
Linen collection ``ii_mask``: not a :class:`flax.nnx.Param`, so ``nnx.Optimizer(model, tx,
wrt=nnx.Param)`` never sees it); prune by assigning
``layer.mask[...] = invjax.layers.ii.prune_mask(layer.mask[...], relevance, keep)``.
The Linen layers also sow their outputs as ``intermediates`` for :mod:`invjax.invariance` and
the pruning schedule; these NNX layers do not (both read Linen models).
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp
from flax import nnx

from invjax import groups as G
from invjax.contract import Exact, Precise
from invjax.layers import ii as linen
from invjax.nnx.e2 import check_in_features
from invjax.ops import ii as ops

_LECUN = nnx.initializers.lecun_normal()
_D4 = G.dihedral(4)


class MonomialMask(nnx.Variable):
    """The ``{0, 1}`` mask of a monomial layer's active pairs (Linen collection ``ii_mask``)."""


class _WeightedSum(Precise, nnx.Module):
    """A WS layer's settings and ``kernel [k, k, in_features, features]``, checked as the Linen
    layers check them (:func:`invjax.layers.ii.check_ws_settings`)."""

    def __init__(
        self,
        in_features,
        features,
        kernel_size,
        method,
        kernel_init,
        precision,
        rngs,
        interpolation: str | None,
    ):
        self.features, self.kernel_size, self.method = features, kernel_size, method
        self.precision = precision
        if interpolation is not None:  # None: the layer checks its own settings
            linen.check_ws_settings(self, interpolation)
        check_in_features(in_features, type(self).__name__)
        shape = (kernel_size, kernel_size, in_features, features)
        self.kernel = nnx.Param(kernel_init(rngs.params(), shape, jnp.float32))

    def integrate(self, x, group, interpolation: str):
        """``[B, features]``: the Linen layer's ``method`` on ``x``."""
        linen._check_input(x, type(self).__name__)
        fn = linen.WS_METHODS[self.method]
        return fn(x, self.kernel[...].astype(x.dtype), group, interpolation, self.precision)


class E2InvariantIntegration(Exact, _WeightedSum):
    """E(2)-II with a weighted sum, equation (5) (:class:`invjax.layers.ii.E2InvariantIntegration`):
    ``[B, H, W, in_features] -> [B, features]``, invariant to ``group``.

    Args:
      in_features: ``C_in``.
      features, group, kernel_size, interpolation, method, kernel_init, precision: as the Linen
        layer.
      rngs: draws ``kernel`` with ``kernel_init``.
    """

    def __init__(
        self,
        in_features: int,
        features: int,
        group: G.Group | str = _D4,
        kernel_size: int = 3,
        interpolation: str = "bilinear",
        method: str = "fast",
        kernel_init: Callable = _LECUN,
        precision: str | None = None,
        *,
        rngs: nnx.Rngs,
    ):
        self.group, self.interpolation = G.parse_group(group), interpolation
        super().__init__(
            in_features, features, kernel_size, method, kernel_init, precision, rngs, interpolation
        )

    exact_group = linen.E2InvariantIntegration.exact_group

    def __call__(self, x):
        return self.integrate(x, self.group, self.interpolation)


class RotationInvariantIntegration(_WeightedSum):
    """Rotation-II with a weighted sum, equation (4): E(2)-II over ``C_N`` (``n_rotations``)
    (:class:`invjax.layers.ii.RotationInvariantIntegration`). Shapes: ``[B, H, W, C_in] ->
    [B, features]``.

    Args:
      in_features: ``C_in``.
      features, n_rotations, kernel_size, interpolation, method, kernel_init, precision: as
        the Linen layer.
      rngs: draws ``kernel``.
    """

    def __init__(
        self,
        in_features: int,
        features: int,
        n_rotations: int = 4,
        kernel_size: int = 3,
        interpolation: str = "bilinear",
        method: str = "fast",
        kernel_init: Callable = _LECUN,
        precision: str | None = None,
        *,
        rngs: nnx.Rngs,
    ):
        linen._check_positive_int(n_rotations, "n_rotations", type(self).__name__)
        self.n_rotations, self.interpolation = n_rotations, interpolation
        super().__init__(
            in_features, features, kernel_size, method, kernel_init, precision, rngs, interpolation
        )

    def __call__(self, x):
        return self.integrate(x, G.cyclic(self.n_rotations), self.interpolation)


class TranslationInvariantIntegration(_WeightedSum):
    """Translation-II with a weighted sum: a bias-free ``k x k`` convolution, then average
    pooling (:class:`invjax.layers.ii.TranslationInvariantIntegration`). Shapes: ``[B, H, W,
    C_in] -> [B, features]``.

    Args:
      in_features: ``C_in``.
      features, kernel_size, method, kernel_init, precision: as the Linen layer.
      rngs: draws ``kernel``.
    """

    def __init__(
        self,
        in_features: int,
        features: int,
        kernel_size: int = 3,
        method: str = "fast",
        kernel_init: Callable = _LECUN,
        precision: str | None = None,
        *,
        rngs: nnx.Rngs,
    ):
        super().__init__(
            in_features, features, kernel_size, method, kernel_init, precision, rngs, "bilinear"
        )

    def __call__(self, x):
        return self.integrate(x, G.cyclic(1), "bilinear")


class ScaleInvariantIntegration(_WeightedSum):
    """Scale-II with a weighted sum, equation (7)
    (:class:`invjax.layers.ii.ScaleInvariantIntegration`): ``A_o = mean_t (x' * psi_o)(t) /
    mean_{y, i} x'_i(y)``, ``x' = max(x, epsilon)``. Shapes: ``[B, H, W, C_in] -> [B,
    features]``.

    Args:
      in_features: ``C_in``.
      features, kernel_size, epsilon, method (``'fast'`` or ``'reference'``), kernel_init,
        precision, divide: as the Linen layer (``divide=False``: the numerator alone, not
        scale-invariant).
      rngs: draws ``kernel``.
    """

    def __init__(
        self,
        in_features: int,
        features: int,
        kernel_size: int = 3,
        epsilon: float = ops.DEFAULT_EPSILON,
        method: str = "fast",
        kernel_init: Callable = _LECUN,
        precision: str | None = None,
        divide: bool = True,
        *,
        rngs: nnx.Rngs,
    ):
        owner = type(self).__name__
        linen._check_positive_int(features, "features", owner)
        linen._check_kernel_size(kernel_size, owner)
        linen._check_method(method, owner, ("fast", "reference"))
        self.epsilon = ops.check_epsilon(epsilon)
        self.divide = bool(divide)
        super().__init__(
            in_features, features, kernel_size, method, kernel_init, precision, rngs, None
        )

    def __call__(self, x):
        linen._check_input(x, type(self).__name__)
        kernel = self.kernel[...].astype(x.dtype)
        if not self.divide:  # the numerator of eq. (7) alone
            ws = linen.WS_METHODS[self.method]
            return ws(ops.clamp(x, self.epsilon), kernel, None, "bilinear", self.precision)
        fn = ops.scale_ws_integrate if self.method == "fast" else ops.scale_ws_reference
        return fn(x, kernel, self.epsilon, self.precision)


class ScaleMonomialInvariantIntegration(Precise, nnx.Module):
    """Scale-II with monomials, equation (6)
    (:class:`invjax.layers.ii.ScaleMonomialInvariantIntegration`): ``n_pairs`` ratios of
    translation-averaged monomials drawn from ``seed``; pruned pairs (mask 0) output 0.
    Shapes: ``[B, H, W, C_in] -> [B, n_pairs]`` (``[B, C_in]`` with ``layout='channels'``).

    Args:
      n_pairs, n_factors, kernel_size, max_exponent, epsilon, seed, method, placement, output,
        precision, layout, divisor: as the Linen layer (no parameters: the pairs are drawn
        when the layer is called, from the input's channels).
    """

    def __init__(
        self,
        n_pairs: int = 25,
        n_factors: int = 3,
        kernel_size: int = 3,
        max_exponent: int = 2,
        epsilon: float = ops.DEFAULT_EPSILON,
        seed: int = 0,
        method: str = "fast",
        placement: str = "neighbourhood",
        output: str = "ratio",
        precision: str | None = None,
        layout: str = "pairs",
        divisor: str = "random",
    ):
        self.n_pairs, self.n_factors, self.kernel_size = n_pairs, n_factors, kernel_size
        self.max_exponent, self.epsilon, self.seed = max_exponent, epsilon, seed
        self.method, self.placement, self.output = method, placement, output
        self.precision, self.layout, self.divisor = precision, layout, divisor
        self.check_settings()
        self.mask = MonomialMask(jnp.ones((n_pairs,), jnp.float32))

    pairs = linen.ScaleMonomialInvariantIntegration.pairs
    check_settings = linen.ScaleMonomialInvariantIntegration.check_settings
    integrate = linen.ScaleMonomialInvariantIntegration.integrate
    _channels = linen.ScaleMonomialInvariantIntegration._channels

    def __call__(self, x):
        linen._check_input(x, type(self).__name__)
        return self.integrate(x, self.mask[...])[0]


class MixedPooling(nnx.Module):
    """DISCO's pooling baseline (:class:`invjax.layers.ii.MixedPooling`): ReLU, MaxPool
    ``max_window`` stride 1, AvgPool ``avg_window`` stride ``avg_stride``, batch norm per
    channel (``flax.nnx.BatchNorm``, attribute ``bn``), flattened channel-major.
    Shapes: ``[B, H, W, C] -> [B, C * H' * W']``.

    Args:
      in_features: ``C``.
      max_window, avg_window, avg_stride, momentum, epsilon: as the Linen layer.
      use_running_average: eval mode (``model.eval()`` sets it on ``bn``).
      rngs: passed to the batch norm.
    """

    def __init__(
        self,
        in_features: int,
        max_window: int = 7,
        avg_window: int = 2,
        avg_stride: int = 4,
        momentum: float = 0.9,
        epsilon: float = 1e-5,
        use_running_average: bool = False,
        *,
        rngs: nnx.Rngs,
    ):
        owner = type(self).__name__
        for name, value in (
            ("max_window", max_window),
            ("avg_window", avg_window),
            ("avg_stride", avg_stride),
        ):
            linen._check_positive_int(value, name, owner)
        check_in_features(in_features, owner)
        self.max_window, self.avg_window, self.avg_stride = max_window, avg_window, avg_stride
        self.bn = nnx.BatchNorm(
            in_features,
            use_running_average=use_running_average,
            momentum=momentum,
            epsilon=epsilon,
            rngs=rngs,
        )

    def __call__(self, x):
        linen._check_input(x, type(self).__name__)
        y = self.bn(ops.mixed_pool(x, self.max_window, self.avg_window, self.avg_stride))
        return jnp.moveaxis(y, -1, 1).reshape(y.shape[0], -1)


class AveragePooling(Exact, nnx.Module):
    """Global average pooling over the spatial axes, ``[B, H, W, C] -> [B, C]``
    (:class:`invjax.layers.ii.AveragePooling`)."""

    exact_group = linen.AveragePooling.exact_group

    def __call__(self, x):
        linen._check_input(x, type(self).__name__)
        return ops.average_pool(x)
