"""The Markdown tables of a study's report (:mod:`launch.studies.report`), from record rows only.

Every function takes rows of the record (:mod:`launch.studies.record`) or the comparisons made
of them and returns Markdown; none reads a file.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def error_cell(runs: dict, need: int, empty: str) -> str:
    """One table cell: the mean ± sd test error of ``runs`` (``{seed: row}``), the count if
    fewer than ``need`` landed, ``Nu`` for N unconverged runs; ``empty`` when none landed."""
    if not runs:
        return empty
    e = [r["test_error"] for r in runs.values()]
    m = sum(e) / len(e)
    sd = math.sqrt(sum((x - m) ** 2 for x in e) / (len(e) - 1)) if len(e) > 1 else 0.0
    cell = f"{m:.2f} ± {sd:.2f}" if len(e) > 1 else f"{m:.2f}"
    if len(e) < need:
        cell += f" ({len(e)})"
    bad = sum(r.get("convergence", {}).get("converged") is False for r in runs.values())
    return cell + (f" {bad}u" if bad else "")


def _pct(x) -> str:
    return f"{x:.2f}" if isinstance(x, int | float) and math.isfinite(x) else "-"


def p_text(x, alpha: float = 0.05) -> str:
    """Two significant digits, three where two would read as the level ``alpha`` itself (a Holm
    p of 0.0499 is supported, and printed as 0.05 it would read as not)."""
    if not isinstance(x, int | float) or math.isnan(x):
        return "-"
    if x < 1e-4:
        return f"{x:.1e}"
    return f"{x:.3g}" if f"{x:.2g}" == f"{alpha:.2g}" and x != alpha else f"{x:.2g}"


def tuning_table(dataset: str, results: dict, chosen: dict, candidates, split=None) -> str:
    """One line per (family, candidate): held-out error and loss of the last epoch, the last
    epoch's training loss and error, converged?; the chosen candidate in bold.

    ``results``: family -> label -> record; ``chosen``: family -> :func:`choose`'s dict;
    ``candidates``: family -> [(label, HPs)]; ``split``: what the runs trained on (default
    the digits' 80:20 split)."""
    split = split or "80:20 split of the training split (863 / 216), realisation 0"
    lines = [
        f"Tuning on {dataset}'s {split}, "
        "seed 0; the last epoch's model; **bold** = chosen (lowest held-out error).",
        "",
        "| family | candidate | held-out error % | held-out loss | train loss | train error % "
        "| converged |",
        "|---|---|---|---|---|---|---|",
    ]
    for family, runs in results.items():
        for label, _ in candidates(family):
            r = runs.get(label)
            pick = chosen.get(family, {}).get("label") == label
            name = f"**{label}**" if pick else label
            if r is None:
                lines.append(f"| {family} | {name} | (not run yet) | | | | |")
                continue
            conv = r.get("convergence", {}).get("converged")
            lines.append(
                f"| {family} | {name} | {_pct(r.get('val_error'))} | {_pct(r.get('val_loss'))} "
                f"| {_pct(r.get('train_loss'))} | {_pct(r.get('train_error'))} "
                f"| {'-' if conv is None else 'yes' if conv else '**no**'} |"
            )
    return "\n".join(lines)


def results_table(errors: dict, dataset: str, families: Sequence[str], need: int) -> str:
    """Test error [%] mean ± sample std over the realisations per family and N_t, with the
    count of runs ("(k)" when fewer than ``need``) and of unconverged runs ("u" marks)."""
    sizes = sorted({n for d, _, n in errors if d == dataset})
    if not sizes:
        return ""
    lines = [
        "| family | " + " | ".join(f"N_t = {n}" for n in sizes) + " |",
        "|---|" + "---|" * len(sizes),
    ]
    for family in families:
        cells = []
        for n in sizes:
            cells.append(error_cell(errors.get((dataset, family, n), {}), need, empty=""))
        if any(cells):
            lines.append(f"| {family} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def convergence_summary(errors: dict) -> tuple[int, int, list[str]]:
    """(judged runs, unconverged runs, their names) of the main runs."""
    judged, bad = 0, []
    for (dataset, family, n), runs in sorted(errors.items()):
        for seed, r in sorted(runs.items()):
            c = r.get("convergence", {}).get("converged")
            if c is None:
                continue
            judged += 1
            if c is False:
                bad.append(f"{dataset}/{family}/N_t={n}/seed {seed}")
    return judged, len(bad), bad


def _trained_on(r: dict) -> str:
    """'CPU' when both sides trained there alone, else 'CPU vs CPU+H100' (first side first)."""
    a, b = ("+".join(r.get(f"trained_on_{s}", ["?"])) for s in ("better", "worse"))
    return a if a == b else f"{a} vs {b}"


def claims_markdown(records: Sequence[dict], dataset: str) -> str:
    """The claims of one dataset: one line per claim and N_t."""
    mine = [r for r in records if r["dataset"] == dataset]
    if not mine:
        return ""
    lines = [
        "| claim | N_t | n | diff (points) | 95% CI | wins | p (primary) | p exact sign-flip "
        "| p Holm | verdict | trained on |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in mine:
        sd = "" if math.isnan(r["diff_sd"]) else f" ± {r['diff_sd']:.2f}"
        lo, hi = r.get("ci_low", math.nan), r.get("ci_high", math.nan)
        ci = "-" if math.isnan(lo) else f"[{lo:+.2f}, {hi:+.2f}]"
        v = r["verdict"]
        v = f"**{v}**" if v in ("supported", "contradicted") else v
        lines.append(
            f"| {r['claim']} (`{r['better']}` - `{r['worse']}`) | {r['n_train']} | {r['n']} "
            f"| {r['diff_mean']:+.2f}{sd} | {ci} | {r['wins']}/{r['n']} | {p_text(r['p'])} "
            f"| {p_text(r['p_signflip'])} | {p_text(r['p_holm'])} | {v} | {_trained_on(r)} |"
        )
    return "\n".join(lines)


def verdict_matrix(
    records: Sequence[dict], dataset: str, claims: Sequence[tuple], sizes: Sequence[int], need: int
) -> str:
    """Every claim of ``dataset`` (rows, in ``claims``' order: ``(claim, better, worse,
    datasets)``) at every N_t of ``sizes`` and any other that landed (columns): the mean paired
    difference in points and the verdict, **S** supported, **C** contradicted, nothing for
    inconclusive; ``pending k/need`` while a comparison lacks realisations, ``-`` where it has
    no runs yet. One line a claim, so that a reader sees the whole study at once."""
    rows = [c for c in claims if dataset in c[3]]
    if not rows:
        return ""
    by = {(r["claim"], r["n_train"]): r for r in records if r["dataset"] == dataset}
    ns = sorted(set(sizes) | {n for _, n in by})
    lines = [
        "| claim | " + " | ".join(f"N_t = {n}" for n in ns) + " |",
        "|---|" + "---|" * len(ns),
    ]
    mark = {"supported": " **S**", "contradicted": " **C**"}
    for claim, better, worse, _ in rows:
        cells = []
        for n in ns:
            r = by.get((claim, n))
            if r is None:
                cells.append("-")
            elif r["verdict"] == "pending":
                cells.append(f"pending {r['n']}/{need}")
            else:
                cells.append(f"{r['diff_mean']:+.2f}{mark.get(r['verdict'], '')}")
        lines.append(f"| {claim} (`{better}` - `{worse}`) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def arms_table(
    errors: dict,
    dataset: str,
    families: Sequence[str],
    sizes: Sequence[int],
    need: int,
    paper: dict | None = None,
) -> str:
    """Test error [%] mean ± sample std of every family at every N_t of ``sizes`` (``-``: no
    run yet; ``(k)``: k of ``need`` realisations; ``ku``: k unconverged), and a last column of
    ``paper``'s published ``(mean, std)`` where it has the family. Empty without any run."""
    if not any(d == dataset for d, _, _ in errors):
        return ""
    paper = {f: v for f, v in (paper or {}).items() if f in families}
    head = "| family | " + " | ".join(f"N_t = {n}" for n in sizes)
    head += " | paper (Table 2) |" if paper else " |"
    lines = [head, "|---|" + "---|" * (len(sizes) + bool(paper))]
    for family in families:
        cells = []
        for n in sizes:
            cells.append(error_cell(errors.get((dataset, family, n), {}), need, empty="-"))
        if paper:
            cells.append("{:.2f} ± {:.2f}".format(*paper[family]) if family in paper else "")
        lines.append(f"| {family} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
