"""python -m invjax.main --config=configs/cifar10_e2_ii.py --workdir=runs/cifar10_e2_ii

Table 3, CIFAR-10, single stream, E(2) with II (paper: 2.95% TE).

The E(2)-steerable WRN28-10 (D8, D4, D4 per stage, E(2)-II over D4) with E(2)-II (eq. 5, k=3) as
the invariant head. Recipe of ``cifar10_std.py``; hyperparameters of the appendix table "HPs on
CIFAR-10": batch 96, learning rate 0.005, weight decay 0.005, dropout in the model section
(invjax/configs/models.py). Also phase 1's recipe of the E(2) stream in the multi-stream configs.
"""

from __future__ import annotations

from invjax.configs import table3


def get_config():
    return table3.config("cifar10_e2_ii")
