"""python -m invjax.main --config=configs/mnist_disco.py --workdir=runs/mnist_disco

Table 2, Scaled-MNIST, DISCO (paper: 1.35 +- 0.05% TE).

DISCO's scale-equivariant CNN with its mixed max/average pooling head, on DISCO's basis for this
network: ``disco_b`` as DISCO's ``exp_mnist.sh`` runs it with scale augmentation
(``model.basis='disco_b_plus'``: the shipped DISCO basis, kernel 15, effective size 7, 4 scales,
mixed by type-B Hermite functions of width 1.9, mult 1.9, max order 4; rank 44 of 49). Without
scale augmentation DISCO uses mult 1.5 (``--config.model.basis=disco_b``). Recipe and
hyperparameters of ``mnist_cnn.py`` (SESN / DISCO: Adam, learning rate 0.01). 494,549
parameters.
"""

from __future__ import annotations

from configs import mnist_cnn
from invjax.configs import models

# DISCO's exp_mnist.sh, "Scale-MNIST +" (scale augmentation, as this recipe): disco_b, min scale
# 1.9, mult 1.9 (invjax.bases.scale.TYPE_B); shared by the II-DISCO configs
DISCO_BASIS = "disco_b_plus"


def get_config():
    config = mnist_cnn.get_config()
    config.model = models.mnist("disco")
    config.model.basis = DISCO_BASIS
    return config
