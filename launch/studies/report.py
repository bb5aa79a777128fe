"""A study's report, regenerated from its record alone: ``results.md``, ``claims.json``,
``claims_first_rule.json`` (where a later rule replaced the first at some N_t) and the figures
``error_vs_n_train_<dataset>.png``; the convergence figures on demand (:func:`write_curves`).

The same record gives the same bytes: every table is sorted by the record's run paths, never by
the order in which runs landed, and the command line written into ``results.md`` is the
canonical one (:func:`command`), not the one typed.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence

from launch.studies import plan, plots, stats, tables
from launch.studies.plan import Rule, Study

HOLM_FAMILIES = {"all": "every complete comparison", "claim": "each claim and dataset"}


def convergence_section(errors) -> list[str]:
    """The report's "Convergence" section (no lines when no run was judged)."""
    judged, bad, names = tables.convergence_summary(errors)
    if not judged:
        return []
    return [
        "## Convergence",
        "",
        f"{bad} of {judged} main runs unconverged (training loss over the last 10% of the "
        f"epochs more than {100 * stats.PLATEAU_REL:g}% below the 10% before, and above "
        f"{stats.LOSS_FLOOR}): " + (", ".join(names) if names else "none") + ".",
        "",
    ]


def claims_table(
    study: Study, errors: dict, need: int, test: str = "t", family: str = "all"
) -> list[dict]:
    """Every claim of ``study.claims`` at every (dataset, N_t) that has runs of both families:
    :func:`stats.compare` plus Holm (over the whole table, or per claim and dataset)."""
    points = sorted({(d, n) for d, _, n in errors})
    recs = []
    for claim, better, worse, datasets in study.claims:
        for dataset, n in points:
            a = errors.get((dataset, better, n), {})
            b = errors.get((dataset, worse, n), {})
            if dataset not in datasets or not a or not b:
                continue
            ea = {s: r["test_error"] for s, r in a.items()}
            eb = {s: r["test_error"] for s, r in b.items()}
            c = stats.compare(ea, eb, need, test)
            recs.append({"claim": claim, "better": better, "worse": worse, "dataset": dataset})
            recs[-1] |= {"n_train": n, **c}
            # which devices trained each side (a paired difference across devices carries
            # their spread too: the README's caveats)
            for side, rs in (("better", a), ("worse", b)):
                on = sorted({d for r in rs.values() for d in r.get("trained_on", ["?"])})
                recs[-1][f"trained_on_{side}"] = on
    for g in holm_groups(recs, family):
        stats.adjust(g)
    return recs


def holm_groups(recs: list[dict], family: str) -> list[list[dict]]:
    """The comparisons of each Holm family: all together (``'all'``) or per claim and dataset
    (``'claim'``), each in the order of ``recs``."""
    groups: dict[tuple, list[dict]] = {}
    for r in recs:
        groups.setdefault(("all",) if family == "all" else (r["claim"], r["dataset"]), []).append(r)
    return list(groups.values())


def with_other_holm(
    study: Study, claims: list[dict], errors: dict, need: int, test: str, family: str
) -> str:
    """Add ``p_holm_<other>`` and ``verdict_<other>`` to each of ``claims`` (Holm over the
    other family of :data:`HOLM_FAMILIES`, a sensitivity check of the primary correction);
    return that other family's name."""
    other = next(f for f in HOLM_FAMILIES if f != family)
    for c, o in zip(claims, claims_table(study, errors, need, test, other), strict=True):
        c[f"p_holm_{other}"], c[f"verdict_{other}"] = o["p_holm"], o["verdict"]
    return other


def planned_family_size(study: Study, family: str) -> int:
    """How many comparisons one Holm family holds once every run of the plan has landed."""
    per_size = sum(len(ds) for *_, ds in study.claims) if family == "all" else 1
    return len(study.sizes) * per_size


