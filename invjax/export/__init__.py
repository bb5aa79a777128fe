"""Export: a trained invjax network as serialised StableHLO plus a flat dict of arrays.

    exported = export(model, variables, image_shape=(32, 32, 3))
    logits = exported(images)                       # images [B, 32, 32, 3], any batch size B
    exported.save("net.npz"); exported = load("net.npz")
    logits = jax.jit(exported.apply)(exported.arrays, images)   # pure in (arrays, images)

A finished *run* (its reported model, the normalisation inside the program, raw images in, and
a manifest of the contract and the measured guarantees): ``python -m invjax.export
--workdir=RUN --out=DIR``, then ``load(DIR)`` (:mod:`invjax.export.artifact`, docs/export.md).

How (one source of truth: the network's own ``__call__``)
  Each layer owns its inference form next to its training form: ``inference_arrays(x)``
  computes, from the layer's variables and the shape of its input ``x``, the arrays that eval
  mode needs, and ``inference_call(arrays, x, ...)`` computes the layer from them. E(2) and scale
  convolutions: the kernel expanded from the basis coefficients once, with the stride-2 box of
  :func:`invjax.ops.conv.conv2d` folded in where the grid is even; BatchNorms (E(2), scale, Flax's
  ``nn.BatchNorm``, whose form lives here as Flax owns the class): one per-channel affine map;
  WS II layers: the weight map ``M`` of eq. (4, 5, 7), a dense layer on the flattened map;
  monomial II: only the exponent columns of the unpruned pairs; the multi-stream head: one
  matrix ``W_j diag(w_j / sum_k w_k)`` per stream. Layers without parameters (ReLU, pooling,
  :class:`~invjax.layers.e2.Restrict`'s static gather, the scale max projection, upsampling) and
  plain ``nn.Dense`` / ``nn.Conv`` are already in their inference form.

  :func:`export` runs ``model.apply(variables, x, train=False)`` twice under
  ``flax.linen.intercept_methods``: first eagerly on one image, where every layer with an
  inference form computes its arrays (collected by module path) and continues in that form;
  then traced with those arrays as inputs, every such layer reading its own, all other
  variables (``nn.Dense``, ...) passed as they are. The traced function is exported with
  ``jax.export`` (symbolic batch size) under :data:`invjax.precision.EXACT` (unless told
  otherwise), so every convolution and matrix product carries ``precision = HIGHEST`` in the
  serialised module: true float32 products on every backend (TF32 is not allowed to creep in
  on GPUs), the arithmetic under which the tests hold exported and model logits to 1e-5.
  Nothing here knows a network: a change to a network needs no change to export.

  The export is for one image size (box folding depends on the parity of each map, the II
  weight maps on its size); the batch size is free.

Integrity: :meth:`ExportedModel.save` writes, in the ``__meta__`` header, the SHA-256 of the
serialised program, of the arrays (:func:`arrays_sha256`: every array's name, dtype, shape and
bytes, in name order) and of the header itself without that field (:func:`canonical_json`).
:func:`load` verifies all three before it deserialises anything; every way a file fails (not an
export, written by an earlier invjax without checksums, truncated, a flipped bit, an edited
header, zeroed arrays, a replaced program) is one :class:`ExportError` naming the path and what
is wrong. The checksums find damage and edits; they are not a signature (whoever can rewrite the
file can rewrite its checksums).

Running an export without invjax (only ``jax`` and ``numpy``)::

    import jax, numpy as np
    with np.load("net.npz") as f:
        program = jax.export.deserialize(bytearray(f["__stablehlo__"].tobytes()))
        arrays = {k[2:]: f[k] for k in f.files if k.startswith("a/")}
    logits = program.call(arrays, images)           # images float32 [B, H, W, C]
"""

from __future__ import annotations

import collections
import functools
import hashlib
import json
import os
import re
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from invjax import precision as P
from invjax.contract import Exportable, Typed
from invjax.fields import Field

__all__ = ["FORMAT", "ExportError", "ExportedModel", "export", "load"]

FORMAT = "invjax-export/3"
#: Formats of earlier invjax versions (no checksums): refused, with the advice to export again.
OLD_FORMATS = ("invjax-export/1", "invjax-export/2")
PLATFORMS = None  # None: the default backend (jax.export's default); ("cpu", "cuda"): both
_PROGRAM, _META, _ARRAY = "__stablehlo__", "__meta__", "a/"
_LAYER = "inference"  # flat keys: 'inference/<module path>/<name>' | '<collection>/<path>/<name>'


