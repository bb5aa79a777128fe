"""python -m invjax.main --config=configs/fashion_triple.py --workdir=runs/fashion_triple

The triple-stream network of the real-image multi-stream study: ``fashion_e2.py``,
``fashion_scale.py`` and ``fashion_std.py`` trained first, then frozen under the paper's head
(two phases, as ``digits_triple.py``). Argument ``rot``: the rotated and scaled data and the
rotation-invariant E(2) stream.
"""

from __future__ import annotations

from configs import digits_dual, fashion_e2, fashion_scale, fashion_std
from invjax.configs import common


def streams(variant: str = "") -> dict:
    """The single-stream configs of the triple network."""
    return {
        "e2": fashion_e2.get_config(variant),
        "scale": fashion_scale.get_config(variant),
        "std": fashion_std.get_config(variant),
    }


def two_phase(stream_configs: dict, variant: str = ""):
    """The two-phase multi-stream config over ``stream_configs`` with the digits' head recipe."""
    head = digits_dual.get_config().train
    return common.two_phase(
        fashion_std.get_config(variant),
        common.multistream({k: v.model for k, v in stream_configs.items()}),
        stream_configs,
        batch_size=head.batch_size,
        learning_rate=head.learning_rate,
        weight_decay=head.weight_decay,
        epoch_divisor=4,
    )


def ensemble(stream_config, variant: str = ""):
    """The ensembling controls: three copies of one stream (``stream_config(variant)``, seeds
    offset 0, 1, 2, so the first copy is that stream's own run) under the same head."""
    slots = ("e2", "scale", "std")
    config = two_phase({s: stream_config(variant) for s in slots}, variant)
    for offset, slot in enumerate(slots):
        config.phase1[slot].seed_offset = offset
    return config


def get_config(variant: str = ""):
    return two_phase(streams(variant), variant)
