"""The experiment configs of invjax: one module per experiment row of the paper.

Each module's ``get_config()`` returns an ``ml_collections.ConfigDict`` and its docstring starts
with the command that runs it::

    python -m invjax.main --config=configs/NAME.py --workdir=runs/NAME

A config varies another by importing it (``from configs import cifar10_std``); the model
sections of every architecture are in :mod:`configs.models`, the helpers shared by the configs in
:mod:`configs.common`, the defaults of every key in :mod:`configs.base`. The names and constants
they use (stream and head names, scale sets, downsampling rules, datasets) are imported from
invjax, which owns them.
"""

from __future__ import annotations

import importlib.util
import pathlib


class ConfigFileError(ValueError):
    """The file is not a config file (no ``get_config``, not Python); the message names it."""


def from_file(path: str):
    """``get_config([ARG])`` of the config file ``path`` = ``FILE[:ARG]`` (what
    ``--config=FILE[:ARG]`` loads; ``ARG`` is passed as one string, as config_flags passes it).

    The file runs as a module of its own, once per call; it imports its helpers from this package.
    """
    file, sep, arg = path.partition(":")
    name = pathlib.Path(file).stem  # the module's name in tracebacks and messages: the file's
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None:
        raise ConfigFileError(f"config file {file} is not a Python file (configs are configs/*.py)")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "get_config", None)):
        raise ConfigFileError(
            f"config file {file} defines no get_config() function: a config file's "
            "get_config() returns its ml_collections.ConfigDict (see configs/digits_cnn.py)"
        )
    return module.get_config(arg) if sep else module.get_config()