def with_planned_holm(study: Study, claims: list[dict], family: str) -> None:
    """Add ``p_holm_planned`` and ``verdict_planned`` to each of ``claims``: Holm over the whole
    planned family (every claim on its datasets at every N_t of the plan; with
    ``family='claim'`` each claim and dataset's N_t), the comparisons not yet complete counted
    at p = 1. Holm's adjusted p-values never rise when another p-value falls, so each bounds
    every Holm p its comparison can get as the rest lands (its own runs unchanged): a verdict
    supported here cannot turn."""
    per_group = planned_family_size(study, family)
    for recs in holm_groups(claims, family):
        ps = [r["p"] for r in recs]
        missing = per_group - sum(not math.isnan(p) for p in ps)
        if missing < 0:
            raise ValueError(f"{len(recs)} comparisons in a planned family of {per_group}")
        for r, a in zip(recs, stats.holm(ps + [1.0] * missing), strict=False):
            r["p_holm_planned"] = a
            r["verdict_planned"] = "pending" if math.isnan(a) else stats.verdict(r["diff_mean"], a)


def sensitivity_markdown(study: Study, claims: list[dict], family: str, other: str) -> list[str]:
    """A report section: the verdicts counted under both Holm families, a table of the
    comparisons whose verdict differs between them, and (where :func:`with_planned_holm` ran)
    the verdicts that no later landing can turn."""
    if not claims:
        return []
    _p = tables.p_text  # p-values as the claims tables print them

    def counts(key: str) -> str:
        n = {v: sum(c[key] == v for c in claims) for v in ("supported", "contradicted")}
        return f"{n['supported']} supported, {n['contradicted']} contradicted"

    moved = [c for c in claims if c["verdict"] != c[f"verdict_{other}"]]
    text = [
        "## Sensitivity: the other Holm family, and the planned one",
        "",
        f"Of {len(claims)} comparisons, Holm over {HOLM_FAMILIES[family]} (the verdicts above): "
        f"{counts('verdict')}; over {HOLM_FAMILIES[other]}: {counts(f'verdict_{other}')}. "
        f"The verdicts above stand; {len(moved)} differ under the other correction"
        + (":" if moved else "."),
        "",
    ]
    if moved:
        text += [
            f"| dataset | claim | N_t | diff | p | Holm p | verdict | Holm p ({other}) | verdict |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        text += [
            f"| {c['dataset']} | {c['claim']} | {c['n_train']} | {c['diff_mean']:+.2f} | "
            f"{_p(c['p'])} | {_p(c['p_holm'])} | {c['verdict']} | {_p(c[f'p_holm_{other}'])} | "
            f"{c[f'verdict_{other}']} |"
            for c in moved
        ]
        text.append("")
    if "verdict_planned" in claims[0]:
        m = planned_family_size(study, family)
        fragile = [
            c
            for c in claims
            if c["verdict"] != "inconclusive" and c["verdict_planned"] != c["verdict"]
        ]
        total = f"{m} comparisons" if family == "all" else f"{m} per claim and dataset"
        text += [
            f"Holm over the whole planned family ({total}; the comparisons not yet complete "
            "counted at p = 1), which bounds every Holm p that a comparison can get as the rest "
            f"lands, since Holm's adjusted p-values never rise when another falls: "
            f"{counts('verdict_planned')}. Those verdicts no later landing can turn (unless a "
            "comparison's own runs are replaced). Decided now but not yet beyond that bound: "
            + (
                ", ".join(
                    f"{c['dataset']} {c['claim']} at N_t = {c['n_train']} "
                    f"(Holm p {_p(c['p_holm'])}, bound {_p(c['p_holm_planned'])})"
                    for c in fragile
                )
                or "none"
            )
            + ".",
            "",
        ]
    return text


def superseded(
    study: Study, rows: Sequence[dict], rule: Rule, need: int, test: str, holm_family: str
) -> tuple[list[str], list[dict]]:
    """The first rule's runs at the N_t that ``rule`` trains otherwise: a Markdown section
    (their tables and claims, Holm over these alone) and the claims; both empty where the rules
    agree at every N_t. Kept for the record, outside the report's verdicts."""
    first = study.first_rule
    changed = [
        n or study.n_all
        for n in study.sizes
        if plan.run_label(study, n, rule) != plan.run_label(study, n, first)
    ]
    errors = plan.main_errors(study, rows, first, changed) if changed else {}
    # the SVM's runs are the same under both rules: counted in the report, not superseded
    errors = {k: v for k, v in errors.items() if study.families[k[1]].stem is not None}
    if not errors:
        return [], []
    claims = claims_table(study, errors, need, test, holm_family)
    text = [
        f"## Superseded: the first rule at N_t = {', '.join(map(str, changed))}",
        "",
        f"These runs trained under the first rule (at least {first.min_steps} steps and "
        f"{first.min_epochs} epochs), which the rule above replaced at these N_t before their "
        "retraining, for their convergence (count below). They are not among the verdicts "
        "above; their claims below are corrected among themselves only.",
        "",
    ]
    for dataset in study.datasets:
        table = tables.results_table(errors, dataset, tuple(study.families), need)
        if table:
            text += [f"### {dataset} (first rule)", "", table, ""]
            cm = tables.claims_markdown(claims, dataset)
            text += [cm, ""] if cm else []
    judged, bad, _ = tables.convergence_summary(errors)
    text += [f"{bad} of these {judged} runs are unconverged.", ""]
    return text, claims


