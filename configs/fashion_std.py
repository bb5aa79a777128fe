"""python -m invjax.main --config=configs/fashion_std.py --workdir=runs/fashion_std

The standard stream of the real-image multi-stream study, alone, on Fashion-MNIST
(``docs/results/realimages/README.md``; ``data.path`` is the folder of the four IDX files,
docs/datasets.md). Every ``fashion_*`` config takes the argument ``rot``
(``--config=configs/fashion_std.py:rot``): the rotated and scaled variant
``rotscaled_fashion_mnist``, with the E(2) stream invariant to rotations instead of flips.

The digits configs' WRN10-1 (one block per stage, widths 16/32/64, stem 8) with a first stride of
1 instead of 2, so the maps go 28 -> 28 -> 14 -> 7 and the II layers of the equivariant streams act
on 7x7 maps. No augmentation: the study asks what guaranteed invariances save in data. The last
epoch's model is reported (no selection on validation labels).
"""

from __future__ import annotations

from configs import digits_std

VARIANTS = ("", "rot")


def check_variant(variant) -> bool:
    """True for the rotated variant (config argument ``rot``), False for plain Fashion-MNIST."""
    if variant not in VARIANTS:
        raise ValueError(f"config argument {variant!r} is invalid: use none or 'rot'")
    return variant == "rot"


def stream(family: str, rotated: bool = False):
    """The study's stream of ``family`` std | e2 | scale (model section): the E(2) stream is
    D4, D4, D1 with II over D1 (flips, which keep Fashion-MNIST's labels), or for rotated data
    D4, D4, C4 with II over C4 (the four rotations by 90 degrees)."""
    model = digits_std.stream(family)
    model.first_stride = 1
    if family == "e2" and rotated:
        model.groups = ("D4", "D4", "C4")
        model.ii_group = "C4"
    return model


def get_config(variant: str = ""):
    rotated = check_variant(variant)
    config = digits_std.get_config()
    config.data.name = "rotscaled_fashion_mnist" if rotated else "fashion_mnist"
    config.data.augment = "none"
    config.model = stream("std")
    config.train.num_epochs = 100
    config.train.lr_boundaries = (68, 84)
    config.train.select_best = False
    config.train.eval_every_epochs = 10
    return config
