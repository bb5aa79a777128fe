"""The exported program: a straight-line list of plain ops on named tensors, and its interpreter.

A program is a tuple of :class:`OpSpec` (static: kind, name, input and output tensor names,
JSON-able attributes, parameter names) plus a flat dict of arrays ``{"<op name>/<param>": array}``.
:func:`run` maps ``(program, arrays, images)`` to the output; it is pure and ``jax.jit`` compiles
it with the program static. Tensors are NHWC ``[B, H, W, C]`` maps or ``[B, N]`` vectors; scale
features ``[B, H, W, S, C]`` travel flattened as ``[B, H, W, S * C]`` (scale-major, channel ``s * C
+ c``), E(2) regular fields as in the models (``c * |G| + g``).

Op kinds (:data:`OPS`)
  ``conv``        ``lax.conv_general_dilated`` with an HWIO ``kernel`` (already expanded, stride-2
                  box already folded), explicit ``padding``, ``stride``, ``groups``; optional
                  ``bias`` ``[O]`` or a spatial bias map ``[H', W', O]`` (a BatchNorm shift folded
                  through a zero-padded convolution is position dependent at the border).
  ``dense``       ``x.reshape(B, -1) @ kernel (+ bias)``; ``kernel [N, O]`` rows in NHWC flatten
                  order (an II weight map is a dense layer on the flattened map).
  ``affine``      ``x * scale + shift`` per channel (last axis): a BatchNorm that cannot be folded.
  ``relu``, ``clamp`` (``max(x, epsilon)``), ``add`` (sum of inputs ``+ bias``), ``gather``
                  (static channel ``index``; only left where it cannot be folded).
  ``max_pool``, ``avg_pool`` (``reduce_window``), ``mean`` (global average over H, W),
  ``scale_max`` (maximum over the ``scales`` axis of a flattened scale map), ``upsample``.
  ``scale_ii``    Scale-II WS (eq. 7) collapsed with everything linear after it:
                  ``(flat(x) @ kernel) / mean(flat(x)) + bias``; the division is not linear.
  ``monomial_ii`` Scale-II monomials (eq. 6) in log space with a dense ``exponents`` kernel
                  ``[k, k, C, 2P]`` of the active pairs: ``exp(LSE log m_1 - LSE log m_2)``
                  (without the ``exp`` where attribute ``log`` is true).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from invjax.ops.conv import DIMENSION_NUMBERS


def _hashable(value):
    if isinstance(value, list | tuple):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """One static op of a program (hashable; its arrays live in the program's array dict)."""

    kind: str
    name: str
    inputs: tuple[str, ...]
    output: str
    attrs: tuple[tuple[str, Any], ...] = ()
    params: tuple[str, ...] = ()

    @property
    def attr_dict(self) -> dict:
        return dict(self.attrs)

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "name": self.name,
            "inputs": list(self.inputs),
            "output": self.output,
            "attrs": {k: v for k, v in self.attrs},
            "params": list(self.params),
        }

    @classmethod
    def from_json(cls, d: dict) -> OpSpec:
        return cls(
            d["kind"],
            d["name"],
            tuple(d["inputs"]),
            d["output"],
            tuple(sorted((k, _hashable(v)) for k, v in d["attrs"].items())),
            tuple(d["params"]),
        )


# --------------------------------------------------------------------------- op implementations


def _conv(xs, p, stride, padding, groups):
    y = lax.conv_general_dilated(
        xs[0],
        p["kernel"].astype(xs[0].dtype),
        window_strides=(stride, stride),
        padding=tuple(tuple(q) for q in padding),
        dimension_numbers=DIMENSION_NUMBERS,
        feature_group_count=groups,
    )
    return y + p["bias"] if "bias" in p else y


def _dense(xs, p):
    x = xs[0]
    y = x.reshape(x.shape[0], -1) @ p["kernel"].astype(x.dtype)
    return y + p["bias"] if "bias" in p else y


def _affine(xs, p):
    return xs[0] * p["scale"] + p["shift"]


def _relu(xs, p):
    return jax.nn.relu(xs[0])


def _clamp(xs, p, epsilon):
    return jnp.maximum(xs[0], jnp.asarray(epsilon, xs[0].dtype))


def _add(xs, p):
    y = xs[0]
    for x in xs[1:]:
        y = y + x
    return y + p["bias"] if "bias" in p else y


def _gather(xs, p):
    return jnp.take(xs[0], p["index"], axis=-1)


def _max_pool(xs, p, window, stride, padding):
    dims, strides = (1, window, window, 1), (1, stride, stride, 1)
    pads = ((0, 0),) + tuple(tuple(q) for q in padding) + ((0, 0),)
    return lax.reduce_window(xs[0], -jnp.inf, lax.max, dims, strides, pads)


def _avg_pool(xs, p, window, stride):
    dims, strides = (1, window, window, 1), (1, stride, stride, 1)
    return lax.reduce_window(xs[0], 0.0, lax.add, dims, strides, "VALID") / (window * window)


def _mean(xs, p):
    return xs[0].mean(axis=(1, 2))


