"""The paper's experiment rows: one config file per row, each starting with its run command::

    python -m invjax.main --config=configs/NAME.py --workdir=runs/NAME

These files are loaded by path (``--config=...``, :func:`invjax.configs.load`) and are not
installed with invjax. The Table 3 rows (``svhn_*``, ``cifar10_*``, ``stl10_*``) are each one call
of :func:`invjax.configs.table3.config`, which builds them from one table of their differences; a
row that varies another imports it (``from configs import digits_std``). The helpers they share
(every key's default, the model section of each architecture, the two-phase helpers, the Table 3
table) ship with the package as :mod:`invjax.configs`.
"""