def command(study: Study, rule: Rule, seeds: Sequence[int], test: str, holm_family: str) -> str:
    """The canonical ``report`` command that writes this report: its options where they
    differ from the study's defaults (paths never: the same record gives the same bytes)."""
    words = ["python", "-m", "launch.studies", study.name, "report"]
    main = study.main_rule
    for name in ("min_steps", "min_epochs", "batch_size", "width_divisor"):
        if getattr(rule, name) != getattr(main, name):
            words.append(f"--{name}={getattr(rule, name):g}")
    if tuple(seeds) != tuple(study.seeds):
        words.append("--seeds=" + ",".join(map(str, seeds)))
    if test != "t":
        words.append(f"--test={test}")
    if holm_family != "all":
        words.append(f"--holm_family={holm_family}")
    return " ".join(words)


def tuning_section(study: Study, by_run: dict, split: str | None = None) -> list[str]:
    """Per dataset the tuning table (``split``: what its runs trained on, if not the digits'
    80:20 split)."""
    text = []
    for dataset in study.datasets:
        results = {
            f: plan.tuning_results(study, by_run, dataset, f)
            for f, fam in study.families.items()
            if fam.tune not in ("inherit", "none") and dataset in fam.datasets
        }
        chosen = {f: c for f in results if (c := plan.choose(study, results[f], f)) is not None}
        if any(results.values()):
            text += [
                f"## Tuning: {dataset}",
                "",
                tables.tuning_table(
                    dataset,
                    {f: r for f, r in results.items() if r},
                    chosen,
                    lambda f, done=results: plan.candidates(study, f, done[f]),
                    split,
                ),
                "",
            ]
    return text


def write_report(
    study: Study,
    rows: Sequence[dict],
    out: str,
    rule: Rule | None = None,
    seeds: Sequence[int] | None = None,
    test: str = "t",
    holm_family: str = "all",
    figures: bool = True,
) -> list[str]:
    """Write ``out/results.md``, ``claims.json``, ``claims_first_rule.json`` (or remove a stale
    one) and, with ``figures``, the error-vs-N_t figures, from the record ``rows`` alone
    (``rule``: the main runs' rule, default the study's; ``seeds``: the realisations a
    comparison needs). Returns the paths written. A study with pre-registered claims
    (:attr:`Study.registered`) gets :func:`write_registered_report` instead."""
    if study.registered:
        return write_registered_report(study, rows, out, seeds, figures, study.paper)
    rule = rule or study.main_rule
    seeds = tuple(seeds or study.seeds)
    by_run = {r["run"]: r for r in rows}
    text = [
        f"# The {study.name} study: results",
        "",
        f"Written by `{command(study, rule, seeds, test, holm_family)}` from the record "
        "`runs.jsonl` here (README.md: the protocol and the commands). "
        f"Rule: at least {rule.min_steps} steps and {rule.min_epochs} epochs at batch "
        f"{rule.batch_size}, WRN widths / {rule.width_divisor:g}; last-epoch models "
        f"(tuning: {plan.tune_rule(study, rule).min_epochs} epochs).",
        "",
    ]
    top = len(text)  # the verdicts at a glance go here, before the tuning
    text += tuning_section(study, by_run)
    errors = plan.main_errors(study, rows, rule)
    need = len(seeds)
    claims = claims_table(study, errors, need, test, holm_family)
    other = with_other_holm(study, claims, errors, need, test, holm_family)
    with_planned_holm(study, claims, holm_family)
    sizes = [study.n_all if n == 0 else n for n in study.sizes]
    if claims:
        glance = [
            "## Verdicts at a glance",
            "",
            "Mean paired difference (first - second, points; negative = the claim's direction) "
            f"per claim and N_t; **S** supported, **C** contradicted after Holm over "
            f"{HOLM_FAMILIES[holm_family]}, nothing for inconclusive; `-`: not yet run. "
            "The claims tables below give each comparison's interval and p-values.",
            "",
        ]
        for dataset in study.datasets:
            matrix = tables.verdict_matrix(claims, dataset, study.claims, sizes, need)
            glance += [f"{dataset}:", "", matrix, ""]
        text[top:top] = glance
    text += dataset_sections(study, errors, claims, need, test, holm_family)
    text += sensitivity_markdown(study, claims, holm_family, other)
    first, first_claims = superseded(study, rows, rule, need, test, holm_family)
    text += convergence_section(errors)
    text += first
    os.makedirs(out, exist_ok=True)
    written = []
    if figures:
        controls = [f for f, fam in study.families.items() if fam.tune == "inherit"]
        written += plots.plot_errors(errors, out, tuple(study.families), controls, need=need)
    written.append(_write(os.path.join(out, "results.md"), "\n".join(text)))
    written.append(_write(os.path.join(out, "claims.json"), json.dumps(claims, indent=1)))
    first_path = os.path.join(out, "claims_first_rule.json")
    if first_claims:
        written.append(_write(first_path, json.dumps(first_claims, indent=1)))
    elif os.path.isfile(first_path):  # a report under the first rule itself
        os.remove(first_path)
    return written


