"""python -m invjax.main --config=configs/fashion_triple_std.py --workdir=runs/fashion_triple_std

The ensembling control of ``fashion_triple.py``: three standard streams (seeds offset 0, 1, 2)
under the same head, trained the same way. Argument ``rot``: the rotated and scaled data.
"""

from __future__ import annotations

from configs import fashion_std, fashion_triple


def get_config(variant: str = ""):
    slots = ("e2", "scale", "std")
    config = fashion_triple.two_phase({s: fashion_std.get_config(variant) for s in slots}, variant)
    for offset, slot in enumerate(slots):
        config.phase1[slot].seed_offset = offset
    return config