class ExportError(ValueError):
    """An export that cannot be used: not an export, one written by an earlier invjax without
    checksums, or a damaged or edited one. The message names the path and what is wrong."""


# --------------------------------------------------------------------------- checksums


def canonical_json(obj) -> bytes:
    """The one byte string of a JSON value that its checksum is taken of: keys sorted, no
    spaces, ASCII, and no NaN or infinity (which JSON does not have)."""
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode("ascii")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def arrays_sha256(arrays: dict) -> str:
    """SHA-256 of a flat ``{name: array}`` dict: for each name in sorted order, the canonical JSON
    of ``[name, dtype, shape]`` (dtype as NumPy's ``dtype.str``, e.g. ``'<f4'``), then the array's
    bytes in C order. A zeroed, reshaped, retyped, renamed or missing array changes it."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(canonical_json([name, a.dtype.str, list(a.shape)]))
        h.update(a.tobytes())
    return h.hexdigest()


def is_sha256(value) -> bool:
    return isinstance(value, str) and len(value) == 64 and set(value) <= set("0123456789abcdef")


def _no_constant(name):
    raise ValueError(f"{name} is not a JSON number")


def parse_json(text: str):
    """``json.loads`` that refuses ``NaN``, ``Infinity`` and ``-Infinity`` (Python's json takes
    them; JSON has no such numbers and no export writes them)."""
    return json.loads(text, parse_constant=_no_constant)


def short_error(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:200]}" if text else type(e).__name__


#: The advice after a failed check of an export file.
_AGAIN = (
    "it cannot be trusted: export the network again (python -m invjax.export --workdir=RUN "
    "--out=NEW_DIR, or ExportedModel.save)"
)


# --------------------------------------------------------------------------- Flax's own layers


def _flax_batch_norm_arrays(module: nn.BatchNorm, x):
    """Eval-mode ``nn.BatchNorm`` (features on the last axis) as ``x * a + s`` per channel:
    ``a = scale / sqrt(var + eps)``, ``s = bias - mean * a``. None where that does not apply."""
    if module.axis != -1 or module.axis_name is not None or x.ndim < 2:
        return None
    var = module.get_variable("batch_stats", "var")
    a = jax.lax.rsqrt(var + module.epsilon)
    if module.use_scale:
        a = a * module.get_variable("params", "scale")
    s = -module.get_variable("batch_stats", "mean") * a
    if module.use_bias:
        s = s + module.get_variable("params", "bias")
    return {"scale": a, "shift": s}


def _flax_batch_norm_call(module, arrays, x, *args, **kwargs):
    return x * arrays["scale"] + arrays["shift"]


def _form(module: nn.Module):
    """``(arrays(x, *args), call(arrays, x, *args, **kwargs))`` of ``module``'s inference form,
    or None (the training form is the inference form). ``arrays`` may also answer None.

    A contract layer (:class:`invjax.contract.Exportable`) sees the array alone: ``x`` unwrapped
    from a :class:`~invjax.fields.Field` (its output wrapped back in the type the layer maps it
    to), eval-mode arguments such as ``train=False`` dropped."""
    if isinstance(module, Exportable):

        def arrays(x, *args, **kwargs):
            return module.inference_arrays(x.tensor if isinstance(x, Field) else x)

        def call(found, x, *args, **kwargs):
            if not isinstance(x, Field):
                return module.inference_call(found, x)
            out = module.out_type(x.type) if isinstance(module, Typed) else x.type
            return Field(module.inference_call(found, x.tensor), out)

        return arrays, call
    if type(module) is nn.BatchNorm:
        ra = module.use_running_average

        def arrays(x, use_running_average=None, **_):
            eval_mode = use_running_average if use_running_average is not None else ra
            return _flax_batch_norm_arrays(module, x) if eval_mode else None

        return arrays, functools.partial(_flax_batch_norm_call, module)
    return None


def _key(module: nn.Module) -> str:
    return "/".join(module.path)


# --------------------------------------------------------------------------- the two passes


def _collect(model, variables, shape) -> dict[str, dict[str, np.ndarray]]:
    """Run the model eagerly on one zero image; every layer with an inference form records its
    arrays (by module path) and continues in that form. Returns ``{path: {name: array}}``."""
    found: dict[str, dict[str, np.ndarray]] = {}

    def intercept(next_fun, args, kwargs, context):
        m = context.module
        if context.method_name != "__call__" or m.scope is None or not args:
            return next_fun(*args, **kwargs)
        form = _form(m)
        arrays = None if form is None else form[0](*args, **kwargs)
        if arrays is None:
            return next_fun(*args, **kwargs)
        key = _key(m)
        if key in found:
            raise ValueError(f"export: layer {key!r} is called more than once: not supported")
        found[key] = {n: np.asarray(a) for n, a in arrays.items()}
        return form[1](found[key], *args, **kwargs)

    model = P.configure(model, P.EXACT, strict=False)
    with P.jax_default(P.EXACT), nn.intercept_methods(intercept):
        model.apply(variables, jnp.zeros((1,) + shape, jnp.float32), train=False)
    return found


def _flat_arrays(variables, layers: dict) -> dict[str, np.ndarray]:
    """The export's inputs: every layer's inference arrays, then every variable of the model that
    no such layer holds (``nn.Dense`` kernels ...), flat ``'/'``-joined keys, float32 / int32."""
    out = {}
    for path, arrays in layers.items():
        for name, a in arrays.items():
            out["/".join((_LAYER, path, name))] = a
    owned = [tuple(p.split("/")) if p else () for p in layers]
    for path, leaf in traverse_util.flatten_dict(dict(variables)).items():
        module = path[1:-1]
        if not any(module[: len(o)] == o for o in owned):
            out["/".join(path)] = np.asarray(leaf)
    return {
        k: a.astype(np.int32 if np.issubdtype(a.dtype, np.integer) else np.float32)
        for k, a in out.items()
    }


def _forward(model, arrays: dict, images):
    """The model's own ``__call__`` (eval mode) with its layers in their inference forms."""
    layers: dict[str, dict] = collections.defaultdict(dict)
    variables: dict = {}
    for key, a in arrays.items():
        if key.startswith(_LAYER + "/"):
            path, name = key[len(_LAYER) + 1 :].rsplit("/", 1)
            layers[path][name] = a
            continue
        node = variables
        *parents, name = key.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[name] = a

    def intercept(next_fun, args, kwargs, context):
        m = context.module
        if context.method_name == "__call__" and m.scope is not None and _key(m) in layers:
            return _form(m)[1](layers[_key(m)], *args, **kwargs)
        return next_fun(*args, **kwargs)

    with nn.intercept_methods(intercept):
        return model.apply(variables, images, train=False)