def _write(path: str, text: str) -> str:
    with open(path, "w") as f:
        f.write(text)
    return path


def write_curves(study: Study, rows: Sequence[dict], out: str, rule: Rule | None = None) -> list:
    """The convergence figures, drawn on demand into ``out``: per (dataset, family) one PNG of
    its tuning runs (``tune_*.png``) and one of its main runs under ``rule``
    (``main_*.png``), every run's training loss and held-out / validation error per epoch."""
    rule = rule or study.main_rule
    by_run = {r["run"]: r for r in rows}
    tune = {
        (d, f): plan.tuning_results(study, by_run, d, f)
        for d in study.datasets
        for f, fam in study.families.items()
        if fam.tune != "inherit" and d in fam.datasets
    }
    written = plots.plot_curves(tune, out, "tune")
    errors = plan.main_errors(study, rows, rule)
    main = {}
    for (d, f, n), rs in errors.items():
        main.setdefault((d, f), {}).update({f"N_t={n} seed {s}": r for s, r in rs.items()})
    return written + plots.plot_curves(main, out, "main")


# ----------------------------------------------------------------------------- pre-registered


def best_stream(study: Study, errors: dict, dataset: str, n: int, need: int):
    """``(family, {family: mean validation error})`` of :attr:`Study.best_stream` at
    ``(dataset, N_t)``: the stream with the lowest mean validation error over its
    realisations (ties: the earlier in the list), chosen without reading a test error; family
    None while a stream lacks realisations or a validation error."""
    means = {}
    for s in study.best_stream:
        rs = errors.get((dataset, s, n), {})
        v = [r.get("val_error") for r in rs.values()]
        if len(v) < need or not all(isinstance(x, int | float) and math.isfinite(x) for x in v):
            return None, means
        means[s] = sum(v) / len(v)
    return min(means, key=lambda s: (means[s], study.best_stream.index(s))), means


def _devices(rows) -> list[str]:
    return sorted({d for r in rows for d in (r.get("trained_on") or ["?"])})


PHASE1_KEYS = ("test_error", "val_error")  # what a two-phase row keeps of each stream it froze


def stream_mismatches(rows: Sequence[dict], by_run: dict) -> list[str]:
    """``RUN (SLOT)`` for every stream of a two-phase row in ``rows`` whose phase 1 reused a run
    of the record (``by_run``: run path -> row) but froze other weights than that run's row
    reports: its errors as the head read them differ from the row's (the stream was trained
    again, on a fresh machine say, and did not reproduce). Such a head was not built on the
    stream runs the claim compares it with."""
    out = []
    for r in rows:
        for slot, p1 in sorted((r.get("phase1") or {}).items()):
            other = by_run.get(p1.get("run"))
            if other is not None and any(p1.get(k) != other.get(k) for k in PHASE1_KEYS):
                out.append(f"{r['run']} ({slot})")
    return out


