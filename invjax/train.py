"""Train and evaluate: the one entry point of the run machinery (README, "Contracts", 1).

``train_and_evaluate(config, workdir)`` is ``python -m invjax.main`` minus the command line: it
checks every stage of the command before any compute, then trains (or resumes) and evaluates,
and returns what ``workdir/results.json`` holds. The machinery lives in :mod:`invjax.training`,
one idea per module:

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
    SIGTERM/SIGINT: finish the step, save, stop.
``training.plan``
    The stages of one command: one run, or the paper's two phases (phase-1 streams, then the
    head), each prepared once.
``training.many``, ``training.lockstep``
    ``--config.seeds``: K models of one config in one command, each the single run with its
    seed, stepped together by one compiled step.
"""

from __future__ import annotations

from invjax.training import plan


def train_and_evaluate(config, workdir: str) -> dict:
    """Check every stage of ``config.train.phases`` (ValueError naming the first bad value, no
    compute), then train or resume each in ``workdir`` and evaluate; returns the results."""
    return plan.execute(plan.check(config, workdir))
