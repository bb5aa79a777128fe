"""python -m invjax.main --config=configs/stl10_triple_e2pool.py --workdir=runs/stl10_triple_e2pool

Table 4, STL-10 triple stream, E(2) stream without II, Scale stream with II (paper: 7.35% TE).

``stl10_triple.py`` whose E(2) stream ends in global average pooling instead of E(2)-II; phase 1
trains that stream with its own recipe (``stl10_e2.py``: e2cnn's hyperparameters). The other rows
of Table 4: ``stl10_triple_scalepool.py`` (E(2)-II, Scale pooling: 6.34%),
``stl10_triple_e2pool_scalepool.py`` (both pooling: 7.51%) and ``stl10_triple.py`` (both II: 5.90%).
"""

from __future__ import annotations

from invjax.configs import table3


def get_config():
    return table3.config("stl10_triple_e2pool")
