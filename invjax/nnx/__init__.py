"""invjax's public layers as native Flax NNX modules, over the same ops as the Linen layers.

The Flax documentation leads with NNX, so every public layer of :mod:`invjax.layers` has an NNX
module of the same name here (:mod:`~invjax.nnx.e2`, :mod:`~invjax.nnx.scale`,
:mod:`~invjax.nnx.ii`, :mod:`~invjax.nnx.heads`). Each is constructed the NNX way, with its
input's channels and ``rngs`` (``E2Conv(in_features, features, group, ..., rngs=nnx.Rngs(0))``),
holds its parameters under the Linen layer's names, and computes with the same functions of
:mod:`invjax.ops`; the settings, their defaults and checks, the bases, the initialisation, the
field-type rules and the group a layer is exact for are the Linen layer's own (shared, not
copied). A layer takes and returns :class:`invjax.fields.Field` where the Linen one does, and
declares the same abilities of :mod:`invjax.contract` (:class:`~invjax.contract.Exact`,
:class:`~invjax.contract.Typed`, :class:`~invjax.contract.Precise` with ``precision`` a
constructor argument), so :func:`invjax.equivariance.check_equivariance` measures an NNX network
(``variables=None``) and :func:`invjax.precision.configure` sets its mode. Batch norms follow
``flax.nnx.BatchNorm``: ``model.train()`` / ``model.eval()`` switch ``use_running_average``.

Why native modules rather than ``flax.nnx.bridge.ToNNX`` around the Linen layers (measured by
``benchmarks/nnx.py``, docs/layers.md): the bridge gives the same parameter names and the same
compiled computation, but a wrapped layer is not an instance of the contract's classes (the
equivariance check would see no exact group, ``precision.configure`` no layer), it must be
initialised lazily from a sample input, and its batch norm takes ``train=True,
mutable=['batch_stats']`` on every call instead of following ``model.train()``. The native
modules cost one thin class per layer; the arithmetic stays in one place.

Not here: the inference form (:class:`~invjax.contract.Exportable`; :mod:`invjax.export` reads
Linen models), the sown ``intermediates`` the invariance command and the monomial pruning read
from Linen models, and the paper's networks (:mod:`invjax.models`, Linen).
"""

from invjax.nnx.e2 import E2BatchNorm, E2Conv, E2LiftConv, GroupPool, Restrict
from invjax.nnx.heads import StreamCombination
from invjax.nnx.ii import (
    AveragePooling,
    E2InvariantIntegration,
    MixedPooling,
    MonomialMask,
    RotationInvariantIntegration,
    ScaleInvariantIntegration,
    ScaleMonomialInvariantIntegration,
    TranslationInvariantIntegration,
)
from invjax.nnx.scale import ScaleBatchNorm, ScaleConv, ScaleLiftConv, ScaleMaxProjection

__all__ = [
    "AveragePooling",
    "E2BatchNorm",
    "E2Conv",
    "E2InvariantIntegration",
    "E2LiftConv",
    "GroupPool",
    "MixedPooling",
    "MonomialMask",
    "Restrict",
    "RotationInvariantIntegration",
    "ScaleBatchNorm",
    "ScaleConv",
    "ScaleInvariantIntegration",
    "ScaleLiftConv",
    "ScaleMaxProjection",
    "ScaleMonomialInvariantIntegration",
    "StreamCombination",
    "TranslationInvariantIntegration",
]
