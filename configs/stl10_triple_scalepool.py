"""python -m invjax.main --config=configs/stl10_triple_scalepool.py --workdir=runs/stl10_triple_scalepool

Table 4, STL-10 triple stream, E(2) stream with II, Scale stream without II (paper: 6.34% TE).

``stl10_triple.py`` whose Scale stream ends in global average pooling instead of Scale-II; phase 1
trains that stream with its own recipe (``stl10_scale.py``: DISCO's hyperparameters).
"""

from __future__ import annotations

import pathlib
import runpy

# Configs are files, not a package: load the siblings next to this file wherever it is run from.
common = runpy.run_path(str(pathlib.Path(__file__).with_name("common.py")))


def get_config():
    config = common["get"]("stl10_triple")
    config.model = common["load"]("models")["triple"]("stl10", "map_e2", scale_head="pool")
    config.phase1.scale.train = common["get"]("stl10_scale").train
    return config
