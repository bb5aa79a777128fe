"""python -m invjax.main --config=configs/digits_e2_rot.py --workdir=runs/digits_e2_rot

Offline: the E(2) stream of the digits networks with Invariant Integration over rotations, for
the rotated-and-scaled digits.

``digits_e2.py`` with the groups D4, D4, C4 per stage and E(2)-II over C4 (the four 90-degree
rotations) instead of D4, D4, D1 and II over D1 (flips): on ``rotscaled_digits`` every digit
appears at every angle, so rotation II is the prior the paper's claim is about there. The network
is exactly invariant to 90-degree rotations (not to flips: a mirrored digit is another glyph).
"""

from __future__ import annotations

from configs import digits_e2


def get_config():
    config = digits_e2.get_config()
    config.data.name = "rotscaled_digits"
    config.model.groups = ("D4", "D4", "C4")
    config.model.ii_group = "C4"
    return config
