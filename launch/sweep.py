"""The paper's sweeps as lists of ``python -m invjax.main`` commands: variants x N_t x seeds.

    python launch/sweep.py EXPERIMENT [EXPERIMENT ...] [--sizes paper|full|N,N,...]
        [--seeds paper|S,S,...] [--runs-dir runs] [--set KEY=VALUE ...]
        (--dry_run | --local | --slurm FILE [--nodes N --gpus-per-node G --time T ...])

EXPERIMENT is a config name (``cifar10_triple``) or a group:

==============  ================================================================================
table2          Scaled-MNIST (Table 2): mnist_cnn, mnist_ses, mnist_disco, mnist_ii_disco_monomials,
                mnist_ii_disco_ws
table3:DATASET  the nine rows of Table 3 for svhn | cifar10 | stl10: std, e2, scale, e2_ii,
                scale_ii, dual_star, dual, triple_star, triple (``table3`` = all three datasets)
table4          STL-10 triple streams with and without II (Table 4)
heads           STL-10 triple stream with each combination head (appendix A.1)
end_to_end      STL-10 dual* trained end to end and in two phases (appendix A.2)
digits          the offline digits_* configs
==============  ================================================================================

Sizes (``--sizes paper``, the default; paper Section 5): Scaled-MNIST N_t in {10, 50, 100, 500,
1k, 5k, 10k, 12k} where 10k is the whole training split and 12k pools training and validation
(``data.val_fraction=0``, no best-epoch selection); SVHN and CIFAR-10 {100, 500, 1k, 5k, 10k, 50k}
(CIFAR-10's 50k is the whole training set); STL-10 the full 5k only (the paper has no STL-10
curves); digits {100, 500, all 1079}. ``--sizes full`` runs the whole training split only;
``--sizes 100,1000`` given sizes (0 = whole split). Note: SVHN's 50k cannot be class-balanced (the
core training split has 4,659 nines; invjax's subsets have N_t / 10 images per class) and stops
with that message; the whole SVHN training set is ``--sizes full``.

Seeds (``--seeds paper``): Scaled-MNIST's six realisations 0..5 ("mean and standard deviation
over the six pre-defined data splits"), else seeds 0, 1, 2 (the paper reports mean +- std without
saying how many). On Scaled-MNIST and the scaled digits every seed also picks its realisation
(``data.realisation`` = ``seed``).

Run directories: ``RUNS/<experiment>/n<N_t>_s<seed>`` (``nfull`` for the whole split), which
``python -m invjax.report RUNS`` aggregates.

Phase-1 reuse: within one point (N_t, seed), a multi-stream run whose stream has exactly the
config of a single-stream run in the sweep (e.g. the E(2) stream of ``cifar10_triple`` and
``cifar10_e2_ii``), or of a stream of an earlier multi-stream run (the heads ablation), gets
``--config.phase1.<stream>.workdir=`` that run's directory and reuses it instead of training the
stream again. Such a run therefore waits for the run it reuses: ``--local`` starts it once that
run has ended, and SLURM runs a point's commands in order (single-stream first), one array task
per point; ``--no-share`` gives every multi-stream run private streams.

Output: ``--dry_run`` prints the commands (one per line); ``--local`` runs them here (a failed
command does not stop the rest; the failures are listed at the end); ``--slurm FILE`` writes the
array job ``FILE`` from ``launch/slurm.sh.template`` and its command list ``FILE.commands`` for
GPU clusters, multi-node with ``--nodes`` (``jax.distributed`` from SLURM's environment).

Several runs at once on one machine: ``--local --parallel K --devices-per-run D`` runs K runs
side by side (each free slot takes the next run whose reused runs have ended), each pinned to
its own D devices: GPUs through
``CUDA_VISIBLE_DEVICES`` (K x D must not exceed the GPUs visible), on CPU through
``XLA_FLAGS=--xla_force_host_platform_device_count=D`` (``--platform`` auto | gpu | cpu). Each
command's output then goes to ``WORKDIR.log`` next to its run directory.

Resuming a sweep: ``--local`` skips every run that is finished with the sweep's settings (its
``results.json`` exists and records every epoch asked, and its stored ``config.json`` is this
point's experiment; results copied in without their run are taken as they are) and starts the others with their own
``--workdir``, so a run that was interrupted resumes from its last checkpoint; a sweep stopped
half-way is finished by giving the same command again. A point whose settings changed where a run
may resume (``train.num_epochs`` raised, evaluation or checkpoint intervals) runs again and
resumes; a point whose folder holds another experiment (a changed model, data or recipe) stops
the sweep before any run starts, naming the point and the difference (exit 2): give the earlier
settings, or another ``--runs-dir``.

Stopping a sweep: SIGTERM, SIGINT (Ctrl-C) or SIGHUP (its terminal closed) to ``--local`` is
passed on to the runs in progress, SIGHUP as SIGTERM (each finishes its step, saves a checkpoint
there and exits 143 or 130; they run in their own process group, so a Ctrl-C in the terminal
reaches them once, through the sweep); no further run starts; the sweep waits for them and exits
with 128 + the signal number. A second signal only repeats that it is waiting (SIGKILL to a run
abandons its save, keeping its previous checkpoint). A sweep killed outright (SIGKILL, out of
memory) cannot pass anything on: on Linux each run gets SIGTERM from the kernel when the sweep
dies (``PR_SET_PDEATHSIG``), saves and stops, so the same command resumes it.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import ctypes
import dataclasses
import importlib
import os
import pathlib
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: import configs and invjax of this checkout
    sys.path.insert(0, str(REPO))
CONFIGS = REPO / "configs"
NOT_EXPERIMENTS = ("__init__",)  # modules of configs/ that are no experiment

from invjax.layers.heads import MODES as HEADS  # noqa: E402
from invjax.training import many  # noqa: E402

TEMPLATE = pathlib.Path(__file__).resolve().with_name("slurm.sh.template")

TABLE3_ROWS = (
    "std",
    "e2",
    "scale",
    "e2_ii",
    "scale_ii",
    "dual_star",
    "dual",
    "triple_star",
    "triple",
)
GROUPS: dict[str, list[tuple[str, dict]]] = {
    "table2": [
        (f"mnist_{v}", {}) for v in ("cnn", "ses", "disco", "ii_disco_monomials", "ii_disco_ws")
    ],
    **{
        f"table3:{ds}": [(f"{ds}_{row}", {}) for row in TABLE3_ROWS]
        for ds in ("svhn", "cifar10", "stl10")
    },
    "table4": [
        ("stl10_triple_e2pool_scalepool", {}),
        ("stl10_triple_e2pool", {}),
        ("stl10_triple_scalepool", {}),
        ("stl10_triple", {}),
    ],
    "heads": [("stl10_triple", {"model.head": h}) for h in HEADS],
    "end_to_end": [("stl10_dual_star", {}), ("stl10_dual_star_end_to_end", {})],
    "digits": [(f"digits_{v}", {}) for v in ("std", "e2", "scale", "dual", "triple")],
}
GROUPS["table3"] = [e for ds in ("svhn", "cifar10", "stl10") for e in GROUPS[f"table3:{ds}"]]

# dataset -> [(label, overrides)] of the paper's training sizes.
_MNIST_FULL = {"data.n_train": 0}
_MNIST_POOLED = {"data.n_train": 0, "data.val_fraction": 0.0, "train.select_best": False}
PAPER_SIZES: dict[str, list[tuple[str, dict]]] = {
    "mnist_scale": [
        *((f"n{n}", {"data.n_train": n}) for n in (10, 50, 100, 500, 1000, 5000)),
        ("n10000", _MNIST_FULL),
        ("n12000", _MNIST_POOLED),
    ],
    "svhn_cropped": [(f"n{n}", {"data.n_train": n}) for n in (100, 500, 1000, 5000, 10000, 50000)],
    "cifar10": [
        *((f"n{n}", {"data.n_train": n}) for n in (100, 500, 1000, 5000, 10000)),
        ("n50000", {"data.n_train": 0}),
    ],
    "stl10": [("nfull", {"data.n_train": 0})],
    "scaled_digits": [("n100", {"data.n_train": 100}), ("n500", {"data.n_train": 500})]
    + [("nfull", {"data.n_train": 0})],
}
PAPER_SEEDS = {"mnist_scale": (0, 1, 2, 3, 4, 5)}
DEFAULT_SEEDS = (0, 1, 2)


@dataclasses.dataclass
class Run:
    """One command of the sweep."""

    experiment: str  # directory name: config stem plus its variant overrides
    config: str  # config stem, or "stem:ARG" for the config's argument ARG
    overrides: dict  # --config.KEY=VALUE, in order
    point: tuple[str, int]  # (size label, seed)
    workdir: str
    multi: bool = False

    def command(self, python: str = "python") -> str:
        stem, colon, arg = self.config.partition(":")
        parts = [python, "-m", "invjax.main", f"--config=configs/{stem}.py{colon}{arg}"]
        parts.append(f"--workdir={self.workdir}")
        parts += [f"--config.{k}={_fmt(v)}" for k, v in self.overrides.items()]
        return shlex.join(parts)


def _fmt(value) -> str:
    if isinstance(value, bool | int | float):
        return str(value)
    if isinstance(value, tuple):
        return "(" + "".join(f"{_fmt(v)}," for v in value) + ")"
    return str(value)


def _parse_value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def expand(names: Sequence[str]) -> list[tuple[str, dict]]:
    """Experiment names and groups -> ``[(config stem, variant overrides)]`` (duplicates once)."""
    out: list[tuple[str, dict]] = []
    for name in names:
        if name in GROUPS:
            items = GROUPS[name]
        elif (CONFIGS / f"{name}.py").is_file() and name not in NOT_EXPERIMENTS:
            items = [(name, {})]
        else:
            configs = sorted(p.stem for p in CONFIGS.glob("*.py") if p.stem not in NOT_EXPERIMENTS)
            raise ValueError(
                f"experiment {name!r} is neither a group {sorted(GROUPS)} nor a config {configs}"
            )
        for item in items:
            if item not in out:
                out.append(item)
    return out


def load_config(stem: str, overrides: dict):
    """``configs/<stem>.py``'s config with ``overrides`` applied as the command line would
    (``stem:ARG``: ``get_config(ARG)``, as ``--config=configs/<stem>.py:ARG``)."""
    stem, _, arg = stem.partition(":")
    module = importlib.import_module(f"configs.{stem}")
    config = module.get_config(arg) if arg else module.get_config()
    for key, value in overrides.items():
        *path, last = key.split(".")
        node = config
        for i, part in enumerate([*path, last]):  # an unknown key: named, with the valid ones
            if not hasattr(node, "keys") or part not in node:
                valid = sorted(node.keys()) if hasattr(node, "keys") else []
                raise ValueError(
                    f"config key {key!r} of configs/{stem}.py is unknown: "
                    f"{'.'.join(path[:i]) or 'the config'} has no {part!r} (its keys: {valid})"
                )
            if i < len(path):
                node = node[part]
        node[last] = value
    return config


def variant_name(stem: str, variant: dict) -> str:
    return stem + "".join(f"-{k.split('.')[-1]}_{_fmt(v)}" for k, v in variant.items())


def build(
    names: Sequence[str],
    sizes: str = "paper",
    seeds: str = "paper",
    runs_dir: str = "runs",
    extra: dict | None = None,
    share: bool = True,
) -> list[Run]:
    """The sweep's runs, ordered by point (size, seed) and, within one, single-stream first."""
    from invjax.training import plan  # the same stream configs as the runs will compute

    extra = dict(extra or {})
    runs: list[Run] = []
    for stem, variant in expand(names):
        base = load_config(stem, {**variant, **extra})
        dataset = base.data.name
        if sizes == "paper":
            size_list = PAPER_SIZES.get(dataset, [("nfull", {"data.n_train": 0})])
        elif sizes == "full":
            size_list = [("nfull", {"data.n_train": 0})]
        else:
            ns = [int(s) for s in sizes.split(",") if s.strip()]
            size_list = [(f"n{n}" if n else "nfull", {"data.n_train": n}) for n in ns]
        if seeds == "paper":
            seed_list = PAPER_SEEDS.get(dataset, DEFAULT_SEEDS)
        else:
            seed_list = tuple(int(s) for s in seeds.split(",") if s.strip())
        realisations = dataset in ("mnist_scale", "scaled_digits")  # one split per seed
        name = variant_name(stem, variant)
        multi = plan.phases_of(base) == "two_phase"
        for label, size_ov in size_list:
            for seed in seed_list:
                ov = {**variant, **size_ov, "seed": seed}
                if realisations:
                    ov["data.realisation"] = seed
                ov.update(extra)
                workdir = os.path.join(runs_dir, name, f"{label}_s{seed}")
                runs.append(Run(name, stem, ov, (label, seed), workdir, multi))
    points = list(dict.fromkeys(r.point for r in runs))
    ordered = []
    for p in points:
        here = [r for r in runs if r.point == p]
        here = [r for r in here if not r.multi] + [r for r in here if r.multi]
        if share:
            share_streams(here, plan)
        ordered += here
    return ordered


