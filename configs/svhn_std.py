"""python -m invjax.main --config=configs/svhn_std.py --workdir=runs/svhn_std

Table 3, SVHN, single stream, standard convolutions (the baseline; paper: 2.93% TE).

WRN16-4 with global average pooling. Also the dataset recipe that every SVHN config imports: SGD
with momentum 0.9, 160 epochs, learning rate x0.1 after 80 and 120 epochs, no augmentation
(appendix C.2, following Zagoruyko & Komodakis). Full data: the whole training split trains
(``data.val_fraction=0``: the paper's 80:20 split was for the HP search only);
``--config.data.n_train=N_t`` selects a class-balanced subset. Hyperparameters: the WRN paper's
SVHN recipe (lr 0.01, weight decay 5e-4, dropout 0.4).
"""

from __future__ import annotations

from invjax.configs import base, models


def get_config():
    config = base.get_config()
    config.data.name = "svhn_cropped"
    config.data.val_fraction = 0.0
    config.data.augment = "default"  # none
    config.model = models.std("svhn")
    config.train.optimizer = "sgd"
    config.train.momentum = 0.9
    config.train.nesterov = False
    config.train.batch_size = 128
    config.train.learning_rate = 0.01
    config.train.weight_decay = 0.0005
    config.train.num_epochs = 160
    config.train.lr_boundaries = (80, 120)
    config.train.lr_decay_factor = 0.1
    config.train.select_best = False
    return config
