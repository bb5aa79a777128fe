"""python -m invjax.main --config=configs/stl10_dual.py --workdir=runs/stl10_dual

Table 3, STL-10, II Dual (Scale & E(2); paper: 5.95% TE).

Two phases (invjax/training/plan.py). Phase 1: each stream (e2, scale) is its own run in
``DIR/streams/<stream>`` with its own recipe (``stl10_e2_ii.py``, ``stl10_scale_ii.py``). Phase 2
in ``DIR``: the streams are loaded and frozen; the Map-E(2) head (each stream's invariant features
mapped to the E(2) stream's width, weighted sum) and the classifier train with the appendix table
"Classification head HPs on STL-10": batch 128, learning rate 0.01, weight decay 0.0001, and the
recipe's epochs and schedule divided by 10 (100 epochs). Other heads (appendix A.1):
``--config.model.head=concat|map_scale|map_all`` (phase 1 is the same).
"""

from __future__ import annotations

from invjax.configs import table3


def get_config():
    return table3.config("stl10_dual")
