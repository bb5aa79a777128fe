"""The multi-stream combination head as a Flax NNX module (:mod:`invjax.layers.heads`).

``x_combined = sum_j w_j / (sum_k w_k) o W_j x_j`` over the streams' invariant features
``{name: [B, C_j]}`` (the modes and the equation: :mod:`invjax.layers.heads`). The NNX head is
built for the streams' widths ``in_features = {name: C_j}``; its parameters carry the Linen
names: ``map_<stream>`` (a bias-free :class:`flax.nnx.Linear`, ``kernel [C_j, C_map]``) and
``weight_<stream> [C_map]`` (initialised to 1).
"""

from __future__ import annotations

from collections.abc import Mapping

import jax.numpy as jnp
from flax import nnx

from invjax import precision as P
from invjax.contract import Precise
from invjax.layers import heads as linen
from invjax.nnx.e2 import check_in_features


class StreamCombination(Precise, nnx.Module):
    """Combine per-stream invariant features ``{name: [B, C_j]}`` into ``[B, C_map]``
    (``[B, sum_j C_j]`` for ``concat``), as :class:`invjax.layers.heads.StreamCombination`.

    Args:
      in_features: ``{stream: C_j}``, the width of each stream's features.
      mode: one of :data:`invjax.layers.heads.MODES` (``map_e2``: the paper's best head).
      map_features: ``C_map`` for ``map_all`` (default: the ``e2`` stream's width, else the
        widest).
      precision: the arithmetic of the maps' products (:mod:`invjax.precision`).
      rngs: draws the maps' kernels (``flax.nnx.Linear``'s default init, as ``nn.Dense``'s).
    """

    def __init__(
        self,
        in_features: Mapping[str, int],
        mode: str = "map_e2",
        map_features: int | None = None,
        precision: str | None = None,
        *,
        rngs: nnx.Rngs,
    ):
        self.names = tuple(linen.ordered(in_features))
        if not self.names:
            raise ValueError("StreamCombination: got no stream widths (in_features is empty)")
        linen.check_mode(mode, self.names)
        for n in self.names:
            check_in_features(in_features[n], f"StreamCombination stream {n!r}")
        self.mode, self.precision = mode, precision
        self.target = mode[4:] if mode.startswith("map_") else None
        if self.target is None:
            return
        if self.target == "all":
            widest = max(self.names, key=lambda n: in_features[n])
            c_map = map_features or in_features["e2" if "e2" in in_features else widest]
        else:
            c_map = in_features[self.target]
        for n in self.names:
            if n != self.target:  # the target's map is the identity
                layer = nnx.Linear(in_features[n], c_map, use_bias=False, rngs=rngs)
                setattr(self, f"map_{n}", layer)
            setattr(self, f"weight_{n}", nnx.Param(jnp.ones((c_map,))))

    def __call__(self, features: Mapping):
        names = tuple(linen.ordered(features))
        if names != self.names:
            raise ValueError(f"StreamCombination: got the streams {names}, built for {self.names}")
        for n in names:
            if features[n].ndim != 2:
                raise ValueError(
                    f"StreamCombination: features of stream {n!r} have shape "
                    f"{features[n].shape}; expected [B, C]"
                )
        if self.target is None:
            return jnp.concatenate([features[n] for n in names], axis=-1)
        weights = {n: getattr(self, f"weight_{n}")[...] for n in names}
        total = sum(weights.values())
        y = 0
        for n in names:
            x = features[n]
            if n != self.target:
                kernel = getattr(self, f"map_{n}").kernel[...]
                x = P.einsum("bc,cm->bm", x, kernel, self.precision)
            y = y + (weights[n] / total) * x
        return y
