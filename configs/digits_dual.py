"""python -m invjax.main --config=configs/digits_dual.py --workdir=runs/digits_dual

Offline: the dual-stream (E(2) + Scale) network on scaled digits, trained in the paper's two phases.

Phase 1 trains ``digits_e2.py`` and ``digits_scale.py`` in ``DIR/streams/{e2,scale}``; phase 2
trains the Map-E(2) head and the classifier on the frozen streams in ``DIR`` with the recipe's
epochs divided by 4 (as SVHN / CIFAR-10), learning rate 1e-2 and weight decay 1e-5.
"""

from __future__ import annotations

import pathlib
import runpy

# Configs are files, not a package: load the siblings next to this file wherever it is run from.
common = runpy.run_path(str(pathlib.Path(__file__).with_name("common.py")))


def get_config():
    config = common["get"]("digits_std")
    streams = {"e2": common["get"]("digits_e2"), "scale": common["get"]("digits_scale")}
    return common["two_phase"](
        config,
        common["multistream"]({k: v.model for k, v in streams.items()}),
        streams,
        batch_size=64,
        learning_rate=1e-2,
        weight_decay=1e-5,
        epoch_divisor=4,
    )
