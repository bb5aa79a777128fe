"""Shared fixtures: real images (scikit-image photos, scikit-learn digits), never only noise."""

from __future__ import annotations

import gc
import os
import subprocess

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


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the marks
def pytest_collection_modifyitems(config, items):
    """Under ``--dist loadgroup`` (pyproject's addopts), the tests that use a module-scoped fixture
    of their module (a finished tiny run, a compilation cache, a trained model) run on one worker,
    so the fixture is computed once; with plain ``--dist load`` each worker that got one of those
    tests computed it again. The other tests are still spread one by one."""
    for item in items:
        if "tiny_digits_run" in item.fixturenames:  # a session fixture of two modules
            item.add_marker(pytest.mark.xdist_group("tiny_digits_run"))
            continue
        module = getattr(item, "module", None)
        defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
        for name in item.fixturenames:
            fixture = defs.get(name, ())
            if fixture and fixture[-1].scope == "module" and module is not None:
                if getattr(fixture[-1].func, "__module__", None) == module.__name__:
                    item.add_marker(pytest.mark.xdist_group(module.__name__))
                    break


# Tests between two full collections of what earlier tests left (see pytest_runtest_protocol).
_TESTS_PER_FULL_COLLECTION = 100
_tests_run = [0]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Each test runs with the objects that earlier tests left frozen (``gc.freeze``), so that a
    full collection inside it walks only what the test itself made. The checkpoint writer after a
    failed save, and every release of a workdir's log routing, call ``gc.collect()`` (so that what
    Python says of a failed save's leftovers goes to the run's log); late in a worker each such
    call walked every object of the tests before. The frozen objects are not collected while
    frozen, so every ``_TESTS_PER_FULL_COLLECTION`` tests a full collection runs between tests,
    which frees the cycles earlier tests left behind."""
    _tests_run[0] += 1
    if _tests_run[0] % _TESTS_PER_FULL_COLLECTION == 0:
        gc.collect()
    gc.freeze()
    try:
        return (yield)
    finally:
        gc.unfreeze()


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
def tiny_digits_run(tmp_path_factory):
    """A finished ``python -m invjax.main`` run of ``tiny_runs.SHARED_RUN`` (6 steps): its workdir,
    read by test_faults and test_export_run (copy it before changing it); with the lock released
    at the end."""
    from tiny_runs import SHARED_RUN, run_module

    from invjax import workdir

    wd = str(tmp_path_factory.mktemp("tiny_digits_run") / "w")
    proc = run_module("invjax.main", *SHARED_RUN, f"--workdir={wd}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not os.path.exists(os.path.join(wd, workdir.LOCK_FILE))  # released at the end
    return wd


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


@pytest.fixture
def git_repo(tmp_path):
    """``tmp_path`` as an empty git repository with an author; returns ``git(*args)``, which
    runs git there and returns the completed process."""

    def git(*args):
        return subprocess.run(["git", "-C", str(tmp_path), *args], capture_output=True, text=True)

    git("init", "-q")
    git("config", "user.email", "test@example.com")
    git("config", "user.name", "test")
    return git
