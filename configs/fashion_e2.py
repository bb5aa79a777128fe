"""python -m invjax.main --config=configs/fashion_e2.py --workdir=runs/fashion_e2

The E(2) stream of the real-image multi-stream study (``fashion_std.py``): D4, D4, D1 per stage
and E(2)-II over D1, exactly invariant to horizontal flips, the symmetry Fashion-MNIST's labels
keep; with the argument ``rot`` (``--config=configs/fashion_e2.py:rot``) D4, D4, C4 and II over
the four rotations by 90 degrees, on ``rotscaled_fashion_mnist``.
"""

from __future__ import annotations

from configs import digits_e2, fashion_std


def get_config(variant: str = ""):
    config = fashion_std.get_config(variant)
    config.model = fashion_std.stream("e2", fashion_std.check_variant(variant))
    config.train.learning_rate = digits_e2.get_config().train.learning_rate
    return config
