"""python -m invjax.main --config=configs/svhn_e2_ii.py --workdir=runs/svhn_e2_ii

Table 3, SVHN, single stream, E(2) with II (paper: 2.36% TE).

The E(2)-steerable WRN16-4 (D8 in every stage, E(2)-II over D8) with E(2)-II (eq. 5, k=3) as the
invariant head. Recipe of ``svhn_std.py``; hyperparameters of the appendix table "HPs used for
SVHN experiments": batch 128, learning rate 0.005, weight decay 0.005, dropout in the model
section (invjax/configs/models.py). Also phase 1's recipe of the E(2) stream in the multi-stream configs.
"""

from __future__ import annotations

from invjax.configs import table3


def get_config():
    return table3.config("svhn_e2_ii")
