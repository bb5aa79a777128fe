"""python -m invjax.main --config=configs/stl10_dual_star.py --workdir=runs/stl10_dual_star

Table 3, STL-10, II Dual* (constant parameters; paper: 6.38% TE).

``stl10_dual.py`` with every stream's widths divided by sqrt(2) and rounded up, so the network has
about the baseline's parameters; the streams keep their hyperparameters (the paper did not tune
them again).
"""

from __future__ import annotations

import pathlib
import runpy

# Configs are files, not a package: load the siblings next to this file wherever it is run from.
common = runpy.run_path(str(pathlib.Path(__file__).with_name("common.py")))


def get_config():
    config = common["get"]("stl10_dual")
    config.model = common["load"]("models")["dual"]("stl10", "map_e2", constant_params=True)
    return config
