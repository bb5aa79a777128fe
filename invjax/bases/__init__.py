"""Steerable filter bases, built once in float64 NumPy and cached (:mod:`e2`, :mod:`scale`)."""
