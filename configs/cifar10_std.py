"""python -m invjax.main --config=configs/cifar10_std.py --workdir=runs/cifar10_std

Table 3, CIFAR-10, single stream, standard convolutions (the baseline; paper: 3.89% TE).

WRN28-10 with global average pooling. Also the dataset recipe that every CIFAR-10 config imports:
SGD with momentum 0.9, 200 epochs, learning rate x0.2 after 60, 120 and 160 epochs, random pad-4
crops and horizontal flips (appendix C.3). Full data: the whole training split trains
(``data.val_fraction=0``: the paper's 80:20 split was for the HP search only);
``--config.data.n_train=N_t`` selects a class-balanced subset. Hyperparameters: the WRN paper's
CIFAR recipe (lr 0.1, weight decay 5e-4, dropout 0.3).
"""

from __future__ import annotations

from invjax.configs import base, models


def get_config():
    config = base.get_config()
    config.data.name = "cifar10"
    config.data.val_fraction = 0.0
    config.data.augment = "default"  # crop_flip
    config.model = models.std("cifar10")
    config.train.optimizer = "sgd"
    config.train.momentum = 0.9
    config.train.nesterov = False
    config.train.batch_size = 128
    config.train.learning_rate = 0.1
    config.train.weight_decay = 0.0005
    config.train.num_epochs = 200
    config.train.lr_boundaries = (60, 120, 160)
    config.train.lr_decay_factor = 0.2
    config.train.select_best = False
    return config
