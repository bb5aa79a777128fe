"""python -m invjax.main --config=configs/svhn_dual_star.py --workdir=runs/svhn_dual_star

Table 3, SVHN, II Dual* (constant parameters; paper: 2.20% TE).

``svhn_dual.py`` with every stream's widths divided by sqrt(2) and rounded up, so the network has
about the baseline's parameters; the streams keep their hyperparameters (the paper did not tune
them again).
"""

from __future__ import annotations

from invjax.configs import table3


def get_config():
    return table3.config("svhn_dual_star")
