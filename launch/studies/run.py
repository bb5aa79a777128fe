"""Running a study: its planned runs trained in a run directory, each finished run appended to
the record as one row, the report rewritten from the record after every landing.

A run whose row is in the record, or whose ``results.json`` is in the run directory, is not
trained again; an interrupted run resumes from its checkpoint. So the same ``run`` command
finishes a study stopped anywhere, on this machine or another: copy the run directory (its
unfinished runs' latest checkpoints are enough, :func:`unfinished_files`) and the record, and
run it again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import functools
import hashlib
import json
import os
import shutil
import signal
import subprocess
import tarfile
import time
from collections.abc import Callable, Sequence

from invjax import workdir as workdir_lib
from invjax.run import RESULTS_FILE, STREAMS_DIR
from launch import sweep
from launch.studies import plan, record, report, svm
from launch.studies.plan import Rule, Study

# run_local's status after a signal n is 128 + n (launch/sweep.py): the runs saved a checkpoint
# and stopped, and so does the study (the same command resumes).
STOPPED = 128
FIGURES_EVERY = 10  # landed runs between two redraws of the figures
RUNS_DIR_LOCK = ".study_run.lock"  # in the run directory: one ``run`` command at a time


@dataclasses.dataclass
class Options:
    """What one ``run`` / ``plan`` / ``status`` command does (the command line's values)."""

    stage: str = "all"
    datasets: tuple[str, ...] = ()
    families: tuple[str, ...] = ()
    sizes: tuple[int, ...] = ()
    seeds: tuple[int, ...] = ()
    rule: Rule = dataclasses.field(default_factory=Rule)
    runs_dir: str = "runs/digits"
    record: str = "docs/results/digits/runs.jsonl"
    out: str | None = None  # the report's folder; None: none written
    test: str = "t"
    holm_family: str = "all"
    budget_minutes: float = 0.0
    stop_minutes: float = 0.0
    parallel: int = 1
    runs_per_gpu: int = 1
    platform: str = "auto"
    commit: bool = False
    seeds_in_one: bool = False
    rerun: tuple[str, ...] = ()
    t0: float = dataclasses.field(default_factory=time.perf_counter)
    budget_said: bool = False


def rel(runs_dir: str, path: str) -> str:
    return os.path.relpath(path, runs_dir).replace(os.sep, "/")


def model_paths(runs_dir: str, run: sweep.Run) -> list[str]:
    """The record paths of a run's models (one per seed of a ``--config.seeds`` run)."""
    seeds = run.overrides.get("seeds")
    if isinstance(seeds, tuple):
        return [f"{rel(runs_dir, run.workdir)}/seed_{k}" for k in seeds]
    return [rel(runs_dir, run.workdir)]


def landed(runs_dir: str, run: sweep.Run, *, rows: dict, moving: Sequence[str] = ()) -> bool:
    """Whether every model of ``run`` has its row in the record (``rows``: run path -> row) or
    its ``results.json`` here, and none lies under a path of ``moving`` (to train again)."""
    paths = model_paths(runs_dir, run)
    if any(_under(p, moving) for p in paths):
        return False
    return all(p in rows for p in paths) or sweep.finished(run)


def _under(path: str, prefixes: Sequence[str]) -> bool:
    return any(path == m or path.startswith(m.rstrip("/") + "/") for m in prefixes)


def land(runs_dir: str, record_path: str, replace: Sequence[str] = ()) -> int:
    """Append a row to the record for every finished run in ``runs_dir`` that it lacks; returns
    how many. Under a path of ``replace`` (``--rerun``), a run trained here (it has its
    checkpoints) whose row differs from the record's is appended too, and replaces it."""
    if not os.path.isdir(runs_dir):
        return 0
    known = {r["run"]: r for r in record.read(record_path)}
    new = []
    for path in record.finished_runs(runs_dir):
        run_dir = os.path.join(runs_dir, path)
        if path in known:
            here = os.path.isdir(os.path.join(run_dir, "checkpoints"))
            if not (_under(path, replace) and here):
                continue
        row = record.row(path, run_dir, runs_dir, known)
        if row is None or _same(row, known.get(path)):
            continue
        new.append(row)
        known[path] = row
    return record.append(record_path, new)


def _same(a: dict, b: dict | None) -> bool:
    return b is not None and record.dumps(a) == record.dumps(b)


def unreproduced(runs_dir: str, record_path: str, replace: Sequence[str] = ()) -> list[str]:
    """A line per run trained here (it has its checkpoints) that the record holds from
    elsewhere with other errors (``report.PHASE1_KEYS``), unless it lies under a path of
    ``replace`` (``--rerun``: its row replaces the record's): a stream trained again for its
    heads on another processor, say. The heads that freeze it would not be built on the row
    they are compared with: the report does not test their claims, and ``run`` does not train
    them (:func:`unreproduced_stream`)."""
    return [f"{p} ({why})" for p, why in _unreproduced(runs_dir, record_path, replace).items()]


def curve_departs(run_dir: str, row: dict) -> str | None:
    """Where the run training in ``run_dir`` has left the curve of ``row``, its row in the
    record (the training loss and validation error at the epochs the row keeps, to its 4
    significant digits): the first epoch that differs, as a phrase; None while they agree (a run
    that reproduces its row agrees at every epoch, so this never stops one; a small drift can
    stay hidden by the rounding for some epochs)."""
    mine = record.thin(record.curve(run_dir), points=10**9)
    theirs = row.get("curve") or {}
    for key, what in (("train_loss", "training loss"), ("val_error", "validation error")):
        here = dict(map(tuple, mine.get(key, [])))
        for epoch, value in theirs.get(key, []):
            if epoch in here and here[epoch] != value:
                return f"{what} at epoch {epoch} {here[epoch]} here, {value} in the record"
    return None


def _unreproduced(runs_dir: str, record_path: str, replace: Sequence[str] = ()) -> dict:
    """:func:`unreproduced` as ``{run path: what differs}``, with the record runs training here
    again, unfinished, whose curve already departs from their row's (:func:`curve_departs`)."""
    known = {r["run"]: r for r in record.read(record_path)}
    out = {}
    for path, old in known.items():
        run_dir = os.path.join(runs_dir, path)
        if _under(path, replace) or os.path.isfile(os.path.join(run_dir, RESULTS_FILE)):
            continue
        if os.path.isdir(os.path.join(run_dir, "checkpoints")):
            if departs := curve_departs(run_dir, old):
                out[path] = f"unfinished: {departs}"
    for path in record.finished_runs(runs_dir):
        run_dir, old = os.path.join(runs_dir, path), known.get(path)
        if old is None or _under(path, replace):
            continue
        if not os.path.isdir(os.path.join(run_dir, "checkpoints")):
            continue
        with open(os.path.join(run_dir, RESULTS_FILE)) as f:
            here = json.load(f)
        moved = [
            f"{k} {here.get(k)} here, {old.get(k)} in the record"
            for k in report.PHASE1_KEYS
            if here.get(k) != old.get(k)
        ]
        if moved:
            moved += _host_differences(old.get("host"), here.get("host"))
            out[path] = "; ".join(moved)
    return out


def _host_differences(there: dict | None, here: dict | None) -> list[str]:
    """What the two ``host`` records (:func:`invjax.training.loop.host`) that both hold say
    differently; nothing if either is missing (a row that predates them)."""
    if not there or not here:
        return []
    return [
        f"trained on {k} {there[k]!r} for the record, {here[k]!r} here"
        if k != "cpu"
        else f"trained on {there[k]!r} for the record, on {here[k]!r} here"
        for k in sorted(set(there) & set(here), key=lambda k: (k != "cpu", k))
        if there[k] != here[k]
    ]


def elsewhere(rows: dict, paths, here: dict | None = None) -> tuple[list[str], list[str]]:
    """Of the record runs ``paths`` (``rows``: run path -> row), about to train again here:
    ``PATH (what differs)`` for each whose row was trained on another processor or jax than
    ``here`` (default: this machine's :func:`invjax.training.loop.host`), which will most likely
    not reproduce it, and the paths whose row names no processor beyond its model name (older
    rows: whether they reproduce shows once they are trained)."""
    if here is None:
        from invjax.training.loop import host

        here = host()
    other, unknown = [], []
    for path in sorted(paths):
        there = rows[path].get("host") or {}
        if "cpu_id" not in there:
            unknown.append(path)
        elif differs := _host_differences(there, here):
            other.append(f"{path} ({'; '.join(differs)})")
    return other, unknown


def unreproduced_stream(runs_dir: str, record_path: str, replace: Sequence[str] = ()):
    """``why(run)``, the study runner's reason not to start a run: a record run trained again
    here that did not reproduce its row, or departs from it (:func:`unreproduced`), is not
    trained further, and no two-phase run whose phase 1 would freeze one trains: the report
    would leave its claims untested, after hours of training. A sentence naming the run, what
    differs and what to do; None for any other run."""

    def why(run) -> str | None:
        bad = _unreproduced(runs_dir, record_path, replace)
        own = rel(runs_dir, run.workdir)
        if own in bad:
            return (
                f"trained again here, it does not reproduce its row: {own} ({bad[own]}). Train "
                "it where it reproduces (the same processor and jax), or name its path in "
                "--rerun to let its row be replaced"
            )
        if not run.multi:
            return None
        paths = [rel(runs_dir, wd) for wd in sweep.reused_workdirs(run)]
        hits = [f"{p} ({bad[p]})" for p in paths if p in bad]
        if not hits:
            return None
        return (
            f"the stream run it would freeze, trained again here, did not reproduce its row: "
            f"{'; '.join(hits)}. Train it where that run reproduces (the same processor and "
            "jax), or name the stream's path in --rerun to let its row be replaced"
        )

    return why


def departing(runs_dir: str, record_path: str, replace: Sequence[str] = ()):
    """``why(run)`` while ``run`` trains: for a record run trained again here (a stream its
    heads need, on a new machine) whose curve has left its row's (:func:`curve_departs`), a
    reason to stop it, minutes in instead of at its end; None otherwise and for ``--rerun``'s
    paths (their rows are to be replaced)."""
    known = {r["run"]: r for r in record.read(record_path)}

    def why(run) -> str | None:
        path = rel(runs_dir, run.workdir)
        if path not in known or _under(path, replace):
            return None
        departs = curve_departs(run.workdir, known[path])
        if departs is None:
            return None
        return (
            f"trained again here, its {departs}: it will not reproduce its row, and the heads "
            "that would freeze it do not train here"
        )

    return why


def rerun_prepare(
    runs_dir: str, paths: Sequence[str], dry_run: bool = False
) -> list[tuple[str, bool]]:
    """Make the runs under ``paths`` (relative to ``runs_dir``) train again, e.g. a run whose
    row came from another machine, without the final checkpoint that a two-phase network's
    phase 1 needs. A path under which ``runs_dir`` holds a checkpoint (trained here, finished or
    not) is kept, so the same command resumes it; any other is moved to
    ``runs_dir/replaced/<path>`` (nothing is deleted). Returns per path a line to print and
    whether its finished runs were moved aside (with ``dry_run``: would be). :func:`land` then
    lets the retrained rows replace the record's."""
    out = []
    for path in paths:
        src = os.path.join(runs_dir, path)
        if any("checkpoints" in dirs for _, dirs, _ in os.walk(src)):
            out.append((f"{path}: kept (it has checkpoints here)", False))
        elif not os.path.isdir(src):
            out.append((f"{path}: not here: it trains", False))
        elif dry_run:
            out.append((f"{path}: would move to replaced/{path} and train again", True))
        else:
            dst = os.path.join(runs_dir, "replaced", path)
            if os.path.exists(dst):
                dst += time.strftime("-%Y%m%d-%H%M%S")
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.move(src, dst)
            out.append((f"{path}: moved to {rel(runs_dir, dst)}: it trains again", True))
    return out


def unfinished_files(runs_dir: str, finished: Sequence[str] = ()) -> list[str]:
    """What moves a study's unfinished runs to another machine (paths relative to
    ``runs_dir``): every unfinished run's files, of its checkpoints only the latest step (and
    that step's manifest), without TensorBoard events, the compilation cache, what ``--rerun``
    moved aside or the run directory's lock; also the runs under the paths of ``finished``
    (for their final checkpoint: a two-phase network's phase 1 reuses it)."""
    import fnmatch
    import re

    out = []
    for root, dirs, files in os.walk(runs_dir):
        dirs[:] = sorted(d for d in dirs if d not in ("xla_cache", "tensorboard", "replaced"))
        here = rel(runs_dir, root)
        if RESULTS_FILE in files and not any(
            _under(here, [g]) or fnmatch.fnmatch(here, g) for g in finished
        ):
            dirs[:] = []
            continue
        steps = []
        if os.path.basename(root) in ("checkpoints", "checkpoint_manifests"):
            ckpt = os.path.join(os.path.dirname(root), "checkpoints")
            names = os.listdir(ckpt) if os.path.isdir(ckpt) else []
            steps = sorted(int(d) for d in names if d.isdigit())
        if os.path.basename(root) == "checkpoints" and steps:
            dirs[:] = [d for d in dirs if not d.isdigit() or int(d) == steps[-1]]
        for f in sorted(files):
            if here == "." and f == RUNS_DIR_LOCK:
                continue  # the lock of the command running here, if any
            m = re.fullmatch(r"(\d+)\.json", f)
            if os.path.basename(root) == "checkpoint_manifests" and m and steps:
                if int(m[1]) != steps[-1]:
                    continue
            out.append(rel(runs_dir, os.path.join(root, f)))
    return out


def pack(runs_dir: str, archive: str, finished: Sequence[str] = ()) -> int:
    """Write ``archive`` (``.tar.gz``) of :func:`unfinished_files`; returns how many files.
    Unpacked into the run directory elsewhere (``tar xzf ARCHIVE -C RUNS_DIR``), the same
    ``run`` command resumes those runs."""
    if os.path.lexists(archive) or not os.path.isdir(os.path.dirname(os.path.abspath(archive))):
        raise ValueError(
            f"archive {archive!r} is invalid: "
            + (
                "it exists (pack writes a new file and never replaces one, e.g. a run's "
                "results.json): give a new name"
                if os.path.lexists(archive)
                else "its folder is not a directory"
            )
        )
    files = unfinished_files(runs_dir, finished)
    tmp = f"{archive}.{os.getpid()}.tmp"
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            for f in files:
                tar.add(os.path.join(runs_dir, f), arcname=f)
        try:
            os.link(tmp, archive)  # fails, replacing nothing, if the name was taken meanwhile
        except FileExistsError:
            raise ValueError(f"archive {archive!r} appeared while packing: not replaced") from None
        except OSError:  # a file system without hard links
            os.replace(tmp, archive)
    finally:
        if os.path.lexists(tmp):
            os.remove(tmp)
    return len(files)


# ----------------------------------------------------------------------------- git


def _git(repo: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True)


def commit(paths: Sequence[str], message: str) -> bool:
    """Commit ``paths`` (only those) in the git repository that holds the first; False if
    nothing changed or git refused (another commit holding the index lock: the next one
    takes it)."""
    where = os.path.dirname(os.path.abspath(paths[0]))
    top = _git(where, "rev-parse", "--show-toplevel")
    if top.returncode:
        print(f"study: {where} is not in a git repository: not committed", flush=True)
        return False
    repo = top.stdout.strip()
    _git(repo, "add", "--", *paths)
    if not _git(repo, "diff", "--cached", "--quiet", "--", *paths).returncode:
        return False
    done = _git(repo, "commit", "-q", "-m", message, "--", *paths)
    if done.returncode:
        print(f"study: git commit failed: {done.stderr.strip()[:300]}", flush=True)
    return not done.returncode


def code_digest() -> str:
    """A digest of the study package's sources (``launch/studies/*.py``): the code that plans
    the runs and writes the report."""
    here = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256()
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):
            with open(os.path.join(here, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()


# ----------------------------------------------------------------------------- training


def past_stop(opts: Options) -> bool:
    """Whether ``--stop_minutes`` have passed since the command started (0: never)."""
    return bool(opts.stop_minutes) and time.perf_counter() - opts.t0 > 60 * opts.stop_minutes


def over_budget(opts: Options) -> bool:
    if past_stop(opts):
        return True
    if opts.budget_minutes and time.perf_counter() - opts.t0 > 60 * opts.budget_minutes:
        if not opts.budget_said:
            print(
                f"study: time budget of {opts.budget_minutes:g} min spent: no new run "
                "starts (the same command resumes)",
                flush=True,
            )
            opts.budget_said = True
        return True
    return False


def run_groups(runs: Sequence, opts: Options, after: Callable[[], None], done) -> int:
    """Train ``runs`` not yet ``done(run)``, ``after()`` after each, so that each lands as it
    finishes.

    ``parallel 1``: one at a time, in order (a point's single streams before the runs that
    reuse them). ``parallel P``: ``P`` runs side by side (``runs_per_gpu`` of them sharing a
    GPU), the single-stream runs first, each multi-stream run once the runs its phase 1 reuses
    have ended (:func:`launch.sweep.run_local`); no run starts once the budget is spent.
    Once ``--stop_minutes`` have passed, the runs training are stopped (SIGTERM: each saves a
    checkpoint) and it returns ``STOPPED + SIGTERM``, as if the study had been sent one.
    """
    runs = [r for r in runs if not done(r)]
    skip = unreproduced_stream(opts.runs_dir, opts.record, opts.rerun)
    watch = stopping(departing(opts.runs_dir, opts.record, opts.rerun), opts)
    if opts.parallel > 1:
        if over_budget(opts):
            return _stop_status(opts, 0, runs)
        code = sweep.run_local(
            sorted(runs, key=lambda r: r.multi),  # stable: the plan's order within each kind
            opts.parallel,
            None,
            opts.platform,
            per_gpu=opts.runs_per_gpu,
            on_done=lambda run, code: after(),
            stop=lambda: over_budget(opts),
            skip=skip,
            watch=watch,
        )
        return _stop_status(opts, code, runs)
    status = 0
    for run in runs:
        if sweep.finished(run):
            continue
        if over_budget(opts):
            return _stop_status(opts, status, runs)
        if why := skip(run):
            print(f"sweep: not starting {run.workdir}: {why}", flush=True)
            continue
        code = sweep.run_local([run], 1, None, opts.platform, watch=watch)
        after()
        code = _stop_status(opts, code, runs)
        if code >= STOPPED:
            return code
        status |= code
    return status


def stopping(watch: Callable, opts: Options) -> Callable:
    """``watch`` (a run's reason to stop, or None) that also stops every run once
    ``--stop_minutes`` have passed."""

    def why(run) -> str | None:
        if past_stop(opts):
            return (
                f"--stop_minutes={opts.stop_minutes:g} have passed: it saves a checkpoint and "
                "stops (the same command resumes)"
            )
        return watch(run)

    return why


def _stop_status(opts: Options, code: int, runs: Sequence) -> int:
    """``code``, or ``STOPPED + SIGTERM`` once ``--stop_minutes`` have passed with some of
    ``runs`` unfinished (a signal's status stays: it came first)."""
    if code < STOPPED and past_stop(opts) and not all(map(sweep.finished, runs)):
        return STOPPED + signal.SIGTERM
    return code


def svm_done(point: dict, runs_dir: str, rows: dict) -> bool:
    return rel(runs_dir, point["workdir"]) in rows or os.path.isfile(
        os.path.join(point["workdir"], RESULTS_FILE)
    )


def run_svms(points: Sequence[dict], opts: Options, after, rows: dict) -> None:
    for p in points:
        if svm_done(p, opts.runs_dir, rows) or over_budget(opts):
            continue
        r = svm.run_svm(p)
        print(
            f"svm {p['data.name']} N_t={r['n_train']} seed={p['seed']} C={p['svm_C']:g} "
            f"gamma={p['svm_gamma']:g}x: held-out/val {r['val_error']:.2f}%",
            flush=True,
        )
    after()


def planned(study: Study, opts: Options, stage: str, dataset: str, rows: dict):
    """``(network runs, SVM fits, a note)`` of one stage and dataset, with the choices in the
    record; the note names what waits (heads for their streams' tuning, families without
    tuned HPs)."""
    if stage == "tune":
        chosen = plan.chosen_hps(study, rows, dataset)
        runs, svms, waiting = plan.plan_tune(
            study, opts.runs_dir, dataset, opts.families, opts.rule, chosen, rows
        )
        note = f"{dataset}: {waiting} wait for their streams' tuning" if waiting else ""
        return runs, svms, note
    chosen = plan.chosen_hps(study, rows, dataset)
    runs, svms, missing = plan.plan_main(
        study, opts.runs_dir, dataset, opts.families, opts.sizes, opts.seeds, opts.rule, chosen
    )
    if opts.seeds_in_one:
        runs = plan.seeds_in_one(study, runs)
    note = f"{dataset}: {missing} have no tuned HPs yet: left out" if missing else ""
    return runs, svms, note


def stages(opts: Options) -> tuple[str, ...]:
    return {"tune": ("tune",), "main": ("main",), "all": ("tune", "main")}[opts.stage]


def print_plan(study: Study, opts: Options) -> int:
    """Every planned command, the finished ones marked (a run of several seeds is finished when
    all its models are; one under a path that ``--rerun`` would move aside is not, nor a
    recorded stream run that a head still to train needs here, :func:`still_to_train`), then
    how many are left to train. Heads wait for their streams' tuning: planned once it landed."""
    rows = {r["run"]: r for r in record.read(opts.record)}
    prepared = rerun_prepare(opts.runs_dir, opts.rerun, dry_run=True)
    moving = [p for p, (_, moved) in zip(opts.rerun, prepared, strict=True) if moved]
    for line, _ in prepared:
        print(f"# --rerun {line}")
    left = total = 0
    for stage in stages(opts):
        for dataset in opts.datasets:
            runs, svms, note = planned(study, opts, stage, dataset, rows)
            todo = {r.workdir for r in still_to_train(opts.runs_dir, runs, rows, moving)}
            for r in runs:
                done = r.workdir not in todo
                left += not done
                print(("# finished: " if done else "") + r.command("python"))
            for p in svms:
                done = svm_done(p, opts.runs_dir, rows)
                left += not done
                print(("# finished: " if done else "") + "svm " + json.dumps(p))
            total += len(runs) + len(svms)
            if note:
                print(f"# {note}")
    print(f"# {left} of {total} commands left to run")
    return 0


def retrained_streams(runs_dir: str, runs: Sequence, rows: dict) -> set[str]:
    """The record paths of the stream runs that the unlanded two-phase runs of ``runs`` reuse
    but ``runs_dir`` lacks (their rows came from another machine, or this one was new): phase 1
    trains each again there, and :func:`launch.studies.report.stream_mismatches` checks that
    it reproduced its row."""
    out = set()
    for r in runs:
        if not r.multi or landed(runs_dir, r, rows=rows):
            continue
        for wd in sweep.reused_workdirs(r):
            path = rel(runs_dir, wd)
            if path in rows and not os.path.isfile(os.path.join(wd, RESULTS_FILE)):
                out.add(path)
    return out


def still_to_train(runs_dir: str, runs: Sequence, rows: dict, moving: Sequence[str] = ()) -> list:
    """The runs of ``runs`` that a ``run`` command trains: those not :func:`landed`, and the
    landed stream runs that a head still to train reuses but ``runs_dir`` lacks
    (:func:`retrained_streams`), so that they train again side by side, ahead of the heads,
    instead of one after another inside each head's phase 1."""
    again = retrained_streams(runs_dir, runs, rows)
    return [
        r
        for r in runs
        if not landed(runs_dir, r, rows=rows, moving=moving)
        or any(p in again for p in model_paths(runs_dir, r))
    ]


def _few(paths, shown: int = 3) -> str:
    """``N`` and, if any, the first ``shown`` of ``paths`` (sorted) in parentheses."""
    paths = sorted(paths)
    if not paths:
        return "0"
    more = ", ..." if len(paths) > shown else ""
    return f"{len(paths)} ({', '.join(paths[:shown])}{more})"


def _not_in(todo: set, run) -> bool:
    return run.workdir not in todo


def started_here(workdir: str) -> bool:
    """Whether the run in ``workdir`` started and has not finished: a checkpoint of its own or,
    for a two-phase run, of one of the streams it trains first (``streams/<name>/``)."""
    if os.path.isfile(os.path.join(workdir, RESULTS_FILE)):
        return False
    streams = os.path.join(workdir, STREAMS_DIR)
    names = sorted(os.listdir(streams)) if os.path.isdir(streams) else []
    return any(
        os.path.isdir(os.path.join(d, "checkpoints"))
        for d in [workdir, *(os.path.join(streams, n) for n in names)]
    )


def status(study: Study, opts: Options) -> int:
    """Per stage and dataset: the planned models, how many have their row in the record, how
    many finished here but have not landed, how many started (a checkpoint) and how many are
    left; then the record's unconverged main runs, the stream runs a head still to train will
    train again here (in the record, not in this run directory: a fresh machine; without those
    stopped here for departing from their rows), the heads whose frozen streams are not the
    record's runs, and the runs trained again here that did not reproduce their rows
    (:func:`unreproduced`)."""
    rows = {r["run"]: r for r in record.read(opts.record)}
    print(f"record: {opts.record}: {len(rows)} rows; runs: {opts.runs_dir}")
    w = max([18, *map(len, opts.datasets)])
    print(f"{'stage':6} {'dataset':{w}} planned  landed  here  started  left")
    again: set[str] = set()
    for stage in stages(opts):
        for dataset in opts.datasets:
            runs, svms, note = planned(study, opts, stage, dataset, rows)
            again |= retrained_streams(opts.runs_dir, runs, rows)
            paths = [p for r in runs for p in model_paths(opts.runs_dir, r)]
            paths += [rel(opts.runs_dir, p["workdir"]) for p in svms]
            n_landed = sum(p in rows for p in paths)
            todo = [p for p in paths if p not in rows]
            here = sum(os.path.isfile(os.path.join(opts.runs_dir, p, RESULTS_FILE)) for p in todo)
            started = sum(started_here(os.path.join(opts.runs_dir, p)) for p in todo)
            print(
                f"{stage:6} {dataset:{w}} {len(paths):7} {n_landed:7} {here:5} {started:8} "
                f"{len(todo) - here:5}" + (f"   ({note})" if note else "")
            )
    errors = plan.main_errors(study, list(rows.values()), opts.rule)
    judged = [r for rs in errors.values() for r in rs.values()]
    bad = sum(r["convergence"].get("converged") is False for r in judged)
    print(f"main runs under the rule: {len(judged)} in the record, {bad} unconverged")
    departed = again & set(_unreproduced(opts.runs_dir, opts.record, opts.rerun))
    again -= departed  # stopped here, departing from their rows: not trained again (below)
    print(
        f"stream runs in the record that heads still to train will train again here: {_few(again)}"
    )
    if departed:
        print(f"  and not again, departed from their rows here (below): {len(departed)}")
    if again:
        other, unknown = elsewhere(rows, again)
        print(
            "  of them trained on another processor or jax, most likely not to reproduce (their "
            f"heads would not train here): {len(other)}"
        )
        for line in other:
            print(f"    {line}")
        print(f"  of them with no processor recorded beyond its name: {len(unknown)}")
    moved = report.stream_mismatches(judged, {r["run"]: r for r in judged})
    print(f"two-phase runs whose frozen streams are not the record's runs: {_few(moved)}")
    lines = unreproduced(opts.runs_dir, opts.record, opts.rerun)
    print(f"runs trained again here that did not reproduce their rows: {len(lines)}")
    for line in lines:
        print(f"  {line}")
    return 0


@contextlib.contextmanager
def runs_dir_locked(runs_dir: str):
    """Hold the run directory for one ``run`` command inside the block. A second command on
    the same directory is refused at once (ValueError naming the holder) instead of starting
    runs whose workdirs the first one holds, or moving aside (``--rerun``) runs it is landing.
    The lock is an flock, so a killed command leaves none behind; the file stays."""
    path = os.path.join(runs_dir, RUNS_DIR_LOCK)
    try:
        os.makedirs(runs_dir, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise ValueError(f"--runs_dir={runs_dir} is invalid: {e.strerror}: {path}") from None
    try:
        locked = True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                # Yield outside this handler, or the runs' own errors would be chained to it.
                print(
                    f"study: {runs_dir}: the file system does not support locks "
                    f"({os.strerror(e.errno)}): a second run command here would not be stopped",
                    flush=True,
                )
                locked = False
            elif e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise ValueError(f"cannot lock {path}: {os.strerror(e.errno)}") from None
            else:
                try:
                    holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
                except ValueError:
                    holder = {}
                raise ValueError(
                    f"--runs_dir={runs_dir} is in use by another run command "
                    f"({workdir_lib.holder_text(holder)}): wait for it to finish or stop it (it "
                    "resumes), or give another --runs_dir"
                ) from None
        if locked:
            workdir_lib.write_holder(fd)
        yield path
    finally:
        os.close(fd)  # closing the only descriptor releases the flock


def tune_passes(study: Study) -> int:
    """Planning passes of a tuning stage: the single streams and each extension of their grids
    past an edge (:attr:`~launch.studies.plan.Family.extend_edges`), then the heads and theirs;
    a pass with nothing left to train costs nothing."""
    return 2 * (1 + max((f.extend_edges for f in study.families.values()), default=0))


class Landing:
    """``after(final=False)``: land the runs that finished in the record, rewrite the report
    (with the code the command started with: once the study's sources change on disk it lands
    and commits the rows alone) and commit both. ``count``: rows this command landed;
    ``warned``: the lines already printed."""

    def __init__(self, study: Study, opts: Options):
        self.study, self.opts = study, opts
        self.count = 0
        self.undrawn = 0  # of the landed rows, the ones the figures do not show yet
        self.started_with = code_digest()
        self.stale = False
        self.warned: set[str] = set()

    def warn(self, line: str, text: str) -> None:
        if line not in self.warned:
            self.warned.add(line)
            print(text, flush=True)

    def __call__(self, final: bool = False) -> None:
        opts = self.opts
        new = land(opts.runs_dir, opts.record, opts.rerun)
        for line in unreproduced(opts.runs_dir, opts.record, opts.rerun):
            self.warn(
                line,
                f"study: trained again here, not reproducing its row: {line}; the heads that "
                "would freeze it do not train here (on it their claims would stay untested); "
                "to let it replace the row, name its path in --rerun",
            )
        self.count += new
        self.undrawn += new
        written = self.rewrite(new, final) if opts.out and (new or final) else []
        if opts.commit and new:
            # the record and the files the report wrote, never the rest of its folder (a
            # README being edited there is not a landing)
            commit([opts.record, *written], f"{self.study.name} study: {new} more run(s) landed")
        elif opts.commit and written:
            # the figures redrawn at the end carry no new row; commit only what the report
            # wrote, never other edits in its folder
            commit(written, f"{self.study.name} study: the report's figures redrawn")

    def rewrite(self, new: int, final: bool) -> list[str]:
        """The report's files rewritten (none once the study's code changed on disk)."""
        opts, study = self.opts, self.study
        if self.stale:
            return []
        self.stale = code_digest() != self.started_with
        if self.stale:
            print(
                "study: the study's code (launch/studies) changed after this command "
                "started: it lands the runs but no longer rewrites the report; rewrite it "
                f"with `python -m launch.studies {study.name} report --record {opts.record} "
                f"--out {opts.out}`",
                flush=True,
            )
            return []
        # the tables after every landing, the figures every FIGURES_EVERY runs and at the end
        # if a row landed since they were drawn (a command that lands nothing leaves them
        # alone: redrawn by another matplotlib they differ in bytes only); the runs of this
        # command's rule, against every realisation planned
        figures = self.undrawn > 0 and (final or self.count % FIGURES_EVERY < new)
        rows = record.read(opts.record)
        written = report.write_report(
            study, rows, opts.out, opts.rule, None, opts.test, opts.holm_family, figures
        )
        if figures:
            self.undrawn = 0
        return written


def run(study: Study, opts: Options) -> int:
    """Train what the plan lacks, stage by stage and dataset by dataset (the tuning's single
    streams before the heads that wait for them), landing each finished run in the record and
    rewriting the report in ``opts.out``; 0, 1 if a run failed, 128 + n after signal n."""
    prepared = rerun_prepare(opts.runs_dir, opts.rerun)
    for line, _ in prepared:
        print(f"study: --rerun {line}", flush=True)
    # one compilation cache for the whole study
    os.environ.setdefault("INVJAX_COMPILATION_CACHE", os.path.join(opts.runs_dir, "xla_cache"))
    # A long command keeps the code it started with (Landing: the report is then not rewritten)
    after = Landing(study, opts)
    after()  # what finished here before (a run stopped after its results, before landing)
    status = 0
    for stage in stages(opts):
        for dataset in opts.datasets:
            for _ in range(tune_passes(study) if stage == "tune" else 1):
                rows = {r["run"]: r for r in record.read(opts.record)}
                runs, svms, note = planned(study, opts, stage, dataset, rows)
                other, _ = elsewhere(rows, retrained_streams(opts.runs_dir, runs, rows))
                for line in other:
                    after.warn(
                        line,
                        f"study: to train again here, its row from another processor or jax: "
                        f"{line}; it will most likely not reproduce its row, and the heads "
                        "that would freeze it then do not train",
                    )
                run_svms(svms, opts, after, rows)
                todo = {r.workdir for r in still_to_train(opts.runs_dir, runs, rows, opts.rerun)}
                done = functools.partial(_not_in, todo)
                code = run_groups(runs, opts, after, done)
                if code >= STOPPED:
                    after(final=True)
                    why = f"--stop_minutes={opts.stop_minutes:g}" if past_stop(opts) else "a signal"
                    print(f"study: stopped by {why}; {after.count} run(s) landed", flush=True)
                    return code
                status |= code
            if note:
                print(f"study: {note}", flush=True)
    after(final=True)
    print(f"study: {after.count} run(s) landed in {opts.record} by this command", flush=True)
    return status
