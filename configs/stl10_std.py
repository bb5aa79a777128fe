"""python -m invjax.main --config=configs/stl10_std.py --workdir=runs/stl10_std

Table 3, STL-10, single stream, standard convolutions (the baseline; paper: 12.02% TE).

WRN16-8 with global average pooling. Its recipe is every STL-10 row's (invjax/configs/table3.py): SGD
with Nesterov momentum 0.9, 1000 epochs, learning rate x0.2 after 300, 400, 600 and 800 epochs,
random pad-12 crops, horizontal flips and Cutout (appendix C.4). Full data: the whole training
split trains (``data.val_fraction=0``: the paper's 80:20 split was for the HP search only);
``--config.data.n_train=N_t`` selects a class-balanced subset. Hyperparameters: the recipe of
e2cnn / Cutout for STL-10 (lr 0.1, weight decay 5e-4, batch 128, dropout 0.3).
"""

from __future__ import annotations

from invjax.configs import table3


def get_config():
    return table3.config("stl10_std")
