"""Fused inference: a trained invjax network as plain convolutions and dense layers.

    exported = export(model, variables, image_shape=(32, 32, 3))
    logits = exported(images)                       # jitted; images [B, 32, 32, 3]
    exported.save("net.npz"); exported = load("net.npz")
    logits = jax.jit(exported.apply)(exported.arrays, images)   # pure in (arrays, images)

:func:`export` takes any model of :mod:`invjax.models` (``WideResNet`` of every family and head,
``ScaledMNISTNet`` of every head, ``MultiStreamNetwork`` with every combination head, the tiny
``SimpleCNN``) and its variables, and returns an :class:`ExportedModel`: a static program of plain
ops (:mod:`invjax.export.graph`) and a flat dict of float32 arrays. The export is for one image
size (stride-2 box folding depends on the parity of each map, the II weight maps on its size);
the batch size is free. Eval mode: BatchNorm uses its running statistics, dropout is off.

What is folded (all exact algebra; the tests hold the logits to 1e-5 relative)
  * Steerable bases: every E(2) (lift, regular, trivial) and scale (lift, scale conv) filter is
    expanded once into a dense HWIO kernel; the 1x1 scale shortcut becomes a grouped 1x1 conv.
  * The stride-2 rule of :func:`invjax.ops.conv.conv2d` on even grids: the 2x2 box is folded into
    the ``(k+1) x (k+1)`` kernel once, instead of at every call.
  * Restrictions (D8 -> D4 -> D1): the static channel permutation moves past the next
    BatchNorm and ReLU and ends up in the rows of the convolutions that read it.
  * BatchNorm: folded into the convolution / dense layer that produces its input (``conv -> BN``;
    also into both addends of a residual sum of two convolutions), else into the convolution /
    dense layer that reads its output (``BN -> conv``: the shift becomes a bias, a ``[H', W',
    O]`` map where zero padding makes it position dependent). A pre-activation BatchNorm whose
    input also feeds an identity shortcut is followed by a ReLU and cannot go anywhere: it stays
    a per-channel ``affine`` op.
  * E(2)-II, rotation-II and translation-II WS: the closed form ``A = sum_y x(y) M(y)`` with the
    weight map ``M`` of the group-symmetrised kernel (:func:`invjax.ops.ii.ws_weight_map`), i.e.
    a dense layer on the flattened map, composed with the classifier into one ``[H W C, classes]``
    matrix. Average pooling stays a mean followed by the (composed) dense layer.
  * Multi-stream head: ``W_j``, the normalised weights ``w_j / sum_k w_k`` and the classifier are
    one matrix ``A_j = W_j diag(w_j / sum_k w_k) W_cls`` per stream (``concat``: the rows of
    ``W_cls``), composed with the stream's last linear map (its II weight map, its Scale-II
    numerator and BatchNorm, or the dense after the mean): ``logits = sum_j A_j(x_j) + b``.
  * Scaled-MNIST: the channel-major flattening is a permutation of the first dense layer's rows;
    pruned monomial pairs are dropped (their exponents and their rows).

What stays explicit (not linear, or cheaper unfolded)
  ReLU; max / average pooling between layers and in the pooling heads; the scale max projection;
  the nearest / bicubic x2 upsampling of the Scaled-MNIST networks; Scale-II WS's
  ``max(x, epsilon)`` clamp and its division by the mean of the clamped map (op ``scale_ii``: the
  numerator, the BatchNorm after it and, where that is not more work, the next dense layer are
  one matrix); Scale-II monomials (op ``monomial_ii``: log, a correlation with a dense exponent
  kernel, log-sum-exp, exp); non-foldable BatchNorms as ``affine``; a dense layer is not composed
  into the previous one when that would cost more multiplications (Scale-II's 95 features into
  the 256-wide hidden layer).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from invjax.export import emit, passes
from invjax.export.graph import Graph, OpSpec, program_from_json, program_to_json, run

__all__ = ["ExportedModel", "export", "load"]


@functools.lru_cache(maxsize=32)
def _jitted(program: tuple[OpSpec, ...], output: str):
    return jax.jit(functools.partial(run, program, output))


class ExportedModel:
    """A fused network: ``program`` (static ops) and ``arrays`` (its parameters, a flat dict).

    ``model(images) -> logits`` runs the jitted program; :meth:`apply` is the same pure function
    of ``(arrays, images)`` for callers that jit, shard or differentiate it themselves.
    """

    def __init__(self, program, arrays: dict, output: str, input_shape: Sequence[int]):
        self.program = tuple(program)
        self.arrays = {k: np.asarray(v) for k, v in arrays.items()}
        self.output = output
        self.input_shape = tuple(int(s) for s in input_shape)

    def apply(self, arrays, images):
        """Logits ``[B, classes]`` of ``images [B, H, W, C]``: pure, traceable, jit-able."""
        return run(self.program, self.output, arrays, images)

    def __call__(self, images):
        images = jnp.asarray(images, jnp.float32)
        if images.ndim != 4 or tuple(images.shape[1:]) != self.input_shape:
            raise ValueError(
                f"images of shape {tuple(images.shape)} do not fit this export: expected "
                f"[B, {', '.join(map(str, self.input_shape))}] (export again for another size)"
            )
        return _jitted(self.program, self.output)(self.arrays, images)

    @property
    def num_params(self) -> int:
        return int(sum(a.size for a in self.arrays.values()))

    def op_counts(self) -> dict:
        counts: dict[str, int] = {}
        for op in self.program:
            counts[op.kind] = counts.get(op.kind, 0) + 1
        return counts

    def summary(self) -> str:
        """One line per op: kind, name, parameter shapes."""
        lines = []
        for op in self.program:
            shapes = ", ".join(f"{p}{list(self.arrays[f'{op.name}/{p}'].shape)}" for p in op.params)
            lines.append(f"{op.kind:<12} {op.name:<40} {shapes}")
        return "\n".join(lines)

    def save(self, path) -> None:
        """Write ``path`` (``.npz``): the arrays plus the program as JSON (no pickle)."""
        np.savez(
            path,
            __program__=np.asarray(program_to_json(self.program, self.output, self.input_shape)),
            **{f"arrays/{k}": v for k, v in self.arrays.items()},
        )

    @classmethod
    def load(cls, path) -> ExportedModel:
        with np.load(path, allow_pickle=False) as f:
            if "__program__" not in f.files:
                raise ValueError(f"{path} is not an invjax export: it has no '__program__' entry")
            program, output, input_shape = program_from_json(str(f["__program__"]))
            arrays = {k[len("arrays/") :]: f[k] for k in f.files if k.startswith("arrays/")}
        missing = [
            f"{op.name}/{p}" for op in program for p in op.params if f"{op.name}/{p}" not in arrays
        ]
        if missing:
            raise ValueError(f"{path}: arrays {missing[:3]} of the program are missing")
        return cls(program, arrays, output, input_shape)


def load(path) -> ExportedModel:
    """:meth:`ExportedModel.load`."""
    return ExportedModel.load(path)


def _check_image_shape(image_shape) -> tuple[int, int, int]:
    try:
        shape = tuple(int(s) for s in image_shape)
    except TypeError as err:
        raise ValueError(f"image_shape={image_shape!r} is invalid: give (H, W, C)") from err
    if len(shape) != 3 or min(shape) < 1 or shape != tuple(image_shape):
        raise ValueError(f"image_shape={image_shape!r} is invalid: give (H, W, C), positive ints")
    return shape


def export(model, variables, image_shape: Sequence[int], *, fuse: bool = True) -> ExportedModel:
    """The eval-mode network ``model.apply(variables, x, train=False)`` as an :class:`ExportedModel`.

    Args:
      model: a :mod:`invjax.models` network (``WideResNet``, ``ScaledMNISTNet``,
        ``MultiStreamNetwork``, ``SimpleCNN``).
      variables: its variables (``params``, ``batch_stats``, ``ii_mask``).
      image_shape: ``(H, W, C)`` of the images the export will take.
      fuse: ``False`` keeps the expanded but unfused graph (every BatchNorm an ``affine``, the
        restriction a ``gather``, the head's layers separate): for tests and benchmarks.
    """
    shape = _check_image_shape(image_shape)
    emit.check_supported(model)
    x = jax.ShapeDtypeStruct((1,) + shape, jnp.float32)
    # Abstractly run the model first: a wrong image size or foreign variables fail here, with the
    # model's own message, before any export work.
    jax.eval_shape(lambda v, z: model.apply(v, z, train=False), variables, x)
    g = Graph(shape)
    g.output = emit.logits(emit.Emitter(g), model, variables)
    if fuse:
        passes.fuse(g)
    program, arrays = g.freeze()
    return ExportedModel(program, arrays, g.output, shape)
