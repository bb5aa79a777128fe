"""The first, 200-step sample-complexity study on the offline digits (superseded by the digits
study, :mod:`launch.studies.digits`, which tunes, trains to convergence and tests its claims).
Kept as the recipe that ``benchmarks/run_profile.py`` profiles and as a quick smoke run
(``--quick``).

    python launch/study.py --out OUT [--quick] [--runs-dir runs/study]
        [--datasets scaled_digits,rotscaled_digits] [--families F,F,...] [--sizes 20,50,...,0]
        [--seeds 0,1,2] [--steps 200] [--batch-size 64] [--width-divisor 2]
        [--budget-minutes 90] [--parallel 1] [--platform auto] [--dry-run | --report-only]

Datasets: ``scaled_digits`` (scikit-learn's digits shrunk by s ~ U(0.3, 1)) and
``rotscaled_digits`` (also rotated by theta ~ U(0, 360) degrees); 1079 / 359 / 359 images.

Families (``--families``, all by default): the plain CNN ``cnn`` and the RBF-SVM ``svm`` (the two
non-invariant anchors), the WRN10-1 of the digits configs as ``wrn_std``, ``e2_pool`` and
``e2_ii`` (D4, D4, D1 steerable; head pooling or E(2)-II), ``scale_pool_disco``,
``scale_pool_hermite``, ``scale_iiws_disco``, ``scale_iiws_hermite`` (scale convolutions with
DISCO or Hermite bases; pooling or Scale-II WS), ``scale_iimono_disco`` and
``scale_iimono_hermite`` (the Scaled-MNIST network with Scale-II monomials at the digits' size,
``configs/digits_monomials.py``), and the two-phase ``dual`` (E(2) + Scale) and
``triple`` (+ standard) networks, whose phase 1 reuses the ``e2_ii``, ``scale_iiws_disco`` and
``wrn_std`` runs of the same point.

Same splits for every model: each point (N_t, seed) uses ``data.realisation = seed`` (one of the
digits' fixed stratified splits and its scales / angles) and the class-balanced subset of N_t
training images drawn by ``seed``; the SVM loads exactly these arrays through
:func:`invjax.data.load`.

Training length rule (the same for every network): a fixed number of optimiser steps ``S``
(``--steps``) at batch size ``B`` for every N_t: ``epochs = max(2, ceil(S / ceil(N_t / B)))``,
the learning rate x0.1 after ``round(2/3 epochs)``, validation every ``max(1, epochs // 8)``
epochs (and at the end) for the best-epoch selection. Two-phase networks train each stream by this
rule and then the head with ``S / 4`` steps (the paper divides the head's epochs by 4). The
monomial networks prune 25 -> 12 -> 5 pairs after the same fractions of their epochs as the
paper's 5 and 10 of 60 (:func:`prune_epochs`).

Output: the runs under ``--runs-dir`` (``DATASET/FAMILY/n<N_t>_s<seed>``, ``nall`` for the whole
split; the SVM writes a ``results.json`` there like a run), then in ``--out``: ``results.md``
(mean +- std tables through :func:`invjax.report.table`, and paired differences on the same
splits: every family against the std WRN, and the paper's claims of :data:`CLAIMS`, e.g. II
against pooling), ``results.json`` (the rows, each with its difference to the std WRN),
``paired.json`` (the claims' comparisons) and ``error_vs_n_train_<dataset>.png`` (test error vs
N_t, log axes in percent). Runs whose
``results.json`` exists are skipped, so an interrupted study is finished by the same command.
Points run seed-major (all sizes and datasets of seed 0 first); after ``--budget-minutes`` no new
point starts, so a study cut short has whole curves for fewer seeds, and the tables say how many
runs each mean has. Without dual / triple's single-stream partners in ``--families``, their
streams train inside them.
``--quick``: the smoke run (cnn, e2_ii, svm; N_t 20 and 100; seed 0; 30 steps) in a few minutes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import sys
import time
from collections.abc import Sequence

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: import launch, configs and invjax of this checkout
    sys.path.insert(0, str(REPO))

from launch import sweep  # noqa: E402
from launch.studies import plots  # noqa: E402
from launch.studies.plan import prune_epochs  # noqa: E402
from launch.studies.svm import svm_fit  # noqa: E402
from launch.studies.svm import write_results as write_svm_results  # noqa: E402

DATASETS = ("scaled_digits", "rotscaled_digits")
N_ALL = 1079  # the digits' training split
# The monomial network's settings (sizes, x2 upsampling, recipe): configs/digits_monomials.py.
MONO_STEM = "digits_monomials"
# family -> (config stem, overrides); None = the RBF-SVM (no network).
FAMILIES: dict[str, tuple[str, dict] | None] = {
    "cnn": ("digits_cnn", {}),
    "svm": None,
    "wrn_std": ("digits_std", {}),
    "e2_pool": ("digits_e2", {"model.head": "pool"}),
    "e2_ii": ("digits_e2", {}),
    "scale_pool_disco": ("digits_scale", {"model.head": "pool"}),
    "scale_pool_hermite": ("digits_scale", {"model.head": "pool", "model.scale_basis": "hermite"}),
    "scale_iiws_disco": ("digits_scale", {}),
    "scale_iiws_hermite": ("digits_scale", {"model.scale_basis": "hermite"}),
    "scale_iimono_disco": (MONO_STEM, {}),
    "scale_iimono_hermite": (MONO_STEM, {"model.basis": "hermite"}),
    "dual": ("digits_dual", {}),
    "triple": ("digits_triple", {}),
}
WRN_STEMS = ("digits_std", "digits_e2", "digits_scale")
# The multi-stream configs' streams, read from the configs themselves.
STREAMS = {
    stem: tuple(sweep.load_config(stem, {}).model.streams)
    for stem in ("digits_dual", "digits_triple")
}
FULL = {
    "datasets": DATASETS,
    "families": tuple(FAMILIES),
    "sizes": (20, 50, 100, 300, 0),
    "seeds": (0, 1, 2),
    "steps": 200,
    "budget_minutes": 90.0,
}
QUICK = {
    "datasets": DATASETS,
    "families": ("cnn", "e2_ii", "svm"),
    "sizes": (20, 100),
    "seeds": (0,),
    "steps": 30,
    "budget_minutes": 0.0,
}


def schedule(n_train: int, steps: int, batch_size: int) -> dict:
    """The training-length rule: ``train.*`` overrides giving about ``steps`` optimiser steps.

    ``epochs = max(2, ceil(steps / ceil(N_t / B)))`` (an epoch has ``ceil(N_t / B)`` batches),
    one x0.1 decay after ``round(2/3 epochs)``, validation every ``max(1, epochs // 8)`` epochs.
    ``B = min(batch_size, N_t)``: the trainer refuses a batch larger than the training set (the
    study's first N_t = 20 runs, made before that check, drew batches of 64 with repeats).
    """
    n = n_train or N_ALL
    batch_size = min(batch_size, n)
    per_epoch = math.ceil(n / batch_size)
    epochs = max(2, math.ceil(steps / per_epoch))
    boundary = min(max(1, round(2 * epochs / 3)), epochs - 1)
    return {
        "batch_size": batch_size,
        "num_epochs": epochs,
        "lr_boundaries": (boundary,),
        "eval_every_epochs": max(1, epochs // 8),
    }


def label(n_train: int) -> str:
    return f"n{n_train}" if n_train else "nall"


def plan(
    runs_dir: str,
    datasets: Sequence[str],
    families: Sequence[str],
    sizes: Sequence[int],
    seeds: Sequence[int],
    steps: int,
    batch_size: int = 64,
    width_divisor: float = 2.0,
) -> tuple[list, list[dict]]:
    """``(network runs as launch/sweep.py Runs, SVM points)`` ordered by point, streams shared."""
    runs, svm = [], []
    # seed-major: a study cut short by its time budget has whole curves for the first seeds
    for seed in seeds:
        for dataset in datasets:
            for n in sizes:
                point = []
                for family in families:
                    workdir = os.path.join(runs_dir, dataset, family, f"{label(n)}_s{seed}")
                    data = {
                        "data.name": dataset,
                        "data.n_train": n,
                        "data.realisation": seed,
                        "seed": seed,
                    }
                    if FAMILIES[family] is None:
                        svm.append({**data, "workdir": workdir})
                        continue
                    stem, extra = FAMILIES[family]
                    ov = {**data, **extra}
                    train = schedule(n, steps, batch_size)
                    if stem in STREAMS:
                        for s in STREAMS[stem]:
                            ov[f"model.streams.{s}.width_divisor"] = width_divisor
                            ov.update({f"phase1.{s}.train.{k}": v for k, v in train.items()})
                        train = schedule(n, max(1, steps // 4), batch_size)
                    elif stem in WRN_STEMS:
                        ov["model.width_divisor"] = width_divisor
                    elif stem == MONO_STEM:
                        ov["model.prune_epochs"] = prune_epochs(train["num_epochs"])
                    ov.update({f"train.{k}": v for k, v in train.items()})
                    multi = stem in STREAMS
                    point.append(
                        sweep.Run(f"{dataset}/{family}", stem, ov, (n, seed), workdir, multi)
                    )
                # single-stream runs first, so that dual / triple reuse their streams
                point = [r for r in point if not r.multi] + [r for r in point if r.multi]
                from invjax.training import plan

                sweep._share_streams(point, plan)
                runs += point
    return runs, svm


# ----------------------------------------------------------------------------- the RBF-SVM anchor

SVM_C = (1.0, 10.0, 100.0)
SVM_GAMMA = (0.3, 1.0, 3.0)  # times scikit-learn's 'scale': 1 / (n_features * var(X_train))


def run_svm(point: dict) -> dict:
    """RBF-SVM on the point's exact splits, C and gamma chosen on validation over
    :data:`SVM_C` x :data:`SVM_GAMMA` (:func:`svm_fit`); writes results.json."""
    fit, error = svm_fit(point, [(c, g) for c in SVM_C for g in SVM_GAMMA])
    return write_svm_results(
        point,
        fit,
        {"test_error": error("test"), "val_error": fit.val_error},
        {
            "svm_C": fit.C,
            "svm_gamma": fit.gamma,
            "svm_grid": {"C": list(SVM_C), "gamma_times_scale": list(SVM_GAMMA)},
        },
    )


# ----------------------------------------------------------------------------- aggregation


def _groups(runs_dir: str) -> dict[tuple, list[dict]]:
    """The runs' results by ``(family, dataset, N_t)``, from the run directories."""
    from invjax import report

    groups: dict[tuple, list[dict]] = {}
    for run_dir, r in report.find_results(runs_dir):
        parts = os.path.relpath(run_dir, runs_dir).split(os.sep)
        if len(parts) != 3:
            continue
        dataset, family, _ = parts
        groups.setdefault((family, dataset, r.get("n_train")), []).append(r)
    return groups


def _by_seed(groups: dict[tuple, list[dict]]) -> dict[tuple, dict]:
    return {
        key: {r.get("seed"): float(r["test_error"]) for r in rs if _finite(r.get("test_error"))}
        for key, rs in groups.items()
    }


def _finite(x) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


def aggregate(runs_dir: str) -> list[dict]:
    """Rows in :func:`invjax.report.aggregate`'s format, one per (family, dataset, N_t), each with
    its :func:`paired` difference to :data:`PAIRED_REFERENCE`.

    Grouped by the run directory ``DATASET/FAMILY/...`` rather than by recorded overrides,
    because the training length (``train.num_epochs``) differs between the N_t of one family.
    """
    from invjax import report

    groups = _groups(runs_dir)
    by_seed = _by_seed(groups)
    rows = []
    for (family, dataset, n_train), rs in groups.items():
        row = report.summarise(family, dataset, n_train, rs)
        row.update(paired(by_seed, family, dataset, n_train))
        rows.append(row)
    order = {f: i for i, f in enumerate(FAMILIES)}
    rows.sort(key=lambda r: (r["dataset"], order.get(r["experiment"], 99), r["n_train"] or 0))
    return rows


# Every family is compared with this one on the same splits (same seeds = same realisations and
# subsets): the non-invariant network of the same width and recipe.
PAIRED_REFERENCE = "wrn_std"
# The paper's claims as paired comparisons (family, reference): II against pooling, the two
# Scale-II forms, and each combination against its own streams.
CLAIMS = (
    ("e2_ii", "e2_pool"),
    ("scale_iiws_disco", "scale_pool_disco"),
    ("scale_iiws_hermite", "scale_pool_hermite"),
    ("scale_iimono_disco", "scale_iiws_disco"),
    ("scale_iimono_hermite", "scale_iiws_hermite"),
    ("dual", "e2_ii"),
    ("dual", "scale_iiws_disco"),
    ("triple", "dual"),
)


def paired(
    by_seed: dict, family: str, dataset: str, n_train, reference: str = PAIRED_REFERENCE
) -> dict:
    """The family's test error minus ``reference``'s, seed by seed (same splits).

    Pairing removes the part of the spread that the split itself causes (a hard realisation is
    hard for every model), so a difference can be clear where the two means' error bars overlap.
    Returns ``paired_vs``, ``paired_diff_mean`` / ``_std`` (points; sample std), ``paired_wins``
    (seeds where the family's error is lower) and ``paired_n`` (common seeds); ``{}`` for the
    reference itself or without common seeds.
    """
    from invjax import report

    mine = by_seed.get((family, dataset, n_train), {})
    ref = by_seed.get((reference, dataset, n_train), {})
    common = sorted(set(mine) & set(ref), key=str)
    if family == reference or not common:
        return {}
    diffs = [mine[s] - ref[s] for s in common]
    m, sd = report.mean_std(diffs)
    return {
        "paired_vs": reference,
        "paired_diff_mean": m,
        "paired_diff_std": sd,
        "paired_wins": sum(d < 0 for d in diffs),
        "paired_n": len(diffs),
    }


def claims(runs_dir: str) -> list[dict]:
    """:func:`paired` for every comparison of :data:`CLAIMS` at every (dataset, N_t) run."""
    by_seed = _by_seed(_groups(runs_dir))
    points = sorted({(d, n) for _, d, n in by_seed}, key=lambda p: (p[0], p[1] or 0))
    out = []
    for family, reference in CLAIMS:
        for dataset, n_train in points:
            pair = paired(by_seed, family, dataset, n_train, reference)
            if pair:
                out.append({"experiment": family, "dataset": dataset, "n_train": n_train} | pair)
    return out


def paired_table(records: Sequence[dict], dataset: str) -> str:
    """Markdown: one line per comparison ("family - reference"), one column per N_t, cells
    "mean ± std (wins/n)" in points; ``""`` when the dataset has none."""
    mine = [r for r in records if r["dataset"] == dataset and r.get("paired_n")]
    if not mine:
        return ""
    sizes = sorted({r["n_train"] for r in mine})
    lines = [
        "| comparison | " + " | ".join(f"N_t = {n}" for n in sizes) + " |",
        "|---|" + "---|" * len(sizes),
    ]
    for label in dict.fromkeys(f"{r['experiment']} - {r['paired_vs']}" for r in mine):
        cells = {r["n_train"]: r for r in mine if f"{r['experiment']} - {r['paired_vs']}" == label}
        lines.append(
            f"| {label} | "
            + " | ".join(
                f"{c['paired_diff_mean']:+.2f} ± {c['paired_diff_std']:.2f} "
                f"({c['paired_wins']}/{c['paired_n']})"
                if (c := cells.get(n))
                else "-"
                for n in sizes
            )
            + " |"
        )
    return "\n".join(lines)


def plot(rows: Sequence[dict], out: str) -> list[str]:
    """One PNG per dataset: test error [%] vs N_t, log-log, mean +- std band per family."""
    written = []
    for dataset in sorted({r["dataset"] for r in rows}):
        curves: dict[str, list[dict]] = {}
        for r in rows:
            if r["dataset"] == dataset and math.isfinite(r["test_error_mean"]):
                curves.setdefault(r["experiment"], []).append(r)
        lines = []
        for i, (family, rs) in enumerate(curves.items()):
            rs = sorted(rs, key=lambda r: r["n_train"])
            x = [r["n_train"] for r in rs]
            m = [max(r["test_error_mean"], 0.1) for r in rs]
            s = [r["test_error_std"] for r in rs]
            lines.append((family, x, m, s, "--" if family in ("cnn", "svm") else "-", i))
        path = os.path.join(out, f"error_vs_n_train_{dataset}.png")
        written.append(
            plots.error_figure(
                lines,
                path,
                title=f"{dataset}: mean ± std over seeds",
                ylabel="test error (log, %)",
                figsize=(6.5, 4.5),
                dpi=110,
                band_alpha=0.15,
                legend_fontsize=7,
                percent_ticks=True,
            )
        )
    return written


def write_report(runs_dir: str, out: str, header: str) -> list[dict]:
    from invjax import report

    rows = aggregate(runs_dir)
    pairs = claims(runs_dir)
    os.makedirs(out, exist_ok=True)
    text = [header, ""]
    for dataset in sorted({r["dataset"] for r in rows}):
        text += [
            f"## {dataset}",
            "",
            report.table([r for r in rows if r["dataset"] == dataset], markdown=True),
            "",
        ]
        for records, what in (
            (rows, f"each family against `{PAIRED_REFERENCE}`"),
            (pairs, "the paper's claims"),
        ):
            table = paired_table(records, dataset)
            if table:
                text += [
                    f"Paired on the same splits, {what}: test error of the first minus the "
                    "second, in points, mean ± sample std over the common seeds (seeds where "
                    "the first is lower / common seeds; negative = the first is better).",
                    "",
                    table,
                    "",
                ]
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(text))
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(rows, f, indent=1)
    with open(os.path.join(out, "paired.json"), "w") as f:
        json.dump(pairs, f, indent=1)
    plots = plot(rows, out) if rows else []
    print(report.table(rows), flush=True)
    print("wrote", os.path.join(out, "results.md"), os.path.join(out, "results.json"), *plots)
    return rows


# ----------------------------------------------------------------------------- command line


def _ints(text: str, what: str, valid) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = ()
    if not values or not all(valid(v) for v in values):
        raise ValueError(f"{what}={text!r} is invalid")
    return values


def parse(argv: Sequence[str] | None):
    p = argparse.ArgumentParser(prog="python launch/study.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="docs/results", help="tables and plots go here")
    p.add_argument(
        "--runs-dir",
        default=None,
        help="run directories (default runs/study, --quick: runs/study_quick)",
    )
    p.add_argument("--quick", action="store_true", help="the smoke run (see the docstring)")
    p.add_argument("--datasets", default=None, help=f"comma list of {DATASETS}")
    p.add_argument("--families", default=None, help=f"comma list of {tuple(FAMILIES)}")
    p.add_argument("--sizes", default=None, help="comma list of N_t (0 = all 1079)")
    p.add_argument("--seeds", default=None, help="comma list of seeds 0..5 (= realisations)")
    p.add_argument("--steps", type=int, default=None, help="optimiser steps per run (the rule)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--width-divisor", type=float, default=2.0, help="WRN widths divided by this")
    p.add_argument(
        "--budget-minutes",
        type=float,
        default=None,
        help="start no new point after this many minutes (default 90; --quick: none)",
    )
    p.add_argument("--parallel", type=int, default=1, help="points trained side by side")
    p.add_argument(
        "--platform",
        choices=("auto", "cpu", "gpu"),
        default="auto",
        help="where runs train: 'auto' gives each parallel slot its own GPU where GPUs are "
        "visible, else the CPU (launch/sweep.py's slot rule)",
    )
    p.add_argument(
        "--cache-dir", default=None, help="JAX compilation cache (default RUNS/xla_cache)"
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the commands only")
    mode.add_argument("--report-only", action="store_true", help="aggregate existing runs only")
    args = p.parse_args(argv)
    base = QUICK if args.quick else FULL
    try:
        datasets = tuple(args.datasets.split(",")) if args.datasets else base["datasets"]
        for d in datasets:
            if d not in DATASETS:
                raise ValueError(f"--datasets: {d!r} is invalid: choose from {list(DATASETS)}")
        families = tuple(args.families.split(",")) if args.families else base["families"]
        for f in families:
            if f not in FAMILIES:
                raise ValueError(f"--families: {f!r} is invalid: choose from {list(FAMILIES)}")
        sizes = (
            _ints(args.sizes, "--sizes", lambda n: n == 0 or (10 <= n <= 1070 and n % 10 == 0))
            if args.sizes
            else base["sizes"]
        )
        seeds = _ints(args.seeds, "--seeds", lambda s: 0 <= s <= 5) if args.seeds else base["seeds"]
        steps = base["steps"] if args.steps is None else args.steps
        if args.budget_minutes is None:
            args.budget_minutes = base["budget_minutes"]
        if args.budget_minutes < 0:
            raise ValueError(
                f"--budget-minutes={args.budget_minutes} is invalid: it must be >= 0 (0 = none)"
            )
        for name, v, ok in (
            ("--steps", steps, steps >= 1),
            ("--batch-size", args.batch_size, args.batch_size >= 1),
            ("--width-divisor", args.width_divisor, args.width_divisor >= 1),
            ("--parallel", args.parallel, args.parallel >= 1),
        ):
            if not ok:
                raise ValueError(f"{name}={v} is invalid: it must be >= 1")
        if not (args.dry_run or args.report_only):
            sweep.slot_envs(args.parallel, 1, args.platform)  # enough GPUs: say so now
    except ValueError as e:
        msg = str(e)
        if "--sizes" in msg:
            msg += ": give N_t as 0 (all 1079) or multiples of 10 in 10..1070 (class-balanced)"
        if "--seeds" in msg:
            msg += ": give integers 0..5 (each seed is also the digits' realisation)"
        p.error(msg)
    return args, datasets, families, sizes, seeds, steps


def main(argv: Sequence[str] | None = None) -> int:
    args, datasets, families, sizes, seeds, steps = parse(argv)
    out = os.path.abspath(args.out)
    # runs/ is git-ignored: checkpoints never land next to the committed tables
    runs_dir = os.path.abspath(
        args.runs_dir or ("runs/study_quick" if args.quick else "runs/study")
    )
    header = (
        f"# {'Quick smoke run' if args.quick else 'Sample-complexity study'} "
        f"(`python launch/study.py {' '.join(argv if argv is not None else sys.argv[1:])}`)\n\n"
        f"datasets {', '.join(datasets)}; families {', '.join(families)}; N_t "
        f"{', '.join(str(n or N_ALL) for n in sizes)}; seeds {', '.join(map(str, seeds))}; "
        f"{steps} optimiser steps per run at batch {args.batch_size} (heads of two-phase "
        f"networks {max(1, steps // 4)}); WRN widths / {args.width_divisor:g}. Test error in %, "
        "mean ± sample std over the seeds (each seed = realisation and subset)."
    )
    if args.report_only:
        write_report(runs_dir, out, header)
        return 0
    runs, svm = plan(
        runs_dir, datasets, families, sizes, seeds, steps, args.batch_size, args.width_divisor
    )
    if args.dry_run:
        for r in runs:
            print(r.command("python"))
        for p in svm:
            print("svm", json.dumps(p))
        return 0
    os.environ["INVJAX_COMPILATION_CACHE"] = os.path.abspath(
        args.cache_dir or os.path.join(runs_dir, "xla_cache")
    )
    t0 = time.perf_counter()
    for p in svm:
        if os.path.isfile(os.path.join(p["workdir"], "results.json")):
            continue
        r = run_svm(p)
        print(
            f"svm {p['data.name']} N_t={r['n_train']} seed={p['seed']}: test_error="
            f"{r['test_error']:.2f}% (C={r['svm_C']:g}, gamma={r['svm_gamma']:.2e})",
            flush=True,
        )
    status, left = 0, 0
    points = sweep.by_point(runs)
    for k in range(0, len(points), args.parallel):  # `parallel` points side by side
        if args.budget_minutes and time.perf_counter() - t0 > 60 * args.budget_minutes:
            left = sum(1 for g in points[k:] for r in g if not sweep.finished(r))
            print(
                f"study: time budget of {args.budget_minutes:g} min spent: {left} network runs "
                "not started (the same command resumes them)",
                flush=True,
            )
            break
        batch = [r for g in points[k : k + args.parallel] for r in g]
        status |= sweep.run_local(batch, args.parallel, 1, args.platform)
    took = time.perf_counter() - t0
    done = sum(sweep.finished(r) for r in runs)
    print(
        f"study: {done} of {len(runs)} network runs and {len(svm)} SVM fits finished; "
        f"this command took {took / 60:.1f} min",
        flush=True,
    )
    note = f"\n\nThis command took {took / 60:.1f} min; {done} of {len(runs)} network runs finished"
    note += f" ({left} not started: time budget)." if left else "."
    write_report(runs_dir, out, header + note)
    return status


if __name__ == "__main__":
    sys.exit(main())
