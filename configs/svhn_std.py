"""python -m invjax.main --config=configs/svhn_std.py --workdir=runs/svhn_std

Table 3, SVHN, single stream, standard convolutions (the baseline; paper: 2.93% TE).

WRN16-4 with global average pooling. Its recipe is every SVHN row's (invjax/configs/table3.py): SGD
with momentum 0.9, 160 epochs, learning rate x0.1 after 80 and 120 epochs, no augmentation
(appendix C.2, following Zagoruyko & Komodakis). Full data: the whole training split trains
(``data.val_fraction=0``: the paper's 80:20 split was for the HP search only);
``--config.data.n_train=N_t`` selects a class-balanced subset. Hyperparameters: the WRN paper's
SVHN recipe (lr 0.01, weight decay 5e-4, dropout 0.4).
"""

from __future__ import annotations

from invjax.configs import table3


def get_config():
    return table3.config("svhn_std")
