"""python -m invjax.main --config=configs/stl10_e2.py --workdir=runs/stl10_e2

Table 3, STL-10, single stream, E(2) without II (paper: 9.80% TE).

The E(2)-steerable WRN16-8 (D8, D4, D1 per stage, E(2)-II over D1 (flips)) with global average
pooling instead of II (the baseline of its own paper). Recipe of ``stl10_std.py``;
hyperparameters: e2cnn's STL-10 recipe (lr 0.1, weight decay 5e-4, batch 128, dropout 0.3).
"""

from __future__ import annotations

from invjax.configs import table3


def get_config():
    return table3.config("stl10_e2")
