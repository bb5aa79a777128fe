"""python -m invjax.main --config=configs/stl10_triple_scalepool.py --workdir=runs/stl10_triple_scalepool

Table 4, STL-10 triple stream, E(2) stream with II, Scale stream without II (paper: 6.34% TE).

``stl10_triple.py`` whose Scale stream ends in global average pooling instead of Scale-II; phase 1
trains that stream with its own recipe (``stl10_scale.py``: DISCO's hyperparameters).
"""

from __future__ import annotations

from invjax.configs import table3


def get_config():
    return table3.config("stl10_triple_scalepool")
