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

from invjax.configs import table3


def get_config():
    return table3.config("cifar10_e2")
