"""python -m invjax.main --config=configs/mnist_ii_disco_monomials_pointwise.py --workdir=runs/mnist_ii_disco_monomials_pointwise

Table 2 variant (not a row of the paper): II-DISCO with the exactly scale-invariant monomials.

``mnist_ii_disco_monomials.py`` with ``model.monomial_placement='pointwise'``: every factor of a
monomial reads the same position (products across channels, no spatial offsets), which makes
eq. (6) exactly invariant to scaling on the continuous plane (docs/monomials.md). Same
pruning, recipe and hyperparameters; one feature per pair (``monomial_layout="pairs"``), since
on one channel's map a pointwise pair is the constant 1.
"""

from __future__ import annotations

from configs import mnist_ii_disco_monomials


def get_config():
    config = mnist_ii_disco_monomials.get_config()
    config.model.monomial_placement = "pointwise"
    # one feature per pair of channels: on one channel's map a pointwise pair is the constant 1
    config.model.monomial_layout = "pairs"
    return config
