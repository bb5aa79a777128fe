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
