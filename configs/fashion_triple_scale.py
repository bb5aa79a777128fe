"""python -m invjax.main --config=configs/fashion_triple_scale.py --workdir=runs/fashion_triple_scale

The stronger ensembling control of ``fashion_triple.py``: three copies of its best stream on
Fashion-MNIST, the scale stream (``fashion_scale.py``, seeds offset 0, 1, 2), under the same head,
trained the same way. ``fashion_triple_std.py`` ensembles standard streams; this one asks whether
three *different* invariances beat three copies of the best one. Argument ``rot``: the rotated
and scaled data.
"""

from __future__ import annotations

from configs import fashion_scale, fashion_triple


def get_config(variant: str = ""):
    return fashion_triple.ensemble(fashion_scale.get_config, variant)
