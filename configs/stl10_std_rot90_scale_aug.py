"""python -m invjax.main --config=configs/stl10_std_rot90_scale_aug.py --workdir=runs/stl10_std_rot90_scale_aug

Section 5 (text), STL-10: the standard WRN16-8 trained with random 90-degree rotations and scales
s in [0.25, 1] as augmentation, on top of the standard crops, flips and Cutout (paper: 21.80% TE,
against 12.08% without them): augmentation does not buy what guaranteed invariance does.

``stl10_std.py`` with ``data.augment='crop_flip_cutout_rot90_scale'``
(:mod:`invjax.data.augment`: a random quarter turn, a bicubic rescaling about the centre with
mean-colour fill, then the standard augmentation).
"""

from __future__ import annotations

from invjax.configs import table3


def get_config():
    return table3.config("stl10_std_rot90_scale_aug")
