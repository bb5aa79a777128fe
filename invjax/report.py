"""Aggregate finished runs into tables (mean +- std over seeds) and a plot of error vs training size.

    python -m invjax.report RUNS_DIR [--markdown | --json] [--plot FILE] [--curves FILE]
                            [--no-plot] [--include-streams]

Reads every ``results.json`` under ``RUNS_DIR`` (contract 1), groups the runs by experiment
(config file and the overrides other than seed / subset / realisation, which ``invjax.main``
records in ``results.json``), dataset and training-set size ``n_train``, and prints one row per
group: the number of runs, test error mean +- sample standard deviation (``ddof=1``) over the
seeds (Scaled-MNIST: the realisations), validation error, parameters and wall time; a group of
one run shows its figure with ``(n=1)``, as it has no spread. The paper reports its tables and
curves this way (Tables 2-4, Figures 2-5).

Phase-1 stream runs of two-phase experiments (``*/streams/<stream>/``) are left out unless
``--include-streams``: they are parts of the multi-stream experiment above them.

Plots (matplotlib, an invjax dependency; ``--no-plot`` skips them):

- ``RUNS_DIR/error_vs_n_train.png`` (``--plot``): test error against the training-set size
  ``N_t`` on log-log axes with the error in percent, one panel per dataset and one line (mean,
  +- std band) per experiment with two or more sizes, like the paper's limited-data figures.
- ``RUNS_DIR/training_curves.png`` (``--curves``): train and validation error (percent) and loss
  against the epoch of every run, from its ``metrics.jsonl``; a star marks the final test error
  at the epoch of the reported model (best validation or last).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Iterable, Sequence

from invjax import run as run_lib

RESULTS_FILE = run_lib.RESULTS_FILE
# Overrides that vary *within* an experiment (one point of a curve, one seed); the rest name it.
WITHIN_GROUP = (
    "seed",
    "data.seed",
    "data.n_train",
    "data.realisation",
    "data.data_dir",
    "multi_host",
)


def _warn(message: str) -> None:
    print(f"report: {message}", file=sys.stderr, flush=True)


def find_results(
    runs_dir: str, include_streams: bool = False, warn=_warn
) -> list[tuple[str, dict]]:
    """``(run directory, results)`` of every readable ``results.json`` under ``runs_dir``, each
    run once.

    Left out, each with a ``warn`` line: a file that is not a run's results (not a JSON object
    with ``test_error``); a ``results.json`` beside the models of a run of several seeds (the
    folder's ``run_kind.json`` or ``seeds.json``: a single run trained into that folder, which
    would count a seed twice); a second copy of a run already found (the same recorded config
    file, overrides, dataset, ``n_train`` and seed: :func:`run_identity`).
    """
    if not os.path.isdir(runs_dir):
        raise ValueError(f"runs directory {runs_dir!r} does not exist")
    found = []
    for root, dirs, files in os.walk(runs_dir):
        dirs.sort()
        dirs[:] = [d for d in dirs if d not in run_lib.NO_RESULTS_DIRS]  # checkpoints, logs
        if not include_streams and os.path.basename(os.path.dirname(root)) == run_lib.STREAMS_DIR:
            continue
        if RESULTS_FILE not in files:
            continue
        path = os.path.join(root, RESULTS_FILE)
        try:
            results = run_lib.read_results(root)
        except ValueError as e:  # unreadable, or not a run's results
            warn(f"skipping {e}")
            continue
        if run_lib.holds_seeds(root):
            warn(
                f"skipping {path}: {root} holds the models of a run of several seeds "
                f"(counted from its {run_lib.SEED_DIR.format('<k>')}/); a results.json beside "
                "them is a single run trained into that folder and would count a seed twice"
            )
            continue
        found.append((root, results))
    return _each_once(found, runs_dir, warn)


def run_identity(run_dir: str, results: dict, runs_dir: str) -> tuple | None:
    """What makes a recorded run that run: experiment (config file and overrides), dataset,
    ``n_train``, seed and the data realisation/subset seed overrides; None for a run without
    the command's record (its identity is unknown, it is never taken for another)."""
    if not results.get("config_file") or results.get("seed") is None:
        return None
    overrides = results.get("overrides") or {}
    return (
        experiment_name(run_dir, results, runs_dir),
        results.get("dataset"),
        results.get("n_train"),
        results.get("seed"),
        repr(overrides.get("data.realisation")),
        repr(overrides.get("data.seed")),
    )


