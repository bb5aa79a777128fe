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

    ``checksums`` holds the SHA-256 of ``model.npz`` (the file's bytes) and of the manifest
    itself without that field (:func:`invjax.export.canonical_json`), so that neither the
    program, its arrays nor the contract can change unnoticed.

``invjax.export.load(DIR)`` verifies both checksums, the manifest's schema (types; the value
range that of the dtype; finite normalisation with ``std > 0``; one class name per logit) and
the program's own checksums and shapes against the manifest before it returns an
:class:`ExportedRun`; any failure is one :class:`invjax.export.ExportError` naming the path and
what is wrong (an export of an earlier invjax, without checksums, is refused with the advice to
export again). :class:`ExportedRun` checks every input against the manifest (dtype, shape, value
range: one ValueError naming what it takes) before running the program.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import shutil
import tempfile

import jax
import numpy as np

from invjax import certificate, equivariance
from invjax import precision as P
from invjax import run as run_lib
from invjax.export import (
    INPUT_DTYPES,
    ExportedModel,
    ExportError,
    canonical_json,
    export,
    is_sha256,
    parse_json,
    sha256,
    short_error,
)

FORMAT = "invjax-export-dir/2"
#: Formats of earlier invjax versions (no checksums): refused, with the advice to export again.
OLD_FORMATS = ("invjax-export-dir/1",)
#: The value range of raw images of each dtype (as the datasets store them).
RANGES = {"uint8": [0, 255], "float32": [0.0, 1.0]}
CHECKSUMS = "checksums"
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
                problem = f"values in [{x.min()}, {x.max()}]"  # shortest exact: no rounding
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
        """The export in directory ``path``, verified (module doc); :class:`ExportError`."""
        path = os.fspath(path)
        again = _Again(path)
        where = os.path.join(path, MANIFEST_FILE)
        if not os.path.isfile(where):
            raise ExportError(
                f"{path} is not an invjax export: it has no {MANIFEST_FILE} (write one with "
                "python -m invjax.export --workdir=RUN --out=DIR)"
            )
        try:
            with open(where, encoding="utf-8") as f:
                manifest = parse_json(f.read())
        except (OSError, ValueError, RecursionError) as e:  # nested too deep: RecursionError
            raise ExportError(f"{where} is not readable JSON ({short_error(e)}); {again}") from None
        if not isinstance(manifest, dict):
            raise ExportError(f"{where} is a JSON {type(manifest).__name__}, not a manifest")
        fmt = manifest.get("format")
        if fmt in OLD_FORMATS:
            raise ExportError(
                f"{where}: format {fmt!r} was written by an earlier invjax and carries no "
                f"checksums, so the export cannot be verified: {again}"
            )
        if fmt != FORMAT:
            raise ExportError(f"{where}: format {fmt!r} is not {FORMAT!r}")
        sums = manifest.get(CHECKSUMS)
        if not isinstance(sums, dict) or not all(
            is_sha256(sums.get(k)) for k in (PROGRAM_FILE, MANIFEST_FILE)
        ):
            raise ExportError(
                f"{where} has no valid {CHECKSUMS!r} (sha256 of {PROGRAM_FILE} and of "
                f"{MANIFEST_FILE}): damaged or edited; {again}"
            )
        body = {k: v for k, v in manifest.items() if k != CHECKSUMS}
        if sha256(canonical_json(body)) != sums[MANIFEST_FILE]:
            raise ExportError(
                f"{where} differs from when it was written (sha256 of its content without "
                f"{CHECKSUMS!r}): edited or damaged; {again}"
            )
        problem = manifest_problem(manifest)
        if problem is not None:
            raise ExportError(f"{where}: {problem}; {again}")
        npz = os.path.join(path, PROGRAM_FILE)
        try:
            with open(npz, "rb") as f:
                digest = sha256(f.read())
        except OSError as e:
            raise ExportError(f"{npz} cannot be read ({short_error(e)}); {again}") from None
        if digest != sums[PROGRAM_FILE]:
            raise ExportError(
                f"{npz} differs from when it was written (sha256): damaged or edited; {again}"
            )
        program = ExportedModel.load(npz)
        spec = manifest["input"]
        if list(program.input_shape) != spec["shape"][1:] or program.input_dtype != spec["dtype"]:
            raise ExportError(
                f"{path}: the program takes {program.input_dtype} {list(program.input_shape)}, "
                f"the manifest says {spec['dtype']} {spec['shape'][1:]}: the export is damaged"
            )
        if program.num_outputs != manifest["output"]["logits"][1]:
            raise ExportError(
                f"{path}: the program gives {program.num_outputs} logits, the manifest says "
                f"{manifest['output']['logits'][1]}: the export is damaged"
            )
        return cls(path, manifest, program)


