"""python -m invjax.main --config=configs/stl10_e2_ii.py --workdir=runs/stl10_e2_ii

Table 3, STL-10, single stream, E(2) with II (paper: 7.67% TE).

The E(2)-steerable WRN16-8 (D8, D4, D1 per stage, E(2)-II over D1 (flips)) with E(2)-II (eq. 5,
k=3) as the invariant head. Recipe of ``stl10_std.py``; hyperparameters of the appendix table "HPs
on STL-10": batch 96, learning rate 0.002, weight decay 0.01, dropout in the model section
(invjax/configs/models.py). Also phase 1's recipe of the E(2) stream in the multi-stream configs.
"""

from __future__ import annotations

from invjax.configs import table3


def get_config():
    return table3.config("stl10_e2_ii")
