"""Aggregate finished runs into tables (mean +- std over seeds) and a plot of error vs training size.

    python -m invjax.report RUNS_DIR [--markdown] [--plot FILE | --no-plot] [--include-streams]

Reads every ``results.json`` under ``RUNS_DIR`` (contract 1), groups the runs by experiment
(config file and the overrides other than seed / subset / realisation, which ``invjax.main``
records in ``results.json``), dataset and training-set size ``n_train``, and prints one row per
group: the number of runs, test error mean +- sample standard deviation (``ddof=1``; 0 for one
run) over the seeds (Scaled-MNIST: the realisations), validation error, parameters and wall
time. The paper reports its tables and curves this way (Tables 2-4, Figures 2-5).

Phase-1 stream runs of two-phase experiments (``*/streams/<stream>/``) are left out unless
``--include-streams``: they are parts of the multi-stream experiment above them.

The plot (``RUNS_DIR/error_vs_n_train.png`` unless ``--plot``) draws test error against
``n_train`` on log-log axes, one panel per dataset and one line (mean, +- std band) per
experiment, like the paper's limited-data figures. It needs matplotlib, which invjax does not
require: without it the plot is skipped with a message.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Iterable, Sequence

RESULTS_FILE = "results.json"
# Overrides that vary *within* an experiment (one point of a curve, one seed); the rest name it.
WITHIN_GROUP = (
    "seed",
    "data.seed",
    "data.n_train",
    "data.realisation",
    "data.data_dir",
    "multi_host",
)


def find_results(runs_dir: str, include_streams: bool = False) -> list[tuple[str, dict]]:
    """``(run directory, results)`` of every readable ``results.json`` under ``runs_dir``."""
    if not os.path.isdir(runs_dir):
        raise ValueError(f"runs directory {runs_dir!r} does not exist")
    found = []
    for root, dirs, files in os.walk(runs_dir):
        dirs.sort()
        # Checkpoints and TensorBoard files hold no results: do not descend into them.
        dirs[:] = [
            d for d in dirs if d not in ("checkpoints", "tensorboard", "corrupt_checkpoints")
        ]
        if not include_streams and os.path.basename(os.path.dirname(root)) == "streams":
            continue
        if RESULTS_FILE in files:
            try:
                with open(os.path.join(root, RESULTS_FILE)) as f:
                    results = json.load(f)
            except (OSError, ValueError) as e:
                print(f"report: skipping unreadable {root}/{RESULTS_FILE}: {e}", file=sys.stderr)
                continue
            if isinstance(results, dict) and "test_error" in results:
                found.append((root, results))
    return found


def experiment_name(run_dir: str, results: dict, runs_dir: str) -> str:
    """``config stem[key=value, ...]`` from the recorded config file and overrides, else the
    run directory's first component under ``runs_dir``."""
    config_file = results.get("config_file")
    if config_file:
        name = os.path.splitext(os.path.basename(str(config_file).split(":")[0]))[0]
        arg = str(config_file).partition(":")[2]
        if arg:
            name += f":{arg}"
        overrides = results.get("overrides") or {}
        kept = [f"{k}={v}" for k, v in sorted(overrides.items()) if k not in WITHIN_GROUP]
        name += f"[{', '.join(kept)}]" if kept else ""
        return name + (f"/{results['stream']}" if results.get("stream") else "")
    rel = os.path.relpath(run_dir, runs_dir)
    return rel.split(os.sep)[0] if rel != "." else os.path.basename(os.path.abspath(run_dir))


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (``ddof=1``; 0 for a single value)."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    if n == 1:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def aggregate(runs: Iterable[tuple[str, dict]], runs_dir: str) -> list[dict]:
    """One row per (experiment, dataset, n_train), sorted by dataset, experiment and n_train."""
    groups: dict[tuple, list[dict]] = {}
    for run_dir, r in runs:
        key = (experiment_name(run_dir, r, runs_dir), r.get("dataset", "?"), r.get("n_train"))
        groups.setdefault(key, []).append(r)
    rows = []
    for (name, dataset, n_train), rs in groups.items():
        finite = lambda key, rs=rs: [
            float(r[key])
            for r in rs
            if isinstance(r.get(key), int | float) and math.isfinite(r[key])
        ]

        test_m, test_s = mean_std(finite("test_error"))
        val_m, val_s = mean_std(finite("val_error"))
        params = sorted({int(r["params"]) for r in rs if isinstance(r.get("params"), int)})
        wall = finite("wall_time_s")
        rows.append(
            {
                "experiment": name,
                "dataset": dataset,
                "n_train": n_train,
                "runs": len(rs),
                "seeds": sorted({r.get("seed") for r in rs}, key=str),
                "test_error_mean": test_m,
                "test_error_std": test_s,
                "val_error_mean": val_m,
                "val_error_std": val_s,
                "params": params[0] if len(params) == 1 else params,
                "wall_time_s_mean": sum(wall) / len(wall) if wall else math.nan,
            }
        )
    rows.sort(key=lambda r: (str(r["dataset"]), r["experiment"], r["n_train"] or 0))
    return rows


