"""python -m invjax.main --config=configs/stl10_triple_e2pool_scalepool.py --workdir=runs/stl10_triple_e2pool_scalepool

Table 4, STL-10 triple stream, neither invariant stream with II (paper: 7.51% TE).

``stl10_triple.py`` whose E(2) and Scale streams both end in global average pooling; phase 1
trains them with their baselines' recipes (``stl10_e2.py``, ``stl10_scale.py``).
"""

from __future__ import annotations

from configs import stl10_e2, stl10_scale, stl10_triple
from invjax.configs import models


def get_config():
    config = stl10_triple.get_config()
    config.model = models.triple("stl10", "map_e2", e2_head="pool", scale_head="pool")
    config.phase1.e2.train = stl10_e2.get_config().train
    config.phase1.scale.train = stl10_scale.get_config().train
    return config
