"""python -m invjax.main --config=configs/mnist_ses.py --workdir=runs/mnist_ses

Table 2, Scaled-MNIST, SES-CNN (paper: 1.42 +- 0.07% TE).

SESN's scale-equivariant CNN with max pooling and SESN's pooling head, on SESN's own basis for
this network (``mnist_ses_vector_56``): Hermite type B (``model.basis='hermite_b'``: width 2.0 at
scale 1, mult 1.5, max order 4; kernel 15, 49 functions spanning 45 at the smallest scale, 4
scales 2^(i/3)). Recipe and hyperparameters of ``mnist_cnn.py`` (SESN / DISCO: Adam, learning
rate 0.01). 494,549 parameters. Type A (invjax's former choice, width 1.5):
``--config.model.basis=hermite``.
"""

from __future__ import annotations

from configs import mnist_cnn
from invjax.configs import models


def get_config():
    config = mnist_cnn.get_config()
    config.model = models.mnist("ses")
    config.model.basis = "hermite_b"  # SESN's mnist_ses_vector_56 (invjax.bases.scale.TYPE_B)
    return config
