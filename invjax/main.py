"""Train and evaluate one experiment (README, "Contracts", 1).

    python -m invjax.main --config=configs/NAME.py --workdir=DIR [--config.KEY=VALUE ...]
    python -m invjax.main --config=configs/NAME.py --help     # also lists the config's keys
    python -m invjax.main --config=configs/NAME.py --workdir=DIR --dry_run   # checks only

Examples:
    python -m invjax.main --config=configs/digits_cnn.py --workdir=runs/digits_cnn
    python -m invjax.main --config=configs/cifar10_e2_ii.py --workdir=runs/c10_e2ii_1k \\
        --config.data.n_train=1000 --config.seed=1

Common overrides: ``--config.seed``, ``--config.data.n_train`` (N_t, 0 = all),
``--config.train.num_epochs``, ``--config.train.batch_size`` (global; divisible by the number
of devices, all of which are used), ``--config.train.learning_rate``, ``--config.model.head``
(multi-stream). Every experiment of the paper is one file in ``configs/`` (README, "Configs").

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
``--config.seeds=0,1,2`` trains one model per seed in ``DIR/seed_<k>/`` (each the single run
with that seed) in one program; it prints ``seed=<k> test_error=X.XX%`` per model and, last, the
mean as ``test_error=X.XX%`` (:mod:`invjax.training.many`, docs/many_models.md).
Multi-stream configs with ``train.phases='two_phase'`` run both of the paper's phases (phase 1's
stream runs in ``DIR/streams/<stream>``, then the head in ``DIR``; :mod:`invjax.training.plan`).
The work itself is in :mod:`invjax.training` (its map: :mod:`invjax.train`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys

from absl import app, flags, logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Experiment config file.", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and results.")
_CACHE = flags.DEFINE_string(
    "compilation_cache",
    None,
    "Directory of JAX's persistent compilation cache ('off' disables it). Default: "
    "$INVJAX_COMPILATION_CACHE, else $JAX_COMPILATION_CACHE_DIR, else ~/.cache/invjax/xla.",
)
_DRY_RUN = flags.DEFINE_bool(
    "dry_run",
    False,
    "Check the config, the data, the model's shapes and the workdir, print what the run would "
    "do, and stop before any compute; writes nothing.",
)


def _fail(message: str, status: int = 2, kind: str = "error: "):
    print(f"invjax: {kind}{message}", file=sys.stderr, flush=True)
    # The message is the whole report: once it is out, objects that orbax or asyncio leave
    # behind after a failed save or read must not add "Exception ignored" tracebacks when they
    # are collected at shutdown.
    sys.unraisablehook = lambda unraisable: None
    sys.exit(status)


def _config_args(argv) -> tuple[str | None, list[str]]:
    """``(--config's value or None, the --config.KEY=VALUE arguments)`` of ``argv``."""
    path, overrides = None, []
    for i, arg in enumerate(argv[1:], 1):
        if arg.startswith("--config="):
            path = arg.split("=", 1)[1]
        elif arg == "--config" and i + 1 < len(argv):
            path = argv[i + 1]
        elif arg.startswith("--config."):
            overrides.append(arg)
    return path, overrides


def _load_config(path: str):
    """``get_config([ARG])`` of the config file ``path`` (``FILE[:ARG]``), run once; one clear
    message (exit 2) for a missing file or one that fails to load."""
    file = path.partition(":")[0]
    if not os.path.isfile(file):
        _fail(f"--config={path}: no such config file (configs live in configs/*.py)")
    try:
        from invjax.configs import ConfigFileError, load

        return load(path)
    except ConfigFileError as e:
        _fail(str(e))
    except Exception as e:  # noqa: BLE001 (any failure of the user's file gets one message)
        _fail(f"cannot load config file {file}: {type(e).__name__}: {e}")


def _check_overrides(config, overrides) -> None:
    """One clear message for an unknown ``--config.KEY`` (ml_collections reports it as a
    KeyError traceback or not at all)."""
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


class _ConfigFileParser(flags.ArgumentParser):
    """The parser of ``--config``: loads the file once (:func:`_load_config`), checks the
    command line's overrides on that config, and locks it; config_flags then applies the
    overrides to it. (It replaces config_flags' own loader, which reports a missing file only
    when the config is first read and an unknown key as a traceback.)"""

    def __init__(self, overrides=()):
        self.overrides = list(overrides)

    def parse(self, argument):
        config = _load_config(argument)
        _check_overrides(config, self.overrides)
        config.lock()  # lock_config=True: an override cannot add a key
        return config

    def flag_type(self):
        return "config object"


def _config_keys(config, prefix="config") -> list[str]:
    out = []
    for key in sorted(config.keys()):
        value = config[key]
        if hasattr(value, "keys") and hasattr(value, "unlocked"):
            out += _config_keys(value, f"{prefix}.{key}")
        else:
            out.append(f"  --{prefix}.{key}={value!r}")
    return out


def _help(argv) -> str:
    """The module docstring, the flags, and with ``--config=FILE`` the keys it can override."""
    text = [__doc__.rstrip(), "", "flags:"]
    text += [
        f"  --{name}: {flags.FLAGS[name].help}"
        for name in ("config", "workdir", "dry_run", "compilation_cache", "verbosity")
        if name in flags.FLAGS
    ]
    path, _ = _config_args(argv)
    if path is None:
        here = os.path.join(os.getcwd(), "configs")
        if os.path.isdir(here):
            names = sorted(
                f[:-3] for f in os.listdir(here) if f.endswith(".py") and f != "__init__.py"
            )
            text += ["", f"configs (in {here}): " + ", ".join(names)]
        text += ["", "Add --config=configs/NAME.py to --help to list that config's keys."]
        return "\n".join(text)
    config = _load_config(path)  # --help parses no flags: this is the file's one load
    text += ["", f"keys of {path} (override with --config.KEY=VALUE; shown: its values):"]
    return "\n".join(text + _config_keys(config))


def _parse_flags(argv):
    if any(a in ("-h", "--help", "-help", "--helpshort") for a in argv[1:]):
        print(_help(argv))
        sys.exit(0)
    _, overrides = _config_args(argv)
    flags.FLAGS["config"].parser = _ConfigFileParser(overrides)
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


def _describe(plan, describe) -> str:
    """What ``--dry_run`` prints: each stage of the plan and, where prepared, its banner."""
    lines = [f"dry run: {plan.phases} experiment, {len(plan.stages)} stage(s); nothing computed"]
    for stage in plan.stages:
        if stage.results is not None:
            lines.append(f"{stage.name}: finished in {stage.workdir} (reused)")
        elif stage.experiment is not None:
            restored = stage.experiment.restored
            lines.append(describe(stage.experiment, restored.step if restored else None))
        else:
            lines.append(f"{stage.name}: to run in {stage.workdir}")
    from invjax.training.plan import schedule_text

    return "\n".join([*lines, schedule_text(plan)])


def main(argv):
    del argv
    from invjax.training import signals

    if _WORKDIR.value is None or _CONFIG.value is None:
        _fail("both --config=configs/NAME.py and --workdir=DIR are required")
    if not flags.FLAGS["verbosity"].present:  # orbax logs every file it writes at INFO
        logging.set_verbosity(logging.WARNING)
    with signals.handle_signals():
        try:
            results = _check_and_run(_CONFIG.value, _WORKDIR.value)
        except signals.Stopped as e:  # a checkpoint at the step reached was saved
            _fail(str(e), status=e.status, kind="")
        except signals.Interrupted as e:
            _fail(
                f"stopped by {e} outside training (nothing unsaved was lost); run the same "
                "command to resume",
                status=128 + e.signum,
                kind="",
            )
    if results is not None:  # None: --dry_run
        for seed, r in results.get("results", {}).items():  # several seeds: each model's first
            print(f"seed={seed} test_error={r['test_error']:.2f}%", flush=True)
        print(f"test_error={results['test_error']:.2f}%", flush=True)  # their mean


def _check_and_run(config, workdir_flag: str) -> dict | None:
    """Check the workdir, lock it, check every phase, then train (module docstring's statuses).

    The lock is taken before the checkpoints are read where the workdir exists (a run writing
    them could otherwise be read half-way); a new workdir is created and locked only once every
    check has passed (bad input leaves nothing behind), and checked again if another run
    created it meanwhile.
    """
    import jax

    from invjax import checkpoint, compilation_cache, parallel, workdir
    from invjax.training import loop, many
    from invjax.training import plan as plan_lib
    from invjax.training.experiment import describe

    try:
        path = workdir.check(workdir_flag)
        seeds, run_config = many.split(config)  # --config.seeds: K models (training.many)
    except ValueError as e:  # WorkdirError too
        _fail(str(e))
    record = _record()
    if run_config is not config:  # one seed of config.seeds: recorded as that single run
        record = many.model_record(record, config, run_config.seed)
    config = run_config
    if seeds is None:
        check, execute, nbytes = plan_lib.check, plan_lib.execute, plan_lib.checkpoint_bytes
        show = functools.partial(_describe, describe=describe)
    else:
        check, execute, nbytes = many.check, many.execute, many.checkpoint_bytes
        show = functools.partial(many.describe, describe_plan=lambda p: _describe(p, describe))
    compilation_cache.enable(_CACHE.value)
    try:
        parallel.initialize_distributed(bool(config.get("multi_host", False)))
    except ValueError as e:  # a bad JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID
        _fail(str(e))
    if _DRY_RUN.value:  # every check, no lock, nothing written
        try:
            plan = check(config, workdir_flag)
        except (ValueError, checkpoint.CheckpointError, FileNotFoundError) as e:
            _fail(str(e))
        print(show(plan), flush=True)
        return None
    primary = jax.process_index() == 0
    bad_input = (ValueError, checkpoint.CheckpointError, FileNotFoundError)
    with contextlib.ExitStack() as stack:
        try:
            existed = os.path.isdir(path)
            if existed and primary:
                stack.enter_context(workdir.locked([path]))
            plan = check(config, workdir_flag)  # every phase, before any compute
            if not existed and primary:
                stack.enter_context(workdir.locked([path]))
                if set(os.listdir(path)) - {workdir.LOCK_FILE}:  # another run got there first
                    plan = check(config, workdir_flag)
            if primary:
                workdir.check_space(path, nbytes(plan))
        except bad_input as e:  # WorkdirError (busy, full) too
            _fail(str(e))
        except OSError as e:
            _fail(f"--workdir={workdir_flag}: {e}")
        try:
            return execute(plan, record=record)
        except (loop.NonFiniteLossError, loop.RunIOError, checkpoint.SaveError) as e:
            _fail(str(e), status=1)
        except (plan_lib.StageError, workdir.WorkdirError) as e:
            _fail(str(e))


if __name__ == "__main__":
    app.run(main, flags_parser=_parse_flags)