# --------------------------------------------------------------------------- the artifact


class ExportedModel:
    """A serialised network: ``program`` (a ``jax.export.Exported``) and its ``arrays``.

    ``model(images) -> logits`` runs the program (jitted); :meth:`apply` is the same pure
    function of ``(arrays, images)`` for callers that jit or shard it themselves.
    """

    def __init__(
        self,
        program: jax.export.Exported,
        arrays: dict,
        input_shape: Sequence[int],
        input_dtype: str = "float32",
    ):
        self.program = program
        self.arrays = dict(arrays)
        self.input_shape = tuple(int(s) for s in input_shape)
        self.input_dtype = str(input_dtype)
        self._jitted = jax.jit(program.call)

    def apply(self, arrays, images):
        """Logits ``[B, classes]`` of ``images [B, H, W, C]``: pure, traceable, jit-able."""
        return self.program.call(arrays, images)

    def __call__(self, images):
        if self.input_dtype == "uint8":
            if np.asarray(images).dtype != np.uint8:
                raise ValueError(
                    f"images of dtype {np.asarray(images).dtype} do not fit this export: it takes "
                    "uint8 images (0..255, as the dataset stores them)"
                )
            images = jnp.asarray(images)
        else:
            images = jnp.asarray(images, jnp.float32)
        if images.ndim != 4 or tuple(images.shape[1:]) != self.input_shape:
            raise ValueError(
                f"images of shape {tuple(images.shape)} do not fit this export: expected "
                f"[B, {', '.join(map(str, self.input_shape))}] (export again for another size)"
            )
        return self._jitted(self.arrays, images)

    @property
    def num_params(self) -> int:
        """Scalars in the float arrays (the integer index arrays of pruned monomials excluded)."""
        return int(sum(a.size for a in self.arrays.values() if a.dtype.kind == "f"))

    def mlir(self) -> str:
        """The StableHLO module as text."""
        return self.program.mlir_module()

    def op_counts(self) -> dict[str, int]:
        """``{StableHLO op: occurrences in the module text}`` (``convolution``, ``dot_general``,
        ``multiply`` ..., without the ``stablehlo.`` prefix; the ops inside a reduction's body
        count too). The integer shape arithmetic of the symbolic batch size (ops whose type
        signature has no float tensor) and ``return`` are left out."""
        counts: collections.Counter = collections.Counter()
        for line in self.mlir().splitlines():
            op = re.search(r"\bstablehlo\.([a-z_]+)", line)
            if not op or op.group(1) == "return":
                continue
            code = line.split(" loc(")[0]
            # An op with a region ("reduce_window"(...) ({ ...) has its types on a later line.
            signature = code.rsplit(" : ", 1)[1] if " : " in code else ""
            if not signature or re.search(r"[x<]f(16|32|64)\b|bf16", signature):
                counts[op.group(1)] += 1
        return dict(counts)

    def summary(self) -> str:
        """One line per array (name, shape), then the op counts."""
        lines = [f"{k:<60} {list(a.shape)}" for k, a in self.arrays.items()]
        counts = sorted(self.op_counts().items(), key=lambda kv: -kv[1])
        lines.append("ops: " + ", ".join(f"{k} {n}" for k, n in counts))
        return "\n".join(lines)

    @property
    def num_outputs(self) -> int:
        """The program's logits per image (the last axis of its one output)."""
        return int(self.program.out_avals[0].shape[-1])

    def save(self, path) -> None:
        """Write ``path`` (``.npz``, no pickle): the serialised program, a JSON header with the
        checksums (module doc) and the arrays (``a/<key>``). See the package doc for loading it
        with jax alone."""
        program = bytes(self.program.serialize())
        arrays = {k: np.asarray(v) for k, v in self.arrays.items()}
        meta = {
            "format": FORMAT,
            "input_shape": list(self.input_shape),
            "input_dtype": self.input_dtype,
        }
        meta["sha256"] = {
            "program": sha256(program),
            "arrays": arrays_sha256(arrays),
            "header": sha256(canonical_json(meta)),
        }
        np.savez(
            path,
            **{_PROGRAM: np.frombuffer(program, np.uint8)},
            **{_META: np.asarray(json.dumps(meta))},
            **{_ARRAY + k: v for k, v in arrays.items()},
        )

    @classmethod
    def load(cls, path) -> ExportedModel:
        """The export in ``path``, its checksums verified (module doc); :class:`ExportError`
        naming the path and what is wrong for anything else."""
        path = os.fspath(path)
        meta, program_bytes, arrays = _read_npz(path)
        sums = meta["sha256"]
        if sha256(program_bytes) != sums["program"]:
            raise ExportError(
                f"{path}: its program differs from when it was saved (sha256): damaged or "
                f"edited; {_AGAIN}"
            )
        if arrays_sha256(arrays) != sums["arrays"]:
            raise ExportError(
                f"{path}: its arrays differ from when they were saved (sha256): damaged or "
                f"edited; {_AGAIN}"
            )
        try:
            program = jax.export.deserialize(bytearray(program_bytes))
            (want, images), _ = jax.tree_util.tree_unflatten(program.in_tree, program.in_avals)
            out = program.out_avals[0].shape
        except Exception as e:  # noqa: BLE001 (flatbuffers and jax raise many types on garbage)
            raise ExportError(
                f"{path}: its program cannot be deserialised ({short_error(e)}); {_AGAIN}"
            ) from None
        problem = _program_problem(want, images, out, arrays, meta)
        if problem is not None:
            raise ExportError(f"{path}: {problem}; {_AGAIN}")
        return cls(program, arrays, meta["input_shape"], meta["input_dtype"])


