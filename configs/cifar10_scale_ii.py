"""python -m invjax.main --config=configs/cifar10_scale_ii.py --workdir=runs/cifar10_scale_ii

Table 3, CIFAR-10, single stream, Scale with II (paper: 3.91% TE).

The DISCO scale-equivariant WRN28-10 (3 scales 1, 1.41, 2; kernel 5, effective size 3) with
Scale-II WS (eq. 7, k=3) and BatchNorm as the invariant head. Recipe of ``cifar10_std.py``;
hyperparameters of the appendix table "HPs on CIFAR-10": batch 128, learning rate 0.1, weight
decay 0.0005, dropout in the model section (invjax/configs/models.py). Also phase 1's recipe of the Scale
stream in the multi-stream configs.
"""

from __future__ import annotations

from invjax.configs import table3


def get_config():
    return table3.config("cifar10_scale_ii")
