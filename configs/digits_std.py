"""python -m invjax.main --config=configs/digits_std.py --workdir=runs/digits_std

Offline: the standard stream of the digits networks, alone (no download; see digits_triple.py).

A small pre-activation WRN10-1 (one block per stage, widths 16/32/64, stem 8, first stride 2:
28 -> 14 -> 7 -> 4) with global average pooling, on ``scaled_digits`` (scikit-learn's handwritten
digits in MNIST's format, shrunk by s ~ U(0.3, 1); 1079 / 359 / 359 images). Also the recipe of
every ``digits_*`` config: Scaled-MNIST's (Adam, step decay x0.1, random scaling s in [0.5, 2],
best validation epoch reported), shortened to fit a laptop.
"""

from __future__ import annotations

import ml_collections

from invjax.configs import base, common
from invjax.groups import DEFAULT_SCALES
from invjax.models.wrn import DEFAULT_DOWNSAMPLE


def stream(family: str, head: str = "ii") -> ml_collections.ConfigDict:
    """The small WRN of the digits configs for ``family`` std | e2 | scale (model section)."""
    c = ml_collections.ConfigDict()
    c.name = "wrn"
    c.family = family
    c.depth = 10
    c.widen_factor = 1
    c.stem_width = 8
    c.first_stride = 2
    c.head = "pool" if family == "std" else head
    c.dropout = 0.0
    c.width_divisor = 1.0
    c.ii_kernel_size = 3
    c.num_classes = 10
    # The peers' downsampling per family; override with
    # --config.model.downsample=symmetric|strided|maxpool (README: the measured effect).
    c.downsample = DEFAULT_DOWNSAMPLE[family]
    if family == "e2":
        # D4 in the first stages, flips only at the end: digits are not rotation invariant
        # (6 / 9), so the network is exactly invariant to horizontal flips only (as STL-10's).
        c.groups = ("D4", "D4", "D1")
        c.ii_group = "D1"
        c.ii_interpolation = "bilinear"
    if family == "scale":
        c.scales = DEFAULT_SCALES
        c.scale_kernel_size = 5
        c.scale_effective_size = 3
        c.scale_basis = "disco"
    return c


def get_config():
    config = base.get_config()
    config.data.name = "scaled_digits"
    config.data.augment = "default"  # scale: s ~ U(0.5, 2)
    config.model = stream("std")
    config.train.optimizer = "adam"
    config.train.learning_rate = 1e-2
    config.train.weight_decay = 1e-5
    config.train.batch_size = 64
    config.train.num_epochs = 12
    common.schedule_fractions(config.train, (2 / 3,))  # after 8 of 12 epochs
    config.train.lr_decay_factor = 0.1
    config.train.select_best = True
    return config