def _side(rs: dict) -> dict:
    params = sorted({r.get("params") for r in rs.values() if r.get("params") is not None})
    bad = sum(r.get("convergence", {}).get("converged") is False for r in rs.values())
    return {"params": params[0] if len(params) == 1 else params or None, "unconverged": bad}


def registered_claims(study: Study, errors: dict, need: int) -> list[dict]:
    """The pre-registered claims (:attr:`Study.registered`), each at its one (dataset, N_t):
    :func:`stats.compare` (paired t-test), ``t``, the observed ``diff_sd`` and the minimum
    detectable effect it implies at Holm's first level (power 0.8), both arms' parameters and
    unconverged runs, and Holm over exactly the registered claims. A claim is *tested* once
    both arms have ``need`` common realisations, every run of both on one kind of device; a
    claim not tested counts at p = 1 in Holm's family (so an adjusted p only falls as claims
    land) and reads ``pending`` or ``not tested`` with the reason."""
    from launch.studies import power

    m = len(study.registered)
    first = power.holm_levels(m, stats.ALPHA)[0]
    recs = [_claim_record(study, errors, need, c, first) for c in study.registered]
    tested = [r["status"] == "tested" for r in recs]
    adj = stats.holm([r["p"] if ok else 1.0 for r, ok in zip(recs, tested, strict=True)])
    for r, ok, a in zip(recs, tested, adj, strict=True):
        r["p_holm"] = a if ok else math.nan
        r["verdict"] = stats.verdict(r["diff_mean"], a) if ok else r["status"]
    return recs


def exploratory_claims(study: Study, errors: dict, need: int) -> list[dict]:
    """The comparisons of :attr:`Study.exploratory`, computed as :func:`registered_claims`
    computes a claim (the MDE at the registered family's first Holm level, for scale) but
    outside its correction: ``p_holm`` NaN, and no verdict (``verdict`` is the status)."""
    from launch.studies import power

    first = power.holm_levels(max(1, len(study.registered)), stats.ALPHA)[0]
    recs = [_claim_record(study, errors, need, c, first) for c in study.exploratory]
    for r in recs:
        r["p_holm"] = math.nan
        r["verdict"] = "no verdict" if r["status"] == "tested" else r["status"]
    return recs


def _claim_record(study: Study, errors: dict, need: int, c, first: float) -> dict:
    """One claim's statistics (:func:`registered_claims`) before any correction."""
    from launch.studies import power

    rec = {"claim": c.id, "dataset": c.dataset, "n_train": c.n_train}
    rec |= {"better": c.better, "worse": c.worse, "worse_family": c.worse}
    a = errors.get((c.dataset, c.better, c.n_train), {})
    why = None
    if c.worse == "best_stream":
        chosen, means = best_stream(study, errors, c.dataset, c.n_train, need)
        rec["stream_val_error"] = means
        rec["worse_family"] = chosen
        if chosen is None:
            why = "pending: the streams' validation errors are not all in"
    b = errors.get((c.dataset, rec["worse_family"], c.n_train), {}) if not why else {}
    ea = {s: r["test_error"] for s, r in a.items()}
    eb = {s: r["test_error"] for s, r in b.items()}
    rec |= stats.compare(ea, eb, need, "t")
    n, sd = rec["n"], rec["diff_sd"]
    # t only where the test has all its pairs (a pending claim's t over 2 pairs can read -285);
    # the MDE is always the planned test's: `need` pairs at the sd observed so far.
    complete = math.isfinite(rec["p"]) and sd > 0
    rec["t"] = rec["diff_mean"] / (sd / math.sqrt(n)) if complete else math.nan
    rec["mde"] = (
        power.minimum_detectable_effect(sd, need, first)
        if n >= 2 and math.isfinite(sd) and sd > 0
        else math.nan
    )
    rec |= {f"{k}_better": v for k, v in _side(a).items()}
    rec |= {f"{k}_worse": v for k, v in _side(b).items()}
    devices = _devices(list(a.values()) + list(b.values()))
    rec["trained_on"] = devices
    if why is None and math.isnan(rec["p"]):
        why = f"pending: {n} of {need} realisations"
    if why is None and (len(devices) != 1 or "?" in devices):
        why = f"not tested: trained on {' and '.join(devices)} (rerun on one kind)"
    by_run = {r["run"]: r for rs in errors.values() for r in rs.values()}
    moved = stream_mismatches([*a.values(), *b.values()], by_run)
    rec["stream_mismatches"] = moved
    if why is None and moved:
        why = (
            f"not tested: {len(moved)} head(s) froze streams other than the record's runs "
            f"({moved[0]}{', ...' if len(moved) > 1 else ''}; rerun those streams)"
        )
    rec["status"] = why or "tested"
    return rec


