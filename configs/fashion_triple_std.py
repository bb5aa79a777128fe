"""python -m invjax.main --config=configs/fashion_triple_std.py --workdir=runs/fashion_triple_std

The ensembling control of ``fashion_triple.py``: three standard streams (seeds offset 0, 1, 2)
under the same head, trained the same way. Argument ``rot``: the rotated and scaled data.
"""

from __future__ import annotations

from configs import fashion_std, fashion_triple


def get_config(variant: str = ""):
    return fashion_triple.ensemble(fashion_std.get_config, variant)
