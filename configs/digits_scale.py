"""python -m invjax.main --config=configs/digits_scale.py --workdir=runs/digits_scale

Offline: the Scale stream of the digits networks, alone (see digits_triple.py).

``digits_std.py``'s WRN10-1 with DISCO scale convolutions (scales 1, 1.41, 2; kernel 5, effective
size 3) and Scale-II WS (eq. 7, k = 3) followed by BatchNorm; 8 epochs (x0.1 after 6).
"""

from __future__ import annotations

from configs import digits_std


def get_config():
    config = digits_std.get_config()
    config.model = digits_std.stream("scale")
    # The costliest stream on a CPU (three scales of 5x5 filters): 8 epochs instead of 12 keep
    # the default job (digits_triple.py) near 5 minutes on 2 cores.
    config.train.num_epochs = 8
    config.train.lr_boundary_fractions = (0.75,)  # after 6 of 8 epochs
    return config
