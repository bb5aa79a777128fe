"""python -m invjax.main --config=configs/mnist_ii_disco_monomials.py --workdir=runs/mnist_ii_disco_monomials

Table 2, Scaled-MNIST, II-DISCO with Scale-II monomials (paper: 1.30 +- 0.06% TE).

DISCO's CNN with monomial Scale-II (eq. 6, k = 3): 25 monomials, pruned to 12 and 5 after 5 and 10
epochs by the model's epoch-end hook. Recipe of ``mnist_cnn.py``; hyperparameters of the appendix
table "II-DISCO HPs on Scaled-MNIST": batch 128, learning rate 1e-3, weight decay 5e-6, BatchNorm
decay 5e-4 and dropout 0.7 (in the model section).
"""

from __future__ import annotations

from configs import mnist_cnn, models


def get_config():
    config = mnist_cnn.get_config()
    config.model = models.mnist("ii_disco_monomials")
    config.train.batch_size = 128
    config.train.learning_rate = 1e-3
    config.train.weight_decay = 5e-6
    return config