def _read_npz(path: str) -> tuple[dict, bytes, dict]:
    """``(header, program bytes, arrays)`` of an export file, its header checked (format,
    fields, its own checksum); the program and arrays are not yet verified."""
    if not os.path.isfile(path):
        raise ExportError(f"{path}: no such file (an invjax export is a .npz file)")
    try:
        with open(path, "rb") as fh:
            zipped = fh.read(2) == b"PK"
        f = np.load(path, allow_pickle=False)
    except Exception as e:  # noqa: BLE001 (text, pickle, a truncated zip, an unreadable file)
        if zipped:
            raise ExportError(
                f"{path} is damaged: NumPy cannot read it as an .npz archive "
                f"({short_error(e)}); {_AGAIN}"
            ) from None
        raise ExportError(
            f"{path} is not an invjax export (an .npz file written by invjax.export): "
            f"NumPy cannot read it as one ({type(e).__name__})"
        ) from None
    if not isinstance(f, np.lib.npyio.NpzFile):  # a single array (.npy)
        raise ExportError(
            f"{path} is not an invjax export: it holds one array, not an export's .npz entries"
        )
    with f:
        if _PROGRAM not in f.files or _META not in f.files:
            raise ExportError(
                f"{path} is not an invjax export: it has no '{_PROGRAM}' / '{_META}' entry"
            )
        try:
            meta = parse_json(str(f[_META]))
            program_bytes = f[_PROGRAM].tobytes()
            arrays = {k[len(_ARRAY) :]: f[k] for k in f.files if k.startswith(_ARRAY)}
        except Exception as e:  # noqa: BLE001 (zlib, zipfile, struct, NumPy's format errors)
            raise ExportError(
                f"{path} is damaged: an entry cannot be read ({short_error(e)}); {_AGAIN}"
            ) from None
    problem = _header_problem(meta)
    if problem is not None:
        raise ExportError(f"{path}: {problem}")
    return meta, program_bytes, arrays


