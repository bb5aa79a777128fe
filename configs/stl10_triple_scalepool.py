"""python -m invjax.main --config=configs/stl10_triple_scalepool.py --workdir=runs/stl10_triple_scalepool

Table 4, STL-10 triple stream, E(2) stream with II, Scale stream without II (paper: 6.34% TE).

``stl10_triple.py`` whose Scale stream ends in global average pooling instead of Scale-II; phase 1
trains that stream with its own recipe (``stl10_scale.py``: DISCO's hyperparameters).
"""

from __future__ import annotations

from configs import stl10_scale, stl10_triple
from invjax.configs import models


def get_config():
    config = stl10_triple.get_config()
    config.model = models.triple("stl10", "map_e2", scale_head="pool")
    config.phase1.scale.train = stl10_scale.get_config().train
    return config
