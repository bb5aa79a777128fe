"""python -m invjax.main --config=configs/stl10_scale.py --workdir=runs/stl10_scale

Table 3, STL-10, single stream, Scale without II (paper: 8.07% TE).

The DISCO scale-equivariant WRN16-8 (3 scales 1, 1.41, 2; kernel 5, effective size 3) with global
average pooling instead of II (the baseline of its own paper). Recipe of ``stl10_std.py``;
hyperparameters: DISCO's STL-10 recipe (lr 0.05, weight decay 1e-3, batch 64, dropout 0.3).
"""

from __future__ import annotations

from invjax.configs import table3


def get_config():
    return table3.config("stl10_scale")
