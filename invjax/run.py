"""A run's folder, read: the names of its files and the one reader of a finished run.

``python -m invjax.main --workdir=DIR`` (contract 1) leaves in ``DIR``:

- :data:`CONFIG_FILE` (``config.json``): the config the run trained, for people; the reference
  copy is the one stored with every checkpoint (:func:`stored_config`).
- :data:`CHECKPOINTS_DIR` (``checkpoints/<step>/``), :data:`MANIFESTS_DIR`,
  :data:`CORRUPT_DIR`: the orbax steps, their integrity manifests and the steps set aside
  (:mod:`invjax.checkpoint`).
- :data:`METRICS_FILE` (``metrics.jsonl``) and :data:`TENSORBOARD_DIR`: one record per
  evaluation (:mod:`invjax.logging_utils`).
- :data:`RESULTS_FILE` (``results.json``): the finished run's figures (``test_error``,
  ``epochs``, ``steps``, ``params``, the certificate, the command's ``config_file`` and
  ``overrides``; a two-phase run adds ``phases`` and ``phase1``), written last.
- :data:`KIND_FILE` (``run_kind.json``): one run or the K models of ``--config.seeds``, each a
  run in :data:`SEED_DIR` (``seed_<k>/``) with the summary :data:`SEEDS_SUMMARY`
  (``seeds.json``); a two-phase run's phase-1 streams are runs in :data:`STREAMS_DIR`
  (``streams/<stream>/``).
- :data:`LOCK_FILE`, :data:`LOG_FILE`: the lock of the process that owns the folder and its log
  (:mod:`invjax.workdir`).

Each name is defined once: the lock's, the kind's and the checkpoints' in :mod:`invjax.workdir`
(the lowest module that writes in the folder, and the one :mod:`invjax.checkpoint` builds on),
the metrics' in :mod:`invjax.logging_utils`, ``results.json`` and ``streams/`` here; a JSON
record is written whole or not at all with :func:`write_json_atomic`.

A run is *finished* for a config (:func:`finished_results`) when its ``results.json`` records
``train.num_epochs`` epochs at the newest checkpoint's step and the config stored with its
checkpoints is that experiment (:func:`check_resume_config`: equal up to
:data:`RESUMABLE_KEYS`; another experiment is one ValueError naming the difference).
:func:`read_finished` reads a finished run from its folder alone (its own stored config):
``config``, ``kind`` (``'single'``, ``'two_phase'`` or ``'end_to_end'``; the folder of K models
is refused, naming one model's folder), ``results``; its :meth:`Finished.reported` model is the
one the run reports (best-validation copy or last, :func:`invjax.checkpoint.reported_variables`)
restored from its final checkpoint after the checkpoint's integrity manifest is verified
(:func:`invjax.checkpoint.restore_latest`).

This module sits below :mod:`invjax.training`, which imports it (the plan reuses finished runs
through :func:`finished_results` and writes ``results.json`` through these names); measuring a
run (export, the invariance command, the report) reads it here and imports nothing of the
trainer.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import TYPE_CHECKING, Any

from invjax import workdir as workdir_lib
from invjax.logging_utils import METRICS_FILE, TENSORBOARD_SUBDIR

if TYPE_CHECKING:
    import ml_collections

# The functions that read a checkpoint or a config import invjax.checkpoint, ml_collections,
# flax and JAX where they need them: reading the names and results (the report) starts without.

RESULTS_FILE = "results.json"
STREAMS_DIR = "streams"
CONFIG_FILE = workdir_lib.CONFIG_FILE
CHECKPOINTS_DIR = workdir_lib.CHECKPOINTS_DIR
MANIFESTS_DIR = workdir_lib.MANIFESTS_DIR
CORRUPT_DIR = workdir_lib.CORRUPT_DIR
TENSORBOARD_DIR = TENSORBOARD_SUBDIR
KIND_FILE = workdir_lib.KIND_FILE
SEED_DIR = workdir_lib.SEED_DIR
SEEDS_SUMMARY = workdir_lib.SEEDS_SUMMARY
LOCK_FILE = workdir_lib.LOCK_FILE
LOG_FILE = workdir_lib.LOG_FILE
#: The folders of a run that hold no results (a search for results need not enter them).
NO_RESULTS_DIRS = (CHECKPOINTS_DIR, MANIFESTS_DIR, CORRUPT_DIR, TENSORBOARD_DIR)
write_json_atomic = workdir_lib.write_json_atomic

__all__ = [
    "CHECKPOINTS_DIR",
    "CONFIG_FILE",
    "CORRUPT_DIR",
    "KIND_FILE",
    "LOCK_FILE",
    "LOG_FILE",
    "MANIFESTS_DIR",
    "METRICS_FILE",
    "NO_RESULTS_DIRS",
    "RESULTS_FILE",
    "RESUMABLE_KEYS",
    "SEEDS_SUMMARY",
    "SEED_DIR",
    "STREAMS_DIR",
    "TENSORBOARD_DIR",
    "Finished",
    "Reported",
    "check_resume_config",
    "check_variables",
    "finished_results",
    "flat_config",
    "has_checkpoint",
    "holds_seeds",
    "read_finished",
    "read_results",
    "reported",
    "stored_config",
    "write_json_atomic",
]

# ----------------------------------------------------------------------------- configs

#: Keys a resumed run may change (everything else must match the stored config).
RESUMABLE_KEYS = (
    "multi_host",
    "eval_precision",
    "data.data_dir",
    "train.num_epochs",
    "train.eval_batch_size",
    "train.eval_every_epochs",
    "train.log_every_steps",
    "train.checkpoint_every_steps",
    "train.checkpoint_every_epochs",
    "train.keep_checkpoints",
)


def flat_config(config) -> dict:
    """``{'section.key': value}`` of a config (a ConfigDict or its JSON dict)."""
    from flax import traverse_util

    d = (
        json.loads(config.to_json_best_effort())
        if hasattr(config, "to_json_best_effort")
        else config
    )
    return {".".join(map(str, k)): v for k, v in traverse_util.flatten_dict(d).items()}


def check_resume_config(stored: dict | None, config, workdir: str) -> None:
    """A workdir's checkpoints may only be resumed by the same experiment (RESUMABLE_KEYS aside):
    one ValueError naming the first differences otherwise (nothing when ``stored`` is None)."""
    if stored is None:
        return
    old, new = flat_config(stored), flat_config(config)
    old.setdefault("precision", "default")  # runs from before the setting trained like this
    diff = [
        k
        for k in sorted(set(old) | set(new))
        if old.get(k) != new.get(k) and k not in RESUMABLE_KEYS
    ]
    if diff:
        shown = ", ".join(f"{k}: {old.get(k)!r} stored, {new.get(k)!r} now" for k in diff[:5])
        raise ValueError(
            f"--workdir={workdir} holds checkpoints of a different experiment ({shown}"
            f"{', ...' if len(diff) > 5 else ''}). Resume it with its own config (saved in "
            f"{os.path.join(workdir, CONFIG_FILE)}) or choose a new --workdir. Only "
            f"{list(RESUMABLE_KEYS)} may change on resume."
        )


def _tuples(tree):
    """JSON lists back to the tuples the configs hold (groups, scales, ...)."""
    if isinstance(tree, dict):
        return {k: _tuples(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return tuple(_tuples(v) for v in tree)
    return tree


def stored_config(workdir: str) -> ml_collections.ConfigDict | None:
    """The config stored with the run's newest verified checkpoint
    (:func:`invjax.checkpoint.read_config`), as the ConfigDict it trained; None without one."""
    import ml_collections

    from invjax import checkpoint

    stored = checkpoint.read_config(workdir)
    return None if stored is None else ml_collections.ConfigDict(_tuples(stored))


def has_checkpoint(workdir: str) -> bool:
    """Whether the folder holds a committed checkpoint step (verified or not)."""
    from invjax import checkpoint

    return bool(checkpoint.list_steps(workdir))


# ----------------------------------------------------------------------------- results


def read_results(workdir: str) -> dict | None:
    """``workdir/results.json``, or None where there is none. One ValueError naming the file
    when it cannot be read or is not a run's results (a JSON object with ``test_error``)."""
    path = os.path.join(workdir, RESULTS_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            results = json.load(f)
    except (OSError, ValueError) as e:  # cut short by a kill, damaged, not a file
        raise ValueError(f"unreadable {path}: {e}") from None
    if not isinstance(results, dict):
        raise ValueError(
            f"{path}: it holds a JSON {type(results).__name__}, not a run's results (an object "
            "with test_error)"
        )
    if "test_error" not in results:
        raise ValueError(f"{path}: it has no test_error (not a finished run's results)")
    return results


def holds_seeds(workdir: str) -> bool:
    """Whether the folder holds the K models of ``--config.seeds`` (each a run in
    ``seed_<k>/``) rather than one run (:func:`invjax.workdir.read_kind`)."""
    kind = workdir_lib.read_kind(workdir)
    return kind is not None and kind["kind"] == workdir_lib.SEEDS


def finished_results(config, workdir: str) -> dict | None:
    """The results of a finished run of ``config`` in ``workdir``, else None.

    Finished: ``results.json`` records ``config.train.num_epochs`` epochs and the newest
    checkpoint is its last step. A workdir holding another experiment's checkpoints raises
    :func:`check_resume_config`'s ValueError (nothing is touched); one without checkpoints
    holds no finished run (results copied in without their run cannot be checked).
    """
    from invjax import checkpoint

    stored = checkpoint.read_config(workdir)
    if stored is None:
        return None
    check_resume_config(stored, config, workdir)
    try:
        results = read_results(workdir)
    except ValueError:
        return None  # cut short: the run finishes again (it resumes from its checkpoint)
    steps = checkpoint.list_steps(workdir)
    if results is None or results.get("epochs") != config.train.num_epochs or not steps:
        return None
    if results.get("steps") != steps[-1]:
        return None
    return results


# ----------------------------------------------------------------------------- a finished run


@dataclasses.dataclass(frozen=True)
class Reported:
    """The model a checkpoint stands for: its ``variables`` (``{'params', 'batch_stats',
    ...}``), the checkpoint's ``step``, and how it was chosen (``selected_by``: ``'best
    validation'`` or ``'last epoch'``; ``model_epoch``: that model's epoch)."""

    step: int
    variables: dict
    selected_by: str
    model_epoch: int | None

    @property
    def info(self) -> dict:
        """``{'selected_by', 'model_epoch'}`` (as manifests and measurements record them)."""
        return {"selected_by": self.selected_by, "model_epoch": self.model_epoch}


def reported(workdir: str, step: int | None = None) -> Reported:
    """The reported model of the newest verified checkpoint of ``workdir`` (finished or not).

    :class:`invjax.checkpoint.CheckpointError` when there is none (no checkpoint, or none whose
    files match their manifest); with ``step`` (a finished run's last), a ValueError when the
    newest readable checkpoint is another step (its final checkpoint is unreadable).
    """
    from invjax import checkpoint

    restored = checkpoint.restore_latest(workdir)
    if restored is None:
        raise checkpoint.CheckpointError(
            f"--workdir={workdir} holds no checkpoint in {checkpoint.checkpoint_dir(workdir)}: "
            "train that run first (python -m invjax.main --config=... --workdir=...)"
        )
    if step is not None and restored.step != step:
        raise ValueError(
            f"--workdir={workdir}: the newest readable checkpoint is step {restored.step}, but the "
            f"run finished at step {step}: its final checkpoint is unreadable"
        )
    variables, info = checkpoint.reported_variables(restored.state, restored.meta)
    return Reported(restored.step, variables, info["selected_by"], info["model_epoch"])


@dataclasses.dataclass(frozen=True)
class Finished:
    """A finished run read from its folder: ``workdir``, the ``config`` it trained (stored with
    its checkpoints) and its ``results`` (``results.json``)."""

    workdir: str
    config: ml_collections.ConfigDict
    results: dict

    @property
    def kind(self) -> str:
        """``'single'``, ``'two_phase'`` (its phase-1 streams are runs of their own) or
        ``'end_to_end'``: the config's ``train.phases``."""
        return self.config.train.get("phases", "single")

    def reported(self) -> Reported:
        """The model the run reports, from its final checkpoint (verified; :func:`reported`)."""
        return reported(self.workdir, self.results["steps"])


def read_finished(workdir: str) -> Finished:
    """The finished run in ``workdir``; one ValueError (:class:`~invjax.workdir.WorkdirError`,
    :class:`~invjax.checkpoint.CheckpointError`) naming the folder and what to do otherwise: no
    such directory, the folder of K models (give one model's ``seed_<k>/``), no readable
    checkpoint, or a run that has not finished."""
    if not os.path.isdir(workdir):
        raise ValueError(f"--workdir={workdir}: no such directory")
    workdir_lib.refuse_seeds_folder(workdir)
    config = stored_config(workdir)
    if config is None:
        raise ValueError(
            f"--workdir={workdir} holds no readable checkpoint: give the directory of a run of "
            "python -m invjax.main"
        )
    results = finished_results(config, workdir)
    if results is None:
        raise ValueError(
            f"--workdir={workdir} is not a finished run (its {RESULTS_FILE} does not record all "
            f"{config.train.num_epochs} epochs at its newest checkpoint): run the same "
            "python -m invjax.main command to finish it"
        )
    return Finished(workdir, config, results)


def check_variables(model, image_shape, variables, workdir: str, model_cfg) -> None:
    """One ValueError if a checkpoint's variables are not those of ``model`` (another model or
    width): every variable the model needs, with its shape (compared abstractly, no compute)
    against :func:`invjax.models.common.init_variables` on images ``image_shape``."""
    import jax
    import numpy as np
    from flax import traverse_util

    from invjax import checkpoint
    from invjax.initialise import init_variables

    want = jax.eval_shape(lambda k: init_variables(model, image_shape, k), jax.random.PRNGKey(0))
    want = traverse_util.flatten_dict(dict(want), sep="/")
    have = traverse_util.flatten_dict(dict(variables), sep="/")
    missing = [k for k in want if k not in have]
    extra = [k for k in have if k not in want and k.startswith("params/")]
    shapes = [
        (k, tuple(np.shape(have[k])), tuple(want[k].shape))
        for k in want
        if k in have and tuple(np.shape(have[k])) != tuple(want[k].shape)
    ]
    if not missing and not shapes and not extra:
        return
    stored: Any = (checkpoint.read_config(workdir) or {}).get("model") or {}
    if missing:
        example = f"{missing[0]} is missing"
    elif shapes:
        example = f"{shapes[0][0]} has shape {shapes[0][1]}, the model needs {shapes[0][2]}"
    else:
        example = f"{extra[0]} is not a parameter of the model"
    raise ValueError(
        f"--workdir={workdir} holds a checkpoint of another model (stored model.name="
        f"{stored.get('name', '?')!r}, config model.name={model_cfg.get('name')!r}): "
        f"{len(missing)} variables missing, {len(shapes)} of another shape and {len(extra)} "
        f"parameters the model lacks, e.g. {example}. "
        f"Use the config the run was trained with (its {CONFIG_FILE})"
    )
