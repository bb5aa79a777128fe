"""The data a run was trained on, as one digest: recorded when the run starts, checked whenever
the same workdir is resumed or found finished.

``compute(splits)`` is the SHA-256 of every split a run uses (``train``, ``val``, ``test``, in
that order), each as its shape, its images' bytes and its labels: so it names the source files'
content *and* the split (validation share, ``n_train`` subset, realisation) together, for every
source alike (IDX files, TFDS, image folders, the digits). :func:`invjax.data.load` computes it
for each dataset it loads (``Dataset.fingerprint``; None for the stand-in data of a dry run that
did not generate a realisation).

``DIR/data_fingerprint.json`` holds ``{"fingerprint": "sha256:...", "dataset": NAME, "sizes":
{split: N}}``, written by :func:`record` when a run starts from scratch. :func:`check` raises
:class:`DataChangedError` (a ``ValueError``: refused before any compute, exit 2) when the workdir
records another fingerprint than the data loaded now: a finished run is then neither evaluated
again on other data nor its ``results.json`` replaced, and a resumable one does not go on
training on other data. A run started before the record has none and is not checked.
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from invjax import workdir as workdir_lib

FILE = "data_fingerprint.json"
SPLITS = ("train", "val", "test")


class DataChangedError(ValueError):
    """The workdir's run was trained on other data than the config loads now; names both."""


def compute(splits: dict) -> str:
    """``'sha256:<64 hex>'`` of ``splits`` (``{name: Split}``, the names of :data:`SPLITS`
    present), each split's shape, image bytes and int64 labels in turn."""
    h = hashlib.sha256()
    for name in SPLITS:
        split = splits.get(name)
        if split is None:
            continue
        images = np.ascontiguousarray(split.images)
        h.update(f"{name}:{images.dtype.str}:{images.shape}".encode())
        h.update(images.reshape(-1).view(np.uint8))
        h.update(np.asarray(split.labels, np.int64).tobytes())
    return "sha256:" + h.hexdigest()


def short(fingerprint: str) -> str:
    """The fingerprint as messages name it (16 hex digits after the algorithm)."""
    algo, _, digest = str(fingerprint).partition(":")
    return f"{algo}:{digest[:16]}" if digest else str(fingerprint)


def read(workdir: str) -> dict | None:
    """The workdir's record, None where there is none; :class:`DataChangedError` naming the
    file if it is not a record (a garbled file is not silently replaced)."""
    path = os.path.join(workdir, FILE)
    if not os.path.lexists(path):
        return None
    try:
        with open(path) as f:
            stored = json.load(f)
    except (OSError, ValueError, RecursionError) as e:
        stored = e
    if not isinstance(stored, dict) or not isinstance(stored.get("fingerprint"), str):
        raise DataChangedError(
            f"{path} is not a data fingerprint record ({type(stored).__name__}): the run's data "
            "cannot be compared with this config's. If you know the run was trained on exactly "
            "these data, delete the file and run the same command again; else choose a new "
            "--workdir"
        )
    return stored


def check(workdir: str, dataset) -> None:
    """Refuse (:class:`DataChangedError`) when ``workdir`` records another fingerprint than
    ``dataset.fingerprint``; nothing to check where either is missing."""
    stored = read(workdir)
    now = getattr(dataset, "fingerprint", None)
    if stored is None or now is None or stored["fingerprint"] == now:
        return
    sizes = stored.get("sizes")
    then = f" ({_sizes(sizes)})" if isinstance(sizes, dict) else ""
    raise DataChangedError(
        f"--workdir={workdir} was trained on other data: its data fingerprint is "
        f"{short(stored['fingerprint'])}{then}, the data of this config are {short(now)} "
        f"({_sizes(_sizes_of(dataset))}; {os.path.join(workdir, FILE)}). The source files or the "
        "split changed since the run started: restore them, or train on these data in a new "
        "--workdir"
    )


def _sizes_of(dataset) -> dict:
    return {s: len(getattr(dataset, s)) for s in SPLITS}


def _sizes(sizes: dict) -> str:
    return " / ".join(f"{s} {sizes.get(s, '?')}" for s in SPLITS)


def record(workdir: str, dataset) -> None:
    """Write ``workdir``'s record of ``dataset`` (atomically; a run starting from scratch
    replaces the record of one that was stopped before its first checkpoint), unless the
    dataset has no fingerprint (a stand-in)."""
    now = getattr(dataset, "fingerprint", None)
    path = os.path.join(workdir, FILE)
    if now is None:
        return
    info = {"fingerprint": now, "dataset": dataset.name, "sizes": _sizes_of(dataset)}
    workdir_lib.write_json_atomic(path, info)
