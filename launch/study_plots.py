"""The one home of the studies' error-vs-N_t figure (``launch/study.py``, ``study_report.py``).

:func:`error_figure` draws test error against the training-set size N_t on log-log axes, one
line per family with a band of mean ± std; each caller chooses its looks (size, title, line
styles, tick labels) and what mean and std mean (seeds of a sample, realisations).
"""

from __future__ import annotations

from collections.abc import Sequence


def plt():
    """matplotlib's pyplot on the file-only Agg backend (no display on a batch machine)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot

    return matplotlib.pyplot


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
) -> str:
    """Write ``path``: one line per ``(family, x, mean, std, style, index)`` of ``curves``
    (``x`` the N_t, ``mean``/``std`` in percent, means already clipped to the log axis), its
    band ``[max(mean - std, 0.1), mean + std]``; ``index`` picks its colour of tab20 and its
    marker. ``percent_ticks``: ``%``-labelled y ticks and one x tick per N_t."""
    pyplot = plt()
    fig, ax = pyplot.subplots(figsize=figsize)
    colours = pyplot.get_cmap("tab20").colors  # 13 families: the default 10 colours repeat
    for family, x, m, s, style, i in curves:
        c = colours[i % 20]
        ax.plot(x, m, style, marker="os^vD"[i % 5], color=c, label=family, ms=marker_size)
        ax.fill_between(
            x,
            [max(a - b, 0.1) for a, b in zip(m, s)],
            [a + b for a, b in zip(m, s)],
            color=c,
            alpha=band_alpha,
        )
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
    fig.savefig(path, dpi=dpi)
    pyplot.close(fig)
    return path