def _header_problem(meta) -> str | None:
    """What is wrong with an export file's header, or None."""
    if not isinstance(meta, dict):
        return f"its header is a JSON {type(meta).__name__}, not an object: not an invjax export"
    fmt = meta.get("format")
    if fmt in OLD_FORMATS:
        return (
            f"format {fmt!r} was written by an earlier invjax and carries no checksums, so it "
            "cannot be verified: export the network again"
        )
    if fmt != FORMAT:
        return f"format {fmt!r} is not {FORMAT!r}"
    sums = meta.get("sha256")
    if not isinstance(sums, dict) or not all(
        is_sha256(sums.get(k)) for k in ("program", "arrays", "header")
    ):
        return "its header has no valid 'sha256' checksums (program, arrays, header): damaged"
    body = {k: v for k, v in meta.items() if k != "sha256"}
    if sha256(canonical_json(body)) != sums["header"]:
        return "its header differs from when it was saved (sha256): damaged or edited"
    shape = meta.get("input_shape")
    if (
        not isinstance(shape, list)
        or len(shape) != 3
        or not all(type(v) is int and v >= 1 for v in shape)
    ):
        return f"its header's input_shape {shape!r} is not [H, W, C] of positive ints"
    if meta.get("input_dtype") not in INPUT_DTYPES:
        return f"its header's input_dtype {meta.get('input_dtype')!r} is not one of {INPUT_DTYPES}"
    return None


def _program_problem(want, images, out, arrays: dict, meta: dict) -> str | None:
    """Whether the deserialised program takes these arrays and the header's images."""
    if not isinstance(want, dict) or set(want) != set(arrays):
        missing = sorted(set(want) - set(arrays))[:3] if isinstance(want, dict) else []
        extra = sorted(set(arrays) - set(want))[:3] if isinstance(want, dict) else []
        return f"the program's arrays and the file's differ (missing {missing}, extra {extra})"
    for k, aval in want.items():
        if tuple(aval.shape) != arrays[k].shape or np.dtype(aval.dtype) != arrays[k].dtype:
            return (
                f"array {k!r} is {arrays[k].dtype} {list(arrays[k].shape)}, the program takes "
                f"{np.dtype(aval.dtype)} {list(aval.shape)}"
            )
    shape, dtype = list(images.shape[1:]), str(np.dtype(images.dtype))
    if shape != meta["input_shape"] or dtype != meta["input_dtype"]:
        return (
            f"the program takes {dtype} images {shape}, the header says "
            f"{meta['input_dtype']} {meta['input_shape']}"
        )
    if len(out) != 2 or not isinstance(out[-1], int) or out[-1] < 1:
        return f"the program's output {out} is not logits [B, K]"
    return None


def load(path):
    """An export: a directory written by ``python -m invjax.export`` (an
    :class:`~invjax.export.artifact.ExportedRun`, raw images in, checked against its manifest)
    or an ``.npz`` file written by :meth:`ExportedModel.save` (:meth:`ExportedModel.load`),
    its checksums verified. :class:`ExportError` (a ValueError) naming the path and what is
    wrong for anything else: not an export, an earlier format without checksums, damaged or
    edited."""
    if os.path.isdir(path):
        from invjax.export import artifact

        return artifact.ExportedRun.load(path)
    return ExportedModel.load(path)


