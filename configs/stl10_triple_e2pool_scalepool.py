"""python -m invjax.main --config=configs/stl10_triple_e2pool_scalepool.py --workdir=runs/stl10_triple_e2pool_scalepool

Table 4, STL-10 triple stream, neither invariant stream with II (paper: 7.51% TE).

``stl10_triple.py`` whose E(2) and Scale streams both end in global average pooling; phase 1
trains them with their baselines' recipes (``stl10_e2.py``, ``stl10_scale.py``).
"""

from __future__ import annotations

from invjax.configs import table3


def get_config():
    return table3.config("stl10_triple_e2pool_scalepool")
