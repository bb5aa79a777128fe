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

from invjax.configs import table3


def get_config():
    return table3.config("stl10_triple_std")
