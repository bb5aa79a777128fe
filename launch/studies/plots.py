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


def partial_points(counts: Sequence[int], need: int | None) -> list[int]:
    """The indices of ``counts`` below ``need`` (none without a ``need``): the points of a
    curve whose realisations are not all in yet."""
    return [] if need is None else [j for j, k in enumerate(counts) if k < need]


def error_curves(
    errors: dict, dataset: str, families: Sequence[str], controls: Sequence[str] = ()
) -> list[tuple]:
    """The curves :func:`error_figure` draws for ``dataset``: per family of ``families`` with
    a run there, ``(family, x, mean, std, style, index, counts)`` over its N_t in increasing
    order; ``errors`` maps ``(dataset, family, N_t)`` to ``{seed: row}``. Mean and sample std
    (0 for one run) of the rows' ``test_error`` in percent, the mean clipped to 0.1 for the
    log axis; ``style`` dashed for the anchors (``cnn``, ``svm``), dotted for ``controls``."""
    lines = []
    for i, family in enumerate(families):
        pts = sorted((n, rs) for (d, f, n), rs in errors.items() if d == dataset and f == family)
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
        lines.append((family, x, m, s, style, i, [len(v) for v in e]))
    return lines


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
    need: int | None = None,
) -> str:
    """Write ``path``: one line per ``(family, x, mean, std, style, index, counts)`` of
    ``curves`` (``x`` the N_t, ``mean``/``std`` in percent, means already clipped to the log
    axis, ``counts`` the realisations behind each point), its band
    ``[max(mean - std, 0.1), mean + std]``; ``index`` picks its colour of tab20 and its marker.
    ``percent_ticks``: ``%``-labelled y ticks and one x tick per N_t. ``errorbars``: the same
    interval as an error bar at each point too (a band has no width where a family has one
    N_t). ``dodge``: the curves' points at one N_t side by side (:func:`dodged`; the ticks stay
    at the N_t). ``need``: a point of fewer realisations is drawn hollow and labelled ``k/need``
    (:func:`partial_points`), so that an unfinished arm does not read as a finished one."""
    pyplot = plt()
    fig, ax = pyplot.subplots(figsize=figsize)
    colours = pyplot.get_cmap("tab20").colors  # 13 families: the default 10 colours repeat
    partial = False
    for k, (family, x, m, s, style, i, counts) in enumerate(curves):
        c = colours[i % 20]
        x = dodged(x, k, len(curves), dodge)
        low = [max(a - b, 0.1) for a, b in zip(m, s)]
        marker = "os^vD"[i % 5]
        ax.plot(x, m, style, marker=marker, color=c, label=family, ms=marker_size)
        ax.fill_between(x, low, [a + b for a, b in zip(m, s)], color=c, alpha=band_alpha)
        if errorbars:
            err = [[a - lo for a, lo in zip(m, low)], list(s)]
            ax.errorbar(x, m, yerr=err, fmt="none", ecolor=c, elinewidth=1, capsize=2)
        for j in partial_points(counts, need):
            partial = True
            # white fill over the line's filled marker: hollow, in the family's colour
            ax.plot([x[j]], [m[j]], marker, color=c, mfc="white", ms=marker_size, zorder=3)
            ax.annotate(
                f"{counts[j]}/{need}",
                (x[j], m[j]),
                xytext=(4, 3),
                textcoords="offset points",
                fontsize=6,
                color=c,
            )
    if partial:
        title += f"\nhollow, k/{need}: only k of {need} realisations so far"
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
    need: int | None = None,
) -> list[str]:
    """``error_vs_n_train_<dataset>.png``: test error vs N_t (log-log), mean ± std per family
    (:func:`error_curves`); controls dotted, anchors dashed. ``errorbars``: also as error bars,
    the families' points side by side at each N_t and the axes labelled in plain numbers
    (``error_figure``). ``need``: the realisations a point has when complete; fewer are drawn
    hollow and labelled."""
    written = []
    for dataset in sorted({d for d, _, _ in errors}):
        written.append(
            error_figure(
                error_curves(errors, dataset, families, controls),
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
                need=need,
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
