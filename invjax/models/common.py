"""Building blocks shared by the networks: a plain convolution over :func:`invjax.ops.conv.conv2d`,
width rules, upsampling, and the parameter count / layer table of ``python -m invjax.summary``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from invjax import groups as G
from invjax.contract import Exportable, Precise
from invjax.initialise import init_variables  # noqa: F401  (re-exported: its earlier home)
from invjax.ops.conv import conv2d, inference_kernel
from invjax.trees import count_params  # noqa: F401  (re-exported: its home before invjax.trees)

# He-normal (fan-in) like the E(2) layers: keeps activations of order one in deep pre-act WRNs.
he_normal = nn.initializers.variance_scaling(2.0, "fan_in", "normal")


class StdConv(Exportable, Precise, nn.Module):
    """A plain ``k x k`` convolution through :func:`conv2d` (``downsample``: its stride-2 rule).

    Shapes: ``[B, H, W, C_in] -> [B, H', W', features]`` (``H' = ceil(H / stride)``).
    """

    features: int
    kernel_size: int = 3
    stride: int = 1
    use_bias: bool = False
    kernel_init: nn.initializers.Initializer = he_normal
    downsample: str = "symmetric"
    precision: str | None = None  # arithmetic of the products (invjax.precision; None: JAX's)

    @nn.compact
    def __call__(self, x):
        if x.ndim != 4:
            raise ValueError(f"StdConv: expected NHWC input [B, H, W, C], got shape {x.shape}")
        k = self.kernel_size
        kernel = self.param("kernel", self.kernel_init, (k, k, x.shape[-1], self.features))
        y = conv2d(x, kernel, self.stride, downsample=self.downsample, precision=self.precision)
        if self.use_bias:
            y = y + self.param("bias", nn.initializers.zeros, (self.features,))
        return y

    def inference_arrays(self, x):
        """``{'kernel': [k', k', C_in, features]}`` (and ``'bias'``): the stride-2 box folded in
        where :func:`conv2d` folds it on ``x`` (``k' = k + 1``), else the kernel itself."""
        kernel = self.get_variable("params", "kernel")
        out = {"kernel": inference_kernel(kernel, x.shape, self.stride, self.downsample)}
        if self.use_bias:
            out["bias"] = self.get_variable("params", "bias")
        return out

    def inference_call(self, arrays, x):
        """The layer from :meth:`inference_arrays`: one plain convolution."""
        y = conv2d(
            x, arrays["kernel"], self.stride, downsample=self.downsample, precision=self.precision
        )
        return y + arrays["bias"] if "bias" in arrays else y


def divide_width(channels: int, divisor: float) -> int:
    """Constant-parameter streams (appendix C): ``C -> ceil(C / divisor)``, ``divisor = sqrt(2)``
    for the dual and ``sqrt(3)`` for the triple network (parameters scale with ``C^2``)."""
    if not divisor >= 1.0:
        raise ValueError(f"width_divisor={divisor!r} is invalid: it must be a number >= 1")
    if divisor == 1.0:
        return int(channels)
    # The 1e-9 keeps exact quotients (e.g. 2 / sqrt(2) * sqrt(2)) from rounding up by one ulp.
    return max(1, math.ceil(channels / divisor - 1e-9))


def e2_fields(planes: int, group: G.Group) -> int:
    """e2cnn's "fixparams" width rule: ``int(planes / |G| * sqrt(|G|))`` regular fields, which keeps
    the parameter count of a layer close to that of a plain layer with ``planes`` channels."""
    order = group.order
    return max(1, int(planes / order * math.sqrt(order)))


def upsample(x, factor: int = 2, method: str = "nearest"):
    """``[B, H, W, C] -> [B, factor H, factor W, C]``.

    ``nearest`` repeats pixels (DISCO's ``nn.Upsample(scale_factor=2)``, its default mode);
    ``bicubic`` resamples with :func:`invjax.groups.resize` (Keys cubic, pixel centres aligned).
    Both commute exactly with 90-degree rotations and flips of the grid.
    """
    if method == "nearest":
        return jnp.repeat(jnp.repeat(x, factor, axis=1), factor, axis=2)
    if method in ("bicubic", "bilinear"):
        return G.resize(x, (x.shape[1] * factor, x.shape[2] * factor), method)
    raise ValueError(f"upsampling method {method!r} is unknown: choose 'nearest' or 'bicubic'")


# --------------------------------------------------------------------------- parameter table


def abstract_variables(module: nn.Module, input_shape: Sequence[int], **kwargs):
    """``ShapeDtypeStruct`` variables of ``module.init`` on a float32 input (no compute)."""
    x = jax.ShapeDtypeStruct(tuple(input_shape), jnp.float32)
    return jax.eval_shape(
        lambda xx: module.init(jax.random.PRNGKey(0), xx, train=False, **kwargs), x
    )


def layer_rows(module: nn.Module, input_shape: Sequence[int]) -> list[dict]:
    """One row per parametrised layer: ``path``, ``params`` (count), ``shapes`` and ``output``.

    ``output`` is the shape of the layer's output on ``input_shape`` (from Flax's captured
    intermediates, computed abstractly with ``jax.eval_shape``).

    Why not ``Module.tabulate`` (checked with flax 0.12.8; it is abstract too): it returns a
    rich text table with one box of several lines per module and parameter leaf (hundreds of
    lines for a WRN28-10), not rows to compute with, and lists the parameter-free modules too.
    ``clu.parameter_overview`` (no TensorFlow needed) lists parameter leaves without the
    layers' output shapes and would add a dependency for that.
    """
    x = jax.ShapeDtypeStruct(tuple(input_shape), jnp.float32)
    order: dict[tuple, int] = {}

    def record(next_fun, args, kwargs, context):
        # Module paths in call order (pytrees of dicts come back with sorted keys).
        path = tuple(context.module.path) if context.module.scope is not None else ()
        order.setdefault(path, len(order))
        return next_fun(*args, **kwargs)

    def run(xx):
        with nn.intercept_methods(record):
            return module.init_with_output(
                jax.random.PRNGKey(0), xx, train=False, capture_intermediates=True
            )

    (_, variables) = jax.eval_shape(run, x)
    params = variables.get("params", {})
    inter = variables.get("intermediates", {})
    outputs = {}
    for path, leaf in traverse_util.flatten_dict(dict(inter)).items():
        if path and path[-1] == "__call__":
            outputs[path[:-1]] = leaf
        elif len(path) >= 2 and path[-2] == "__call__":  # tuple of outputs stored as a dict
            outputs.setdefault(path[:-2], leaf)
    layers: dict[tuple, list] = {}
    for path, leaf in traverse_util.flatten_dict(dict(params)).items():
        layers.setdefault(path[:-1], []).append((path[-1], leaf.shape))
    rows = []
    for path, leaves in sorted(layers.items(), key=lambda kv: order.get(kv[0], len(order))):
        out = outputs.get(path)
        out_shape = (
            tuple(out[0].shape) if isinstance(out, tuple | list) else getattr(out, "shape", None)
        )
        rows.append(
            {
                "path": "/".join(path),
                "params": int(sum(int(np.prod(s)) for _, s in leaves)),
                "shapes": ", ".join(f"{n}{list(s)}" for n, s in leaves),
                "output": None if out_shape is None else tuple(out_shape),
            }
        )
    return rows


def format_table(rows: list[dict], title: str = "") -> str:
    width = max([len(r["path"]) for r in rows] + [5])
    lines = [title] if title else []
    lines.append(f"{'layer':<{width}}  {'params':>10}  {'output':<22}  parameter shapes")
    lines.append("-" * (width + 60))
    for r in rows:
        out = "" if r["output"] is None else str(list(r["output"]))
        lines.append(f"{r['path']:<{width}}  {r['params']:>10,}  {out:<22}  {r['shapes']}")
    lines.append("-" * (width + 60))
    lines.append(f"{'total':<{width}}  {sum(r['params'] for r in rows):>10,}")
    return "\n".join(lines)