def _key(config) -> str:
    return config.to_json_best_effort(sort_keys=True)


def share_streams(runs: list[Run], plan) -> None:
    """Point multi-stream runs' phase 1 at identical runs of the same point (see the docstring);
    ``plan``: :mod:`invjax.training.plan`."""
    owners: dict[str, str] = {}
    for run in runs:
        config = load_config(run.config, run.overrides)
        if not run.multi:
            owners.setdefault(_key(config), run.workdir)
            continue
        for s in plan.stream_names(config):
            key = _key(plan.stream_config(config, s))
            if key in owners:
                run.overrides[f"phase1.{s}.workdir"] = owners[key]
            else:
                owners[key] = os.path.join(run.workdir, plan.STREAMS_SUBDIR, s)


def reused_workdirs(run: Run) -> list[str]:
    """The workdirs, as given, of the models a run's phase 1 reuses
    (``phase1.<stream>.workdir``), in the order of its overrides."""
    return [
        str(v)
        for k, v in run.overrides.items()
        if k.startswith("phase1.") and k.endswith(".workdir") and v
    ]


def needs(runs: Sequence[Run]) -> list[set[int]]:
    """Per run, the indices of the other runs in ``runs`` it must wait for: those whose models
    its phase 1 reuses (``phase1.<stream>.workdir``: a single-stream run's directory, or
    ``<workdir>/streams/<stream>`` of the multi-stream run that trains that stream first)."""
    where = {os.path.normpath(os.path.join(REPO, r.workdir)): i for i, r in enumerate(runs)}
    out = []
    for i, run in enumerate(runs):
        wait = set()
        for value in reused_workdirs(run):
            path = os.path.normpath(os.path.join(REPO, value))
            while path not in where and os.path.dirname(path) != path:
                path = os.path.dirname(path)  # a stream inside another run's folder
            if where.get(path, i) != i:
                wait.add(where[path])
        out.append(wait)
    return out


