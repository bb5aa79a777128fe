"""python -m invjax.main --config=configs/cifar10_std.py --workdir=runs/cifar10_std

Table 3, CIFAR-10, single stream, standard convolutions (the baseline; paper: 3.89% TE).

WRN28-10 with global average pooling. Its recipe is every CIFAR-10 row's (invjax/configs/table3.py):
SGD with momentum 0.9, 200 epochs, learning rate x0.2 after 60, 120 and 160 epochs, random pad-4
crops and horizontal flips (appendix C.3). Full data: the whole training split trains
(``data.val_fraction=0``: the paper's 80:20 split was for the HP search only);
``--config.data.n_train=N_t`` selects a class-balanced subset. Hyperparameters: the WRN paper's
CIFAR recipe (lr 0.1, weight decay 5e-4, dropout 0.3).
"""

from __future__ import annotations

from invjax.configs import table3


def get_config():
    return table3.config("cifar10_std")
