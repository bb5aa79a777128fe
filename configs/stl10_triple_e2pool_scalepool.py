"""python -m invjax.main --config=configs/stl10_triple_e2pool_scalepool.py --workdir=runs/stl10_triple_e2pool_scalepool

Table 4, STL-10 triple stream, neither invariant stream with II (paper: 7.51% TE).

``stl10_triple.py`` whose E(2) and Scale streams both end in global average pooling; phase 1
trains them with their baselines' recipes (``stl10_e2.py``, ``stl10_scale.py``).
"""

from __future__ import annotations

import pathlib
import runpy

# Configs are files, not a package: load the siblings next to this file wherever it is run from.
common = runpy.run_path(str(pathlib.Path(__file__).with_name("common.py")))


def get_config():
    config = common["get"]("stl10_triple")
    config.model = common["load"]("models")["triple"](
        "stl10", "map_e2", e2_head="pool", scale_head="pool"
    )
    config.phase1.e2.train = common["get"]("stl10_e2").train
    config.phase1.scale.train = common["get"]("stl10_scale").train
    return config