def _scale_max(xs, p, scales):
    x = xs[0]
    return x.reshape(x.shape[:-1] + (scales, x.shape[-1] // scales)).max(axis=-2)


def _upsample(xs, p, factor, method):
    from invjax.models.common import upsample

    return upsample(xs[0], factor, method)


def _scale_ii(xs, p):
    x = xs[0]
    flat = x.reshape(x.shape[0], -1)
    y = (flat @ p["kernel"].astype(x.dtype)) / flat.mean(axis=1, keepdims=True)
    return y + p["bias"] if "bias" in p else y


def _monomial_ii(xs, p, epsilon, log=False):
    x = xs[0]
    e = p["exponents"].astype(x.dtype)
    pad = (e.shape[0] - 1) // 2
    logx = jnp.log(jnp.maximum(x, jnp.asarray(epsilon, x.dtype)))
    # Outside the image counts as epsilon; a VALID correlation on the padded log map gives the
    # H x W central outputs (the model's SAME correlation then crop reads the same taps).
    logx = jnp.pad(logx, ((0, 0), (pad, pad), (pad, pad), (0, 0)), constant_values=np.log(epsilon))
    logm = lax.conv_general_dilated(logx, e, (1, 1), "VALID", dimension_numbers=DIMENSION_NUMBERS)
    lse = jax.nn.logsumexp(logm, axis=(1, 2)).reshape(x.shape[0], -1, 2)
    return lse[..., 0] - lse[..., 1] if log else jnp.exp(lse[..., 0] - lse[..., 1])


OPS = {
    "conv": _conv,
    "dense": _dense,
    "affine": _affine,
    "relu": _relu,
    "clamp": _clamp,
    "add": _add,
    "gather": _gather,
    "max_pool": _max_pool,
    "avg_pool": _avg_pool,
    "mean": _mean,
    "scale_max": _scale_max,
    "upsample": _upsample,
    "scale_ii": _scale_ii,
    "monomial_ii": _monomial_ii,
}


def apply_op(kind: str, attrs: dict, params: dict, inputs: list):
    return OPS[kind](inputs, params, **attrs)


def run(program: tuple[OpSpec, ...], output: str, arrays: dict, images):
    """Evaluate ``program`` on ``images`` (``[B, H, W, C]``); pure in ``(arrays, images)``."""
    env = {"images": images}
    for op in program:
        params = {k: arrays[f"{op.name}/{k}"] for k in op.params}
        env[op.output] = apply_op(op.kind, op.attr_dict, params, [env[i] for i in op.inputs])
    return env[output]


# --------------------------------------------------------------------------- mutable graph


@dataclasses.dataclass
class Node:
    """A mutable op while the graph is built and fused (``params`` are float64 NumPy)."""

    kind: str
    name: str
    inputs: list[str]
    output: str
    attrs: dict = dataclasses.field(default_factory=dict)
    params: dict = dataclasses.field(default_factory=dict)


class Graph:
    """Builder of a program: ``emit`` appends a node and infers its output shape (batch 1)."""

    def __init__(self, image_shape: tuple[int, int, int]):
        self.nodes: list[Node] = []
        self.input_shape = (1,) + tuple(int(s) for s in image_shape)
        self.shapes: dict[str, tuple[int, ...]] = {"images": self.input_shape}
        self.output: str | None = None
        self._names: set[str] = {"images"}

    def unique(self, name: str) -> str:
        base, i = name, 1
        while name in self._names:
            i += 1
            name = f"{base}#{i}"
        self._names.add(name)
        return name

    def infer(self, node: Node) -> tuple[int, ...]:
        ins = [jax.ShapeDtypeStruct(self.shapes[i], jnp.float32) for i in node.inputs]
        params = {
            k: np.asarray(v, np.float32 if v.dtype.kind == "f" else v.dtype)
            for k, v in node.params.items()
        }
        out = jax.eval_shape(lambda *xs: apply_op(node.kind, node.attrs, params, list(xs)), *ins)
        return tuple(out.shape)

    def emit(self, kind: str, inputs, name: str, params=None, **attrs) -> str:
        name = self.unique(name)
        node = Node(kind, name, list(inputs), name, dict(attrs), dict(params or {}))
        self.shapes[name] = self.infer(node)
        self.nodes.append(node)
        return name

    def producer(self, tensor: str) -> Node | None:
        for node in self.nodes:
            if node.output == tensor:
                return node
        return None

    def consumers(self, tensor: str) -> list[Node]:
        return [n for n in self.nodes if tensor in n.inputs]

    def sole_consumer(self, tensor: str) -> Node | None:
        """The one node reading ``tensor`` (None if several, none, or it is the graph output)."""
        cons = self.consumers(tensor)
        if tensor == self.output or len(cons) != 1 or cons[0].inputs.count(tensor) != 1:
            return None
        return cons[0]

    def freeze(self) -> tuple[tuple[OpSpec, ...], dict[str, np.ndarray]]:
        program, arrays = [], {}
        for n in self.nodes:
            program.append(
                OpSpec(
                    n.kind,
                    n.name,
                    tuple(n.inputs),
                    n.output,
                    tuple(sorted((k, _hashable(v)) for k, v in n.attrs.items())),
                    tuple(sorted(n.params)),
                )
            )
            for k, v in n.params.items():
                v = np.asarray(v)
                arrays[f"{n.name}/{k}"] = v.astype(np.float32) if v.dtype.kind == "f" else v
        return tuple(program), arrays


def program_to_json(program, output: str, input_shape) -> str:
    return json.dumps(
        {
            "format": "invjax.export/1",
            "input_shape": list(input_shape),
            "output": output,
            "ops": [op.to_json() for op in program],
        }
    )


def program_from_json(text: str):
    d = json.loads(text)
    if d.get("format") != "invjax.export/1":
        raise ValueError(
            f"exported program format {d.get('format')!r} is unknown: expected 'invjax.export/1'"
        )
    return (
        tuple(OpSpec.from_json(o) for o in d["ops"]),
        d["output"],
        tuple(d["input_shape"]),
    )
