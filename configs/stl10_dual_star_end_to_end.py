"""python -m invjax.main --config=configs/stl10_dual_star_end_to_end.py --workdir=runs/stl10_dual_star_end_to_end

Appendix B.2, STL-10: the constant-parameter dual stream trained end to end (paper: 7.86% TE,
vs 6.38% with the two phases of ``stl10_dual_star.py``).

One run from random initialisation (``train.phases='end_to_end'``, ``freeze_streams=False``):
every stream, the Map-E(2) head and the classifier train together with the full STL-10 recipe of
``stl10_std.py`` (1000 epochs, Nesterov, x0.2 at 300/400/600/800, crop + flip + Cutout). The
paper trained it "without tuning any stream-specific hyper-parameters" and does not list the ones
it used; this config takes the Scale-II stream's (batch 96, learning rate 0.02, weight decay
1e-3), between the E(2)-II stream's (2e-3) and the baseline's (0.1) learning rates. Dropout stays
per stream (invjax/configs/models.py).
"""

from __future__ import annotations

from invjax.configs import table3


def get_config():
    return table3.config("stl10_dual_star_end_to_end")
