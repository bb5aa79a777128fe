"""python -m invjax.main --config=configs/digits_triple.py --workdir=runs/digits_triple

Offline default job: the triple-stream network (E(2), Scale and standard streams) on scaled
digits, trained in the paper's two phases on a laptop's CPU.

Phase 1 trains ``digits_e2.py``, ``digits_scale.py`` and ``digits_std.py`` as their own runs in
``DIR/streams/{e2,scale,std}``; phase 2 loads and freezes them and trains the Map-E(2) head and
the classifier in ``DIR`` (``digits_dual.py``'s head recipe). Prints each phase's test error and,
last, the triple network's ``test_error=X.XX%``.
"""

from __future__ import annotations

import pathlib
import runpy

# Configs are files, not a package: load the siblings next to this file wherever it is run from.
common = runpy.run_path(str(pathlib.Path(__file__).with_name("common.py")))


def get_config():
    config = common["get"]("digits_std")
    streams = {k: common["get"](f"digits_{k}") for k in ("e2", "scale", "std")}
    head = common["get"]("digits_dual").train  # the dual network's head recipe
    return common["two_phase"](
        config,
        common["multistream"]({k: v.model for k, v in streams.items()}),
        streams,
        batch_size=head.batch_size,
        learning_rate=head.learning_rate,
        weight_decay=head.weight_decay,
        epoch_divisor=4,
    )