class _Again:
    """The advice to export again, naming the run the manifest names (read only when a message
    is formatted: a hint, the manifest may be anything)."""

    def __init__(self, path: str):
        self.path = path

    def __str__(self) -> str:
        try:
            with open(os.path.join(self.path, MANIFEST_FILE), encoding="utf-8") as f:
                workdir = json.load(f)["source"]["workdir"]
            if not isinstance(workdir, str) or not workdir or "\n" in workdir:
                workdir = "RUN"
        except Exception:  # noqa: BLE001 (only a hint)
            workdir = "RUN"
        return f"export the run again (python -m invjax.export --workdir={workdir} --out=NEW_DIR)"


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_count(v) -> bool:
    return type(v) is int and v >= 1


def manifest_problem(m: dict) -> str | None:
    """What is wrong with the fields of a manifest that loading and calling an export rely on
    (the contract), or None. The checksum already tells an edit; this tells a manifest that
    could not have been written by :func:`export_run` (and names the field)."""
    if m.get("program") != PROGRAM_FILE:
        return f"program {m.get('program')!r} is not {PROGRAM_FILE!r}"
    spec = m.get("input")
    if not isinstance(spec, dict):
        return f"input is {type(spec).__name__}, not an object"
    shape = spec.get("shape")
    if not (
        isinstance(shape, list)
        and len(shape) == 4
        and shape[0] == "B"
        and all(_is_count(v) for v in shape[1:])
    ):
        return f"input.shape {shape!r} is not ['B', H, W, C] with positive H, W, C"
    dtype = spec.get("dtype")
    if dtype not in INPUT_DTYPES:
        return f"input.dtype {dtype!r} is not one of {INPUT_DTYPES}"
    value_range = spec.get("range")
    if not (
        isinstance(value_range, list)
        and len(value_range) == 2
        and all(_is_number(v) for v in value_range)
        and value_range[0] < value_range[1]
    ):
        return f"input.range {value_range!r} is not [lo, hi] of finite numbers with lo < hi"
    if value_range != RANGES[dtype]:
        return (
            f"input.range {value_range!r} is not {RANGES[dtype]}, the range of raw {dtype} "
            "images that the program normalises"
        )
    norm = spec.get("normalisation")
    c = shape[3]
    for key in ("mean", "std"):
        v = norm.get(key) if isinstance(norm, dict) else None
        if not (isinstance(v, list) and len(v) == c and all(_is_number(x) for x in v)):
            return f"input.normalisation.{key} {v!r} is not {c} finite numbers"
    if not all(x > 0 for x in norm["std"]):
        return f"input.normalisation.std {norm['std']!r} is not positive"
    out = m.get("output")
    logits = out.get("logits") if isinstance(out, dict) else None
    if not (isinstance(logits, list) and len(logits) == 2 and _is_count(logits[1])):
        return f"output.logits {logits!r} is not ['B', K] with K >= 1"
    classes = out.get("classes")
    if not (isinstance(classes, list) and all(isinstance(x, str) for x in classes)):
        return f"output.classes {classes!r} is not a list of names"
    if len(classes) != logits[1]:
        n = len(classes)
        return f"output.classes has {n} name{'' if n == 1 else 's'} for {logits[1]} logits"
    source = m.get("source")
    if not (isinstance(source, dict) and isinstance(source.get("dataset"), str)):
        return "source.dataset is not a name"
    return None


# --------------------------------------------------------------------------- exporting a run


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


def check_destination(out: str) -> None:
    """``--out`` must be a new (or empty, not mounted) directory that can be created where it
    is: ValueError naming the problem otherwise, before anything is read or computed. The
    parent is tried with a probe directory made and removed at once (permission bits do not
    stop root; a read-only mount or ``/proc`` does)."""
    if not out or not out.strip():
        raise ValueError("--out is empty: give a new directory for the export")
    if "\0" in out:
        raise ValueError(f"--out={out!r} is not a valid path (it holds a NUL character)")
    target = os.path.abspath(out)
    parent = os.path.dirname(target.rstrip(os.sep)) or os.sep
    try:
        if os.path.exists(target):
            if not os.path.isdir(target) or os.listdir(target):
                raise ValueError(
                    f"--out={out} exists and is not an empty directory: give a new one"
                )
            if os.path.ismount(target):
                raise ValueError(
                    f"--out={out} is a mount point (its file system is in use there): give a new "
                    "directory inside it"
                )
        while not os.path.exists(parent):
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            raise ValueError(f"--out={out} is under {parent}, which is a file, not a directory")
        os.rmdir(tempfile.mkdtemp(prefix=".invjax-export-probe-", dir=parent))
    except OSError as e:
        raise ValueError(
            f"--out={out} cannot be created: {parent} does not let this process create a "
            f"directory there ({e.strerror or short_error(e)}); give another --out"
        ) from None


