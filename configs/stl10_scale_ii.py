"""python -m invjax.main --config=configs/stl10_scale_ii.py --workdir=runs/stl10_scale_ii

Table 3, STL-10, single stream, Scale with II (paper: 7.92% TE).

The DISCO scale-equivariant WRN16-8 (3 scales 1, 1.41, 2; kernel 5, effective size 3) with
Scale-II WS (eq. 7, k=3) and BatchNorm as the invariant head. Recipe of ``stl10_std.py``;
hyperparameters of the appendix table "HPs on STL-10": batch 96, learning rate 0.02, weight decay
0.001, dropout in the model section (invjax/configs/models.py). Also phase 1's recipe of the Scale stream
in the multi-stream configs.
"""

from __future__ import annotations

from invjax.configs import table3


def get_config():
    return table3.config("stl10_scale_ii")
