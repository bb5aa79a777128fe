"""python -m invjax.main --config=configs/fashion_triple_e2.py --workdir=runs/fashion_triple_e2

The stronger ensembling control of ``fashion_triple.py`` on the rotated and scaled data (argument
``rot``): three copies of its best stream there, the E(2) stream (``fashion_e2.py:rot``, invariant
to the four rotations; seeds offset 0, 1, 2), under the same head, trained the same way. Without
an argument: the flip-invariant E(2) stream on Fashion-MNIST.
"""

from __future__ import annotations

from configs import fashion_e2, fashion_triple


def get_config(variant: str = ""):
    return fashion_triple.ensemble(fashion_e2.get_config, variant)
