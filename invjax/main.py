"""Train and evaluate one experiment (DESIGN.md, contract 1).

    python -m invjax.main --config=configs/NAME.py --workdir=DIR [--config.KEY=VALUE ...]

Writes ``DIR/metrics.jsonl``, ``DIR/results.json``, ``DIR/tensorboard/`` and orbax checkpoints
under ``DIR/checkpoints``; the last line of output is ``test_error=X.XX%``. Started again with
the same ``DIR`` it resumes. Bad input (an unknown config key, an invalid value, a training size
the classes cannot split, a wrong image shape, an unreadable checkpoint) stops with one message
before any compute (exit status 2); a NaN/Inf loss stops with the step named (exit status 1).
The workdir is checked (non-empty, a writable directory, room for a checkpoint) and locked
against a second run before any compute (:mod:`invjax.workdir`); a full disk or another write
failure during training stops with one message, keeping the last good checkpoint (exit status 1).
SIGTERM or SIGINT finishes the current step, saves a checkpoint there and exits with status
128 + the signal number (143, 130); the same command resumes (README, "Under faults").
Multi-stream configs with ``train.phases='two_phase'`` run both of the paper's phases (phase 1's
stream runs in ``DIR/streams/<stream>``, then the head in ``DIR``; :mod:`invjax.experiment`).
The work itself is in :mod:`invjax.train`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys

from absl import app, flags, logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Experiment config file.", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and results.")


def _fail(message: str, status: int = 2, kind: str = "error: "):
    print(f"invjax: {kind}{message}", file=sys.stderr, flush=True)
    # The message is the whole report: once it is out, objects that orbax or asyncio leave
    # behind after a failed save or read must not add "Exception ignored" tracebacks when they
    # are collected at shutdown.
    sys.unraisablehook = lambda unraisable: None
    sys.exit(status)


def _check_config_args(argv) -> None:
    """Give one clear message for a missing config file or an unknown ``--config.KEY``.

    (ml_collections reports those as a KeyError traceback or not at all.)
    """
    path, overrides = None, []
    for i, arg in enumerate(argv[1:], 1):
        if arg.startswith("--config="):
            path = arg.split("=", 1)[1]
        elif arg == "--config" and i + 1 < len(argv):
            path = argv[i + 1]
        elif arg.startswith("--config."):
            overrides.append(arg)
    if path is None:
        return  # absl reports the missing required flag
    file, _, param = path.partition(":")
    if not os.path.isfile(file):
        _fail(f"--config={path}: no such config file (configs live in configs/*.py)")
    try:
        spec = importlib.util.spec_from_file_location("_invjax_config_check", file)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        config = module.get_config(param) if param else module.get_config()
    except Exception as e:  # noqa: BLE001 (any failure of the user's file gets one message)
        _fail(f"cannot load config file {file}: {type(e).__name__}: {e}")
    for arg in overrides:
        key = arg[2:].split("=", 1)[0][len("config.") :]
        node, walked = config, "config"
        for part in key.split("."):
            if not hasattr(node, "keys") or not hasattr(node, "unlocked"):
                break  # below a leaf (e.g. a tuple): ml_collections judges
            if part not in node:
                _fail(
                    f"unknown config key {walked[len('config.') :] + '.' if '.' in walked else ''}"
                    f"{part!s} in {arg}: valid keys of {walked} are {sorted(node.keys())}"
                )
            node, walked = node[part], f"{walked}.{part}"


def _parse_flags(argv):
    _check_config_args(argv)
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        _fail(str(e))


def _record() -> dict:
    """What ``results.json`` records of the command: the config file and the overrides."""
    flag = flags.FLAGS["config"]
    return {
        "config_file": config_flags.get_config_filename(flag),
        "overrides": {k: v for k, v in sorted(config_flags.get_override_values(flag).items())},
    }


def main(argv):
    del argv
    from invjax import train

    if _WORKDIR.value is None or _CONFIG.value is None:
        _fail("both --config=configs/NAME.py and --workdir=DIR are required")
    if not flags.FLAGS["verbosity"].present:  # orbax logs every file it writes at INFO
        logging.set_verbosity(logging.WARNING)
    with train.handle_signals():
        try:
            results = _check_and_run(_CONFIG.value, _WORKDIR.value)
        except train.Stopped as e:  # a checkpoint at the step reached was saved
            _fail(str(e), status=e.status, kind="")
        except train.Interrupted as e:
            _fail(
                f"stopped by {e} outside training (nothing unsaved was lost); run the same "
                "command to resume",
                status=128 + e.signum,
                kind="",
            )
    print(f"test_error={results['test_error']:.2f}%", flush=True)


def _check_and_run(config, workdir_flag: str) -> dict:
    """Check the workdir, lock it, check every phase, then train (module docstring's statuses).

    The lock is taken before the checkpoints are read where the workdir exists (a run writing
    them could otherwise be read half-way); a new workdir is created and locked only once every
    check has passed (bad input leaves nothing behind), and checked again if another run
    created it meanwhile.
    """
    import jax

    from invjax import checkpoint, experiment, parallel, train, workdir

    try:
        path = workdir.check(workdir_flag)
    except workdir.WorkdirError as e:
        _fail(str(e))
    parallel.initialize_distributed(bool(config.get("multi_host", False)))
    primary = jax.process_index() == 0
    bad_input = (ValueError, checkpoint.CheckpointError, FileNotFoundError)
    with contextlib.ExitStack() as stack:
        try:
            existed = os.path.isdir(path)
            if existed and primary:
                stack.enter_context(workdir.locked([path]))
            plan = experiment.check(config, workdir_flag)  # every phase, before any compute
            if not existed and primary:
                stack.enter_context(workdir.locked([path]))
                if set(os.listdir(path)) - {workdir.LOCK_FILE}:  # another run got there first
                    plan = experiment.check(config, workdir_flag)
            if primary:
                workdir.check_space(path, experiment.checkpoint_bytes(plan))
        except bad_input as e:  # WorkdirError (busy, full) too
            _fail(str(e))
        except OSError as e:
            _fail(f"--workdir={workdir_flag}: {e}")
        try:
            return experiment.execute(plan, record=_record())
        except (train.NonFiniteLossError, train.RunIOError, checkpoint.SaveError) as e:
            _fail(str(e), status=1)
        except (experiment.StageError, workdir.WorkdirError) as e:
            _fail(str(e))


if __name__ == "__main__":
    app.run(main, flags_parser=_parse_flags)
