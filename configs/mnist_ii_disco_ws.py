"""python -m invjax.main --config=configs/mnist_ii_disco_ws.py --workdir=runs/mnist_ii_disco_ws

Table 2, Scaled-MNIST, II-DISCO with Scale-II WS (paper: 1.30 +- 0.02% TE).

DISCO's CNN with Scale-II (weighted sum, eq. 7, k = 3) instead of its pooling head (appendix
table "II-DISCO architecture on Scaled-MNIST"). Recipe of ``mnist_cnn.py``; hyperparameters of the
appendix table "II-DISCO HPs on Scaled-MNIST": batch 128, learning rate 5e-3, weight decay 5e-7
(PyTorch-style L2 with Adam), BatchNorm decay 0.01 and dropout 0.1 (in the model section).
"""

from __future__ import annotations

import pathlib
import runpy

# Configs are files, not a package: load the siblings next to this file wherever it is run from.
common = runpy.run_path(str(pathlib.Path(__file__).with_name("common.py")))


def get_config():
    config = common["get"]("mnist_cnn")
    config.model = common["load"]("models")["mnist"]("ii_disco_ws")
    config.train.batch_size = 128
    config.train.learning_rate = 5e-3
    config.train.weight_decay = 5e-7
    return config
