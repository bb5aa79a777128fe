"""Thin Flax Linen modules over :mod:`invjax.ops` (:mod:`e2`, :mod:`scale`, :mod:`ii`, :mod:`heads`)."""
