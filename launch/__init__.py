"""Launchers: sweeps of the paper's experiments (:mod:`launch.sweep`) and the studies
(:mod:`launch.studies`). Run from the repository root, e.g. ``python -m launch.studies digits
status``."""
