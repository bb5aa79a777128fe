"""Pure, jit-able functions for the math: no state, no Flax.

Submodules: :mod:`conv` (grid-symmetric convolution), :mod:`e2` (E(2) group convolution,
group pooling, restriction), :mod:`scale` (scale convolution and projection), :mod:`ii`
(Invariant Integration reductions).
"""
