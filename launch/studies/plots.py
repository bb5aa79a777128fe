"""The figures of a study: test error against N_t (:func:`plot_errors`, committed with the
report) and the runs' training curves (:func:`plot_curves`, drawn on demand).

:func:`error_figure` draws test error against the training-set size N_t on log-log axes, one
line per family with a band of mean ± std; each caller chooses its looks (size, title, line
styles, tick labels) and what mean and std mean (seeds of a sample, realisations). PNG bytes
depend only on the data and on matplotlib's drawing (no date or version is written into them).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence


def plt():
    """matplotlib's pyplot on the file-only Agg backend (no display on a batch machine)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot

    return matplotlib.pyplot


def dodged(x: Sequence[float], k: int, count: int, dodge: float) -> list[float]:
    """``x`` of the k-th of ``count`` curves moved by ``(k - (count - 1) / 2) * dodge`` decades:
    the curves' points at one N_t side by side, symmetric about it."""
    return [n * 10 ** ((k - (count - 1) / 2) * dodge) for n in x]


def error_figure(
    curves: Sequence[tuple],
    path: str,
    *,
    title: str,
    ylabel: str,
    figsize: tuple[float, float],
    dpi: int,
    band_alpha: float,
    legend_fontsize: int,
    marker_size: float | None = None,
    percent_ticks: bool = False,
    errorbars: bool = False,
    dodge: float = 0.0,
) -> str:
    """Write ``path``: one line per ``(family, x, mean, std, style, index)`` of ``curves``
    (``x`` the N_t, ``mean``/``std`` in percent, means already clipped to the log axis), its
    band ``[max(mean - std, 0.1), mean + std]``; ``index`` picks its colour of tab20 and its
    marker. ``percent_ticks``: ``%``-labelled y ticks and one x tick per N_t. ``errorbars``:
    the same interval as an error bar at each point too (a band has no width where a family
    has one N_t). ``dodge``: the curves' points at one N_t side by side (:func:`dodged`; the
    ticks stay at the N_t)."""
    pyplot = plt()
    fig, ax = pyplot.subplots(figsize=figsize)
    colours = pyplot.get_cmap("tab20").colors  # 13 families: the default 10 colours repeat
    for k, (family, x, m, s, style, i) in enumerate(curves):
        c = colours[i % 20]
        x = dodged(x, k, len(curves), dodge)
        low = [max(a - b, 0.1) for a, b in zip(m, s)]
        ax.plot(x, m, style, marker="os^vD"[i % 5], color=c, label=family, ms=marker_size)
        ax.fill_between(x, low, [a + b for a, b in zip(m, s)], color=c, alpha=band_alpha)
        if errorbars:
            err = [[a - lo for a, lo in zip(m, low)], list(s)]
            ax.errorbar(x, m, yerr=err, fmt="none", ecolor=c, elinewidth=1, capsize=2)
    ax.set_xscale("log")
    ax.set_yscale("log")
    if percent_ticks:
        from matplotlib.ticker import FuncFormatter, NullFormatter

        percent = FuncFormatter(lambda v, _: f"{v:g}%")
        ax.yaxis.set_major_formatter(percent)
        ax.yaxis.set_minor_formatter(percent)
        ax.tick_params(axis="y", which="minor", labelsize=7)
        ax.set_xticks(sorted({n for _, x, *_ in curves for n in x}))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("training images N_t (log)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=legend_fontsize, ncol=2)
    fig.tight_layout()
    # no "Software: matplotlib <version>" text chunk: the bytes depend on the data and drawing
    fig.savefig(path, dpi=dpi, metadata={"Software": None})
    pyplot.close(fig)
    return path


def plot_errors(
    errors: dict,
    out: str,
    families: Sequence[str],
    controls: Sequence[str] = (),
    *,
    errorbars: bool = False,
) -> list[str]:
    """``error_vs_n_train_<dataset>.png``: test error vs N_t (log-log), mean ± std per family;
    controls dotted, anchors dashed. ``errorbars``: also as error bars, the families' points
    side by side at each N_t and the axes labelled in plain numbers (``error_figure``)."""
    written = []
    for dataset in sorted({d for d, _, _ in errors}):
        lines = []
        for i, family in enumerate(families):
            pts = sorted(
                (n, rs) for (d, f, n), rs in errors.items() if d == dataset and f == family
            )
            if not pts:
                continue
            x = [n for n, _ in pts]
            e = [[r["test_error"] for r in rs.values()] for _, rs in pts]
            m = [max(sum(v) / len(v), 0.1) for v in e]
            s = [
                math.sqrt(sum((a - mm) ** 2 for a in v) / (len(v) - 1)) if len(v) > 1 else 0.0
                for v, mm in zip(e, m)
            ]
            style = "--" if family in ("cnn", "svm") else ":" if family in controls else "-"
            lines.append((family, x, m, s, style, i))
        written.append(
            error_figure(
                lines,
                os.path.join(out, f"error_vs_n_train_{dataset}.png"),
                title=f"{dataset}: mean ± std over realisations (last-epoch models)",
                ylabel="test error % (log)",
                figsize=(7.5, 5),
                dpi=100,
                band_alpha=0.12,
                legend_fontsize=6,
                marker_size=4,
                percent_ticks=errorbars,
                errorbars=errorbars,
                dodge=0.012 if errorbars else 0.0,
            )
        )
    return written


def plot_curves(groups: dict, out: str, prefix: str) -> list[str]:
    """One PNG per (dataset, family): every run's epoch-mean training loss (solid) and
    held-out / validation error (dotted, right axis) against its epoch, from the rows' thinned
    ``curve`` (:func:`launch.studies.record.thin`). ``groups``: ``(dataset, family) -> {run
    label: row}``."""
    pyplot = plt()
    os.makedirs(out, exist_ok=True)
    written = []
    for (dataset, family), runs in sorted(groups.items()):
        runs = {k: r for k, r in runs.items() if r.get("curve", {}).get("train_loss")}
        if not runs:
            continue
        fig, ax = pyplot.subplots(figsize=(6.5, 4))
        ax2 = ax.twinx()
        colours = pyplot.get_cmap("viridis")
        for i, (label, r) in enumerate(sorted(runs.items())):
            c = colours(i / max(1, len(runs) - 1))
            tr = r["curve"]["train_loss"]
            conv = r.get("convergence", {}).get("converged")
            ax.plot(
                [e[0] for e in tr],
                [e[1] for e in tr],
                color=c,
                lw=1,
                label=label + (" (unconverged)" if conv is False else ""),
            )
            va = r["curve"].get("val_error", [])
            ax2.plot([e[0] for e in va], [e[1] for e in va], ":", color=c, lw=1)
        ax.set_yscale("log")
        ax.set_xlabel("epoch")
        ax.set_ylabel("training loss (epoch mean, log)")
        ax2.set_ylabel("held-out / validation error % (dotted)")
        ax.set_title(f"{prefix} {dataset} {family}", fontsize=9)
        ax.legend(fontsize=5, ncol=2)
        fig.tight_layout()
        path = os.path.join(out, f"{prefix}_{dataset}_{family}.png")
        fig.savefig(path, dpi=80, metadata={"Software": None})
        pyplot.close(fig)
        written.append(path)
    return written
