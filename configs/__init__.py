"""The paper's experiment rows: one config file per row, each starting with its run command::

    python -m invjax.main --config=configs/NAME.py --workdir=runs/NAME

These files are loaded by path (``--config=...``, :func:`invjax.configs.load`) and are not
installed with invjax. A row that varies another imports it (``from configs import cifar10_std``);
the helpers they share (every key's default, the model section of each architecture, the
two-phase helpers) ship with the package as :mod:`invjax.configs`.
"""