def _each_once(found, runs_dir: str, warn) -> list[tuple[str, dict]]:
    seen: dict[tuple, str] = {}
    out = []
    for run_dir, results in found:
        key = run_identity(run_dir, results, runs_dir)
        if key is not None and key in seen:
            warn(
                f"skipping {os.path.join(run_dir, RESULTS_FILE)}: the same run (seed "
                f"{results.get('seed')}, same config and overrides) as {seen[key]}, counted once"
            )
            continue
        if key is not None:
            seen[key] = run_dir
        out.append((run_dir, results))
    return out


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


def summarise(name: str, dataset, n_train, rs: list[dict]) -> dict:
    """One table row of the results ``rs`` of one group (mean, std and count over its runs)."""

    def finite(key):
        return [
            float(r[key])
            for r in rs
            if isinstance(r.get(key), int | float) and math.isfinite(r[key])
        ]

    test, val = finite("test_error"), finite("val_error")
    test_m, test_s = mean_std(test)
    val_m, val_s = mean_std(val)
    params = sorted({int(r["params"]) for r in rs if isinstance(r.get("params"), int)})
    wall = finite("wall_time_s")
    return {
        "experiment": name,
        "dataset": dataset,
        "n_train": n_train,
        "runs": len(rs),
        "seeds": sorted({r.get("seed") for r in rs}, key=str),
        "test_error_mean": test_m,
        "test_error_std": test_s,
        "test_error_n": len(test),
        "val_error_mean": val_m,
        "val_error_std": val_s,
        "val_error_n": len(val),
        "params": params[0] if len(params) == 1 else params,
        "wall_time_s_mean": sum(wall) / len(wall) if wall else math.nan,
        "test_errors": test,
    }


def aggregate(runs: Iterable[tuple[str, dict]], runs_dir: str) -> list[dict]:
    """One row per (experiment, dataset, n_train), sorted by dataset, experiment and n_train."""
    groups: dict[tuple, list[dict]] = {}
    for run_dir, r in runs:
        key = (experiment_name(run_dir, r, runs_dir), r.get("dataset", "?"), r.get("n_train"))
        groups.setdefault(key, []).append(r)
    rows = [summarise(name, ds, n, rs) for (name, ds, n), rs in groups.items()]
    rows.sort(key=lambda r: (str(r["dataset"]), r["experiment"], r["n_train"] or 0))
    return rows


def _pm(mean: float, std: float, n: int = 2) -> str:
    """``mean ± std``; a single run has no spread to show: ``mean (n=1)``."""
    if math.isnan(mean):
        return "n/a"
    return f"{mean:.2f} (n=1)" if n == 1 else f"{mean:.2f} ± {std:.2f}"


def _flat_counts(rows: Sequence[dict]) -> list[int]:
    out = []
    for r in rows:
        p = r.get("params")
        out += [int(x) for x in (p if isinstance(p, list) else [p]) if isinstance(x, int)]
    return out


def params_unit(counts: Sequence[int]) -> tuple[str, float, int]:
    """``(suffix, divisor, decimals)``: one unit for a whole column of parameter counts, chosen
    by the largest (``M`` from a million, ``k`` from ten thousand), with the decimals that give the
    smallest at least two significant digits (at most 3): ``0.072M`` beside ``36.48M``."""
    big = max(counts, default=0)
    suffix, div = ("M", 1e6) if big >= 1e6 else ("k", 1e3) if big >= 1e4 else ("", 1.0)
    small = min((c for c in counts if c > 0), default=big) / div
    decimals = 0 if not suffix else min(3, max(1, 1 - math.floor(math.log10(small or 1))))
    return suffix, div, decimals