def by_point(runs: Sequence[Run]) -> list[list[Run]]:
    points = list(dict.fromkeys(r.point for r in runs))
    return [[r for r in runs if r.point == p] for p in points]


def _model_dirs(run: Run) -> list[str]:
    """Where the run's models write: ``seed_<k>/`` of each model of a run of several
    (``--config.seeds``, ``invjax.training.many``), else the workdir itself."""
    root = os.path.join(REPO, run.workdir)
    seeds = run.overrides.get("seeds")
    if isinstance(seeds, tuple) and len(seeds) > 1:
        return [many.seed_workdir(root, k) for k in seeds]
    return [root]


class PointChanged(ValueError):
    """A point's folder holds a run of other settings than the sweep's now (the message names
    the point and the difference)."""


def finished(run: Run) -> bool:
    """Whether the run is finished *with the settings the sweep gives it now*: every model's
    ``results.json`` exists (written last, atomically) and, where the model's folder holds
    checkpoints, it is a finished run (:func:`invjax.run.finished_results`) of this point's
    experiment as its run stores it (:func:`invjax.training.plan.stored_config`), up to what a
    run may change on resume (``train.num_epochs``, evaluation and checkpoint intervals:
    :data:`invjax.run.RESUMABLE_KEYS`). A point whose epochs differ is not finished: it is run
    again and resumes. A point that holds another experiment raises :class:`PointChanged`
    naming the difference. Results without checkpoints (copied in from elsewhere, without the
    run) are taken as they are."""
    from invjax import run as run_lib
    from invjax.training import plan

    dirs = _model_dirs(run)
    if not all(os.path.isfile(os.path.join(d, run_lib.RESULTS_FILE)) for d in dirs):
        return False
    # As its runs store it: epochs scaled and the schedule in epochs (plan.resolve).
    config = plan.resolve(load_config(run.config, run.overrides))
    seeds, config = many.split(config)
    configs = [many.model_config(config, k) for k in seeds] if seeds else [config]
    with contextlib.chdir(REPO):  # the commands' relative paths (phase1.*.workdir) resolve here
        for d, c in zip(dirs, configs):
            if not run_lib.has_checkpoint(d):
                continue
            try:
                results = run_lib.finished_results(plan.stored_config(c, d), d)
            except ValueError as e:
                raise PointChanged(
                    f"{run.workdir} was run with other settings than this sweep's ({e})"
                ) from None
            if results is None:
                return False
    return True


