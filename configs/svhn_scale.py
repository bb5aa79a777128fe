"""python -m invjax.main --config=configs/svhn_scale.py --workdir=runs/svhn_scale

Table 3, SVHN, single stream, Scale without II (paper: 2.71% TE).

The DISCO scale-equivariant WRN16-4 (3 scales 1, 1.41, 2; kernel 5, effective size 3) with global
average pooling instead of II (the baseline of its own paper). Recipe of ``svhn_std.py``;
hyperparameters: DISCO has no SVHN recipe: the baseline's (std) hyperparameters.
"""

from __future__ import annotations

from invjax.configs import table3


def get_config():
    return table3.config("svhn_scale")
