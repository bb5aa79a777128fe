"""Shared fixtures: real images (scikit-image photos, scikit-learn digits), never only noise."""

from __future__ import annotations

import numpy as np
import pytest

from invjax import precision as P


def pytest_configure(config):
    # The whole session computes in the exact precision, fixtures of any scope included (a
    # module-scoped fixture is computed outside the per-test scope below); GPUs default to TF32.
    import jax

    jax.config.update("jax_default_matmul_precision", P.EXACT)
    config.addinivalue_line(
        "markers",
        "precision(name): compute the test under invjax precision `name` instead of the exact one",
    )


@pytest.fixture(autouse=True)
def _pinned_precision(request):
    """Every test computes under invjax's exact precision (``P.EXACT``: float32 products on every
    backend), so exactness bounds hold on GPUs too, where the default arithmetic is TF32: layers
    built without a ``precision`` follow JAX's default, pinned here; a test marked
    ``@pytest.mark.precision(name)`` pins JAX's default closest to ``name`` instead."""
    marker = request.node.get_closest_marker("precision")
    with P.jax_default(marker.args[0] if marker else P.EXACT):
        yield


@pytest.fixture(scope="session")
def photo32():
    """A 32x32 RGB crop of scikit-image's astronaut photo, float32 in [0, 1], ``[1, 32, 32, 3]``."""
    import skimage.data

    img = skimage.data.astronaut()[100:164:2, 180:244:2].astype(np.float32) / 255.0
    return img[None]


@pytest.fixture(scope="session")
def photo_batch():
    """Two different 32x32 RGB photo crops, ``[2, 32, 32, 3]`` float32 in [0, 1]."""
    import skimage.data

    a = skimage.data.astronaut()[100:164:2, 180:244:2]
    b = skimage.data.chelsea()[60:124:2, 100:164:2]
    return np.stack([a, b]).astype(np.float32) / 255.0


@pytest.fixture(scope="session")
def camera64():
    """A smooth 65x65 grey crop of the camera photo (odd size: a true centre pixel), ``[1,65,65,1]``."""
    import skimage.data
    import skimage.transform

    img = skimage.data.camera()[40:300, 120:380].astype(np.float64) / 255.0
    img = skimage.transform.resize(img, (65, 65), anti_aliasing=True)
    return img.astype(np.float32)[None, :, :, None]