def _pm(mean: float, std: float) -> str:
    return "n/a" if math.isnan(mean) else f"{mean:.2f} ± {std:.2f}"


def _params(p) -> str:
    if isinstance(p, list):
        return "/".join(_params(x) for x in p) if p else "n/a"
    return f"{p / 1e6:.2f}M" if p >= 1e5 else str(p)


def table(rows: Sequence[dict], markdown: bool = False) -> str:
    """The rows as an aligned text table, or a Markdown table."""
    header = [
        "experiment",
        "dataset",
        "n_train",
        "runs",
        "test error [%]",
        "val error [%]",
        "params",
        "wall [s]",
    ]
    body = [
        [
            r["experiment"],
            str(r["dataset"]),
            str(r["n_train"]),
            str(r["runs"]),
            _pm(r["test_error_mean"], r["test_error_std"]),
            _pm(r["val_error_mean"], r["val_error_std"]),
            _params(r["params"]),
            "n/a" if math.isnan(r["wall_time_s_mean"]) else f"{r['wall_time_s_mean']:.0f}",
        ]
        for r in rows
    ]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        return "\n".join(lines)
    widths = [max(len(x) for x in col) for col in zip(header, *body)]
    fmt = lambda row: "  ".join(x.ljust(w) for x, w in zip(row, widths)).rstrip()
    return "\n".join([fmt(header), fmt(["-" * w for w in widths]), *map(fmt, body)])


def plot(rows: Sequence[dict], path: str) -> str | None:
    """Test error vs ``n_train`` (log-log), one panel per dataset. Returns the path written, or
    None (with a message on stderr) if matplotlib is missing or no experiment has two sizes."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            "report: matplotlib is not installed: no plot (pip install matplotlib)", file=sys.stderr
        )
        return None
    curves: dict[str, dict[str, list[dict]]] = {}
    for r in rows:
        if (
            isinstance(r["n_train"], int)
            and r["n_train"] > 0
            and not math.isnan(r["test_error_mean"])
        ):
            curves.setdefault(str(r["dataset"]), {}).setdefault(r["experiment"], []).append(r)
    curves = {ds: {k: v for k, v in exps.items() if len(v) >= 2} for ds, exps in curves.items()}
    curves = {ds: exps for ds, exps in curves.items() if exps}
    if not curves:
        print("report: no experiment has two or more training sizes: no plot", file=sys.stderr)
        return None
    fig, axes = plt.subplots(1, len(curves), figsize=(5.5 * len(curves), 4.2), squeeze=False)
    for ax, (ds, exps) in zip(axes[0], sorted(curves.items())):
        for name, rs in sorted(exps.items()):
            rs = sorted(rs, key=lambda r: r["n_train"])
            x = [r["n_train"] for r in rs]
            m = [r["test_error_mean"] for r in rs]
            s = [r["test_error_std"] for r in rs]
            ax.plot(x, m, marker="o", label=name)
            lo = [max(a - b, 1e-3) for a, b in zip(m, s)]
            ax.fill_between(x, lo, [a + b for a, b in zip(m, s)], alpha=0.2)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("training images N_t")
        ax.set_ylabel("test error [%]")
        ax.set_title(ds)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m invjax.report", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("runs_dir", help="directory searched for results.json files")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument(
        "--plot", default=None, help="plot file (default RUNS_DIR/error_vs_n_train.png)"
    )
    parser.add_argument("--no-plot", action="store_true", help="do not plot")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead")
    parser.add_argument(
        "--include-streams", action="store_true", help="also list phase-1 stream runs"
    )
    args = parser.parse_args(argv)
    try:
        runs = find_results(args.runs_dir, args.include_streams)
    except ValueError as e:
        print(f"report: error: {e}", file=sys.stderr)
        return 2
    if not runs:
        print(f"report: no results.json under {args.runs_dir}", file=sys.stderr)
        return 1
    rows = aggregate(runs, args.runs_dir)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(table(rows, args.markdown), flush=True)
    if not args.no_plot:
        path = plot(rows, args.plot or os.path.join(args.runs_dir, "error_vs_n_train.png"))
        if path:
            print(f"plot: {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
