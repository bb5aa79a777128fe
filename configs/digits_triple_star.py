"""python -m invjax.main --config=configs/digits_triple_star.py --workdir=runs/digits_triple_star

Offline: the constant-parameter ("*") triple network of the digits (widths / sqrt(3)).

``digits_triple.py`` with every stream's widths divided by sqrt(3) (rounded up, as the paper's
Triple* rows), so the network has about one stream's parameters; recipes unchanged.
"""

from __future__ import annotations

from configs import digits_triple
from invjax.configs import models


def get_config():
    config = digits_triple.get_config()
    for name in config.model.streams:
        config.model.streams[name].width_divisor = models.width_divisor(3)
    return config
