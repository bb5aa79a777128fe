"""Multi-stream combination heads (paper Section 4.4 and appendix B.1, Table 6).

Each stream ``j in {e2, scale, std}`` delivers invariant features ``x_j`` of shape ``[B, C_j]``.
The head maps them to a common width and adds them with a normalised learnable weighted sum::

    x~_j = W_j x_j                      (W_j in R^{C_map x C_j}, no bias; identity for the target)
    x_combined = sum_j  w_j / (sum_k w_k)  o  x~_j     (w_j in R^{C_map}, initialised to 1)

so that ``sum_j (w_j / sum_k w_k)_i = 1`` for every channel ``i`` (Hadamard products ``o``).

Modes (:data:`MODES`)
  ``map_e2``, ``map_scale``, ``map_std``: the named stream keeps a fixed identity map and
  ``C_map = C_target`` (``map_e2`` is the paper's best head); ``map_all``: every stream gets a
  learnable ``W_j`` to ``C_map = map_features`` (default: the E(2) stream's width, else the widest);
  ``concat``: the features are concatenated, ``[B, sum_j C_j]`` (no parameters).

Parameters: ``map_<stream>/kernel [C_j, C_map]`` and ``weight_<stream> [C_map]``. A phase-2 trainer
(streams frozen) trains exactly these and the classifier after the head.

The normalisation divides by ``sum_k w_k`` as the paper states (not a softmax), so the weights stay
interpretable as per-channel shares; they start at ``1 / n_streams``.
"""

from __future__ import annotations

from collections.abc import Mapping

import flax.linen as nn
import jax.numpy as jnp

from invjax import precision as P
from invjax.contract import Exportable, Precise
from invjax.layers.ii import FEATURES_NAME

STREAMS = ("e2", "scale", "std")
MODES = ("concat", "map_e2", "map_scale", "map_std", "map_all")


def check_mode(mode: str, streams) -> None:
    """ValueError unless ``mode`` is a head and its target stream is among ``streams``."""
    if mode not in MODES:
        raise ValueError(f"combination head {mode!r} is unknown: choose one of {MODES}")
    target = mode[4:] if mode.startswith("map_") else None
    if target not in (None, "all") and target not in streams:
        raise ValueError(
            f"combination head {mode!r} maps onto the {target!r} stream, but the network has "
            f"streams {tuple(streams)}: choose one of "
            f"{('concat', 'map_all') + tuple('map_' + s for s in streams)}"
        )


def ordered(features: Mapping) -> list[str]:
    """Stream names in the fixed order of :data:`STREAMS` (then any others, sorted)."""
    names = [s for s in STREAMS if s in features]
    return names + sorted(set(features) - set(names))


class StreamCombination(Exportable, Precise, nn.Module):
    """Combine per-stream invariant features ``{name: [B, C_j]}`` into ``[B, C_map]``.

    See the module docstring for the modes and the equation.
    """

    mode: str = "map_e2"
    """The head, one of :data:`MODES`: ``"map_e2"``, ``"map_scale"``, ``"map_std"`` (the named
    stream keeps the identity map, ``C_map`` is its width; ``"map_e2"`` is the paper's best
    head), ``"map_all"`` (a learnt ``W_j`` for every stream) or ``"concat"`` (``[B, sum_j C_j]``,
    no parameters). A ``map_<stream>`` mode needs that stream among the features."""
    map_features: int | None = None
    """``C_map`` for ``"map_all"``; ``None``: the ``e2`` stream's width, else the widest
    stream's. Unused by the other modes."""
    precision: str | None = None
    """The arithmetic of the maps' products ``W_j x_j``: a mode of :mod:`invjax.precision`
    (``"highest"``, ``"default"``, ``"bf16"``, ``"exact_fast"``, or a CPU emulation); ``None``:
    JAX's default matmul precision."""

    @nn.compact
    def __call__(self, features: Mapping):
        names = ordered(features)
        if not names:
            raise ValueError("StreamCombination: got no stream features")
        check_mode(self.mode, names)
        for n in names:
            if features[n].ndim != 2:
                raise ValueError(
                    f"StreamCombination: features of stream {n!r} have shape "
                    f"{features[n].shape}; expected [B, C]"
                )
        if self.mode == "concat":
            y = jnp.concatenate([features[n] for n in names], axis=-1)
            self.sow("intermediates", FEATURES_NAME, y)
            return y
        target = self.mode[4:]
        if target == "all":
            default = (
                features["e2"]
                if "e2" in features
                else max((features[n] for n in names), key=lambda f: f.shape[-1])
            )
            c_map = self.map_features or default.shape[-1]
        else:
            c_map = features[target].shape[-1]
        mapped = {}
        for n in names:
            if n == target:
                mapped[n] = features[n]  # W_target fixed to the identity
            else:
                mapped[n] = nn.Dense(
                    c_map,
                    use_bias=False,
                    dot_general=P.dense_dot_general(self.precision),
                    name=f"map_{n}",
                )(features[n])
        weights = {n: self.param(f"weight_{n}", nn.initializers.ones, (c_map,)) for n in names}
        total = sum(weights[n] for n in names)
        y = sum((weights[n] / total) * mapped[n] for n in names)
        self.sow("intermediates", FEATURES_NAME, y)
        return y

    def inference_arrays(self, features: Mapping):
        """The head as one matrix per stream, ``A_j = W_j diag(w_j / sum_k w_k)``, as
        ``map_<j> [C_j, C_map]`` (the target stream, whose ``W`` is the identity, keeps only the
        vector ``share_<j> [C_map]``), so that ``x_combined = sum_j x_j A_j``. ``None`` for
        ``concat`` (no parameters: its training form is its inference form)."""
        if self.mode == "concat":
            return None
        names = ordered(features)
        shares = self.normalised_weights(self.variables["params"])
        out = {}
        for n in names:
            if f"map_{n}" in self.variables["params"]:
                out[f"map_{n}"] = self.variables["params"][f"map_{n}"]["kernel"] * shares[n]
            else:
                out[f"share_{n}"] = shares[n]
        return out

    def inference_call(self, arrays, features: Mapping):
        """``sum_j x_j A_j`` (:meth:`inference_arrays`): ``[B, C_map]``."""
        terms = []
        for n in ordered(features):
            if f"map_{n}" in arrays:
                terms.append(P.einsum("bc,cm->bm", features[n], arrays[f"map_{n}"], self.precision))
            else:
                terms.append(features[n] * arrays[f"share_{n}"])
        return sum(terms)

    @staticmethod
    def normalised_weights(head_params: Mapping) -> dict:
        """``{stream: w_j / sum_k w_k}`` from the head's parameters (for reports)."""
        ws = {k[len("weight_") :]: v for k, v in head_params.items() if k.startswith("weight_")}
        total = sum(ws.values())
        return {k: v / total for k, v in ws.items()}
