"""Dual (E(2) + scale) and triple (+ standard) invariant networks (paper Section 4.4, Figure 1).

``name='multistream'``. Each stream is a single-stream network (a :class:`~invjax.models.wrn.
WideResNet` or a Scaled-MNIST network) held as a sub-module named ``'e2'``, ``'scale'`` or
``'std'`` and run up to its invariant features (``features_only=True``: no classifier). Its
variables under ``params/<stream>``, ``batch_stats/<stream>`` (and ``ii_mask/<stream>``) are
therefore exactly the single-stream network's variables minus its ``classifier``, so phase 2 of
the paper's training starts from phase-1 checkpoints with :func:`load_streams`.

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

from collections.abc import Mapping

import flax.linen as nn
import jax
from flax.core import freeze, unfreeze

from invjax.layers.heads import STREAMS, StreamCombination, check_mode
from invjax.models import REGISTRY, register

PHASE2_TRAINABLE = ("head", "classifier")
"""Parameter path prefixes that train in phase 2 (``config.train.trainable``)."""


class MultiStreamNetwork(nn.Module):
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
        y = StreamCombination(self.head, self.map_features, name="head")(feats)
        if features_only:
            return y
        return nn.Dense(self.num_classes, name="classifier")(y)

    def features(self, x, train: bool = False):
        return self(x, train, features_only=True)


def _subtree_shapes(tree, prefix=()):
    if hasattr(tree, "items"):
        out = {}
        for k, v in tree.items():
            out.update(_subtree_shapes(v, prefix + (k,)))
        return out
    return {prefix: tuple(getattr(tree, "shape", ()))}


def load_streams(variables, streams: Mapping[str, Mapping], skip=("classifier",)):
    """Copy single-stream variables into a multi-stream network's variables.

    Args:
      variables: the multi-stream network's variables (``params``, ``batch_stats``, ...).
      streams: ``{stream name: single-stream variables}``, e.g. restored phase-1 checkpoints.
      skip: top-level single-stream modules that the stream does not have (its classifier).
    Returns:
      New variables (same container type) with ``<collection>/<stream>`` replaced for every
      collection of the single-stream variables. Raises ValueError naming the first path whose
      shape differs or is missing (a stream built with another width or group).
    """
    frozen = not isinstance(variables, dict)
    out = unfreeze(variables) if frozen else {k: unfreeze(v) for k, v in variables.items()}
    for name, single in streams.items():
        if name not in STREAMS:
            raise ValueError(f"stream name {name!r} is unknown: choose one of {STREAMS}")
        single = unfreeze(single)
        for col, tree in single.items():
            if col == "intermediates":
                continue
            src = {k: v for k, v in tree.items() if k not in skip}
            if col not in out or name not in out[col]:
                if not src:
                    continue
                raise ValueError(
                    f"load_streams: the network has no '{col}/{name}' subtree (streams: "
                    f"{sorted(out.get('params', {}))})"
                )
            want, got = _subtree_shapes(out[col][name]), _subtree_shapes(src)
            if want != got:
                diff = sorted(set(want.items()) ^ set(got.items()))[0]
                raise ValueError(
                    f"load_streams: '{col}/{name}' does not match the single-stream variables at "
                    f"{'/'.join(map(str, diff[0]))} (network {want.get(diff[0])}, given "
                    f"{got.get(diff[0])}): were they built with the same config?"
                )
            out[col][name] = src
    return freeze(out) if frozen else out


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
        if sname not in REGISTRY or sname == "multistream":
            raise ValueError(
                f"stream {name!r} has model name {sname!r}: valid stream models are "
                f"{sorted(set(REGISTRY) - {'multistream'})}"
            )
        modules[name] = REGISTRY[sname](sc)
    return MultiStreamNetwork(
        **modules,
        head=config.get("head", "map_e2"),
        map_features=config.get("map_features", None),
        num_classes=num_classes,
        freeze_streams=bool(config.get("freeze_streams", False)),
    )