def _num(x, fmt: str = "{:.2f}") -> str:
    return fmt.format(x) if isinstance(x, int | float) and math.isfinite(x) else "-"


def registered_markdown(recs: Sequence[dict], need: int) -> str:
    """The claims' table; ``n`` out of ``need`` realisations, or a record's own
    ``realisations`` (a later family's claims each have theirs)."""
    lines = [
        "| claim | dataset | N_t | A - B | n | diff (points) | 95% CI | A lower | t | p "
        "| sign-flip p | Holm p | verdict | sd of diff | MDE | params A / B "
        "| unconverged A / B | trained on |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in recs:
        worse = f"`{r['worse_family'] or r['worse']}`"
        if r["worse"] == "best_stream" and r["worse_family"]:
            worse += " (best stream)"
        ci = "-" if math.isnan(r["ci_low"]) else f"[{r['ci_low']:+.2f}, {r['ci_high']:+.2f}]"
        v = r["verdict"]
        v = f"**{v}**" if v in ("supported", "contradicted") else v
        params = f"{r['params_better'] or '-'} / {r['params_worse'] or '-'}"
        lower = f"{r['wins']}/{r['n']}" if r["n"] and math.isfinite(r["p"]) else "-"
        lines.append(
            f"| {r['claim']} | `{r['dataset']}` | {r['n_train']} | `{r['better']}` - {worse} "
            f"| {r['n']}/{r.get('realisations', need)} | {_num(r['diff_mean'], '{:+.2f}')} "
            f"| {ci} | {lower} "
            f"| {_num(r['t'])} | {tables.p_text(r['p'])} | {tables.p_text(r['p_signflip'])} "
            f"| {tables.p_text(r['p_holm'])} | {v} "
            f"| {_num(r['diff_sd'])} | {_num(r['mde'])} | {params} "
            f"| {r['unconverged_better']} / {r['unconverged_worse']} "
            f"| {'+'.join(r['trained_on']) or '-'} |"
        )
    return "\n".join(lines)


def dataset_sections(
    study: Study, errors: dict, claims: list[dict], need: int, test: str, holm_family: str
) -> list[str]:
    """Per dataset: every family's test errors and the claims judged there."""
    text = []
    for dataset in study.datasets:
        table = tables.results_table(errors, dataset, tuple(study.families), need)
        if not table:
            continue
        text += [
            f"## Test error: {dataset}",
            "",
            f"Mean ± sample std over the realisations, in %; `(k)`: only k of {need} "
            "realisations finished; `ku`: k runs unconverged.",
            "",
            table,
            "",
        ]
        cm = tables.claims_markdown(claims, dataset)
        if cm:
            text += [
                f"### Claims: {dataset}",
                "",
                f"Paired over the common realisations (diff = first - second, points; negative"
                f" = the claim's direction); primary test `{test}` (two-sided), Holm over "
                f"{HOLM_FAMILIES[holm_family]}"
                f" at alpha = {stats.ALPHA}; `pending` while fewer than {need} realisations;"
                " 95% CI: the Student t interval of the mean difference, not adjusted for"
                " the multiple comparisons.",
                "",
                cm,
                "",
            ]
    return text


def write_registered_report(
    study: Study,
    rows: Sequence[dict],
    out: str,
    seeds: Sequence[int] | None = None,
    figures: bool = True,
    paper: dict | None = None,
) -> list[str]:
    """The report of a study whose claims were fixed before its runs (:attr:`Study.registered`):
    ``results.md`` (the claims with their statistics and verdicts, the tuning, every arm at
    every N_t beside ``paper``'s figures for that dataset, convergence), ``claims.json`` and,
    with ``figures``, one figure per dataset of test error against N_t; from the record
    ``rows`` alone."""
    seeds = tuple(seeds or study.seeds)
    need = len(seeds)
    every = plan.main_errors(study, rows, study.main_rule)
    errors = {k: {s: r for s, r in v.items() if s in seeds} for k, v in every.items()}
    errors = {k: v for k, v in errors.items() if v}
    recs = registered_claims(study, errors, need)
    explore = exploratory_claims(study, errors, need)
    later = {f.name: later_claims(study, every, f) for f in study.later_registered}
    text = registered_section(study, rows, recs, seeds)
    text += exploratory_section(study, explore, need)
    for fam in study.later_registered:
        text += later_section(fam, later[fam.name])
    text += tuning_section(
        study,
        {r["run"]: r for r in rows},
        "80:20 split of realisation 0 (N_t = 1,000 of the 80 %, held out: the 20 %)",
    )
    text += arms_sections(study, errors, seeds, paper or {})
    text += convergence_section(errors)
    os.makedirs(out, exist_ok=True)
    written = []
    if figures:
        written += plots.plot_errors(errors, out, tuple(study.families), errorbars=True, need=need)
    written.append(_write(os.path.join(out, "results.md"), "\n".join(text)))
    written.append(_write(os.path.join(out, "claims.json"), json.dumps(recs, indent=1)))
    if explore:
        doc = json.dumps(explore, indent=1)
        written.append(_write(os.path.join(out, "exploratory.json"), doc))
    for name, later_recs in later.items():
        doc = json.dumps(later_recs, indent=1)
        written.append(_write(os.path.join(out, f"claims_{name}.json"), doc))
    return written


def later_claims(study: Study, errors: dict, family) -> list[dict]:
    """The claims of a family registered later (:attr:`Study.later_registered`): each on its
    own realisations (``family.seeds(id)``, all of them needed), Holm over the family's claims
    alone (a claim not yet tested counts at p = 1), the MDE at the family's first level."""
    from launch.studies import power

    first = power.holm_levels(len(family.claims), stats.ALPHA)[0]
    recs = []
    for c in family.claims:
        mine = set(family.seeds(c.id))
        errs = {k: {s: r for s, r in v.items() if s in mine} for k, v in errors.items()}
        rec = _claim_record(study, errs, len(mine), c, first)
        if rec["status"].startswith("pending: ") and "realisations" in rec["status"]:
            span = f"{min(mine)}-{max(mine)}"
            rec["status"] = f"pending: {rec['n']} of its {len(mine)} realisations ({span})"
        recs.append(rec)
    tested = [r["status"] == "tested" for r in recs]
    adj = stats.holm([r["p"] if ok else 1.0 for r, ok in zip(recs, tested, strict=True)])
    for r, ok, a in zip(recs, tested, adj, strict=True):
        r["p_holm"] = a if ok else math.nan
        r["verdict"] = stats.verdict(r["diff_mean"], a) if ok else r["status"]
        r["realisations"] = len(family.seeds(r["claim"]))
    return recs


def later_section(family, recs: list[dict]) -> list[str]:
    """``results.md``'s section of a family registered later."""
    m = len(recs)
    tested = sum(r["status"] == "tested" for r in recs)
    spans = ", ".join(
        f"{c.id} {min(family.seeds(c.id))}-{max(family.seeds(c.id))}" for c in family.claims
    )
    return [
        f"## The registered family {family.name}",
        "",
        f"Registered before any of its runs, on its own realisations ({spans}); the same "
        f"statistics as above, each claim over all its realisations, Holm over these {m} "
        f"claims alone at alpha = {stats.ALPHA} (a claim not yet tested counts at p = 1); "
        f"`MDE` at its first level alpha / {m}.",
        "",
        f"{tested} of {m} tested.",
        "",
        registered_markdown(recs, 0),
        "",
    ]


def registered_section(
    study: Study, rows: Sequence[dict], recs: list[dict], seeds: tuple[int, ...]
) -> list[str]:
    """``results.md``'s title, command and the registered claims' table (``recs``)."""
    from launch.studies import power

    need, m = len(seeds), len(recs)
    first = power.holm_levels(m, stats.ALPHA)[0]
    cmd = ["python", "-m", "launch.studies", study.name, "report"]
    if seeds != tuple(study.seeds):
        cmd.append("--seeds=" + ",".join(map(str, seeds)))
    text = [
        f"# The {study.name} study: results",
        "",
        f"Written by `{' '.join(cmd)}` from the record `runs.jsonl` here (README.md: the plan,"
        " fixed before the runs). Last-epoch models; every family trains its fixed recipe.",
        "",
    ]
    if not rows:
        text += ["**No run has landed in the record yet**: every claim is pending.", ""]
    counts = {v: sum(r["verdict"] == v for r in recs) for v in ("supported", "contradicted")}
    tested = sum(r["status"] == "tested" for r in recs)
    text += [
        "## The pre-registered claims",
        "",
        f"{m} claims, each at one dataset and N_t: `A - B` is the paired difference of test "
        f"errors over {need} realisations (points; negative = the claim's direction), "
        "two-sided paired t-test, 95% CI the Student t interval of the mean difference, "
        "`A lower`: the realisations in which A's error is the lower, `sign-flip p`: the "
        "exact two-sided sign-flip permutation p beside the t-test's, Holm "
        f"over exactly these {m} claims at alpha = {stats.ALPHA} (a claim not yet tested "
        "counts at p = 1, so no later landing raises an adjusted p). `sd of diff`: the "
        "observed standard deviation of the paired differences; `MDE`: the smallest effect "
        f"that sd lets a test of {need} pairs detect with power {power.POWER} at Holm's "
        f"first level alpha / {m} = {first:.5f} (an inconclusive claim rules out effects of "
        "that size, not smaller ones). Best stream: the stream with the lowest mean "
        "validation error. A claim whose runs trained on more than one kind of device is "
        "not tested, nor one with a head whose frozen streams are not the stream runs of "
        "the record (their errors as the head read them differ from the rows').",
        "",
        f"{tested} of {m} tested: {counts['supported']} supported, "
        f"{counts['contradicted']} contradicted.",
        "",
        registered_markdown(recs, need),
        "",
    ]
    picks = [r for r in recs if r.get("stream_val_error")]
    if picks:
        text += ["Mean validation errors of the streams (%):", ""]
        for r in picks:
            vals = ", ".join(f"`{s}` {v:.2f}" for s, v in r["stream_val_error"].items())
            text.append(f"- {r['claim']}: {vals}")
        text.append("")
    return text


def exploratory_section(study: Study, explore: list[dict], need: int) -> list[str]:
    """The exploratory comparisons' section (none: nothing)."""
    if not explore:
        return []
    return [
        "## Exploratory comparisons (added after results were read; not pre-registered)",
        "",
        "The same paired statistics as above, outside Holm's family and without a "
        "verdict: each asks what a registered result leaves open, and deciding it would "
        "take a test registered before its runs. `MDE` at the registered family's first "
        "Holm level, for scale.",
        "",
        *(f"- {c.id}: {c.why}" for c in study.exploratory),
        "",
        registered_markdown(explore, need),
        "",
    ]


def arms_sections(study: Study, errors: dict, seeds: tuple[int, ...], paper: dict) -> list[str]:
    """Per dataset, every arm that trains any of the realisations ``seeds`` at every N_t
    (``paper``'s published figures beside them); an arm on other realisations only (a later
    family's) is not in these tables."""
    text, need = [], len(seeds)
    sizes_of = {d: study.dataset_sizes.get(d, study.sizes) for d in study.datasets}
    for dataset in study.datasets:
        fams = [
            f
            for f, fam in study.families.items()
            if dataset in fam.datasets and set(study.seeds_of(f)) & set(seeds)
        ]
        published = paper.get(dataset, {})
        table = tables.arms_table(errors, dataset, fams, sizes_of[dataset], need, published)
        if table:
            text += [
                f"## Test error: {dataset}",
                "",
                f"Mean ± sample std over the realisations, in %; `(k)`: only k of {need} "
                "realisations; `ku`: k runs unconverged."
                + (
                    " The paper's Table 2 (MNIST-scale, its full training set) beside the "
                    "arms it reports."
                    if any(f in published for f in fams)
                    else ""
                ),
                "",
                table,
                "",
            ]
    return text
