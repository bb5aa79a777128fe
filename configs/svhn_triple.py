"""python -m invjax.main --config=configs/svhn_triple.py --workdir=runs/svhn_triple

Table 3, SVHN, II Triple (Scale, E(2) & Std.; paper: 2.10% TE).

Two phases (invjax/training/plan.py). Phase 1: each stream (e2, scale, std) is its own run in
``DIR/streams/<stream>`` with its own recipe (``svhn_e2_ii.py``, ``svhn_scale_ii.py``,
``svhn_std.py``). Phase 2 in ``DIR``: the streams are loaded and frozen; the Map-E(2) head (each
stream's invariant features mapped to the E(2) stream's width, weighted sum) and the classifier
train with the appendix table "Classification head HPs on SVHN": batch 128, learning rate 0.01,
weight decay 0.0001, and the recipe's epochs and schedule divided by 4 (40 epochs). Other heads
(appendix A.1): ``--config.model.head=concat|map_scale|map_std|map_all`` (phase 1 is the same).
"""

from __future__ import annotations

from invjax.configs import table3


def get_config():
    return table3.config("svhn_triple")
