"""python -m invjax.main --config=configs/mnist_ses.py --workdir=runs/mnist_ses

Table 2, Scaled-MNIST, SES-CNN (paper: 1.42 +- 0.07% TE).

SESN's scale-equivariant CNN (Hermite basis, kernel 15, effective size 7, 4 scales 2^(i/3)) with max pooling and SESN's pooling head. Recipe and hyperparameters of ``mnist_cnn.py`` (SESN / DISCO: Adam, learning rate 0.01).
"""

from __future__ import annotations

from configs import mnist_cnn
from invjax.configs import models


def get_config():
    config = mnist_cnn.get_config()
    config.model = models.mnist("ses")
    return config
