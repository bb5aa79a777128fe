"""The study command: plan, run, report and follow a study from its record.

    python -m launch.studies digits plan   [--stage tune|main|all] [--datasets D,D] [--families F,F]
        [--sizes 20,50,100,300,0] [--seeds 0,...,5] [--runs_dir runs/digits] [--record FILE]
        [--min_steps 600] [--min_epochs 300] [--batch_size 64] [--width_divisor 2]
        [--seeds_in_one] [--rerun main/DATASET/FAMILY/LABEL,...]
    python -m launch.studies digits run    (plan's options) [--out DIR] [--budget_minutes 0]
        [--stop_minutes 0] [--parallel 1] [--runs_per_gpu 1] [--platform auto|cpu|gpu] [--commit]
        [--dry_run] [--test t|signflip|wilcoxon] [--holm_family all|claim]
    python -m launch.studies digits report [--record FILE] [--out DIR] [--runs_dir DIR]
        [--curves DIR] [--no_figures] [rule options] [--seeds ...] [--test ...] [--holm_family ...]
    python -m launch.studies digits status (plan's options)
    python -m launch.studies digits pilot  --min_epochs N [--families wrn_std,e2_ii]
        [--datasets rotscaled_digits] [--sizes 300,0] [--runs_dir runs/digits_pilot] [--dry_run]
    python -m launch.studies digits pack   ARCHIVE.tar.gz [--runs_dir DIR] [--finished PATH ...]

    python -m launch.studies realimages plan|run|status (the same options, without the rule's:
        each family trains its fixed recipe) [--data_path NAME=DIR,...]
    python -m launch.studies realimages report [--record FILE] [--out DIR] [--runs_dir DIR]
    python -m launch.studies realimages power [--json] [--flops FILE] [--realisations 10]
    python -m launch.studies realimages flops --out FILE [--time-steps 3]

Run from the repository root. ``--record`` defaults to ``docs/results/<study>/runs.jsonl`` and
``--out`` to the record's folder. ``plan`` prints every command (the finished ones marked);
``run`` trains what the record lacks, appends each finished run as a row and rewrites the report
(``--out ''``: no report); ``report`` regenerates ``results.md``, ``claims.json`` and the
figures from the record alone (``--runs_dir``: land that directory's finished runs first;
``--curves DIR``: also draw every run's training curve there); ``status`` counts planned,
landed and unfinished runs; ``pilot`` trains a rule's pilot on the tuning split; ``pack``
archives the unfinished runs' latest checkpoints, to resume them on another machine (unpack into
its run directory and ``run`` again). A run of the record that ``run`` trains again here (a
stream its heads freeze, on a new machine) stops once its curve departs from its row's at an
epoch the row keeps (checked every 30 s), and no head trains on a stream that did not reproduce
its row (``status`` names them; ``--rerun`` lets their rows be replaced). ``--budget_minutes M``:
no run starts M minutes after the command did; ``--stop_minutes M``: then the runs training are
stopped too (within 30 s; each saves a checkpoint), as a SIGTERM to the study would, for a job
with a wall-time limit. Exit status: 0 done, 2 refused before any work (one ``invjax: error:``
line), 1 failed while running, 128 + n stopped by signal n, and 143 stopped at
``--stop_minutes`` with runs unfinished (the same command resumes).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Sequence

STUDIES = ("digits", "realimages")  # modules of launch.studies that define a STUDY


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, the house's prefix, exit 2
        print(f"invjax: error: {message}", file=sys.stderr)
        sys.exit(2)


def _names(text: str, valid: Sequence[str], what: str) -> tuple[str, ...]:
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    for x in names:
        if x not in valid:
            raise ValueError(f"{what}: {x!r} is invalid: choose from {list(valid)}")
    if not names:
        raise ValueError(f"{what} is empty: choose from {list(valid)}")
    return names


def _ints(text: str, what: str, ok, valid: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = ()
    if not values or not all(ok(v) for v in values):
        raise ValueError(f"{what}={text!r} is invalid: {valid}")
    return values


def _fixed_recipes(study) -> bool:
    """Whether every family trains its own fixed recipe (no rule options then)."""
    return all(f.rule is not None for f in study.families.values())


def _rule_options(p, study) -> None:
    if _fixed_recipes(study):
        return
    rule = study.main_rule
    p.add_argument("--min_steps", type=int, default=rule.min_steps)
    p.add_argument("--min_epochs", type=int, default=rule.min_epochs)
    p.add_argument("--batch_size", type=int, default=rule.batch_size)
    p.add_argument("--width_divisor", type=float, default=rule.width_divisor)


def _stats_options(p, study) -> None:
    from launch.studies import stats

    if study.registered:  # the pre-registered test and correction only
        return
    p.add_argument("--test", choices=stats.TESTS, default="t", help="the primary paired test")
    p.add_argument("--holm_family", choices=("all", "claim"), default="all")


def parser(study, module=None) -> _Parser:
    name = study.name
    top = _Parser(prog=f"python -m launch.studies {name}", description=__doc__.split("\n\n")[0])
    sub = top.add_subparsers(dest="command", required=True, parser_class=_Parser)
    record = f"docs/results/{name}/runs.jsonl"
    cmds = {}
    for cmd in ("plan", "run", "status"):
        p = cmds[cmd] = sub.add_parser(cmd)
        p.add_argument("--stage", choices=("tune", "main", "all"), default="all")
        p.add_argument("--datasets", default=",".join(study.datasets))
        p.add_argument("--families", default=",".join(study.families))
        p.add_argument("--sizes", default=",".join(map(str, study.sizes)), help="0 = all")
        p.add_argument("--seeds", default=",".join(map(str, study.all_seeds)), help="realisations")
        p.add_argument("--runs_dir", default=f"runs/{name}")
        p.add_argument("--record", default=record)
        _rule_options(p, study)
        if study.dataset_overrides:
            p.add_argument(
                "--data_path",
                default="",
                help="NAME=DIR,...: the folder of a dataset's IDX files (default: the study's)",
            )
        p.add_argument("--seeds_in_one", action="store_true", help="K seeds per invocation")
        p.add_argument(
            "--rerun",
            default="",
            help="run paths under --runs_dir (main/DATASET/FAMILY/LABEL, comma-separated) to "
            "train again; their rows replace the record's",
        )
    r = cmds["run"]
    r.add_argument("--out", default=None, help="the report's folder (default: the record's)")
    _stats_options(r, study)
    r.add_argument(
        "--budget_minutes", type=float, default=0.0, help="no run starts after it; 0 = none"
    )
    r.add_argument(
        "--stop_minutes",
        type=float,
        default=0.0,
        help="the runs training then save a checkpoint and stop; 0 = none",
    )
    r.add_argument("--platform", choices=("auto", "cpu", "gpu"), default="auto")
    r.add_argument("--parallel", type=int, default=1, help="runs side by side")
    r.add_argument("--runs_per_gpu", type=int, default=1, help="parallel runs sharing one GPU")
    r.add_argument("--commit", action="store_true", help="commit the record and report")
    r.add_argument("--dry_run", action="store_true", help="print the plan only")
    p = sub.add_parser("report")
    p.add_argument("--record", default=record)
    p.add_argument("--out", default=None, help="default: the record's folder")
    p.add_argument("--runs_dir", default=None, help="land its finished runs first")
    p.add_argument("--curves", default=None, help="draw the convergence figures here")
    p.add_argument("--no_figures", action="store_true", help="tables only")
    p.add_argument("--seeds", default=",".join(map(str, study.seeds)))
    _rule_options(p, study)
    _stats_options(p, study)
    if module is not None and hasattr(module, "add_commands"):
        module.add_commands(sub)
    if study.registered:  # no rule to pilot: each family's recipe is fixed
        _pack_parser(sub, name)
        return top
    p = sub.add_parser("pilot")
    p.add_argument("--min_epochs", type=int, required=True)
    p.add_argument("--families", default="wrn_std,e2_ii")
    p.add_argument("--datasets", default=study.datasets[-1])
    p.add_argument("--sizes", default="300,0", help=f"images of the {study.n_tune} (0 = all)")
    p.add_argument("--runs_dir", default=f"runs/{name}_pilot")
    p.add_argument("--record", default=record)
    p.add_argument("--dry_run", action="store_true")
    _pack_parser(sub, name)
    return top


def _pack_parser(sub, name: str) -> None:
    p = sub.add_parser("pack")
    p.add_argument("archive", help="the .tar.gz to write")
    p.add_argument("--runs_dir", default=f"runs/{name}")
    p.add_argument(
        "--finished",
        action="append",
        default=[],
        help="finished runs (a path under --runs_dir, or a glob) packed too, for their final "
        "checkpoint (e.g. '*/scale_iiws_disco/*': a two-phase network's phase 1)",
    )


def options(study, args):
    """The parsed command line as :class:`launch.studies.run.Options`; ValueError names a bad
    value and what is valid."""
    from launch.studies.run import Options

    n_all = study.n_all
    if study.dataset_sizes:  # each dataset's own N_t list
        listed = sorted({n for ns in study.dataset_sizes.values() for n in ns})
        sizes = _ints(
            args.sizes,
            "--sizes",
            lambda n: n == 0 or n in listed,
            f"give 0 (each dataset's whole split) or N_t of the plan {listed}",
        )
    else:
        sizes = _ints(
            args.sizes,
            "--sizes",
            lambda n: n == 0 or (10 <= n < n_all and n % 10 == 0),
            f"give 0 (all {n_all}) or multiples of 10 in 10..{n_all - 9} (class-balanced)",
        )
    opts = Options(
        stage=args.stage,
        datasets=_names(args.datasets, study.datasets, "--datasets"),
        families=_names(args.families, tuple(study.families), "--families"),
        sizes=sizes,
        seeds=_seeds(study, args.seeds),
        rule=_rule(args, study),
        runs_dir=os.path.abspath(args.runs_dir),
        record=os.path.abspath(args.record),
        seeds_in_one=args.seeds_in_one,
    )
    opts.rerun = tuple(x.strip().rstrip("/") for x in args.rerun.split(",") if x.strip())
    for path in opts.rerun:
        parts = path.split("/")
        if os.path.isabs(path) or ".." in parts or parts[0] != "main" or len(parts) < 2:
            raise ValueError(
                f"--rerun: {path!r} is invalid: give main runs' paths relative to --runs_dir "
                "(e.g. main/scaled_digits/e2_ii/nall_e300; a tuning run's first result fixes a "
                "choice and is not replaced)"
            )
    if args.command == "run":
        out = os.path.dirname(opts.record) if args.out is None else args.out
        opts.out = os.path.abspath(out) if out else None
        opts.test = getattr(args, "test", "t")
        opts.holm_family = getattr(args, "holm_family", "all")
        opts.budget_minutes, opts.platform = args.budget_minutes, args.platform
        opts.stop_minutes = args.stop_minutes
        opts.parallel, opts.runs_per_gpu, opts.commit = (
            args.parallel,
            args.runs_per_gpu,
            args.commit,
        )
        for flag in ("budget_minutes", "stop_minutes"):
            if getattr(args, flag) < 0:
                raise ValueError(f"--{flag}={getattr(args, flag)} is invalid: it must be >= 0")
        for flag in ("parallel", "runs_per_gpu"):
            if getattr(args, flag) < 1:
                raise ValueError(f"--{flag}={getattr(args, flag)} is invalid: it must be >= 1")
    return opts


def _seeds(study, text: str) -> tuple[int, ...]:
    valid = study.all_seeds
    return _ints(text, "--seeds", lambda s: s in valid, f"give realisations {_ranges(valid)}")


def _ranges(values: Sequence[int]) -> str:
    """``0..9, 10..21``-style text of sorted integers."""
    out, start = [], None
    for i, v in enumerate(values):
        start = v if start is None else start
        if i + 1 == len(values) or values[i + 1] != v + 1:
            out.append(f"{start}..{v}" if v > start else f"{v}")
            start = None
    return ", ".join(out)


def _rule(args, study):
    from launch.studies.plan import Rule

    if not hasattr(args, "min_steps"):  # every family trains its own recipe
        return study.main_rule
    for name in ("min_steps", "min_epochs", "batch_size"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name}={getattr(args, name)} is invalid: it must be >= 1")
    if args.width_divisor < 1:
        raise ValueError(f"--width_divisor={args.width_divisor} is invalid: it must be >= 1")
    return Rule(args.min_steps, args.min_epochs, args.batch_size, args.width_divisor)


def commands_module(name: str):
    """A study's own subcommands, ``launch.studies.<name>_commands`` (``COMMANDS``,
    ``add_commands`` and ``command``), or None."""
    import importlib.util

    module = f"launch.studies.{name}_commands"
    return importlib.import_module(module) if importlib.util.find_spec(module) else None


def _with_data_paths(study, module, text: str):
    """``study`` with the IDX folders of ``--data_path NAME=DIR,...``."""
    paths = {}
    for item in (x.strip() for x in text.split(",") if x.strip()):
        name, eq, where = item.partition("=")
        if not eq or not where or name not in study.datasets:
            raise ValueError(
                f"--data_path: {item!r} is invalid: give NAME=DIR with NAME in "
                f"{list(study.datasets)}"
            )
        paths[name] = where
    return module.make_study(paths)


def report_command(study, args) -> int:
    from launch.studies import record, report, run

    rule, seeds = _rule(args, study), _seeds(study, args.seeds)
    rows_path = os.path.abspath(args.record)
    if not os.path.isfile(rows_path):
        raise ValueError(f"--record={args.record!r} is invalid: no such file")
    rows = record.read(rows_path)  # a damaged record is refused before anything is written
    if args.runs_dir:
        new = run.land(os.path.abspath(args.runs_dir), rows_path)
        print(f"study: {new} run(s) landed from {args.runs_dir}", flush=True)
        rows = record.read(rows_path)
    out = os.path.abspath(args.out or os.path.dirname(rows_path))
    test, holm_family = getattr(args, "test", "t"), getattr(args, "holm_family", "all")
    written = report.write_report(
        study, rows, out, rule, seeds, test, holm_family, not args.no_figures
    )
    if args.curves:
        written += report.write_curves(study, rows, os.path.abspath(args.curves), rule)
    print(f"study: wrote {len(written)} files from {len(rows)} rows: " + ", ".join(written))
    return 0


def pilot_command(study, args) -> int:
    from launch.studies import pilot
    from launch.studies.plan import Rule

    if args.min_epochs < 1:
        raise ValueError(f"--min_epochs={args.min_epochs} is invalid: it must be >= 1")
    families = _names(args.families, tuple(study.families), "--families")
    datasets = _names(args.datasets, study.datasets, "--datasets")
    n = study.n_tune
    sizes = _ints(args.sizes, "--sizes", lambda k: 0 <= k < n, f"give 0..{n - 1} (0 = all {n})")
    rule = Rule(min_epochs=args.min_epochs)
    return pilot.pilot(
        study,
        rule,
        families,
        datasets,
        sizes,
        os.path.abspath(args.runs_dir),
        os.path.abspath(args.record),
        args.dry_run,
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if not argv or argv[0] not in STUDIES:
        got = repr(argv[0]) if argv else "nothing"
        print(
            f"invjax: error: study {got} is invalid: choose from {list(STUDIES)}", file=sys.stderr
        )
        return 2
    module = importlib.import_module(f"launch.studies.{argv[0]}")
    study = module.STUDY
    own = commands_module(argv[0])
    args = parser(study, own).parse_args(argv[1:])
    from launch.studies import record, run

    if own is not None and args.command in own.COMMANDS:
        try:
            return own.command(args)
        except ValueError as e:  # refused before any work
            print(f"invjax: error: {e}", file=sys.stderr)
            return 2
        except Exception as e:
            print(f"invjax: error: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
    held = contextlib.ExitStack()
    try:
        if getattr(args, "data_path", ""):
            study = _with_data_paths(study, module, args.data_path)
        if args.command == "report":
            return report_command(study, args)
        if args.command == "pilot":
            return pilot_command(study, args)
        if args.command == "pack":
            if not os.path.isdir(args.runs_dir):
                raise ValueError(f"--runs_dir={args.runs_dir!r} is invalid: no such directory")
            k = run.pack(args.runs_dir, args.archive, args.finished)
            print(f"{args.archive}: {k} files of the unfinished runs in {args.runs_dir}")
            return 0
        opts = options(study, args)
        if args.command == "status":
            return run.status(study, opts)
        if args.command == "plan" or args.dry_run:
            return run.print_plan(study, opts)
        from launch import sweep

        sweep.slot_envs(opts.parallel, 1, opts.platform, opts.runs_per_gpu)  # enough GPUs?
        record.read(opts.record)  # a damaged record is refused before any run starts
        # a second command on this run directory is refused here, before any run starts
        held.enter_context(run.runs_dir_locked(opts.runs_dir))
    except ValueError as e:
        print(f"invjax: error: {e}", file=sys.stderr)
        return 2
    with held:
        try:
            return run.run(study, opts)
        except Exception as e:  # one line for the user; the runs' own logs hold the details
            print(f"invjax: error: {type(e).__name__}: {e}", file=sys.stderr)
            return 1


if __name__ == "__main__":
    sys.exit(main())
