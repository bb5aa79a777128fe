"""A study's record: one JSON line per finished run (``runs.jsonl``), the only input of its report.

A row holds the run's identity, what it trained with, and what the report and the convergence
rule read from it:

* ``run``: its path under the run directory, ``main/DATASET/FAMILY/LABEL/seed_K``,
  ``tune/DATASET/FAMILY/CANDIDATE`` or ``pilot/E<epochs>/DATASET/FAMILY/n<N>``; ``stage``,
  ``dataset``, ``family``, ``label``, ``seed`` spell it out, ``n_train`` is the run's training
  images;
* ``config_file`` and ``overrides`` (the ``--config.*`` values; the RBF-SVM: its data keys and
  ``svm_C`` / ``svm_gamma_times_scale``);
* ``test_error`` / ``val_error`` [%], ``test_loss`` / ``val_loss``, ``train_loss`` /
  ``train_error`` (the last epoch's epoch means), ``params``, ``epochs``, ``steps``;
* ``convergence``: :func:`launch.studies.stats.convergence` of the run's full per-epoch training
  losses (``converged``, ``drop``, ``final_loss``, the window means ``before`` / ``last``);
* ``device`` (the accelerator's name, ``cpu``), ``trained_on`` (short names of every device that
  trained it, a two-phase network's streams included), ``wall_time_s`` (a two-phase network's
  adds its streams' own, reused or not); a two-phase network's ``phase2_wall_time_s`` (the
  head's alone) and ``phase1`` (per slot its stream's errors, epochs, device and ``run``: the
  reused run's path, or ``streams/<slot>`` inside its own directory);
* ``curve``: the training loss and the held-out / validation error against the epoch, thinned to
  at most :data:`CURVE_POINTS` epochs and 4 significant digits, for the convergence figures.

Rows are appended as runs finish; a later row of the same ``run`` replaces an earlier one (a run
trained again). Every row is checked on reading (:func:`validate`), so a damaged record fails
with the line that is wrong.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence

from invjax.run import CHECKPOINTS_DIR, RESULTS_FILE, STREAMS_DIR, TENSORBOARD_DIR
from launch.studies import stats

RECORD = "runs.jsonl"
STAGES = ("main", "tune", "pilot")
CURVE_POINTS = 60
REQUIRED = {  # key -> the types its value may have
    "run": (str,),
    "stage": (str,),
    "dataset": (str,),
    "family": (str,),
    "label": (str,),
    "seed": (int,),
    "n_train": (int, type(None)),
    "overrides": (dict,),
    "convergence": (dict,),
    "trained_on": (list,),
    "curve": (dict,),
}


def identity(run: str) -> dict:
    """``stage``, ``dataset``, ``family``, ``label`` and ``seed`` of a run path (see the module
    docstring); ValueError naming the path for any other shape."""
    parts = run.split("/")
    shapes = {"main": 5, "tune": 4, "pilot": 5}
    if not parts or parts[0] not in shapes or len(parts) != shapes[parts[0]]:
        raise ValueError(
            f"run path {run!r} is invalid: expected main/DATASET/FAMILY/LABEL/seed_K, "
            "tune/DATASET/FAMILY/CANDIDATE or pilot/E<epochs>/DATASET/FAMILY/n<N>"
        )
    stage = parts[0]
    if stage == "main":
        if not (parts[4].startswith("seed_") and parts[4][5:].isdigit()):
            raise ValueError(f"run path {run!r} is invalid: its last part must be seed_K")
        return {"stage": stage, "dataset": parts[1], "family": parts[2], "label": parts[3]} | {
            "seed": int(parts[4][5:])
        }
    if stage == "tune":
        return {"stage": stage, "dataset": parts[1], "family": parts[2], "label": parts[3]} | {
            "seed": 0
        }
    return {"stage": stage, "dataset": parts[2], "family": parts[3]} | {
        "label": f"{parts[1]}/{parts[4]}",
        "seed": 0,
    }


def validate(row: dict) -> dict:
    """``row`` itself if it is a well-formed record row, else ValueError naming the field."""
    if not isinstance(row, dict):
        raise ValueError(f"a record row must be a JSON object, not {type(row).__name__}")
    for key, kinds in REQUIRED.items():
        if key not in row:
            raise ValueError(f"record row {row.get('run', '?')!r} has no {key!r}")
        if not isinstance(row[key], kinds) or isinstance(row[key], bool):
            names = " or ".join(k.__name__ for k in kinds)
            raise ValueError(
                f"record row {row['run']!r}: {key}={row[key]!r} is invalid: it must be {names}"
            )
    ident = identity(row["run"])
    for key, value in ident.items():
        if row[key] != value:
            raise ValueError(
                f"record row {row['run']!r}: {key}={row[key]!r} disagrees with its path ({value!r})"
            )
    for key in ("test_error", "val_error"):
        x = row.get(key)
        if x is not None and not (isinstance(x, int | float) and 0.0 <= x <= 100.0):
            raise ValueError(f"record row {row['run']!r}: {key}={x!r} is not a % in [0, 100]")
    if row["convergence"].get("converged") not in (True, False, None):
        raise ValueError(f"record row {row['run']!r}: convergence.converged must be a boolean")
    return row


def read(path: str) -> list[dict]:
    """The rows of the record at ``path`` in file order, the last row of each ``run`` standing
    where that run's first row stood; ``[]`` for a missing file. ValueError names the line."""
    if not os.path.isfile(path):
        return []
    rows: dict[str, dict] = {}
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = validate(json.loads(line))
            except (json.JSONDecodeError, ValueError) as e:
                raise ValueError(f"{path}:{i}: {e}") from None
            rows[row["run"]] = row
    return list(rows.values())


