"""Train and evaluate: the one entry point of the run machinery (``python -m invjax.main`` is
its command line).

``train_and_evaluate(config, workdir)`` does everything the command does: it checks the workdir
and every stage of the job before any compute, trains ``config.seeds`` as K models
(:mod:`invjax.training.many`) or one run (its phases, :mod:`invjax.training.plan`), holds the
workdir's lock (:mod:`invjax.workdir`) while it writes, records what the folder holds
(``DIR/run_kind.json``), stops on SIGTERM/SIGINT after saving (:mod:`invjax.training.signals`),
and returns what ``workdir/results.json`` (K models: ``workdir/seeds.json``) holds.
:func:`dry_run` is the same checks and a description, writing nothing. The machinery lives in
:mod:`invjax.training`, one idea per module:

``training.optimizer``
    ``config.train`` checked; the paper's optimisers and step schedules; frozen parameters.
``training.state``
    :class:`TrainState`, its initialisation and the ``init_from`` grafts of finished runs.
``training.steps``
    The jitted train and eval steps, the batches of a step, evaluation of a split.
``training.experiment``
    One run checked and loaded (``prepare``): dataset, model, optimiser, restored checkpoint.
``training.loop``
    The loop of one run: epochs, checkpoints, the model's epoch-end protocol, results.
``training.signals``
    SIGTERM/SIGINT: finish the step, save, stop (several processes agree on the step).
``training.plan``
    The stages of one command: one run, or the paper's two phases (phase-1 streams, then the
    head), each prepared once.
``training.many``, ``training.lockstep``
    ``--config.seeds``: K models of one config in one command, each the single run with its
    seed, stepped together by one compiled step.

Errors. Bad input raises before any compute: ``ValueError`` naming the value (its subclasses
:class:`invjax.workdir.WorkdirError` / ``WorkdirBusyError``,
:class:`invjax.checkpoint.CheckpointError`), ``FileNotFoundError`` or ``OSError`` of the
workdir. Training raises :class:`invjax.training.loop.NonFiniteLossError`,
:class:`~invjax.training.loop.RunIOError`, :class:`invjax.checkpoint.SaveError`,
:class:`invjax.training.plan.StageError` or, on a signal,
:class:`invjax.training.signals.Stopped` (a checkpoint saved) /
:class:`~invjax.training.signals.Interrupted` (nothing unsaved). ``on_compute``, called once
every check has passed and just before the first compute, tells them apart for a caller
(``invjax.main`` maps them to its exit statuses).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable

import jax

from invjax import parallel
from invjax import workdir as workdir_lib
from invjax.data import scaled_mnist
from invjax.training import many, signals
from invjax.training import plan as plan_lib


@dataclasses.dataclass
class Job:
    """A checked job: one run's plan (``seeds`` None) or K models' (:class:`many.ManyPlan`)."""

    config: object
    path: str  # the workdir, absolute
    seeds: tuple[int, ...] | None
    plan: object  # plan_lib.Plan or many.ManyPlan

    @property
    def kind(self) -> str:
        return workdir_lib.SEEDS if self.seeds else workdir_lib.RUN


def _split(config, workdir: str, record: dict | None):
    """``(path, seeds, run config, record)``: the workdir checked, ``config.seeds`` read (a
    single seed is that single run, recorded as such); starts multi-process JAX if asked."""
    path = workdir_lib.check(workdir)
    seeds, run_config = many.split(config)
    record = dict(record or {})
    if run_config is not config:
        record = many.model_record(record, config, run_config.seed)
    parallel.initialize_distributed(bool(run_config.get("multi_host", False)))
    return path, seeds, run_config, record


def _check(config, path: str, workdir: str, seeds) -> Job:
    """Every stage of every model checked and prepared (no compute, nothing written); a folder
    that holds the other kind of job is refused naming the command that fits."""
    workdir_lib.check_kind(path, workdir_lib.SEEDS if seeds else workdir_lib.RUN, seeds)
    plan = many.check(config, workdir) if seeds else plan_lib.check(config, workdir)
    return Job(config, path, seeds, plan)


def dry_run(config, workdir: str, describe: Callable | None = None) -> str:
    """What ``--dry_run`` prints: every check of :func:`train_and_evaluate`, then each stage
    (``describe(experiment, restored_step)`` of each prepared run, by default
    :func:`invjax.training.experiment.describe`). No lock, no compute, nothing written."""
    from invjax.training.experiment import describe as describe_run

    describe = describe or describe_run
    path, seeds, config, _ = _split(config, workdir, None)
    with scaled_mnist.checks_only():  # a realisation not cached is neither made nor written
        job = _check(config, path, workdir, seeds)
    show = lambda p: _describe_plan(p, describe)  # noqa: E731
    return many.describe(job.plan, describe_plan=show) if seeds else show(job.plan)


def _describe_plan(plan, describe) -> str:
    lines = [f"dry run: {plan.phases} experiment, {len(plan.stages)} stage(s); nothing computed"]
    for stage in plan.stages:
        if stage.results is not None:
            lines.append(f"{stage.name}: finished in {stage.workdir} (reused)")
        elif stage.experiment is not None:
            restored = stage.experiment.restored
            lines.append(describe(stage.experiment, restored.step if restored else None))
        else:
            lines.append(f"{stage.name}: to run in {stage.workdir}")
    return "\n".join([*lines, plan_lib.schedule_text(plan)])


def train_and_evaluate(
    config,
    workdir: str,
    *,
    record: dict | None = None,
    on_compute: Callable[[], None] | None = None,
) -> dict:
    """Check, lock, train (or resume) and evaluate the job of ``config`` in ``workdir``.

    ``config.seeds = (k_1, ..., k_K)`` (K >= 2) trains K models in ``workdir/seed_<k>/`` and
    returns the summary of ``seeds.json`` (its ``results``: seed -> that model's results);
    otherwise the run's results (``results.json``), each of ``config.train.phases``' stages run
    in turn. ``record``: entries added to each ``results.json`` (``invjax.main`` records its
    config file and overrides). A workdir that another process holds raises
    :class:`invjax.workdir.WorkdirBusyError` before anything is read; see the module docstring
    for the other errors. SIGTERM/SIGINT are handled here unless an enclosing
    :func:`invjax.training.signals.handle_signals` block does it already.
    """
    path, seeds, config, record = _split(config, workdir, record)
    own_signals = signals.command_request() is None
    with contextlib.ExitStack() as stack:
        if own_signals:
            stack.enter_context(signals.handle_signals())
        with scaled_mnist.caches_deferred() as commit_caches:  # none if refused
            job = _locked_check(stack, config, path, workdir, seeds)
            if jax.process_index() == 0:
                commit_caches()
        if jax.process_index() == 0:
            workdir_lib.write_kind(path, job.kind, seeds=seeds, record=record)
        if on_compute is not None:
            on_compute()
        execute = many.execute if seeds else plan_lib.execute
        return execute(job.plan, record=record)


def _locked_check(stack: contextlib.ExitStack, config, path: str, workdir: str, seeds) -> Job:
    """:func:`_check` under the workdir's lock (process 0 holds it), and the room for a
    checkpoint. The lock is taken before the checkpoints are read where the workdir exists (a
    run writing them could otherwise be read half-way); a new workdir is created and locked
    only once every check has passed (bad input leaves nothing behind), and checked again if
    another run created it meanwhile."""
    primary = jax.process_index() == 0
    existed = os.path.isdir(path)
    if existed and primary:
        stack.enter_context(workdir_lib.locked([path]))
    job = _check(config, path, workdir, seeds)
    if not existed and primary:
        stack.enter_context(workdir_lib.locked([path]))
        if set(os.listdir(path)) - {workdir_lib.LOCK_FILE}:  # another run got there first
            job = _check(config, path, workdir, seeds)
    if primary:
        nbytes = many.checkpoint_bytes(job.plan) if seeds else plan_lib.checkpoint_bytes(job.plan)
        workdir_lib.check_space(path, nbytes)
    return job
