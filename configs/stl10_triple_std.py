"""python -m invjax.main --config=configs/stl10_triple_std.py --workdir=runs/stl10_triple_std

Table 4 (text of Section 5), STL-10 triple stream of three *standard* streams (paper: 10.29% TE):
the control showing that the guaranteed invariances, not the ensembling, make the triple network.

``stl10_triple.py`` with a standard WRN16-8 (global average pooling, ``stl10_std.py``'s recipe)
in each of the three stream slots. Phase 1 trains the three streams as their own runs in
``DIR/streams/{e2,scale,std}`` (slot names) with seeds ``seed``, ``seed + 1``, ``seed + 2``
(``config.phase1.<slot>.seed_offset``), so that they are three different networks; phase 2 trains
the Map head and the classifier as in ``stl10_triple.py``.
"""

from __future__ import annotations

from configs import stl10_std
from invjax.configs import common, models


def get_config():
    config = stl10_std.get_config()
    model = models.triple_std("stl10", "map_e2")
    recipe = stl10_std.get_config()
    config = common.two_phase(
        config,
        model,
        {"e2": recipe, "scale": recipe, "std": recipe},
        batch_size=128,
        learning_rate=0.01,
        weight_decay=0.0001,
        epoch_divisor=10,
    )
    for offset, slot in enumerate(("e2", "scale", "std")):
        config.phase1[slot].seed_offset = offset
    return config
