"""python -m invjax.main --config=configs/digits_dual.py --workdir=runs/digits_dual

Offline: the dual-stream (E(2) + Scale) network on scaled digits, trained in the paper's two phases.

Phase 1 trains ``digits_e2.py`` and ``digits_scale.py`` in ``DIR/streams/{e2,scale}``; phase 2
trains the Map-E(2) head and the classifier on the frozen streams in ``DIR`` with the recipe's
epochs divided by 4 (as SVHN / CIFAR-10), learning rate 1e-2 and weight decay 1e-5.
"""

from __future__ import annotations

from configs import digits_e2, digits_scale, digits_std
from invjax.configs import common


def get_config():
    config = digits_std.get_config()
    streams = {"e2": digits_e2.get_config(), "scale": digits_scale.get_config()}
    return common.two_phase(
        config,
        common.multistream({k: v.model for k, v in streams.items()}),
        streams,
        batch_size=64,
        learning_rate=1e-2,
        weight_decay=1e-5,
        epoch_divisor=4,
    )
