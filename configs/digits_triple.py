"""python -m invjax.main --config=configs/digits_triple.py --workdir=runs/digits_triple

Offline default job: the triple-stream network (E(2), Scale and standard streams) on scaled
digits, trained in the paper's two phases on a laptop's CPU.

Phase 1 trains ``digits_e2.py``, ``digits_scale.py`` and ``digits_std.py`` as their own runs in
``DIR/streams/{e2,scale,std}``; phase 2 loads and freezes them and trains the Map-E(2) head and
the classifier in ``DIR`` (``digits_dual.py``'s head recipe). Prints each phase's test error and,
last, the triple network's ``test_error=X.XX%``.
"""

from __future__ import annotations

from configs import digits_dual, digits_e2, digits_scale, digits_std
from invjax.configs import common


def get_config():
    config = digits_std.get_config()
    streams = {
        "e2": digits_e2.get_config(),
        "scale": digits_scale.get_config(),
        "std": digits_std.get_config(),
    }
    head = digits_dual.get_config().train  # the dual network's head recipe
    return common.two_phase(
        config,
        common.multistream({k: v.model for k, v in streams.items()}),
        streams,
        batch_size=head.batch_size,
        learning_rate=head.learning_rate,
        weight_decay=head.weight_decay,
        epoch_divisor=4,
    )
