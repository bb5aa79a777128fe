"""Which transformations a module is exact for, and how far off it is under any transformation.

One answer for every layer and network, used by the run certificate (:mod:`invjax.certificate`),
the invariance command (:mod:`invjax.invariance`) and the tests.

Exact elements
  A module states the group it is equivariant to with a method ``exact_group(input_shape)``
  (the E(2) layers: their group; a Wide-ResNet: its last stage's group met with its II group;
  a multi-stream network: the meet of its streams'; modules without the method: the trivial
  group, i.e. no claim). :func:`exact_group` meets it with the symmetries of the input's pixel
  grid (90-degree rotations and flips of a square grid, ``D4``; 180 degrees and the two flips of
  a rectangle, ``D2``): these are the elements that act on the grid by permutation, where the
  module's output changes only by float32 rounding. Other angles and scales are interpolated and
  never exact.

Measured error
  :func:`check_equivariance` applies the module to ``x`` and to its transformed copies in one
  batch and returns, per transformation, the relative error (:func:`relative_error`,
  per sample)

      max_n ||f(L_g x_n) - L'_g f(x_n)||_2 / ||L'_g f(x_n)||_2

  with ``L'_g`` the action on the output's field type (:meth:`invjax.fields.FieldType.transform`:
  spatial permutation, and the channel permutation of regular fields; none for an invariant
  output ``[B, C]``). Transformations are the exact elements by default, or any elements of a
  group, or any image transforms ``(label, images -> images)`` of an invariant output (e.g.
  :func:`invjax.invariance.transform_family` ``('rot45')``).

Precision: the measurement runs under :data:`invjax.precision.EXACT` unless told otherwise; the
guarantee (errors of float32 rounding, below 1e-5 relative) holds at that precision (README,
"Precision and the guarantee").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from invjax import fields
from invjax import groups as G
from invjax import precision as P
from invjax.contract import Exact, Typed, is_nnx

TRIVIAL_GROUP = G.cyclic(1)


class Element(NamedTuple):
    """Element ``index`` of ``group``, with its ``label`` (``'rot90'``, ``'flip_rot180'`` ...)."""

    label: str
    group: G.Group
    index: int


def element_label(group: G.Group, g: int) -> str:
    """``'rot90'``, ``'flip'``, ``'flip_rot90'``, ... for element ``g`` of ``group`` (the mirror
    first, then the rotation, as :func:`invjax.groups.transform` acts)."""
    f, _ = group.element(g)
    deg = round(math.degrees(group.angle(g))) % 360
    if f:
        return "flip" if deg == 0 else f"flip_rot{deg}"
    return f"rot{deg}"


def grid_group(input_shape: Sequence[int]) -> G.Group:
    """The symmetries of the pixel grid of ``input_shape`` (``[..., H, W, C]``) that fix its
    shape: ``D4`` for a square grid, ``D2`` (180 degrees and the two mirrors) otherwise."""
    h, w = input_shape[-3], input_shape[-2]
    return G.dihedral(4 if h == w else 2)


def exact_group(module, input_shape: Sequence[int]) -> G.Group:
    """The group of elements ``module`` is exact for on inputs of ``input_shape`` (module
    docstring): its own ``exact_group(input_shape)`` met with :func:`grid_group`."""
    own = module.exact_group(tuple(input_shape)) if isinstance(module, Exact) else TRIVIAL_GROUP
    return G.intersect(own, grid_group(input_shape))


def exact_elements(module, input_shape: Sequence[int]) -> list[Element]:
    """The non-identity elements ``module`` is exact for on ``input_shape`` (in the order of
    :func:`exact_group`'s elements: rotations, then the mirrored ones)."""
    group = exact_group(module, input_shape)
    return [Element(element_label(group, g), group, g) for g in range(1, group.order)]


def relative_error(a, b, *, per_sample: bool = False, ord: float = 2) -> float:
    """``||a - b|| / ||b||`` in float64 (``b``: the reference; 0 where ``a == b``).

    ``ord``: 2 (Euclidean norm of the flattened arrays) or ``np.inf`` (largest absolute value).
    ``per_sample``: the largest of the ratios of the slices along the leading axis
    (``max_n ||a_n - b_n|| / ||b_n||``, what the guarantee bounds) instead of one ratio.
    """
    if ord not in (2, np.inf):
        raise ValueError(f"ord={ord!r} is invalid: choose 2 or np.inf")
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        raise ValueError(f"relative_error: shapes {a.shape} and {b.shape} differ")
    a = a.reshape(len(a) if per_sample else 1, -1)
    b = b.reshape(len(b) if per_sample else 1, -1)
    num = np.linalg.norm(a - b, ord=ord, axis=1)
    den = np.linalg.norm(b, ord=ord, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(num == 0, 0.0, num / den)
    return float(np.max(ratio))


def input_type(module) -> fields.FieldType:
    """The field type ``module`` takes: its :meth:`invjax.contract.Typed.in_type` (trivial for
    modules that are not :class:`~invjax.contract.Typed`, e.g. whole networks)."""
    return module.in_type() if isinstance(module, Typed) else fields.TRIVIAL


def _transforms(module, x_shape, transforms, in_type):
    """``[(label, input action, output action or None (= invariant only))]``."""
    if transforms is None:
        transforms = exact_elements(module, x_shape)
    out = []
    for t in transforms:
        if isinstance(t, Element):
            t = (t.group, t.index)
        a, b = t
        if isinstance(a, G.Group):
            group, g = a, int(b)
            out.append(
                (
                    element_label(group, g),
                    lambda x, group=group, g=g: in_type.transform(x, group, g),
                    (group, g),
                )
            )
        elif isinstance(a, str) and callable(b):
            out.append((a, b, None))
        else:
            raise ValueError(
                f"transform {t!r} is invalid: give an Element, a (Group, index) pair or a "
                "(label, images -> images) pair"
            )
    return out


def _applier(module, variables, method, apply_kwargs: dict):
    """``(apply, variables)`` with ``apply(variables, x)`` the module's output array on ``x``:
    ``module.apply(variables, x, method=method, **apply_kwargs)`` for a Linen module; for a Flax
    NNX module (``variables`` None) the module called directly under its own graph, its state
    the variables (``nnx.split``; a call that updates batch statistics updates a copy)."""
    if not is_nnx(module):
        kwargs = dict(apply_kwargs, **({} if method is None else {"method": method}))

        def apply(v, inputs):
            return _array(module.apply(v, inputs, **kwargs))

        return apply, variables
    if variables is not None:
        raise ValueError(
            f"check_equivariance: {type(module).__name__} is a Flax NNX module, which holds its "
            "own variables: pass variables=None"
        )
    from flax import nnx  # imported already: the caller holds an NNX module

    graphdef, state = nnx.split(module)

    def apply_nnx(s, inputs):
        m = nnx.merge(graphdef, s)
        if method is None:
            return _array(m(inputs, **apply_kwargs))
        if isinstance(method, str):  # a method the caller names, as Linen's apply takes it
            return _array(getattr(m, method)(inputs, **apply_kwargs))
        return _array(method(m, inputs, **apply_kwargs))

    return apply_nnx, state


def _array(y):
    return y.tensor if isinstance(y, fields.Field) else y


def check_equivariance(
    module,
    variables,
    x,
    transforms: Sequence | None = None,
    *,
    in_type: fields.FieldType | None = None,
    out_type: fields.FieldType | None = None,
    precision: str | None = P.EXACT,
    method: str | Callable | None = None,
    **apply_kwargs,
) -> dict[str, float]:
    """``{label: relative error}`` of ``module.apply(variables, x, **apply_kwargs)`` (an NNX
    module: ``module(x, **apply_kwargs)``) under each transformation (module docstring).

    Args:
      module: a Linen module (or any object with ``apply``), or a Flax NNX module
        (:mod:`invjax.nnx`, or a network of them), called directly: ``module(x,
        **apply_kwargs)``.
      variables: the Linen module's variables; None for an NNX module (it holds its own).
      x: ``[B, H, W, C]`` inputs of ``in_type`` (default: :func:`input_type`).
      transforms: None (the exact elements, :func:`exact_elements`), or a sequence of
        :class:`Element` / ``(Group, index)`` (equivariance: the output is transformed by the
        same element) / ``(label, images -> images)`` (invariance: the output must be ``[B, C]``).
      out_type: the output's field type for spatial outputs (default: ``module.out_type(in_type)``
        where the module has the rule, else trivial).
      precision: the :mod:`invjax.precision` mode the applies run under (None: the caller's).
      method, apply_kwargs: passed to ``module.apply`` (e.g. ``train=False``); for an NNX module
        ``method`` names the method to call (or is a function of the module and ``x``).
    Returns:
      ``{}`` when there is nothing to check (no exact element and no ``transforms``).
    """
    x = jnp.asarray(x)
    if x.ndim != 4:
        raise ValueError(f"check_equivariance: x has shape {x.shape}: expected [B, H, W, C]")
    in_type = in_type or input_type(module)
    in_type.check_channels(x, f"check_equivariance({type(module).__name__})")
    todo = _transforms(module, x.shape, transforms, in_type)
    if not todo:
        return {}

    if precision is not None:
        P.check(precision)
        # invjax's layers take the arithmetic as an attribute (a new module, so a new trace);
        # other modules follow JAX's closest default below.
        module = P.configure(module, precision, strict=False)
    apply, variables = _applier(module, variables, method, apply_kwargs)
    # The output's kind (invariant [B, C] or a map) is checked before any compute.
    y_shape = jax.eval_shape(apply, variables, x).shape
    if len(y_shape) not in (2, 4):
        raise ValueError(f"check_equivariance: output shape {y_shape} is neither [B, C] nor NHWC")
    if len(y_shape) == 4:
        bad = [label for label, _, element in todo if element is None]
        if bad:
            raise ValueError(
                f"transforms {bad} are image transforms, but the output {y_shape} is a map: give "
                "group elements to measure equivariance"
            )
        if out_type is None:
            out_type = module.out_type(in_type) if isinstance(module, Typed) else fields.TRIVIAL
    run = jax.jit(apply)
    # The shapes of transformed inputs differ only for 90-degree rotations of non-square inputs;
    # inputs of one shape share one batch (one compilation, one call).
    inputs = [x] + [t(x) for _, t, _ in todo]
    outputs: list = [None] * len(inputs)
    by_shape: dict[tuple, list[int]] = {}
    for i, xi in enumerate(inputs):
        by_shape.setdefault(tuple(xi.shape), []).append(i)
    for idx in by_shape.values():
        batch = jnp.concatenate([inputs[i] for i in idx])
        if precision is None:
            y = run(variables, batch)
        else:
            with P.jax_default(precision):
                y = run(variables, batch)
        for i, part in zip(idx, jnp.split(y, len(idx))):
            outputs[i] = part
    y0 = outputs[0]
    errors = {}
    for (label, _, element), y in zip(todo, outputs[1:]):
        want = y0 if y0.ndim == 2 else out_type.transform(y0, *element)
        errors[label] = relative_error(y, want, per_sample=True)
    return errors


__all__ = [
    "Element",
    "check_equivariance",
    "element_label",
    "exact_elements",
    "exact_group",
    "grid_group",
    "input_type",
    "relative_error",
]
