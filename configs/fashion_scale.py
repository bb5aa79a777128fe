"""python -m invjax.main --config=configs/fashion_scale.py --workdir=runs/fashion_scale

The scale stream of the real-image multi-stream study (``fashion_std.py``): three scales of the
DISCO basis (kernel 5, effective size 3) and Scale-II WS on 7x7 maps. Argument ``rot``: the
rotated and scaled data.
"""

from __future__ import annotations

from configs import fashion_std


def get_config(variant: str = ""):
    config = fashion_std.get_config(variant)
    config.model = fashion_std.stream("scale")
    return config
