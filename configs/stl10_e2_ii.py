"""python -m invjax.main --config=configs/stl10_e2_ii.py --workdir=runs/stl10_e2_ii

Table 3, STL-10, single stream, E(2) with II (paper: 7.67% TE).

The E(2)-steerable WRN16-8 (D8, D4, D1 per stage, E(2)-II over D1 (flips)) with E(2)-II (eq. 5,
k=3) as the invariant head. Recipe of ``stl10_std.py``; hyperparameters of the appendix table "HPs
on STL-10": batch 96, learning rate 0.002, weight decay 0.01, dropout in the model section
(invjax/configs/models.py). Also phase 1's recipe of the E(2) stream in the multi-stream configs.
"""

from __future__ import annotations

from configs import stl10_std
from invjax.configs import models


def get_config():
    config = stl10_std.get_config()
    config.model = models.e2("stl10", "ii")
    config.train.batch_size = 96
    config.train.learning_rate = 0.002
    config.train.weight_decay = 0.01
    return config
