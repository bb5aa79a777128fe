"""python -m invjax.main --config=configs/mnist_ses.py --workdir=runs/mnist_ses

Table 2, Scaled-MNIST, SES-CNN (paper: 1.42 +- 0.07% TE).

SESN's scale-equivariant CNN (Hermite basis, kernel 15, effective size 7, 4 scales 2^(i/3)) with max pooling and SESN's pooling head. Recipe and hyperparameters of ``mnist_cnn.py`` (SESN / DISCO: Adam, learning rate 0.01).
"""

from __future__ import annotations

import pathlib
import runpy

# Configs are files, not a package: load the siblings next to this file wherever it is run from.
common = runpy.run_path(str(pathlib.Path(__file__).with_name("common.py")))


def get_config():
    config = common["get"]("mnist_cnn")
    config.model = common["load"]("models")["mnist"]("ses")
    return config
