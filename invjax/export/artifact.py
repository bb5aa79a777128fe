"""A finished run as a self-describing directory: the program and the contract it keeps.

    python -m invjax.export --workdir=RUN --out=DIR
    model = invjax.export.load("DIR")      # an ExportedRun
    logits = model(images)                  # images as the run's dataset stores them

``DIR/model.npz``
    The network (:func:`invjax.export.export`, its layers in their inference forms; a multi-stream
    run is the one fused network) with the run's normalisation inside the program: it takes the
    images as ``invjax.data.load(config.data)`` holds them (``uint8`` 0..255 for the TFDS
    datasets and image folders, ``float32`` 0..1 for the digits) and computes
    ``(x / 255 - mean) / std`` (``uint8``) or ``(x - mean) / std`` itself, ``mean`` and ``std``
    the training split's, as the trainer's :func:`invjax.data.to_float`. Traced under
    :data:`invjax.precision.EXACT` (float32 products on every backend).
``DIR/manifest.json``
    What the program needs and guarantees (:data:`FORMAT`): ``input`` (shape ``[B, H, W, C]``
    with a free batch, dtype, value range, the normalisation it applies), ``output`` (logits and
    the class names of label 0, 1, ...), ``source`` (the run's directory, config file and
    overrides, the checkpoint step and how the model was chosen: best validation epoch or last),
    ``precision`` and ``platforms``, ``test_error`` (the run's, and the exported program's own on
    the same raw test split, measured at export), and ``invariance`` (the exact group elements
    of the architecture, :func:`invjax.equivariance.exact_elements`, and the measured maximal
    relative change of the exported logits under each on the first test images).

:class:`ExportedRun` (``invjax.export.load(DIR)``) checks every input against the manifest
(dtype, shape, value range: one ValueError naming what it takes) before running the program.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil

import jax
import numpy as np

from invjax import certificate, equivariance
from invjax import precision as P
from invjax.export import ExportedModel, export

FORMAT = "invjax-export-dir/1"
PROGRAM_FILE = "model.npz"
MANIFEST_FILE = "manifest.json"
#: Test images a time through the program while measuring its test error.
CHUNK = 256


# --------------------------------------------------------------------------- the contract


class ExportedRun:
    """An exported run: ``model(images) -> logits [B, classes]`` for images inside the contract
    of ``manifest['input']``; ``class_names``; ``manifest`` (the whole JSON); ``program`` (the
    :class:`~invjax.export.ExportedModel`, for ``apply`` / ``mlir``)."""

    def __init__(self, path: str, manifest: dict, program: ExportedModel):
        self.path = str(path)
        self.manifest = manifest
        self.program = program
        spec = manifest["input"]
        self.input_shape = tuple(int(v) for v in spec["shape"][1:])
        self.input_dtype = np.dtype(spec["dtype"])
        self.value_range = tuple(float(v) for v in spec["range"])
        self.class_names = tuple(manifest["output"]["classes"])

    def contract(self) -> str:
        h, w, c = self.input_shape
        lo, hi = (f"{v:g}" for v in self.value_range)
        return f"{self.input_dtype} [B, {h}, {w}, {c}] with values in [{lo}, {hi}]"

    def check(self, images) -> np.ndarray:
        """``images`` as an array if they keep the contract, else one ValueError naming it."""
        x = np.asarray(images)
        problem = None
        if x.dtype != self.input_dtype:
            problem = f"dtype {x.dtype}"
            if x.dtype.kind in "fiu":
                problem += f" (convert with images.astype(np.{self.input_dtype}))"
        elif x.ndim != 4 or tuple(x.shape[1:]) != self.input_shape or len(x) == 0:
            problem = f"shape {tuple(x.shape)}"
        elif x.dtype.kind == "f":
            finite = np.isfinite(x)
            lo, hi = self.value_range
            if not finite.all():
                problem = f"{int((~finite).sum())} NaN/Inf values"
            elif float(x.min()) < lo or float(x.max()) > hi:
                problem = f"values in [{float(x.min()):.4g}, {float(x.max()):.4g}]"
        if problem is not None:
            raise ValueError(
                f"images do not fit the export {self.path}: it takes {self.contract()} (as "
                f"dataset {self.manifest['source']['dataset']!r} stores them), got {problem}"
            )
        return x

    def __call__(self, images):
        return self.program(self.check(images))

    @classmethod
    def load(cls, path) -> ExportedRun:
        where = os.path.join(path, MANIFEST_FILE)
        if not os.path.isfile(where):
            raise ValueError(
                f"{path} is not an invjax export: it has no {MANIFEST_FILE} (write one with "
                "python -m invjax.export --workdir=RUN --out=DIR)"
            )
        try:
            with open(where) as f:
                manifest = json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError(f"{where} is not readable JSON ({e})") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            got = manifest.get("format") if isinstance(manifest, dict) else None
            raise ValueError(f"{where}: format {got!r} is not {FORMAT!r}")
        program = ExportedModel.load(os.path.join(path, manifest["program"]))
        spec = manifest["input"]
        if list(program.input_shape) != spec["shape"][1:] or program.input_dtype != spec["dtype"]:
            raise ValueError(
                f"{path}: the program takes {program.input_dtype} {list(program.input_shape)}, "
                f"the manifest says {spec['dtype']} {spec['shape'][1:]}: the export is damaged"
            )
        return cls(path, manifest, program)


# --------------------------------------------------------------------------- exporting a run


def _tuples(tree):
    """JSON lists back to the tuples the configs hold (groups, scales, ...)."""
    if isinstance(tree, dict):
        return {k: _tuples(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return tuple(_tuples(v) for v in tree)
    return tree


def read_run(workdir: str):
    """``(config, results, restored checkpoint)`` of a finished run; one ValueError otherwise."""
    import ml_collections

    from invjax import checkpoint
    from invjax import workdir as workdir_lib
    from invjax.training import plan

    if not os.path.isdir(workdir):
        raise ValueError(f"--workdir={workdir}: no such directory")
    workdir_lib.refuse_seeds_folder(workdir)  # K models: one of its seed_<k>/ is a run
    stored = checkpoint.read_config(workdir)
    if stored is None:
        raise ValueError(
            f"--workdir={workdir} holds no readable checkpoint: give the directory of a run of "
            "python -m invjax.main"
        )
    config = ml_collections.ConfigDict(_tuples(stored))
    results = plan.finished_results(config, workdir)
    if results is None:
        raise ValueError(
            f"--workdir={workdir} is not a finished run (its results.json does not record all "
            f"{config.train.num_epochs} epochs at its newest checkpoint): run the same "
            "python -m invjax.main command to finish it, then export"
        )
    restored = checkpoint.restore_latest(workdir)
    if restored.step != results["steps"]:
        raise ValueError(
            f"--workdir={workdir}: the newest readable checkpoint is step {restored.step}, but the "
            f"run finished at step {results['steps']}: its final checkpoint is unreadable"
        )
    return config, results, restored


def _raw_transform(images: np.ndarray, group, g: int) -> np.ndarray:
    """``L_g`` of raw images, kept in their dtype: exact for the grid-exact elements (rotations
    by multiples of 90 degrees and flips permute pixels)."""
    from invjax import groups as G

    y = np.asarray(G.transform(jax.numpy.asarray(images, np.float32), group, g))
    return y.astype(images.dtype)


def _test_error(program: ExportedModel, split) -> tuple[float, int]:
    errors = 0
    for start in range(0, len(split), CHUNK):
        logits = np.asarray(program(split.images[start : start + CHUNK]))
        errors += int((logits.argmax(-1) != split.labels[start : start + CHUNK]).sum())
    return 100.0 * errors / len(split), errors


def _invariance(program: ExportedModel, model, images: np.ndarray) -> dict:
    elements = equivariance.exact_elements(model, images.shape)
    out = {
        "exact_elements": [e.label for e in elements],
        "bound": certificate.BOUND,
        "n_images": int(len(images)),
    }
    if not elements:
        out["note"] = certificate.NO_EXACT_ELEMENTS
        return out
    y = np.asarray(program(images))
    errors = {
        e.label: equivariance.relative_error(
            program(_raw_transform(images, e.group, e.index)), y, per_sample=True
        )
        for e in elements
    }
    out.update(max_relative_error=errors, holds=bool(max(errors.values()) < certificate.BOUND))
    return out


def export_run(workdir: str, out: str, platforms=None) -> dict:
    """Export the finished run ``workdir`` to the new directory ``out``; returns the manifest.

    The reported model (best-validation copy where the run selects one, else the last) of the
    run's final checkpoint; everything checked before ``out`` is written, which appears whole
    (written beside it, then renamed) or not at all.
    """
    from invjax import data as data_lib
    from invjax import invariance, models
    from invjax.training.state import reported_variables

    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise ValueError(f"--out={out} exists and is not an empty directory: give a new one")
    config, results, restored = read_run(workdir)
    variables, chosen = reported_variables(restored.state, restored.meta)
    ds = data_lib.load(config.data)
    model = models.build(config.model)
    invariance.check_variables(model, ds.image_shape, variables, workdir, config.model)
    dtype = ds.test.images.dtype
    if dtype not in (np.uint8, np.float32):
        raise ValueError(
            f"dataset {ds.name!r} stores {dtype} images: export takes uint8 or float32"
        )
    value_range = [0, 255] if dtype == np.uint8 else [0.0, 1.0]
    program = export(
        model,
        jax.device_get(variables),
        ds.image_shape,
        precision=P.EXACT,
        platforms=platforms,
        input_dtype=str(dtype),
        normalise=(ds.mean, ds.std),
    )
    test_error, _ = _test_error(program, ds.test)
    h, w, c = ds.image_shape
    mean, std = ds.mean.tolist(), ds.std.tolist()
    manifest = {
        "format": FORMAT,
        "program": PROGRAM_FILE,
        "input": {
            "shape": ["B", h, w, c],
            "layout": "NHWC, any batch size B",
            "dtype": str(dtype),
            "range": value_range,
            "as_stored_by": f"invjax.data.load(config.data) of dataset {ds.name!r}",
            "normalisation": {
                "mean": mean,
                "std": std,
                "applied": "inside the program: "
                + ("(x / 255 - mean) / std" if dtype == np.uint8 else "(x - mean) / std"),
            },
        },
        "output": {"logits": ["B", ds.num_classes], "classes": list(ds.class_names)},
        "source": {
            "workdir": os.path.abspath(workdir),
            "config_file": results.get("config_file"),
            "overrides": results.get("overrides"),
            "dataset": ds.name,
            "data": json.loads(config.data.to_json_best_effort()),
            "model": str(config.model.name),
            "seed": config.seed,
            "step": restored.step,
            **chosen,
        },
        "precision": {
            "name": P.EXACT,
            "meaning": "float32 products on every backend (precision HIGHEST in the program)",
        },
        "platforms": list(program.program.platforms),
        "params": program.num_params,
        "test_error": {
            "run": results["test_error"],
            "export": test_error,
            "n_test": len(ds.test),
            "identical": test_error == results["test_error"],
        },
        "invariance": _invariance(program, model, ds.test.images[: certificate.N_IMAGES]),
        "jax_version": jax.__version__,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    tmp = f"{os.path.abspath(out).rstrip(os.sep)}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        program.save(os.path.join(tmp, PROGRAM_FILE))
        with open(os.path.join(tmp, MANIFEST_FILE), "w") as f:
            json.dump(manifest, f, indent=2)
            f.write("\n")
        if os.path.isdir(out):
            os.rmdir(out)  # empty (checked above)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return manifest
