"""python -m invjax.main --config=configs/cifar10_scale.py --workdir=runs/cifar10_scale

Table 3, CIFAR-10, single stream, Scale without II (paper: 4.04% TE).

The DISCO scale-equivariant WRN28-10 (3 scales 1, 1.41, 2; kernel 5, effective size 3) with global
average pooling instead of II (the baseline of its own paper). Recipe of ``cifar10_std.py``;
hyperparameters: DISCO has no CIFAR-10 recipe: the baseline's (std) hyperparameters.
"""

from __future__ import annotations

from invjax.configs import table3


def get_config():
    return table3.config("cifar10_scale")
