"""python -m invjax.main --config=configs/mnist_disco.py --workdir=runs/mnist_disco

Table 2, Scaled-MNIST, DISCO (paper: 1.35 +- 0.05% TE).

DISCO's scale-equivariant CNN (the shipped DISCO basis, kernel 15, effective size 7, 4 scales) with its mixed max/average pooling head. Recipe and hyperparameters of ``mnist_cnn.py`` (SESN / DISCO: Adam, learning rate 0.01).
"""

from __future__ import annotations

from configs import mnist_cnn
from invjax.configs import models


def get_config():
    config = mnist_cnn.get_config()
    config.model = models.mnist("disco")
    return config
