"""Dual (E(2) + scale) and triple (+ standard) invariant networks (paper Section 4.4, Figure 1).

``name='multistream'``. Each stream is a single-stream network (a :class:`~invjax.models.wrn.
WideResNet` or a Scaled-MNIST network) held as a sub-module named ``'e2'``, ``'scale'`` or
``'std'`` and run up to its invariant features (``features_only=True``: no classifier). Its
variables under ``params/<stream>``, ``batch_stats/<stream>`` (and ``ii_mask/<stream>``) are
therefore exactly the single-stream network's variables minus its ``classifier``, so phase 2 of
the paper's training starts from phase-1 checkpoints by copying them in
(:func:`invjax.training.state.graft`, ``train.init_from``).

Head: :class:`~invjax.layers.heads.StreamCombination` (``'concat'``, ``'map_e2'`` (default, the
paper's best), ``'map_scale'``, ``'map_std'``, ``'map_all'``) named ``head``, then
``Dense(num_classes)`` named ``classifier``.

Two-phase training (Section 4.4): with ``freeze_streams=True`` the streams run with
``train=False`` (BatchNorm uses its running statistics, no dropout, no statistics update) and their
features pass ``stop_gradient``, so only the head and the classifier receive gradients
(:data:`PHASE2_TRAINABLE` are their parameter prefixes). ``freeze_streams=False`` trains end to
end (appendix B.2).

Constant parameters (the "*" rows of Table 3): streams whose every width is divided by
``sqrt(n_streams)`` and rounded up (``width_divisor`` of the stream configs; the builder sets it
for all streams when ``config.width_divisor`` is given).
"""

from __future__ import annotations

import flax.linen as nn
import jax

from invjax import groups as G
from invjax import precision as P
from invjax.contract import Exact, Precise
from invjax.layers.heads import STREAMS, StreamCombination, check_mode
from invjax.models import REGISTRY, build, register

PHASE2_TRAINABLE = ("head", "classifier")
"""Parameter path prefixes that train in phase 2 (``config.train.trainable``)."""


class MultiStreamNetwork(Exact, Precise, nn.Module):
    """Streams ``e2`` / ``scale`` / ``std`` (any subset of at least two, or one for tests), a
    combination head and a classifier. Shapes: ``[B, H, W, C] -> [B, num_classes]``.

    ``features(x)`` returns the combined invariant features ``[B, C_map]``;
    ``stream_features(x)`` the per-stream features ``{name: [B, C_j]}``.
    """

    e2: nn.Module | None = None
    scale: nn.Module | None = None
    std: nn.Module | None = None
    head: str = "map_e2"
    map_features: int | None = None
    num_classes: int = 10
    freeze_streams: bool = False
    # Arithmetic of the head and classifier (invjax.precision); invjax.precision.configure sets
    # it here and in every stream.
    precision: str | None = None

    def stream_names(self) -> tuple[str, ...]:
        return tuple(n for n in STREAMS if getattr(self, n) is not None)

    def stream_features(self, x, train: bool = False) -> dict:
        """``{name: [B, C_j]}`` invariant features of every stream (frozen streams: eval mode)."""
        run_train = train and not self.freeze_streams
        out = {}
        for n in self.stream_names():
            f = getattr(self, n)(x, run_train, features_only=True)
            out[n] = jax.lax.stop_gradient(f) if self.freeze_streams else f
        return out

    @nn.compact
    def __call__(self, x, train: bool = False, features_only: bool = False):
        names = self.stream_names()
        if not names:
            raise ValueError("MultiStreamNetwork has no streams: give at least one of e2/scale/std")
        feats = self.stream_features(x, train)
        y = StreamCombination(self.head, self.map_features, self.precision, name="head")(feats)
        if features_only:
            return y
        dot = P.dense_dot_general(self.precision)
        return nn.Dense(self.num_classes, dot_general=dot, name="classifier")(y)

    def features(self, x, train: bool = False):
        return self(x, train, features_only=True)

    def exact_group(self, input_shape):
        """The meet of the streams' groups (:func:`invjax.equivariance.exact_group`): the head
        combines invariant features, so the network is exact for what every stream is exact for."""
        group = None
        for n in self.stream_names():
            stream = getattr(self, n)
            g = stream.exact_group(input_shape) if isinstance(stream, Exact) else G.cyclic(1)
            group = g if group is None else G.intersect(group, g)
        return group or G.cyclic(1)


@register("multistream")
def _build(config):
    streams_cfg = config.get("streams", None)
    if not streams_cfg:
        raise ValueError(
            "multistream config needs 'streams': {name: single-stream model config} with names "
            f"among {STREAMS}"
        )
    unknown = sorted(set(streams_cfg) - set(STREAMS))
    if unknown:
        raise ValueError(f"multistream streams {unknown} are unknown: choose among {STREAMS}")
    check_mode(config.get("head", "map_e2"), [s for s in STREAMS if s in streams_cfg])
    divisor = config.get("width_divisor", None)
    num_classes = config.get("num_classes", None) or 10
    modules = {}
    for name in STREAMS:
        if name not in streams_cfg:
            continue
        sc = streams_cfg[name]
        sc = sc.copy_and_resolve_references() if hasattr(sc, "copy_and_resolve_references") else sc
        if divisor is not None:
            if hasattr(sc, "unlocked"):
                with sc.unlocked():
                    sc.width_divisor = float(divisor)
            else:
                sc = {**sc, "width_divisor": float(divisor)}
        sname = sc.get("name", None)
        imported = isinstance(sname, str) and ":" in sname  # a researcher's own network
        if sname == "multistream" or not (imported or sname in REGISTRY):
            raise ValueError(
                f"stream {name!r} has model name {sname!r}: valid stream models are "
                f"{sorted(set(REGISTRY) - {'multistream'})} or an import path "
                "'package.module:attribute'"
            )
        modules[name] = build(sc)
    return MultiStreamNetwork(
        **modules,
        head=config.get("head", "map_e2"),
        map_features=config.get("map_features", None),
        num_classes=num_classes,
        freeze_streams=bool(config.get("freeze_streams", False)),
    )
