"""python -m invjax.main --config=configs/fashion_triple_star.py --workdir=runs/fashion_triple_star

The size control of ``fashion_triple.py``: every stream's widths divided by sqrt(3) (rounded up),
so that the network has about one stream's parameters. Argument ``rot``: the rotated and scaled
data.
"""

from __future__ import annotations

from configs import fashion_triple
from invjax.configs import models


def get_config(variant: str = ""):
    config = fashion_triple.get_config(variant)
    for name in config.model.streams:
        config.model.streams[name].width_divisor = models.width_divisor(3)
    return config