def _check_image_shape(image_shape) -> tuple[int, int, int]:
    try:
        shape = tuple(int(s) for s in image_shape)
    except TypeError as err:
        raise ValueError(f"image_shape={image_shape!r} is invalid: give (H, W, C)") from err
    if len(shape) != 3 or min(shape) < 1 or shape != tuple(image_shape):
        raise ValueError(f"image_shape={image_shape!r} is invalid: give (H, W, C), positive ints")
    return shape


INPUT_DTYPES = ("float32", "uint8")


def _normalised_forward(model, mean, std, arrays: dict, images):
    """``_forward`` on ``(to_unit(images) - mean) / std``: the trainer's
    :func:`invjax.data.to_float` inside the program (uint8 / 255, float as it is)."""
    x = images.astype(jnp.float32)
    if images.dtype == jnp.uint8:
        x = x / 255.0
    x = (x - jnp.asarray(mean, jnp.float32)) / jnp.asarray(std, jnp.float32)
    return _forward(model, arrays, x)


def export(
    model,
    variables,
    image_shape: Sequence[int],
    *,
    precision: str = P.EXACT,
    platforms=PLATFORMS,
    input_dtype: str = "float32",
    normalise=None,
) -> ExportedModel:
    """The eval-mode network ``model.apply(variables, x, train=False)`` as an :class:`ExportedModel`.

    Args:
      model: a Flax module whose ``__call__`` takes ``(images, train=False)`` (every network of
        :mod:`invjax.models`).
      variables: its variables (``params``, ``batch_stats``, ``ii_mask``).
      image_shape: ``(H, W, C)`` of the images the export will take.
      precision: the :mod:`invjax.precision` the program is traced (and serialised) in.
      platforms: the backends the serialised program is lowered for (None: the default one).
      input_dtype: the dtype of the images the program takes: ``'float32'`` or ``'uint8'``.
      normalise: None (the program takes the network's input as it is), or ``(mean, std)``
        (``[C]`` each, [0, 1] units): the program takes images as the dataset stores them
        (uint8 0..255 or float 0..1) and applies ``(x / 255 - mean) / std`` (uint8) or
        ``(x - mean) / std`` (float) itself, as :func:`invjax.data.to_float` does in training.
    """
    shape = _check_image_shape(image_shape)
    if input_dtype not in INPUT_DTYPES:
        raise ValueError(f"export: input_dtype={input_dtype!r} is invalid: one of {INPUT_DTYPES}")
    if input_dtype == "uint8" and normalise is None:
        raise ValueError("export: input_dtype='uint8' needs normalise=(mean, std)")
    if normalise is not None:
        mean, std = (np.asarray(a, np.float32).reshape(-1) for a in normalise)
        if mean.shape != (shape[2],) or std.shape != (shape[2],) or not (std > 0).all():
            raise ValueError(
                f"export: normalise=(mean, std) must be {shape[2]} values each, std > 0"
            )
    P.check(precision, "export precision")
    if not isinstance(model, nn.Module):
        raise ValueError(
            f"export: model {type(model).__name__} is not supported: give a Flax module"
        )
    x = jax.ShapeDtypeStruct((1,) + shape, jnp.float32)
    # Abstractly run the model first: a wrong image size or foreign variables fail here, with the
    # model's own message, before any export work.
    try:
        jax.eval_shape(lambda v, z: model.apply(v, z, train=False), variables, x)
    except Exception as err:  # noqa: BLE001 (re-raised with what was asked)
        raise ValueError(
            f"export: {type(model).__name__}.apply(variables, images [1, {', '.join(map(str, shape))}],"
            f" train=False) is not supported: {err}"
        ) from err
    arrays = _flat_arrays(variables, _collect(model, variables, shape))
    (batch,) = jax.export.symbolic_shape("b")
    specs = {k: jax.ShapeDtypeStruct(a.shape, a.dtype) for k, a in arrays.items()}
    images = jax.ShapeDtypeStruct((batch,) + shape, jnp.dtype(input_dtype))
    # invjax's layers take the precision as an attribute; others follow JAX's closest default.
    traced = P.configure(model, precision, strict=False)
    forward = (
        functools.partial(_forward, traced)
        if normalise is None
        else functools.partial(_normalised_forward, traced, mean, std)
    )
    with P.jax_default(precision):
        program = jax.export.export(
            jax.jit(forward), platforms=None if platforms is None else tuple(platforms)
        )(specs, images)
    return ExportedModel(program, arrays, shape, input_dtype)
