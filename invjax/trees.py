"""Small utilities on variable trees, shared by the networks, the trainer and the measurements
(a module of its own so that the trainer counts parameters without importing a network)."""

from __future__ import annotations

import jax
import numpy as np


def count_params(params) -> int:
    """Number of scalars in a variable tree (arrays or ``ShapeDtypeStruct``s); the one count
    that the parameter tables, the trainer and the tests use."""
    return int(sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(params)))


__all__ = ["count_params"]
