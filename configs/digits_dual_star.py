"""python -m invjax.main --config=configs/digits_dual_star.py --workdir=runs/digits_dual_star

Offline: the constant-parameter ("*") dual network of the digits, the control that separates
the multi-stream gain from network size.

``digits_dual.py`` with every stream's widths divided by sqrt(2) (rounded up, as the paper's
Dual* rows), so the network has about one stream's parameters; the streams and the head keep
their recipes.
"""

from __future__ import annotations

from configs import digits_dual
from invjax.configs import models


def get_config():
    config = digits_dual.get_config()
    for name in config.model.streams:
        config.model.streams[name].width_divisor = models.width_divisor(2)
    return config
