"""python -m invjax.main --config=configs/svhn_e2.py --workdir=runs/svhn_e2

Table 3, SVHN, single stream, E(2) without II (paper: 2.64% TE).

The E(2)-steerable WRN16-4 (D8 in every stage, E(2)-II over D8) with global average pooling
instead of II (the baseline of its own paper). Recipe of ``svhn_std.py``; hyperparameters: e2cnn
has no SVHN recipe: the baseline's (std) hyperparameters.
"""

from __future__ import annotations

from invjax.configs import table3


def get_config():
    return table3.config("svhn_e2")
