"""python -m invjax.main --config=configs/cifar10_e2.py --workdir=runs/cifar10_e2

Table 3, CIFAR-10, single stream, E(2) without II (paper: 2.91% TE).

The E(2)-steerable WRN28-10 (D8, D4, D4 per stage, E(2)-II over D4) with global average pooling
instead of II (the baseline of its own paper): e2cnn's network (e2cnn_experiments' basis, last
block to ``int(640 sqrt 4)`` trivial fields; ``python -m invjax.summary cifar10_e2_pool`` prints
its count beside e2cnn's). Recipe of ``cifar10_std.py`` with e2cnn's CIFAR-10 recipe
(``cifar_single.sh``: lr 0.1, weight decay 5e-4, batch 128, dropout 0.3, 200 epochs, learning
rate x0.2 every 60 epochs, i.e. after 60, 120 and 180; the paper's WRN recipe decays after 60,
120 and 160).
"""

from __future__ import annotations

from configs import cifar10_std
from invjax.configs import models


def get_config():
    config = cifar10_std.get_config()
    config.model = models.e2("cifar10", "pool")
    config.train.batch_size = 128
    config.train.learning_rate = 0.1
    config.train.weight_decay = 0.0005
    config.train.lr_boundaries = (60, 120, 180)  # e2cnn: --lr_decay_epoch=60 over 200 epochs
    config.train.lr_decay_factor = 0.2
    return config