def export_run(workdir: str, out: str, platforms=None) -> dict:
    """Export the finished run ``workdir`` to the new directory ``out``; returns the manifest.

    The reported model (best-validation copy where the run selects one, else the last) of the
    run's final checkpoint, verified (:mod:`invjax.run`); everything checked before ``out`` is
    written, which appears whole (written beside it, then renamed) or not at all.
    """
    from invjax import data as data_lib
    from invjax import models

    check_destination(out)
    finished = run_lib.read_finished(workdir)
    chosen = finished.reported()
    config = finished.config
    ds = data_lib.load(config.data)
    model = models.build(config.model)
    run_lib.check_variables(model, ds.image_shape, chosen.variables, workdir, config.model)
    dtype = ds.test.images.dtype
    if dtype not in (np.uint8, np.float32):
        raise ValueError(
            f"dataset {ds.name!r} stores {dtype} images: export takes uint8 or float32"
        )
    program = export(
        model,
        jax.device_get(chosen.variables),
        ds.image_shape,
        precision=P.EXACT,
        platforms=platforms,
        input_dtype=str(dtype),
        normalise=(ds.mean, ds.std),
    )
    manifest = _manifest(finished, chosen, ds, program)
    manifest["invariance"] = _invariance(program, model, ds.test.images[: certificate.N_IMAGES])
    manifest["jax_version"] = jax.__version__
    manifest["created"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    _write(program, manifest, out)
    return manifest


def _manifest(finished: run_lib.Finished, chosen: run_lib.Reported, ds, program) -> dict:
    """The manifest's input contract, output, source, precision and test errors (module
    docstring): the run's, and the exported ``program``'s own on the raw test split of ``ds``."""
    config, results = finished.config, finished.results
    test_error, _ = _test_error(program, ds.test)
    dtype = ds.test.images.dtype
    h, w, c = ds.image_shape
    return {
        "format": FORMAT,
        "program": PROGRAM_FILE,
        "input": {
            "shape": ["B", h, w, c],
            "layout": "NHWC, any batch size B",
            "dtype": str(dtype),
            "range": list(RANGES[str(dtype)]),
            "as_stored_by": f"invjax.data.load(config.data) of dataset {ds.name!r}",
            "normalisation": {
                "mean": ds.mean.tolist(),
                "std": ds.std.tolist(),
                "applied": "inside the program: "
                + ("(x / 255 - mean) / std" if dtype == np.uint8 else "(x - mean) / std"),
            },
        },
        "output": {"logits": ["B", ds.num_classes], "classes": list(ds.class_names)},
        "source": {
            "workdir": os.path.abspath(finished.workdir),
            "config_file": results.get("config_file"),
            "overrides": results.get("overrides"),
            "dataset": ds.name,
            "data": json.loads(config.data.to_json_best_effort()),
            "model": str(config.model.name),
            "seed": config.seed,
            "step": chosen.step,
            **chosen.info,
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
    }


def _write(program: ExportedModel, manifest: dict, out: str) -> None:
    """``out/model.npz`` and ``out/manifest.json`` with its checksums (added to ``manifest``),
    written into a folder beside ``out`` and renamed to it: whole or not at all."""
    tmp = f"{os.path.abspath(out).rstrip(os.sep)}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        program.save(os.path.join(tmp, PROGRAM_FILE))
        with open(os.path.join(tmp, PROGRAM_FILE), "rb") as f:
            program_sha = sha256(f.read())
        manifest[CHECKSUMS] = {
            PROGRAM_FILE: program_sha,
            MANIFEST_FILE: sha256(canonical_json(manifest)),  # before this field is added
        }
        with open(os.path.join(tmp, MANIFEST_FILE), "w") as f:
            json.dump(manifest, f, indent=2, allow_nan=False)
            f.write("\n")
        if os.path.isdir(out):
            os.rmdir(out)  # empty (checked above)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
