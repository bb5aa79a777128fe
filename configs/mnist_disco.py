"""python -m invjax.main --config=configs/mnist_disco.py --workdir=runs/mnist_disco

Table 2, Scaled-MNIST, DISCO (paper: 1.35 +- 0.05% TE).

DISCO's scale-equivariant CNN (the shipped DISCO basis, kernel 15, effective size 7, 4 scales) with its mixed max/average pooling head. Recipe and hyperparameters of ``mnist_cnn.py`` (SESN / DISCO: Adam, learning rate 0.01).
"""

from __future__ import annotations

import pathlib
import runpy

# Configs are files, not a package: load the siblings next to this file wherever it is run from.
common = runpy.run_path(str(pathlib.Path(__file__).with_name("common.py")))


def get_config():
    config = common["get"]("mnist_cnn")
    config.model = common["load"]("models")["mnist"]("disco")
    return config
