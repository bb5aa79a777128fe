"""python -m invjax.main --config=configs/cifar10_e2.py --workdir=runs/cifar10_e2

Table 3, CIFAR-10, single stream, E(2) without II (paper: 2.91% TE).

The E(2)-steerable WRN28-10 (D8, D4, D4 per stage, E(2)-II over D4) with global average pooling
instead of II (the baseline of its own paper). Recipe of ``cifar10_std.py``; hyperparameters:
e2cnn's CIFAR-10 recipe (lr 0.1, weight decay 5e-4, batch 128, dropout 0.3).
"""

from __future__ import annotations

import pathlib
import runpy

# Configs are files, not a package: load the siblings next to this file wherever it is run from.
common = runpy.run_path(str(pathlib.Path(__file__).with_name("common.py")))


def get_config():
    config = common["get"]("cifar10_std")
    config.model = common["load"]("models")["e2"]("cifar10", "pool")
    config.train.batch_size = 128
    config.train.learning_rate = 0.1
    config.train.weight_decay = 0.0005
    return config