def _params(p, unit=None) -> str:
    suffix, div, decimals = unit or params_unit(_flat_counts([{"params": p}]))
    if isinstance(p, list):
        return "/".join(_params(x, (suffix, div, decimals)) for x in p) if p else "n/a"
    if not isinstance(p, int):
        return "n/a"
    return f"{p / div:.{decimals}f}{suffix}"


def table(rows: Sequence[dict], markdown: bool = False) -> str:
    """The rows as an aligned text table, or a Markdown table (parameter counts in one unit)."""
    unit = params_unit(_flat_counts(rows))
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
            _pm(r["test_error_mean"], r["test_error_std"], r["test_error_n"]),
            _pm(r["val_error_mean"], r["val_error_std"], r["val_error_n"]),
            _params(r["params"], unit),
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


def _pyplot():
    """matplotlib's pyplot on the file-only Agg backend, or None with a message."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            "report: matplotlib is not installed: no plot (pip install matplotlib)", file=sys.stderr
        )
        return None
    return plt


def _percent_axis(axis, log: bool) -> None:
    """Tick labels like ``5%``, ``20%`` (a log axis would print ``4x10^1``); on a log axis the
    minor ticks at 2x and 5x a power of ten are labelled too, so a narrow range still reads."""
    from matplotlib import ticker

    pct = lambda v, _: f"{v:g}%"
    axis.set_major_formatter(ticker.FuncFormatter(pct))
    if log:
        axis.set_minor_locator(ticker.LogLocator(base=10, subs=(2.0, 5.0)))
        axis.set_minor_formatter(ticker.FuncFormatter(pct))


def _log_axis_ticks(axis, lo: float, hi: float, fmt) -> None:
    """Labelled ticks on a log axis spanning ``[lo, hi]`` that cannot crowd: 1..9 times a power
    of ten within half a decade, 1, 2 and 5 times each power of ten up to two decades, only the
    powers of ten beyond (at most seven); unlabelled minor ticks. Matplotlib's default labels every minor tick of a narrow log
    axis (1.2, 1.4, 1.6 ... overlapping) and mixes notations (``2x10^0`` beside ``3``)."""
    from matplotlib import ticker

    decades = math.log10(hi / lo) if lo > 0 and hi > lo else 0.0
    if decades <= 0.5:  # 1..9: at most five labels inside half a decade
        major = ticker.LogLocator(base=10, subs=tuple(float(k) for k in range(1, 10)))
    elif decades <= 2:
        major = ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0))
    else:
        major = ticker.LogLocator(base=10, subs=(1.0,), numticks=7)
    axis.set_major_locator(major)
    axis.set_major_formatter(ticker.FuncFormatter(fmt))
    axis.set_minor_locator(ticker.LogLocator(base=10, subs="auto"))
    axis.set_minor_formatter(ticker.NullFormatter())


def _n_train_axis(axis, sizes: Sequence[int]) -> None:
    """The N_t axis (log): a labelled tick at each training size of the plot, all in one plain
    notation (``20``, ``1,079``), no labelled minor ticks (``2x10^1`` beside ``100``)."""
    from matplotlib import ticker

    axis.set_major_locator(ticker.FixedLocator(sorted(set(sizes))))
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    axis.set_minor_locator(ticker.NullLocator())
    axis.set_minor_formatter(ticker.NullFormatter())


def short_labels(names: Sequence[str]) -> dict[str, str]:
    """Legend labels: ``stem[k=v, ...]`` names without the overrides they all share (a plot of a
    sweep over one key then shows just that key)."""
    parsed = {}
    for name in names:
        stem, _, rest = name.partition("[")
        parsed[name] = (stem, rest.rstrip("]").split(", ") if rest else [])
    common = set.intersection(*(set(o) for _, o in parsed.values())) if parsed else set()
    out = {}
    for name, (stem, overrides) in parsed.items():
        kept = [o for o in overrides if o not in common]
        out[name] = stem + (f"[{', '.join(kept)}]" if kept else "")
    return out


def legend_label(text: str, width: int = 44, lines: int = 3) -> str:
    """``text`` wrapped at ``width`` characters (at ``, `` between overrides where it can) into
    at most ``lines`` lines, the last cut with ``...``: a legend of long override strings then
    keeps the plot its width."""
    import textwrap

    wrapped = textwrap.wrap(text, width, break_on_hyphens=False) or [""]
    if len(wrapped) > lines:
        wrapped = wrapped[: lines - 1] + [textwrap.shorten(wrapped[lines - 1], width - 3) + "..."]
    return "\n".join(wrapped)


def plot(rows: Sequence[dict], path: str) -> str | None:
    """Test error vs ``n_train`` (log-log, percent), one panel per dataset. Returns the path
    written, or None (with a message on stderr) if matplotlib is missing or no experiment has
    two sizes."""
    plt = _pyplot()
    if plt is None:
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
    legends = []
    for ax, (ds, exps) in zip(axes[0], sorted(curves.items())):
        labels = short_labels(list(exps))
        for name, rs in sorted(exps.items()):
            rs = sorted(rs, key=lambda r: r["n_train"])
            x = [r["n_train"] for r in rs]
            m = [r["test_error_mean"] for r in rs]
            s = [r["test_error_std"] for r in rs]
            runs = "/".join(sorted({str(r["runs"]) for r in rs}))
            ax.plot(x, m, marker="o", label=legend_label(f"{labels[name]} (n={runs})"))
            lo = [max(a - b, 1e-3) for a, b in zip(m, s)]
            ax.fill_between(x, lo, [a + b for a, b in zip(m, s)], alpha=0.2)
        ax.set_xscale("log")
        ax.set_yscale("log")
        _n_train_axis(ax.xaxis, [r["n_train"] for rs in exps.values() for r in rs])
        _percent_axis(ax.yaxis, log=True)
        ax.set_xlabel("training images N_t")
        ax.set_ylabel("test error (mean ± std over seeds)")
        ax.set_title(ds)
        ax.grid(True, which="both", alpha=0.3)
        # Below the panel: a legend inside would hide the curves.
        # (savefig's tight bounding box takes it in; the layout of the panels does not).
        legends.append(ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2)))
        legends[-1].set_in_layout(False)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight", bbox_extra_artists=legends)
    plt.close(fig)
    return path


def read_metrics(run_dir: str) -> list[dict]:
    """The records of ``run_dir/metrics.jsonl`` (lines cut short by a kill are skipped)."""
    path = os.path.join(run_dir, run_lib.METRICS_FILE)
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def plot_curves(runs: Sequence[tuple[str, dict]], runs_dir: str, path: str) -> str | None:
    """Training curves of every run: error (percent) and loss against the epoch, train dashed,
    validation solid, the final test error as a star at the reported model's epoch. Returns the
    path written, or None (with a message) without matplotlib or without any metrics.jsonl."""
    curves = [(d, r, read_metrics(d)) for d, r in runs]
    curves = [(d, r, m) for d, r, m in curves if any(not x.get("final") for x in m)]
    if not curves:
        print("report: no run has a metrics.jsonl: no training curves", file=sys.stderr)
        return None
    plt = _pyplot()
    if plt is None:
        return None
    fig, (ax_err, ax_loss) = plt.subplots(1, 2, figsize=(11, 4.2))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (run_dir, results, metrics) in enumerate(sorted(curves, key=lambda c: c[0])):
        color = colors[i % len(colors)]
        label = os.path.relpath(run_dir, runs_dir)
        label = experiment_name(run_dir, results, runs_dir) if label == "." else label
        label = legend_label(label, width=36, lines=2)
        for split, style in (("train", "--"), ("val", "-")):
            recs = [x for x in metrics if x.get("split") == split and not x.get("final")]
            epochs = [x["epoch"] for x in recs]
            for ax, key in ((ax_err, "error"), (ax_loss, "loss")):
                ys = [math.nan if x.get(key) is None else x[key] for x in recs]
                ax.plot(
                    epochs,
                    ys,
                    style,
                    color=color,
                    label=f"{label} {split}" if ax is ax_err else None,
                )
        final = [x for x in metrics if x.get("final") and x.get("split") == "test"]
        if final and final[-1].get("error") is not None:
            at = final[-1].get("model_epoch", final[-1]["epoch"])
            ax_err.plot([at], [final[-1]["error"]], "*", color=color, markersize=12)
    ax_err.set_ylabel("error (train --, val -, test *)")
    _percent_axis(ax_err.yaxis, log=False)
    ax_loss.set_ylabel("cross-entropy loss")
    ax_loss.set_yscale("log")
    losses = [
        x["loss"]
        for _, _, m in curves
        for x in m
        if not x.get("final") and isinstance(x.get("loss"), int | float) and x["loss"] > 0
    ]
    if losses:
        _log_axis_ticks(ax_loss.yaxis, min(losses), max(losses), lambda v, _: f"{v:g}")
    for ax in (ax_err, ax_loss):
        ax.set_xlabel("epoch")
        ax.grid(True, which="both", alpha=0.3)
    legends = []
    if len(curves) <= 12:
        legends.append(
            ax_err.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
        )
        legends[-1].set_in_layout(False)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight", bbox_extra_artists=legends)
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m invjax.report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("runs_dir", help="directory searched for results.json files")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument(
        "--plot", default=None, help="plot file (default RUNS_DIR/error_vs_n_train.png)"
    )
    parser.add_argument(
        "--curves", default=None, help="training curves file (default RUNS_DIR/training_curves.png)"
    )
    parser.add_argument("--no-plot", action="store_true", help="draw neither plot")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead")
    parser.add_argument(
        "--include-streams", action="store_true", help="also list phase-1 stream runs"
    )
    args = parser.parse_args(argv)
    targets = {}  # plot -> file, for each plot that can be written
    if not args.no_plot:
        for what, flag, given, default in (
            ("plot", "--plot", args.plot, "error_vs_n_train.png"),
            ("curves", "--curves", args.curves, "training_curves.png"),
        ):
            path = given or os.path.join(args.runs_dir, default)
            problem = cannot_write(path) if os.path.isdir(args.runs_dir) or given else None
            if problem and given:  # asked for: refused before anything is read
                print(f"invjax: error: {flag}={given}: {problem}", file=sys.stderr)
                return 2
            if problem:
                _warn(
                    f"no {what} drawn: {problem} (the runs folder may be read-only: give "
                    f"{flag} FILE elsewhere, or --no-plot)"
                )
                continue
            targets[what] = path
    try:
        runs = find_results(args.runs_dir, args.include_streams)
    except ValueError as e:
        print(f"invjax: error: {e}", file=sys.stderr)
        return 2
    if not runs:
        print(f"report: no results.json under {args.runs_dir}", file=sys.stderr)
        return 1
    rows = aggregate(runs, args.runs_dir)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(table(rows, args.markdown), flush=True)
    try:
        if "plot" in targets and plot(rows, targets["plot"]):
            print(f"plot: {targets['plot']}", file=sys.stderr)
        if "curves" in targets and plot_curves(runs, args.runs_dir, targets["curves"]):
            print(f"training curves: {targets['curves']}", file=sys.stderr)
    except OSError as e:  # the destination failed after the check (full, removed)
        print(f"invjax: error: cannot write the plot: {e}", file=sys.stderr)
        return 1
    return 0


def cannot_write(path: str) -> str | None:
    """Why the file ``path`` cannot be written (one line), or None: its folder (or the first
    existing one above it, where it would be made) must be a directory where a file can be
    created; probed by creating and removing one, as permission bits miss read-only mounts."""
    directory = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(directory):
        directory = os.path.dirname(directory)
    if not os.path.isdir(directory):
        return f"{directory} is a file, not a directory"
    if os.path.isdir(path):
        return f"{path} is a directory"
    ext = os.path.splitext(path)[1].lstrip(".").lower()
    if ext:  # a format matplotlib cannot write would fail only after the report is read
        from matplotlib.backend_bases import FigureCanvasBase

        formats = sorted(FigureCanvasBase.get_supported_filetypes())
        if ext not in formats:
            return f"matplotlib cannot write .{ext} files (formats: {', '.join(formats)})"
    probe = os.path.join(directory, f".report-write-test-{os.getpid()}")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.remove(probe)
    except OSError as e:
        return f"{directory} is not writable ({os.strerror(e.errno or 0)})"
    return None


if __name__ == "__main__":
    sys.exit(main())
