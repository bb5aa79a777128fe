"""python -m invjax.main --config=configs/digits_triple_std.py --workdir=runs/digits_triple_std

Offline: the triple network of three *standard* streams on the digits, the control that
separates the guaranteed invariances from ensembling (the paper's Section 5 control on STL-10).

``digits_triple.py`` with ``digits_std.py``'s WRN (global average pooling, its recipe) in each of
the three stream slots (``e2``, ``scale``, ``std`` are slot names), trained by the same two
phases; the slots train with seeds ``seed``, ``seed + 1``, ``seed + 2``
(``config.phase1.<slot>.seed_offset``), so they are three different networks.
"""

from __future__ import annotations

from configs import digits_dual, digits_std
from invjax.configs import common


def get_config():
    config = digits_std.get_config()
    slots = ("e2", "scale", "std")
    model = common.multistream({s: digits_std.stream("std") for s in slots})
    head = digits_dual.get_config().train  # the dual and triple networks' head recipe
    config = common.two_phase(
        config,
        model,
        {s: digits_std.get_config() for s in slots},
        batch_size=head.batch_size,
        learning_rate=head.learning_rate,
        weight_decay=head.weight_decay,
        epoch_divisor=4,
    )
    for offset, slot in enumerate(slots):
        config.phase1[slot].seed_offset = offset
    return config
