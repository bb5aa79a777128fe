"""The helpers of the experiment configs, shipped with invjax; and how a config file is loaded.

The paper's rows are config *files* (``configs/NAME.py`` in the repository, not installed: a
file is loaded by path, as ``ml_collections.config_flags`` loads ``--config``). What those files
share is here, in the package, so that every config, the repository's and a user's own, imports
it the same way:

* :mod:`invjax.configs.base`: ``get_config()`` with every key and its default;
* :mod:`invjax.configs.models`: the model section of every architecture in the paper's appendix
  and :data:`~invjax.configs.models.MODELS`, the registry of their names;
* :mod:`invjax.configs.common`: the two-phase multi-stream helpers;
* :mod:`invjax.configs.table3`: the paper's Table 3 rows, from one table of their differences.

``import invjax.configs`` is enough to use them (``invjax.configs.models.get(...)``): each is
imported on first use.

A config of your own starts from a shipped one in either of two ways::

    # my_config.py, run from the repository root (its configs/ is then importable):
    from configs import cifar10_e2_ii

    # or from anywhere, by path (as --config=... loads it):
    from invjax.configs import load
    def get_config():
        config = load("/path/to/the/repository/configs/cifar10_e2_ii.py")
        config.train.num_epochs = 10
        return config

Nothing in invjax outside this subpackage and the commands imports it (the models, data and
training code read the config sections they are given).
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import os
import sys

_COUNTER = itertools.count()


class ConfigFileError(ValueError):
    """The file is not a config file (not Python, no ``get_config``); the message names it."""


def _package_root(directory: str) -> str | None:
    """The directory above the package that ``directory`` belongs to (the first ancestor
    without ``__init__.py``), or None when ``directory`` is no package (as pytest's rootdir
    rule: ``repo/configs/x.py`` -> ``repo``, so ``from configs import y`` resolves there)."""
    if not os.path.isfile(os.path.join(directory, "__init__.py")):
        return None
    while os.path.isfile(os.path.join(directory, "__init__.py")):
        directory = os.path.dirname(directory)
    return directory


@contextlib.contextmanager
def _importable(root: str | None):
    if root is None or root in sys.path:
        yield
        return
    sys.path.insert(0, root)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(root)


def load(path: str):
    """``get_config([ARG])`` of the config file ``path`` = ``FILE[:ARG]`` (what
    ``--config=FILE[:ARG]`` loads; ``ARG`` is passed as one string, as config_flags passes it).

    The file runs as a module of its own, once per call. Where it lies in a package directory
    (the repository's ``configs/``), that package's parent is importable while it runs, so a row
    that varies another (``from configs import svhn_std``) loads from any working directory.
    """
    file, sep, arg = path.partition(":")
    if not os.path.isfile(file):
        raise FileNotFoundError(f"config file {file!r} not found")
    spec = importlib.util.spec_from_file_location(f"invjax_config_{next(_COUNTER)}", file)
    if spec is None:
        raise ConfigFileError(f"config file {file} is not a Python file (configs are configs/*.py)")
    module = importlib.util.module_from_spec(spec)
    with _importable(_package_root(os.path.dirname(os.path.abspath(file)))):
        spec.loader.exec_module(module)
        if not callable(getattr(module, "get_config", None)):
            raise ConfigFileError(
                f"config file {file} defines no get_config() function: a config file's "
                "get_config() returns its ml_collections.ConfigDict (see configs/digits_cnn.py)"
            )
        return module.get_config(arg) if sep else module.get_config()


#: The submodules, imported on first use: ``import invjax.configs`` is enough for
#: ``invjax.configs.models.get(...)`` (without loading the models for a bare :func:`load`).
SUBMODULES = ("base", "common", "models", "table3")


def __getattr__(name: str):
    if name in SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ConfigFileError", "load", *SUBMODULES]
