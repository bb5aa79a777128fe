"""The multi-stage plan of one command: one training run, or the paper's two phases.

``config.train.phases`` chooses (paper Section 4.4 and appendix B):

``'single'`` (default)
    Train ``config.model`` as one run in ``DIR`` (:func:`invjax.training.experiment.prepare`,
    :func:`invjax.training.loop.run`).
``'two_phase'``
    A multi-stream network (``model.name='multistream'``, ``freeze_streams=True``) trained as the
    paper does. *Phase 1* trains every stream as its own single-stream run, with its own recipe
    ``config.phase1.<stream>.train`` (the stream's hyperparameters, e.g. Table 8's E(2)-II and
    Scale-II columns), in ``DIR/streams/<stream>`` (or ``config.phase1.<stream>.workdir``, e.g. a
    finished single-stream run to reuse). Its model is ``config.model.streams.<stream>`` plus its
    own classifier, on the same data and seed. *Phase 2* trains the combination head in ``DIR``:
    the stream variables (convolutions, II layers, BatchNorm statistics) are copied from the
    phase-1 checkpoints (``train.init_from``, :func:`invjax.training.state.graft`) and frozen
    (the model runs them in eval mode behind ``stop_gradient``; ``train.trainable`` names only the
    head and classifier, so no weight decay touches them either). ``config.train`` is phase 2's recipe:
    the head hyperparameters of the appendix (Tables 9, 12, 14 of the combination heads) with the
    stream recipe's epochs and schedule divided by 4 (SVHN, CIFAR-10) or 10 (STL-10).
``'end_to_end'``
    The multi-stream network trained as one run from random initialisation
    (``freeze_streams=False``; appendix B.2).

Epochs and schedules. :func:`resolve` applies ``train.epochs_scale`` to every stage (each trains
``max(1, round(num_epochs * scale))`` epochs; a phase-1 stream follows the run's scale unless its
own ``config.phase1.<stream>.train.epochs_scale`` is set) and turns a schedule given as fractions
of the run (``train.lr_boundary_fractions``) into epochs; :func:`check` runs on the result, and
each run stores it. :func:`check_values` refuses out-of-range values first (NaN anywhere,
probabilities and BatchNorm momenta outside [0, 1)); ``--dry_run`` prints
:func:`schedule_text`: every stage's epochs, steps and schedule.

Resuming and reuse. Every run of a phase is an ordinary run (contract 1): it resumes from its own
checkpoints. A run whose ``results.json`` records all its epochs and whose stored config is this
one is *finished* (:func:`invjax.run.finished_results`): it is reused, never recomputed, so
restarting the command resumes whichever phase was running. A directory holding checkpoints of
a different config stops the command before any compute (the run's own message); so does any
other bad input of any phase (:func:`check` prepares every phase first). Each stage is prepared
once: :func:`check` builds the :class:`~invjax.training.experiment.Experiment` (dataset, model,
optimiser, restored checkpoint) that :func:`execute` then runs, and stages with the same data
config share one loaded dataset; only phase 2's ``init_from`` sources, which phase 1 writes, are
loaded when phase 2 starts. :func:`execute` locks every workdir it will write in (``DIR`` and
each phase-1 stream workdir still to train, :mod:`invjax.workdir`) before any compute: a second
command on any of them stops at once, naming the run that holds it.

Results. ``DIR/results.json`` is phase 2's results (contract 1: ``test_error``, ``params`` of the
whole network, ...) plus ``phases``, ``phase1`` (each stream's ``test_error``, ``val_error``,
``params``, ``wall_time_s``, ``workdir``), ``phase2_wall_time_s``, and ``wall_time_s`` = both
phases together.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import os
import time
from collections.abc import Callable
from typing import Any

import jax
import ml_collections
import numpy as np

from invjax import data as data_lib
from invjax import models
from invjax import run as run_lib
from invjax import workdir as workdir_lib
from invjax.contract import EpochHooks
from invjax.layers.heads import STREAMS as STREAM_NAMES

# the monomial pruning's rule, re-exported under its earlier home (ScaledMNISTNet.scaled_schedule)
from invjax.layers.ii import scaled_prune_epochs  # noqa: F401
from invjax.logging_utils import format_duration
from invjax.training import loop
from invjax.training.experiment import Experiment, prepare, with_sources
from invjax.training.optimizer import (
    boundaries_in_epochs,
    check_epochs_scale,
    is_num,
    resolve_train,
)

PHASES = ("single", "two_phase", "end_to_end")
STREAMS_SUBDIR = run_lib.STREAMS_DIR


class StageError(ValueError):
    """A later phase cannot start (e.g. a phase-1 checkpoint became unreadable); names the run."""


@dataclasses.dataclass
class Stage:
    """One run of an experiment: ``name`` ('run', a stream name, or 'head'), its config and
    workdir, ``results`` if it had finished before (reused), else its prepared ``experiment``."""

    name: str
    config: Any
    workdir: str
    results: dict | None = None
    experiment: Experiment | None = None
    state_bytes: int = 0  # one checkpoint's arrays, where prepared

    @property
    def label(self) -> str:
        if self.name == "run":
            return "run"
        if self.name == "head":
            return "phase 2: combination head"
        return f"phase 1: stream {self.name!r}"


@dataclasses.dataclass
class Plan:
    """The checked stages of one command, in order (phase 1's streams, then the head)."""

    phases: str
    config: Any
    workdir: str
    stages: list[Stage]


# ----------------------------------------------------------------------------- configs


def phases_of(config) -> str:
    """``config.train.phases`` (default ``'single'``), checked."""
    phases = config.train.get("phases", "single")
    if phases not in PHASES:
        raise ValueError(f"train.phases={phases!r} is invalid: choose one of {list(PHASES)}")
    return phases


def check_values(config, prefix: str = "") -> None:
    """One ValueError naming the first value of ``config`` outside its range, before anything
    is loaded: NaN anywhere, a ``dropout`` probability outside [0, 1), a BatchNorm
    ``bn_momentum`` (running statistics' decay) outside [0, 1), in every section (a
    multi-stream model holds one per stream). The trainer's keys are checked by
    :func:`invjax.training.optimizer.validate_train_config`, the data's by the data layer."""
    for key, value in config.items():
        path = f"{prefix}{key}"
        if hasattr(value, "items"):
            check_values(value, f"{path}.")
            continue
        items = value if isinstance(value, tuple | list) else (value,)
        if any(isinstance(v, float | np.floating) and math.isnan(v) for v in items):
            raise ValueError(f"{path}={value!r} is invalid: NaN is not a setting, give a number")
        if value is None:
            continue
        if key == "dropout" and (not is_num(value) or not 0 <= value < 1):
            raise ValueError(
                f"{path}={value!r} is invalid: a dropout probability must be in [0, 1)"
            )
        if key == "bn_momentum" and (not is_num(value) or not 0 <= value < 1):
            raise ValueError(
                f"{path}={value!r} is invalid: BatchNorm's running-statistics momentum must be "
                "in [0, 1) (decay = 1 - momentum; 0.9 = PyTorch's default)"
            )


def check_seeds(config) -> None:
    """``config.seeds`` with a ``config.seed`` other than 0: refused (each model of a
    several-seed run takes its seed from ``config.seeds``; a ``seed`` beside it would be
    ignored)."""
    seeds, seed = config.get("seeds"), config.get("seed", 0)
    if seeds is not None and seed != 0:
        raise ValueError(
            f"seed={seed!r} and seeds={tuple(seeds) if isinstance(seeds, list | tuple) else seeds!r}"
            " are both set: with config.seeds each model's seed is one of the seeds; drop "
            "--config.seed (or list it in --config.seeds)"
        )


def _unresolved(config) -> bool:
    sections = [config.train] + [
        config.phase1[s].train for s in (config.get("phase1") or {}) if "train" in config.phase1[s]
    ]
    return any("epochs_scale" in t or "lr_boundary_fractions" in t for t in sections)


def resolve(config):
    """``config`` as its stages train (a copy; ``config`` itself where nothing is to resolve).

    ``config.train`` and every ``config.phase1.<stream>.train`` become
    :func:`~invjax.training.optimizer.resolve_train`'s sections: epochs scaled by
    ``train.epochs_scale`` (a stream by its own ``epochs_scale`` where set, else by the run's)
    and the schedule in epochs; the network's own epoch schedule (a monomial head's pruning)
    scaled with the run (:func:`scaled_schedule`). Idempotent: the resolved sections hold no key left to apply.
    """
    if not _unresolved(config):
        return config
    c = copy.deepcopy(config)  # keeps invjax/configs/base.py's reference data.seed = seed
    scale = check_epochs_scale(c.train.get("epochs_scale"))
    with c.unlocked():
        for name in c.get("phase1") or {}:
            tc = c.phase1[name].get("train")
            if tc is None:
                continue  # _check_two_phase names the missing recipe
            where = f"phase1.{name}."
            own = tc.get("epochs_scale")
            try:
                s = scale if own is None else check_epochs_scale(own, f"{where}train.epochs_scale")
                c.phase1[name].train = resolve_train(tc, s)
            except ValueError as e:
                msg = str(e)
                raise ValueError(msg if msg.startswith(where) else where + msg) from e
        c.train = resolve_train(c.train, scale)
        if scale != 1.0:
            c.model.update(scaled_schedule(c.model, scale))
    return c


def scaled_schedule(model_config, scale: float) -> dict:
    """The keys of ``model_config`` that the network's own epoch schedule moves in a run
    ``scale`` times as long (:meth:`invjax.contract.EpochHooks.scaled_schedule`, e.g. the
    monomial head's ``prune_epochs``), with their new values; empty for a network without one.

    The network's fields are its config keys (:func:`invjax.models.build`); a field the schedule
    changes is written back under its own name, and the network built from the result must be
    the scaled one, else ValueError (a schedule the config cannot record would not resume)."""
    model = models.build(model_config)
    if not isinstance(model, EpochHooks):
        return {}
    scaled = model.scaled_schedule(scale)
    names = [f.name for f in dataclasses.fields(model) if f.name not in ("parent", "name")]
    changed = {n: getattr(scaled, n) for n in names if _differ(scaled, model, n)}
    if changed:
        again = models.build(_with(model_config, changed))
        if any(_differ(again, scaled, n) for n in names):
            raise ValueError(
                f"model {model_config.get('name')!r}: its epoch schedule scaled by "
                f"{scale:g} ({changed}) cannot be recorded in config.model"
            )
    return changed


def _differ(a, b, field: str) -> bool:
    x, y = getattr(a, field), getattr(b, field)
    try:
        return bool(x != y)
    except (TypeError, ValueError):  # arrays: compared by identity
        return x is not y


def _with(section, values: dict):
    out = section.copy_and_resolve_references() if hasattr(section, "unlocked") else section
    with out.unlocked():
        out.update(values)
    return out


def schedule_text(plan: Plan) -> str:
    """Each stage's epochs, steps and learning-rate schedule (boundaries in epochs), as the
    stages will train them (``--dry_run`` prints it)."""
    n = len(plan.stages)
    lines = ["schedule (each stage as it trains):"]
    for i, stage in enumerate(plan.stages):
        tc = stage.config.train
        if stage.experiment is not None:
            spe = stage.experiment.steps_per_epoch
        else:  # finished before: its own record
            r = stage.results or {}
            spe = (r.get("steps") or 0) // max(1, int(r.get("epochs") or 1))
        bounds = boundaries_in_epochs(tc)
        rate = f"learning rate {tc.learning_rate:g}"
        if bounds:
            at = ", ".join(f"{b:g}" for b in bounds)
            rate += f", x{tc.lr_decay_factor:g} after epoch{'s' if len(bounds) > 1 else ''} {at}"
        else:
            rate += " (constant)"
        lines.append(
            f"  [{i + 1}/{n}] {stage.label}: {tc.num_epochs} epoch"
            f"{'s' if tc.num_epochs != 1 else ''} x {spe} steps = "
            f"{tc.num_epochs * spe} steps; {rate}"
        )
    return "\n".join(lines)


def _copy(section):
    return section.copy_and_resolve_references() if hasattr(section, "unlocked") else section


def num_classes_of(config) -> int | None:
    """The model's ``num_classes`` or, if unset, the dataset's (known without loading it)."""
    n = config.model.get("num_classes")
    if n is None and config.data.get("name") in data_lib.DATASETS:
        n = data_lib.DATASETS[config.data.name][1]
    elif n is None and config.data.get("name") in data_lib.NAMES:  # an image folder: its classes
        n = data_lib.check_config(config.data)["num_classes"]
    return n


def stream_names(config) -> tuple[str, ...]:
    streams = config.model.get("streams") or {}
    return tuple(s for s in STREAM_NAMES if s in streams)


def _check_two_phase(config) -> tuple[str, ...]:
    """One clear ValueError for a config that cannot be trained in two phases."""
    model = config.model
    if model.get("name") != "multistream":
        raise ValueError(
            f"train.phases='two_phase' needs a multi-stream model, but model.name="
            f"{model.get('name')!r}: use train.phases='single' for single-stream networks"
        )
    names = stream_names(config)
    unknown = sorted(set(model.get("streams") or {}) - set(STREAM_NAMES))
    if unknown or not names:
        raise ValueError(
            f"model.streams {sorted(model.get('streams') or {})} is invalid: give streams named "
            f"among {list(STREAM_NAMES)}"
        )
    if not model.get("freeze_streams", False):
        raise ValueError(
            "train.phases='two_phase' trains the head on frozen streams: set "
            "model.freeze_streams=True (or train.phases='end_to_end' to train everything at once)"
        )
    tc = config.train
    if tc.trainable is None or any(str(p).strip("/").split("/")[0] in names for p in tc.trainable):
        raise ValueError(
            f"train.trainable={tc.trainable!r} is invalid for phase 2: with frozen streams only "
            "the head trains, e.g. train.trainable=('head', 'classifier') (a stream prefix or None "
            "would let weight decay shrink the frozen streams)"
        )
    if tuple(tc.init_from):
        raise ValueError(
            f"train.init_from={tuple(tc.init_from)!r} must be empty with train.phases='two_phase':"
            " phase 2 loads the phase-1 runs itself (point config.phase1.<stream>.workdir at "
            "existing stream runs to reuse them)"
        )
    phase1 = config.get("phase1")
    missing = [s for s in names if phase1 is None or s not in phase1 or "train" not in phase1[s]]
    if missing:
        raise ValueError(
            f"config.phase1 has no training recipe for the streams {missing}: give "
            "config.phase1.<stream>.train (a single-stream config's train section) for each of "
            f"{list(names)}"
        )
    extra = sorted(set(phase1) - set(names))
    if extra:
        raise ValueError(
            f"config.phase1 names {extra}, which are not streams of the model {list(names)}"
        )
    return names


def _check_end_to_end(config) -> None:
    if config.model.get("name") != "multistream" or config.model.get("freeze_streams", False):
        raise ValueError(
            "train.phases='end_to_end' trains a multi-stream network from scratch: it needs "
            "model.name='multistream' with model.freeze_streams=False"
        )
    if config.train.trainable is not None:
        raise ValueError(
            f"train.trainable={config.train.trainable!r}: end-to-end training trains every "
            "parameter; leave train.trainable=None"
        )


def stream_workdir(config, workdir: str, name: str) -> str:
    """Phase 1's run of stream ``name``: ``config.phase1.<name>.workdir`` or
    ``DIR/streams/<name>``."""
    given = config.phase1[name].get("workdir")
    return os.path.abspath(given or os.path.join(workdir, STREAMS_SUBDIR, name))


def stream_config(config, name: str) -> ml_collections.ConfigDict:
    """The single-stream config of phase 1's stream ``name``.

    Same seed, data and ``multi_host`` as ``config``; model ``config.model.streams.<name>`` (with
    the multi-stream ``width_divisor`` if one is set, and the network's ``num_classes``); train
    ``config.phase1.<name>.train``. Built with the same keys as a single-stream config file, so
    that a run of, e.g., ``configs/cifar10_e2_ii.py`` with the same data and seed is the same
    experiment and can be reused through ``config.phase1.<name>.workdir``. Of a config not yet
    :func:`resolve`-d, the stream's ``train.epochs_scale`` is the one it trains with (its own,
    else the run's), so that it equals the stream's own config file's at the same scale.
    """
    c = ml_collections.ConfigDict()
    # seed_offset: streams of one family in several slots (Table 4's three standard streams)
    # must not be the same run.
    c.seed = config.seed + int(config.phase1[name].get("seed_offset", 0) or 0)
    c.multi_host = config.get("multi_host", False)
    # A single run's values of the many-seed keys (invjax.training.many; invjax/configs/base.py).
    c.seeds = ml_collections.config_dict.placeholder(tuple)
    c.realisation_from_seed = ml_collections.config_dict.placeholder(bool)
    c.seeds_strategy = ml_collections.config_dict.placeholder(str)
    c.precision = config.get("precision", "default")
    c.eval_precision = config.get("eval_precision", "highest")
    c.data = _copy(config.data)
    model = _copy(config.model.streams[name])
    with model.unlocked():
        if config.model.get("width_divisor") is not None:
            model.width_divisor = float(config.model.width_divisor)
        # The stream's classifier has the whole network's classes (a config written for a
        # 10-class dataset, run on an image folder with --config.model.num_classes=K).
        model.num_classes = num_classes_of(config)
    c.model = model
    c.train = _copy(config.phase1[name].train)
    with c.train.unlocked():
        c.train.phases = "single"
        if "epochs_scale" in c.train and c.train.epochs_scale is None:  # follows the run's
            scale = config.train.get("epochs_scale")
            c.train.epochs_scale = 1.0 if scale is None else scale
    return c


def head_config(config, workdir: str) -> ml_collections.ConfigDict:
    """Phase 2's config: ``config`` with ``train.init_from`` = every stream's phase-1 run (whole
    variable trees, copied under the stream's name; their classifiers are left out)."""
    c = config.copy_and_resolve_references()
    with c.unlocked():
        c.train.init_from = tuple(
            (stream_workdir(config, workdir, s), "", s) for s in stream_names(config)
        )
        if c.model.get("num_classes") is None:
            c.model.num_classes = num_classes_of(config)
        if c.model.get("head") == "concat":  # concatenation has no parameters to train
            c.train.trainable = tuple(p for p in c.train.trainable if p.strip("/") != "head")
    return c


def stored_config(config, workdir: str) -> ml_collections.ConfigDict:
    """The config that a run of ``config`` (:func:`resolve`-d) in ``workdir`` stores with its
    checkpoints, which :func:`invjax.run.finished_results` compares: phase 2's
    (:func:`head_config`) for two phases, else ``config`` with ``model.num_classes`` the
    dataset's where it is unset (as the run fills it in)."""
    if phases_of(config) == "two_phase":
        return head_config(config, workdir)
    if config.model.get("num_classes") is not None:
        return config
    c = config.copy_and_resolve_references()
    with c.unlocked():
        c.model.num_classes = num_classes_of(config)
    return c


# ----------------------------------------------------------------------------- check and run


def check(config, workdir: str) -> Plan:
    """Validate every phase of the command before any compute (contract 4); returns the plan.

    Raises ValueError (and its subclasses :class:`invjax.checkpoint.CheckpointError`,
    :class:`invjax.data.DatasetNotPreparedError`) naming the first bad value. Writes nothing.
    Every stage still to run is prepared here, once, for :func:`execute` to run; phase 2 without
    its phase-1 sources while those are not finished (everything else about it is checked).
    """
    check_values(config)
    config = resolve(config)
    phases = phases_of(config)
    if phases == "end_to_end":
        _check_end_to_end(config)
    if phases != "two_phase":
        exp = prepare(config, workdir)
        stage = Stage("run", config, workdir, experiment=exp, state_bytes=exp.state_bytes)
        return Plan(phases, config, workdir, [stage])
    workdir = os.path.abspath(workdir)
    names = _check_two_phase(config)
    datasets: dict[str, Any] = {}  # data config (JSON) -> loaded dataset, shared by the stages

    def stage(name, cfg, wd, load_sources=True) -> Stage:
        done = run_lib.finished_results(cfg, wd)
        if done is not None:
            return Stage(name, cfg, wd, done)
        key = cfg.data.to_json_best_effort(sort_keys=True)
        exp = prepare(cfg, wd, load_sources, dataset=datasets.get(key))
        datasets[key] = exp.dataset
        return Stage(name, cfg, wd, experiment=exp, state_bytes=exp.state_bytes)

    stages = [stage(n, stream_config(config, n), stream_workdir(config, workdir, n)) for n in names]
    streams_done = all(s.results is not None for s in stages)
    stages.append(stage("head", head_config(config, workdir), workdir, streams_done))
    return Plan(phases, config, workdir, stages)


def checkpoint_bytes(plan: Plan) -> int:
    """The largest checkpoint (arrays only) a stage of the plan will write."""
    return max((s.state_bytes for s in plan.stages if s.results is None), default=0)


def workdirs(plan: Plan) -> list[str]:
    """The directories the plan writes in (each stage still to run): locked by :func:`execute`."""
    return list(dict.fromkeys(os.path.abspath(s.workdir) for s in plan.stages if s.results is None))


def _say(message: str) -> None:
    if jax.process_index() == 0:
        print(message, flush=True)


def _error(results) -> str:
    e = results.get("test_error")
    return f"{e:.2f}%" if isinstance(e, int | float) and math.isfinite(e) else "n/a"


def _write_results(workdir: str, results: dict) -> None:
    if jax.process_index() == 0:
        run_lib.write_json_atomic(os.path.join(workdir, run_lib.RESULTS_FILE), results)


def execute(plan: Plan, say: Callable[[str], None] = _say, record: dict | None = None) -> dict:
    """Run the stages of a checked plan (reusing finished ones); returns the final results.

    ``record``: extra entries for ``results.json`` (``invjax.main`` records the config file and
    the command-line overrides there, for :mod:`invjax.report`); phase-1 runs get them too, with
    ``stream``, unless they already carry a record of their own (a reused standalone run).
    """
    with contextlib.ExitStack() as stack:
        if jax.process_index() == 0:  # before any compute; re-entrant with invjax.main's lock
            stack.enter_context(workdir_lib.locked(workdirs(plan)))
        return _execute(plan, say, record)


def _execute(plan: Plan, say: Callable[[str], None], record: dict | None) -> dict:
    record = dict(record or {})
    if plan.phases != "two_phase":
        results = loop.run(plan.stages[0].experiment)
        if record:
            results.update(record)
            _write_results(plan.workdir, results)
        return results
    n = len(plan.stages) - 1
    left = {id(s): _steps_left(s) for s in plan.stages if s.results is None}
    total, done, t0 = sum(left.values()), 0, time.perf_counter()
    for i, stage in enumerate(plan.stages):
        where = f"[{i + 1}/{n + 1}] {stage.label} in {stage.workdir}"
        if stage.results is not None:
            say(f"{where}: finished before, reused (test_error={_error(stage.results)})")
            continue
        say(f"{where}; {_job_eta(total - done, total, done, time.perf_counter() - t0)}")
        try:  # phase 2's sources, which phase 1 has just written
            exp = with_sources(stage.experiment)
        except ValueError as e:  # CheckpointError too
            raise StageError(f"{stage.label} in {stage.workdir} cannot start: {e}") from e
        stage.results = loop.run(exp)
        done += left[id(stage)]
        stage.experiment = None  # its dataset and restored state are no longer needed
        if record and stage.name != "head" and "config_file" not in stage.results:
            stage.results.update(record, stream=stage.name)
            _write_results(stage.workdir, stage.results)
        say(f"{stage.label}: test_error={_error(stage.results)}")
    return _combine(plan, record)


def _steps_left(stage: Stage) -> int:
    """Optimiser steps a prepared stage still has to run (its restored step counted done)."""
    exp = stage.experiment
    return exp.num_steps - (exp.restored.step if exp.restored is not None else 0)


def _job_eta(left: int, total: int, done: int, elapsed: float) -> str:
    """The whole job's remaining work, and its ETA at the steps-per-second of the stages run so
    far (per-step costs differ between streams and the head: an estimate that each finished
    stage refines; none before the first)."""
    text = f"job: {left} of {total} steps left"
    if not done:
        return text + " (job ETA after the first stage)"
    return text + f", job ETA {format_duration(left * elapsed / done)} at the rate so far"


def _combine(plan: Plan, record: dict) -> dict:
    """Phase 2's results with the phase-1 summary (written to ``DIR/results.json``)."""
    head = plan.stages[-1].results
    results = dict(head)
    # A results.json that was combined before keeps phase 2's own wall time there.
    phase2_time = head.get("phase2_wall_time_s", head.get("wall_time_s", 0.0))
    phase1 = {}
    for s in plan.stages[:-1]:
        r = s.results
        phase1[s.name] = {
            k: r.get(k) for k in ("test_error", "val_error", "params", "wall_time_s", "epochs")
        }
        phase1[s.name]["workdir"] = s.workdir
    results.update(
        phases=plan.phases,
        phase1=phase1,
        phase2_wall_time_s=phase2_time,
        wall_time_s=phase2_time + sum(v["wall_time_s"] or 0.0 for v in phase1.values()),
    )
    results.update(record)
    _write_results(plan.workdir, results)
    return results
