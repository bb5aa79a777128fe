"""python -m invjax.main --config=configs/stl10_scale.py --workdir=runs/stl10_scale

Table 3, STL-10, single stream, Scale without II (paper: 8.07% TE).

The DISCO scale-equivariant WRN16-8 (3 scales 1, 1.41, 2; kernel 5, effective size 3) with global
average pooling instead of II (the baseline of its own paper). Recipe of ``stl10_std.py``;
hyperparameters: DISCO's STL-10 recipe (lr 0.05, weight decay 1e-3, batch 64, dropout 0.3).
"""

from __future__ import annotations

from configs import stl10_std
from invjax.configs import models


def get_config():
    config = stl10_std.get_config()
    config.model = models.scale("stl10", "pool")
    config.train.batch_size = 64
    config.train.learning_rate = 0.05
    config.train.weight_decay = 0.001
    return config
