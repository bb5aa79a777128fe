"""python -m invjax.main --config=configs/svhn_scale_ii.py --workdir=runs/svhn_scale_ii

Table 3, SVHN, single stream, Scale with II (paper: 2.54% TE).

The DISCO scale-equivariant WRN16-4 (3 scales 1, 1.41, 2; kernel 5, effective size 3) with
Scale-II WS (eq. 7, k=3) and BatchNorm as the invariant head. Recipe of ``svhn_std.py``;
hyperparameters of the appendix table "HPs used for SVHN experiments": batch 128, learning rate
0.2, weight decay 0.0001, dropout in the model section (invjax/configs/models.py). Also phase 1's recipe
of the Scale stream in the multi-stream configs.
"""

from __future__ import annotations

from invjax.configs import table3


def get_config():
    return table3.config("svhn_scale_ii")