def dumps(row: dict) -> str:
    """One line of the record: compact JSON, keys in the row's order."""
    return json.dumps(row, separators=(",", ":"), allow_nan=True)


def append(path: str, rows: Iterable[dict]) -> int:
    """Append ``rows`` (validated first: nothing is written if one is invalid); returns how
    many. Written with one ``write`` and flushed to disk, so a kill leaves whole lines."""
    rows = [validate(r) for r in rows]
    if not rows:
        return 0
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a") as f:
        f.write("".join(dumps(r) + "\n" for r in rows))
        f.flush()
        os.fsync(f.fileno())
    return len(rows)


# ----------------------------------------------------------------------------- rows from runs


def _load(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return None


def curve(run_dir: str) -> dict:
    """The run's epoch records from ``metrics.jsonl`` (else a ``curve.json``): ``train`` /
    ``val`` as ``[[epoch, loss, error], ...]`` (the final evaluation excluded)."""
    out: dict[str, list] = {"train": [], "val": []}
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(path):
        return _load(os.path.join(run_dir, "curve.json")) or out
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except json.JSONDecodeError:  # a line cut by a kill
                continue
            if r.get("split") in out and "final" not in r and "model_epoch" not in r:
                out[r["split"]].append([r.get("epoch"), r.get("loss"), r.get("error")])
    for k in out:  # a resumed run re-logs nothing twice, but keep the last record per epoch
        out[k] = list({e[0]: e for e in out[k]}.values())
    return out


def _sig(x, digits: int = 4):
    return float(f"{x:.{digits}g}") if isinstance(x, int | float) and math.isfinite(x) else x


def thin(full: dict, points: int = CURVE_POINTS) -> dict:
    """The record's curve: ``train_loss`` as ``[[epoch, loss], ...]`` at every
    ``ceil(E / points)``-th epoch, the first and the last, and ``val_error`` as ``[[epoch,
    error], ...]`` at every evaluation; values to 4 significant digits (a figure's precision)."""
    train = [e for e in full.get("train", []) if e[1] is not None]
    every = max(1, math.ceil(len(train) / points))
    keep = [e for i, e in enumerate(train) if i % every == 0 or i == len(train) - 1]
    val = [e for e in full.get("val", []) if e[2] is not None]
    return {
        "train_loss": [[e[0], _sig(e[1])] for e in keep],
        "val_error": [[e[0], _sig(e[2])] for e in val],
    }


def short_device(kind: str | None) -> str:
    """'cpu' -> 'CPU', 'NVIDIA H100 80GB HBM3' -> 'H100'; '?' where a run did not record it."""
    if not kind:
        return "?"
    if kind.lower() == "cpu":
        return "CPU"
    words = [w for w in kind.split() if w.upper() not in ("NVIDIA", "TESLA")]
    return words[0] if words else kind


def relative_run(path: str) -> str | None:
    """A run directory's path from its last ``main`` / ``tune`` component on (the part that
    names it under any run directory: ``/scratch/r/main/d/f/n20/seed_0`` ->
    ``main/d/f/n20/seed_0``); None without one."""
    parts = os.path.normpath(path).split(os.sep)
    at = [i for i, p in enumerate(parts) if p in ("main", "tune")]
    return "/".join(parts[at[-1] :]) if at else None


def _device(r: dict) -> str | None:
    # the SVM (scikit-learn) records no device: it runs on the CPU
    return r.get("device_kind") or ("cpu" if "svm_C" in r else None)


def _svm_overrides(r: dict) -> dict:
    c = r.get("config", {})
    ov = {"data.name": c.get("name"), "data.n_train": c.get("n_train")}
    ov |= {"data.realisation": c.get("realisation"), "seed": c.get("seed")}
    if c.get("val_source") == "train":
        ov |= {"data.val_source": "train", "data.val_fraction": c.get("val_fraction")}
    return ov | {k: r[k] for k in ("svm_C", "svm_gamma_times_scale") if k in r}


def row(run: str, run_dir: str, runs_root: str, known: dict | None = None) -> dict | None:
    """The record row of the finished run ``run`` (its path under ``runs_root``) in ``run_dir``;
    None while it has no ``results.json``. A reused phase-1 stream's device comes from ``known``
    (run -> row, the record so far) or else from its ``results.json`` under ``runs_root``."""
    r = _load(os.path.join(run_dir, RESULTS_FILE))
    if r is None:
        return None
    known = known or {}
    full = curve(run_dir)
    train = [e for e in full.get("train", []) if e[1] is not None]
    conv = stats.convergence([e[1] for e in train]) if train else {"converged": None}
    phase1, devices = {}, {short_device(_device(r))}
    for slot, p1 in (r.get("phase1") or {}).items():
        inside = _load(os.path.join(run_dir, STREAMS_DIR, slot, RESULTS_FILE))
        where = f"streams/{slot}" if inside is not None else relative_run(str(p1.get("workdir")))
        kind = _device(inside) if inside is not None else None
        if inside is None and where is not None:
            if where in known:
                kind = known[where]["device"]
            else:
                other = _load(os.path.join(runs_root, where, RESULTS_FILE))
                kind = _device(other) if other else None
        devices.add(short_device(kind))
        phase1[slot] = {k: p1.get(k) for k in ("test_error", "val_error", "epochs")}
        phase1[slot] |= {"device": kind, "run": where}
    out = {"run": run, **identity(run), "n_train": r.get("n_train")}
    out["config_file"] = r.get("config_file")
    out["overrides"] = r["overrides"] if "overrides" in r else _svm_overrides(r)
    for k in ("test_error", "test_loss", "val_error", "val_loss"):
        out[k] = r.get(k)
    out["train_loss"] = train[-1][1] if train else None
    out["train_error"] = train[-1][2] if train else r.get("train_error")
    for k in ("params", "epochs", "steps"):
        out[k] = r.get(k)
    if out["epochs"] is None and train:  # a run that did not record it: its last epoch
        out["epochs"] = train[-1][0]
    out["convergence"] = conv
    out["device"] = _device(r)
    out["trained_on"] = sorted(devices)
    # the processor and jax versions (None for runs that predate them): what a run trained
    # again must share to reproduce its row bit for bit
    out["host"] = r.get("host")
    out["wall_time_s"] = r.get("wall_time_s")
    if phase1:
        # the head's own time: wall_time_s adds every stream's, trained by this command or reused
        out["phase2_wall_time_s"] = r.get("phase2_wall_time_s")
        out["phase1"] = phase1
    out["curve"] = thin(full)
    return validate(out)


def finished_runs(runs_root: str, stages: Sequence[str] = ("main", "tune")) -> list[str]:
    """The paths (relative to ``runs_root``) of every finished run there, sorted: a directory
    with a ``results.json`` under ``main/`` or ``tune/`` at a run's depth (a two-phase network's
    ``streams/<slot>`` are part of their run, not runs of their own)."""
    out = []
    for stage in stages:
        top = os.path.join(runs_root, stage)
        for root, dirs, files in os.walk(top):
            dirs[:] = sorted(
                d for d in dirs if d not in (CHECKPOINTS_DIR, STREAMS_DIR, TENSORBOARD_DIR)
            )
            rel = os.path.relpath(root, runs_root).replace(os.sep, "/")
            if RESULTS_FILE in files:
                try:
                    identity(rel)
                except ValueError:
                    continue
                out.append(rel)
    return sorted(out)
