"""python -m invjax.main --config=configs/mnist_ii_disco_ws.py --workdir=runs/mnist_ii_disco_ws

Table 2, Scaled-MNIST, II-DISCO with Scale-II WS (paper: 1.30 +- 0.02% TE).

DISCO's CNN with Scale-II (weighted sum, eq. 7, k = 3) instead of its pooling head (appendix
table "II-DISCO architecture on Scaled-MNIST"). Recipe of ``mnist_cnn.py``; hyperparameters of the
appendix table "II-DISCO HPs on Scaled-MNIST": batch 128, learning rate 5e-3, weight decay 5e-7
(PyTorch-style L2 with Adam), BatchNorm decay 0.01 and dropout 0.1 (in the model section). Basis:
DISCO's ``disco_b`` as ``mnist_disco.py`` (``model.basis``). Scale-II acts on the 14 x 14 maps
of conv3 (56 x 56 after the x2 upsampling, two 2 x 2 poolings).
"""

from __future__ import annotations

from configs import mnist_cnn, mnist_disco
from invjax.configs import models


def get_config():
    config = mnist_cnn.get_config()
    config.model = models.mnist("ii_disco_ws")
    config.model.basis = mnist_disco.DISCO_BASIS  # DISCO's disco_b, as the DISCO baseline
    config.train.batch_size = 128
    config.train.learning_rate = 5e-3
    config.train.weight_decay = 5e-7
    return config