def resumes(run: Run) -> bool:
    """Whether the run has a checkpoint to resume from (any of its models)."""
    from invjax import run as run_lib

    return any(os.path.isdir(os.path.join(d, run_lib.CHECKPOINTS_DIR)) for d in _model_dirs(run))


def visible_gpus() -> list[str]:
    """Ids of the GPUs this process may use: ``CUDA_VISIBLE_DEVICES`` if set, else nvidia-smi."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip() and d.strip() != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def slot_envs(parallel: int, per_run: int, platform: str = "auto", per_gpu: int = 1) -> list[dict]:
    """One environment per parallel slot, each pinned to its own ``per_run`` devices.

    ``per_gpu``: slots that share one GPU set (small runs leave a GPU mostly idle: several
    processes side by side fill it); each of them may then take ``0.9 / per_gpu`` of the GPU's
    memory (``XLA_PYTHON_CLIENT_MEM_FRACTION``) instead of JAX's default 75%. No effect on CPUs.
    ValueError naming the numbers when the GPUs do not suffice or a count is below 1.
    """
    for name, value in (
        ("--parallel", parallel),
        ("--devices-per-run", per_run),
        ("--runs-per-gpu", per_gpu),
    ):
        if value < 1:
            raise ValueError(f"{name}={value} is invalid: it must be an integer >= 1")
    gpus = visible_gpus() if platform in ("auto", "gpu") else []
    if platform == "gpu" and not gpus:
        raise ValueError("--platform=gpu but no GPU is visible (CUDA_VISIBLE_DEVICES, nvidia-smi)")
    envs = []
    if gpus:
        sets = -(-parallel // per_gpu)
        if sets * per_run > len(gpus):
            shared = f" / --runs-per-gpu={per_gpu}" if per_gpu > 1 else ""
            raise ValueError(
                f"--parallel={parallel}{shared} x --devices-per-run={per_run} needs "
                f"{sets * per_run} GPUs, but {len(gpus)} are visible ({','.join(gpus)})"
            )
        for k in range(parallel):
            first = (k // per_gpu) * per_run
            env = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(gpus[first : first + per_run]))
            if per_gpu > 1:
                env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{0.9 / per_gpu:.3f}"
            envs.append(env)
        return envs
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "force_host_platform" not in f]
    flags.append(f"--xla_force_host_platform_device_count={per_run}")
    return [dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=" ".join(flags))] * parallel


#: The signals ``--local`` stops on, and the one each is passed to the runs as (a run stops on
#: SIGTERM and SIGINT; a closed terminal's SIGHUP stops them as SIGTERM does).
STOP_SIGNALS = {
    signal.SIGTERM: signal.SIGTERM,
    signal.SIGINT: signal.SIGINT,
    signal.SIGHUP: signal.SIGTERM,
}


def _parent_death_signal():
    """A ``preexec_fn`` that has the kernel send the started command SIGTERM when the sweep
    dies, SIGKILL included (Linux ``prctl(PR_SET_PDEATHSIG)``; the run then saves and stops as
    on any SIGTERM), or None where there is no such call. ``prctl`` is looked up here, in the
    sweep: the child, forked from a threaded process, only calls it."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def stop_with_parent() -> None:
        prctl(1, signal.SIGTERM, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the sweep died before the call: stop now
            os.kill(os.getpid(), signal.SIGTERM)

    return stop_with_parent


class _Stopper:
    """SIGTERM/SIGINT/SIGHUP handler of ``--local``: passes the signal (SIGHUP as SIGTERM) to
    the running commands once, and keeps further ones from starting (``stopped``)."""

    def __init__(self, lock: threading.Lock):
        self.lock = lock
        self.signum: int | None = None
        self.passed: int | None = None  # what the runs got: their exit status is 128 + it
        self.running: dict[int, subprocess.Popen] = {}
        self.preexec = _parent_death_signal()

    def __call__(self, signum, frame) -> None:
        del frame
        name = signal.Signals(signum).name
        if self.signum is not None:
            print(
                f"sweep: {name} again: waiting for {len(self.running)} run(s) to save", flush=True
            )
            return
        self.signum, self.passed = signum, STOP_SIGNALS[signum]
        for proc in list(self.running.values()):
            try:
                proc.send_signal(self.passed)
            except OSError:  # it has just ended
                pass
        passed = f" as {signal.Signals(self.passed).name}" if self.passed != signum else ""
        print(
            f"sweep: {name}: passed to {len(self.running)} run(s){passed}; waiting for their "
            "checkpoints",
            flush=True,
        )

    def start(self, argv, **kwargs) -> subprocess.Popen | None:
        """Start a command unless the sweep is stopping (None then)."""
        with self.lock:
            if self.signum is not None:
                return None
            # Its own process group: a terminal's Ctrl-C reaches it only through __call__; and
            # it stops itself if the sweep dies without passing a signal on (SIGKILL).
            proc = subprocess.Popen(argv, start_new_session=True, preexec_fn=self.preexec, **kwargs)
            self.running[proc.pid] = proc
        if self.passed is not None:  # the signal came while it started: pass it on too
            proc.send_signal(self.passed)
        return proc

    def wait(self, proc: subprocess.Popen) -> int:
        status = proc.wait()
        with self.lock:
            self.running.pop(proc.pid, None)
        return status


def _ask(hook: Callable[[Run], str | None] | None, run: Run, say, what: str) -> str | bool | None:
    """``hook(run)``; False, said, if it raised: a failing check must not leave a run it was
    watching untended, nor end the slot that asked."""
    if hook is None:
        return None
    try:
        return hook(run)
    except Exception as e:  # any failure of a check: the run goes on, as without it
        say(f"sweep: {what} failed on {run.workdir}: {type(e).__name__}: {e}; it goes on")
        return False


def run_local(
    runs: Sequence[Run],
    parallel: int = 1,
    per_run: int | None = None,
    platform: str = "auto",
    *,
    per_gpu: int = 1,
    on_done: Callable[[Run, int], None] | None = None,
    stop: Callable[[], bool] | None = None,
    skip: Callable[[Run], str | None] | None = None,
    watch: Callable[[Run], str | None] | None = None,
    watch_every: float = 30.0,
) -> int:
    """Run the sweep here on ``parallel`` slots, finished runs skipped.

    Each free slot takes the first run, in the order given, whose phase-1 runs (:func:`needs`)
    have ended, so that a multi-stream run never trains a stream another slot is training and
    no slot idles while a run is ready (one that failed counts as ended: the run after it
    trains or resumes the stream itself). ``per_gpu``: slots sharing a GPU (:func:`slot_envs`).
    ``on_done(run, status)`` is called after each run, one call at a time; no run starts once
    ``stop()`` is true (those running finish). ``skip(run)``, asked once a run is ready (what
    it reuses has ended): a reason not to train it, printed instead of starting it, or None.
    ``watch(run)``, asked every ``watch_every`` seconds while a run trains: a reason to stop
    it (SIGTERM: it saves a checkpoint and exits), printed; such a run has not failed.
    Returns 0, 1 if a command failed, or 128 + n after signal n (module docstring).
    """
    envs = (
        slot_envs(parallel, per_run or 1, platform, per_gpu) if parallel > 1 or per_run else [None]
    )
    todo = [r for r in runs if not finished(r)]  # PointChanged: the caller refuses the sweep
    print(f"{len(runs) - len(todo)} of {len(runs)} runs finished already (skipped)", flush=True)
    slots = _Slots(todo, on_done, stop, skip, watch, watch_every)
    handlers = {s: signal.signal(s, slots.stopper) for s in STOP_SIGNALS}
    try:
        threads = [threading.Thread(target=slots.work, args=(k, e)) for k, e in enumerate(envs)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    return slots.summary()


class _Slots:
    """The runs of :func:`run_local` and the slots that take them, one thread per slot: which
    run is ready (its reused runs have ended), starting and watching one command, and the tally
    of the commands that failed, were stopped by a signal, or cut by the watch."""

    def __init__(self, todo: list[Run], on_done, stop, skip, watch, watch_every: float):
        self.todo, self.on_done, self.stop = todo, on_done, stop
        self.skip, self.watch, self.watch_every = skip, watch, watch_every
        self.wait_for = needs(todo)
        self.pending, self.ended, self.running = list(range(len(todo))), set(), 0
        self.ready = threading.Condition()
        self.lock, self.done_lock = threading.Lock(), threading.Lock()
        self.failed: list[str] = []
        self.stopped: list[str] = []
        self.cut: list[str] = []
        self.started = 0
        self.stopper = _Stopper(threading.Lock())

    def say(self, line: str) -> None:  # one line at a time: slots print from their own threads
        with self.lock:
            print(line, flush=True)

    def halted(self) -> bool:
        return self.stopper.signum is not None or (self.stop is not None and self.stop())

    def take(self) -> int | None:
        """The next run whose phase-1 runs have ended; None once none is left or stopping."""
        with self.ready:
            while self.pending and not self.halted():
                i = next((i for i in self.pending if self.wait_for[i] <= self.ended), None)
                if i is None and not self.running:  # nothing runs to end a wait: a cycle
                    i = self.pending[0]
                if i is not None:
                    self.pending.remove(i)
                    why = _ask(self.skip, self.todo[i], self.say, "the check before it starts")
                    if why:  # ended without training: what waits on it may go on
                        self.say(f"sweep: not starting {self.todo[i].workdir}: {why}")
                        self.ended.add(i)
                        continue
                    self.running += 1
                    return i
                self.ready.wait(timeout=1.0)  # wakes when a run ends; the timeout sees a signal
            return None

    def work(self, slot: int, env) -> None:
        """One slot: take the next ready run and run it, until none is left."""
        while (i := self.take()) is not None:
            try:
                self.one(self.todo[i], env, slot)
            finally:
                with self.ready:
                    self.running -= 1
                    self.ended.add(i)
                    self.ready.notify_all()

    def one(self, run: Run, env, slot: int) -> None:
        """Run one command in ``slot`` (its output here, or with ``env`` in ``WORKDIR.log``)."""
        cmd = run.command(sys.executable)
        state = "resume" if resumes(run) else "start"
        t = time.perf_counter()
        if env is None:  # one run at a time: its output right here
            proc = self.stopper.start(shlex.split(cmd), cwd=REPO)
        else:
            log = os.path.join(REPO, run.workdir.rstrip("/") + ".log")
            os.makedirs(os.path.dirname(log), exist_ok=True)
            with open(log, "a") as f:
                proc = self.stopper.start(
                    shlex.split(cmd), cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT
                )
        if proc is None:
            return
        with self.lock:
            self.started += 1
            i = self.started
        n = len(self.todo)
        self.say(f"[{i}/{n}] slot {slot} {state}: {cmd}")
        why = self.watched(run, proc)
        status = self.stopper.wait(proc)
        self.say(f"[{i}/{n}] slot {slot} exit {status} after {time.perf_counter() - t:.0f} s")
        with self.lock:
            if why:
                self.cut.append(cmd)
            elif self.stopper.passed is not None and status == 128 + self.stopper.passed:
                self.stopped.append(cmd)
            elif status:
                self.failed.append(cmd)
        if self.on_done is not None:
            with self.done_lock:
                self.on_done(run, status)

    def watched(self, run: Run, proc: subprocess.Popen) -> str | bool | None:
        """Ask the watch every ``watch_every`` seconds while ``proc`` runs; SIGTERM to it on a
        reason to stop, which is returned (False: the watch failed, the run trains on)."""
        why = None
        while self.watch is not None and why is None:
            try:
                proc.wait(timeout=self.watch_every)
                break
            except subprocess.TimeoutExpired:
                why = _ask(self.watch, run, self.say, "its watch")
                if why:
                    self.say(f"sweep: stopping {run.workdir}: {why}")
                    with contextlib.suppress(OSError):  # it has just ended
                        proc.send_signal(signal.SIGTERM)
                elif why is False:  # the watch failed: the run trains on, unwatched
                    break
        return why

    def summary(self) -> int:
        """Print what did not run through; the sweep's exit status (:func:`run_local`)."""
        n = len(self.todo)
        if self.cut:
            print(f"{len(self.cut)} of {n} commands stopped by the watch (above)")
        if self.failed:
            print(f"{len(self.failed)} of {n} commands failed:", *self.failed, sep="\n  ")
        if self.stopper.signum is not None:
            name = signal.Signals(self.stopper.signum).name
            print(
                f"sweep: stopped by {name}: {len(self.stopped)} run(s) saved a checkpoint and "
                "stopped; run the same command to resume",
                file=sys.stderr,
                flush=True,
            )
            return 128 + self.stopper.signum
        return 1 if self.failed else 0


def _cannot_write_slurm(path: str) -> str | None:
    """Why the script ``path`` (and ``path.commands`` beside it) cannot be written, or None."""
    if os.path.isdir(path):
        return "is a directory: give the script's file name, e.g. DIR/sweep.sh"
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        return f"cannot be written: {folder} is a file, not a directory"
    if not os.path.exists(os.path.dirname(os.path.abspath(path))):
        return f"cannot be written: its folder {os.path.dirname(os.path.abspath(path))} is missing"
    return None


def write_slurm(runs: Sequence[Run], path: str, args) -> tuple[str, str]:
    """Write the array script ``path`` and its command list ``path.commands``."""
    groups = by_point(runs)
    commands_file = os.path.abspath(path + ".commands")
    with open(commands_file, "w") as f:
        for group in groups:
            f.write(" ;; ".join(r.command("python") for r in group) + "\n")
    log_dir = os.path.abspath(args.log_dir or os.path.join(os.path.dirname(path) or ".", "logs"))
    os.makedirs(log_dir, exist_ok=True)
    text = TEMPLATE.read_text().format(
        n_commands=len(runs),
        n_tasks=len(groups),
        script=path,
        commands_file=commands_file,
        job_name=args.job_name,
        last_task=len(groups) - 1,
        max_parallel=args.max_parallel,
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        cpus_per_task=args.cpus_per_task,
        time=args.time,
        log_dir=log_dir,
        partition_line=f"#SBATCH --partition={args.partition}" if args.partition else "",
        repo=REPO,
        setup=args.setup or "",
        multi_host=" --config.multi_host=True" if args.nodes > 1 else "",
    )
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)
    return path, commands_file


def _parser() -> argparse.ArgumentParser:
    """The command line (module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python launch/sweep.py",
        description="Build the paper's sweeps (see the module docstring).",
    )
    parser.add_argument("experiments", nargs="+", help="config names or groups")
    parser.add_argument("--sizes", default="paper", help="paper | full | N,N,... (0 = whole)")
    parser.add_argument("--seeds", default="paper", help="paper | S,S,...")
    parser.add_argument("--runs-dir", default="runs")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="extra config override"
    )
    parser.add_argument("--no-share", action="store_true", help="no phase-1 reuse across runs")
    parser.add_argument(
        "--dry_run",
        action="store_true",
        help="print the commands (with --local or --slurm: what would run or be written) and stop",
    )
    parser.add_argument("--dry-run", dest="dry_run", action="store_true", help=argparse.SUPPRESS)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--local", action="store_true", help="run them here (skips finished runs)")
    mode.add_argument("--slurm", metavar="FILE", help="write a SLURM array script")
    local = parser.add_argument_group("--local")
    local.add_argument("--parallel", type=int, default=1, help="points run side by side")
    local.add_argument(
        "--devices-per-run", type=int, default=None, help="devices pinned to each (default 1)"
    )
    local.add_argument("--platform", choices=("auto", "gpu", "cpu"), default="auto")
    slurm = parser.add_argument_group("SLURM")
    slurm.add_argument("--job-name", default="invjax")
    slurm.add_argument("--nodes", type=int, default=1)
    slurm.add_argument("--gpus-per-node", type=int, default=1)
    slurm.add_argument("--cpus-per-task", type=int, default=8)
    slurm.add_argument("--time", default="48:00:00")
    slurm.add_argument("--partition", default=None)
    slurm.add_argument("--max-parallel", type=int, default=16)
    slurm.add_argument("--log-dir", default=None)
    slurm.add_argument(
        "--setup", default=None, help="shell line run first, e.g. 'source .venv/bin/activate'"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    extra = {}
    for item in args.set:
        key, sep, value = item.removeprefix("--config.").partition("=")
        if not sep:
            parser.error(f"--set {item!r}: expected KEY=VALUE")
        extra[key] = _parse_value(value)
    try:
        runs = build(
            args.experiments, args.sizes, args.seeds, args.runs_dir, extra, not args.no_share
        )
    except (ValueError, KeyError, AttributeError, TypeError) as e:
        print(f"invjax: error: {e}", file=sys.stderr)
        return 2
    if args.local:
        try:  # the numbers and the GPUs, before anything runs
            slot_envs(args.parallel, args.devices_per_run or 1, args.platform)
        except ValueError as e:
            print(f"invjax: error: {e}", file=sys.stderr)
            return 2
    if args.dry_run:
        for run in runs:
            print(run.command())
        where = (
            f"; --local would run {args.parallel} point(s) side by side"
            if args.local
            else f"; --slurm would write {args.slurm}"
            if args.slurm
            else ""
        )
        print(
            f"# {len(runs)} commands, {len(by_point(runs))} points (size, seed){where}",
            file=sys.stderr,
        )
        return 0
    if args.local:
        try:
            return run_local(runs, args.parallel, args.devices_per_run, args.platform)
        except PointChanged as e:  # before any run starts
            print(f"invjax: error: {e}", file=sys.stderr)
            return 2
    if not args.slurm:
        parser.error("choose --dry_run, --local or --slurm FILE")
    problem = _cannot_write_slurm(args.slurm)
    if problem:
        print(f"invjax: error: --slurm {args.slurm}: {problem}", file=sys.stderr)
        return 2
    script, commands = write_slurm(runs, args.slurm, args)
    print(
        f"wrote {script} ({len(runs)} commands in {len(by_point(runs))} array tasks) and {commands}"
    )
    print(f"submit: sbatch {script}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
