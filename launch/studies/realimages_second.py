"""The real-image study's second registered family (B): three questions the first family left
open, each fixed with its test, correction, power and budget before any of its runs, on new
realisations (10 and up, never used by the first family).

* **B1** (X6's question, registered): on the rotated and scaled data, ``b_triple`` (three
  different invariant streams under the paper's head) against ``b_triple_e2`` (three copies of
  the E(2) stream, the first family's best stream there, under the same head);
* **B2, B3** (M3's and M6's question, the size control done right): ``b_triple_star``, whose
  narrowed streams are tuned as the full-width streams are (their own grid), against the best
  stream of the first family (``scale`` on Fashion-MNIST, ``e2`` on the rotated data), both
  tuned here;
* **B4, B5** (what T3 left open): Scale-II (``b_ii_ws_*``) against DISCO's pooling
  (``b_disco_*``) on the real digits at N_t = 100 and 500, both networks on one recipe
  (dropout 0.1, BatchNorm momentum 0.99) tuned by one procedure on the same validation split,
  for at least 1,500 optimiser steps.

Every claim: the two-sided paired t-test over its realisations, Holm over the five at
:data:`ALPHA`; its realisations from the power the observed sds of the record allow
(:func:`power_rows`); its budget from the record's measured wall times (:func:`budget_rows`).
This module depends on the study machinery only (:mod:`launch.studies.plan`); the first
family's module, :mod:`launch.studies.realimages`, adds :func:`families` to its study.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Sequence

from launch.studies import power, stats
from launch.studies.plan import Family, Rule

ALPHA = 0.05
POWER = 0.8
FIRST_SEED = 10  # the first family used realisations 0..9
FASHION, ROT, DIGITS = "fashion_mnist", "rotscaled_fashion_mnist", "scaled_mnist_10k"
N_M = 1_000  # the multi-stream claims' N_t, as M1-M6's
# One tuning grid for every family-B arm that tunes: the first family's grid (1e-3, 3e-3, 1e-2)
# extended past its upper edge, where all three Fashion-MNIST streams chose; a choice on the
# new grid's edge extends it again (plan.candidates), up to EXTEND_EDGES times.
LRS = (1e-3, 3e-3, 1e-2, 3e-2)
WDS_M = (1e-5, 1e-4)  # the first family's weight decays
WDS_DIGITS = (0.0,)  # both published digits recipes use (almost) none: 0 and 5e-7
EXTEND_EDGES = 2
# the digits arms' shared recipe: X1 and X2 saw both networks do better on II-DISCO WS's
# dropout (0.1) than on DISCO's (0.7); 0.99 is Table 6's momentum for II-DISCO WS
DIGITS_RECIPE = {"model.dropout": 0.1, "model.bn_momentum": 0.99}
DIGITS_MIN_STEPS = 1_500  # family M's fewest steps, under which all of its runs converged


@dataclasses.dataclass(frozen=True)
class Claim:
    id: str
    dataset: str
    n_train: int
    better: str  # the arm claimed to have the lower test error
    worse: str
    why: str
    sd_source: tuple[str, str, str, int]  # the record's pairs: (dataset, A, B, N_t), seeds 0-9
    target: float  # the effect [points] the test must detect with power 0.8 at Holm's first level


CLAIMS = (
    Claim(
        "B1", ROT, N_M, "b_triple", "b_triple_e2",
        "three different invariances against three copies of the best one (X6, registered)",
        (ROT, "triple", "triple_e2", N_M), 1.0,
    ),
    Claim(
        "B2", FASHION, N_M, "b_triple_star", "b_scale",
        "one stream's size, its narrowed streams tuned (M3 with the streams tuned)",
        (FASHION, "triple_star", "scale", N_M), 1.0,
    ),
    Claim(
        "B3", ROT, N_M, "b_triple_star", "b_e2",
        "one stream's size on the rotated data, its narrowed streams tuned (M6 likewise)",
        (ROT, "triple_star", "e2", N_M), 1.0,
    ),
    Claim(
        "B4", DIGITS, 100, "b_ii_ws_100", "b_disco_100",
        "Scale-II against pooling at N_t = 100, one tuned recipe, trained to convergence (T3)",
        (DIGITS, "ii_ws", "disco", 100), 4.0,
    ),
    Claim(
        "B5", DIGITS, 500, "b_ii_ws_500", "b_disco_500",
        "the same at N_t = 500",
        (DIGITS, "ii_ws", "disco", 500), 0.9,
    ),
)  # fmt: skip


def realisations_needed(sd: float, target: float, m: int, floor: int = 10) -> int:
    """The fewest realisations (at least ``floor``) whose paired t-test detects ``target`` with
    power :data:`POWER` at Holm's first level ``ALPHA / m`` when the differences' sd is ``sd``."""
    if not (sd > 0 and target > 0):
        raise ValueError(f"sd={sd!r} / target={target!r} is invalid: both must be > 0")
    r = floor
    while power.minimum_detectable_effect(sd, r, ALPHA / m, POWER) > target:
        r += 1
    return r


def observed_sd(rows: Sequence[dict], source: tuple[str, str, str, int]) -> tuple[float, int]:
    """The sd of the paired test-error differences A - B and their count, from the record's
    main rows of realisations 0-9 (``source``: dataset, A, B, N_t)."""
    dataset, a, b, n = source
    err = {
        (r["family"], r["seed"]): r["test_error"]
        for r in rows
        if r["stage"] == "main" and r["dataset"] == dataset and r["n_train"] == n
        and r["family"] in (a, b) and r["seed"] < FIRST_SEED
    }  # fmt: skip
    diffs = [err[a, s] - err[b, s] for s in range(FIRST_SEED) if (a, s) in err and (b, s) in err]
    if len(diffs) < 2:
        raise ValueError(f"the record holds {len(diffs)} pairs of {source}: need >= 2")
    return stats.mean_sd(diffs)[1], len(diffs)


def power_rows(rows: Sequence[dict]) -> list[dict]:
    """Per claim: the observed sd it is planned with, the realisations that detect its target
    at Holm's first level, and the MDE those realisations give at Holm's first and last level."""
    m = len(CLAIMS)
    out = []
    for c in CLAIMS:
        sd, pairs = observed_sd(rows, c.sd_source)
        need = realisations_needed(sd, c.target, m)
        r = REALISATIONS[c.id]  # fixed at registration: the most its dataset and N_t need
        out.append(
            {
                "claim": c.id,
                "dataset": c.dataset,
                "n_train": c.n_train,
                "comparison": f"{c.better} < {c.worse}",
                "sd_source": c.sd_source,
                "sd": sd,
                "pairs": pairs,
                "target": c.target,
                "needed": need,
                "realisations": r,
                "seeds": (FIRST_SEED, FIRST_SEED + r - 1),
                "mde_first": power.minimum_detectable_effect(sd, r, ALPHA / m, POWER),
                "mde_last": power.minimum_detectable_effect(sd, r, ALPHA, POWER),
            }
        )
    return out


# The realisations of each claim, fixed here from :func:`realisations_needed` on the record as
# it stood when this family was registered (tests/test_realimages_second.py recomputes them):
# the most any claim on the same dataset and N_t needs, so that claims sharing arms (B1 and B3
# on the rotated data) share realisations.
REALISATIONS = {"B1": 11, "B2": 11, "B3": 11, "B4": 16, "B5": 10}


def seeds(claim_id: str) -> tuple[int, ...]:
    """The realisations of a claim: :data:`REALISATIONS` of them from :data:`FIRST_SEED` on."""
    return tuple(range(FIRST_SEED, FIRST_SEED + REALISATIONS[claim_id]))


@dataclasses.dataclass(frozen=True)
class Registered:
    """A family of claims registered apart from the study's first (``Study.later_registered``):
    the report judges each claim on ``seeds(claim.id)`` with Holm over ``claims``."""

    name: str
    claims: tuple
    seeds: Callable[[str], tuple[int, ...]]  # claim id -> its realisations


FAMILY = Registered("B", CLAIMS, seeds)


def _arm_seeds(arm: str) -> tuple[int, ...]:
    """An arm's realisations: those of every claim it serves (as A, B or one of B's streams)."""
    out: set[int] = set()
    for c in CLAIMS:
        if arm in (c.better, c.worse) or arm in _streams_of(c.better) + _streams_of(c.worse):
            out |= set(seeds(c.id))
    return tuple(sorted(out))


# the arms: name -> (config stem, stream slot families, where it runs)
STREAM_SLOTS = ("e2", "scale", "std")
HEADS = {
    "b_triple": ("fashion_triple", ("b_e2", "b_scale", "b_std"), (ROT,)),
    "b_triple_e2": ("fashion_triple_e2", ("b_e2",) * 3, (ROT,)),
    # fashion_triple with every slot a narrowed stream family: its phase 1 reuses their runs
    "b_triple_star": ("fashion_triple", ("b_e2_n", "b_scale_n", "b_std_n"), (FASHION, ROT)),
}
STREAMS = {
    "b_std": ("fashion_std", 1.0, (ROT,)),
    "b_e2": ("fashion_e2", 1.0, (ROT,)),
    "b_scale": ("fashion_scale", 1.0, (FASHION, ROT)),
    # narrowed by sqrt(3) as triple_star's streams (models.width_divisor(3)), tuned on their own
    "b_std_n": ("fashion_std", math.sqrt(3), (FASHION, ROT)),
    "b_e2_n": ("fashion_e2", math.sqrt(3), (FASHION, ROT)),
    "b_scale_n": ("fashion_scale", math.sqrt(3), (FASHION, ROT)),
}
# name -> (config stem, N_t, the first family's arm of that network)
DIGITS_ARMS = {
    f"b_{net}_{n}": (stem, n, net)
    for n in (100, 500)
    for net, stem in (("disco", "mnist_disco"), ("ii_ws", "mnist_ii_disco_ws"))
}


def where(arm: str) -> tuple[str, ...]:
    """The datasets an arm of family B runs on."""
    if arm in DIGITS_ARMS:
        return (DIGITS,)
    return (STREAMS.get(arm) or HEADS[arm])[2]


def _streams_of(arm: str) -> tuple[str, ...]:
    return HEADS[arm][1] if arm in HEADS else ()


def families(m_rule: Rule, t_rule: Rule) -> dict[str, Family]:
    """Family B's arms as families of the study: ``m_rule`` the multi-stream recipe (the first
    family's), ``t_rule`` the digits recipe whose fewest steps become
    :data:`DIGITS_MIN_STEPS`. Each tunes on :data:`LRS` x its weight decays, extended past an
    edge where its choice lies, and trains its main runs on its claims' realisations only."""
    rot = {ROT: "rot"}
    grid = {"lr_values": LRS, "extend_edges": EXTEND_EDGES}
    out = {}
    for name, (stem, divisor, where) in STREAMS.items():
        narrow = dataclasses.replace(m_rule, width_divisor=divisor)
        out[name] = Family(
            stem, where, overrides={"model.width_divisor": divisor}, rule=narrow,
            variants=rot, points=tuple((d, N_M) for d in where), seeds=_arm_seeds(name),
            weight_decays=WDS_M, **grid,
        )  # fmt: skip
    for name, (stem, slots, where) in HEADS.items():
        out[name] = Family(
            stem, where, tune="head", streams=tuple(zip(STREAM_SLOTS, slots)), rule=m_rule,
            variants=rot, points=tuple((d, N_M) for d in where), seeds=_arm_seeds(name),
            weight_decays=WDS_M, **grid,
        )  # fmt: skip
    long = dataclasses.replace(t_rule, min_steps=DIGITS_MIN_STEPS)
    for name, (stem, n, _) in DIGITS_ARMS.items():
        out[name] = Family(
            stem, (DIGITS,), overrides=dict(DIGITS_RECIPE), rule=long, points=((DIGITS, n),),
            seeds=_arm_seeds(name), weight_decays=WDS_DIGITS, tune_n_train=n, **grid,
        )  # fmt: skip
    return out


# ----------------------------------------------------------------------------- the budget


def _median_minutes(rows, stage: str, dataset: str, family: str, field: str = "wall_time_s",
                    n_train: int | None = None) -> float:  # fmt: skip
    """The median of ``field`` (seconds) over the record's rows of one arm, in minutes."""
    v = [
        r[field]
        for r in rows
        if r["stage"] == stage and r["dataset"] == dataset and r["family"] == family
        and (n_train is None or r["n_train"] == n_train) and r.get(field)
        and r["seed"] < FIRST_SEED
    ]  # fmt: skip
    if not v:
        raise ValueError(f"the record has no {field} of {stage} {dataset} {family} {n_train}")
    return statistics.median(v) / 60


# What each family-B run is priced as: the record's first-family arm that trains the same
# network the same way (stream runs, phase 2 of a head, or the digits runs scaled to
# DIGITS_MIN_STEPS); a head with private copies (b_triple_e2) adds them.
PROXY = {
    "b_std": "std", "b_e2": "e2", "b_scale": "scale", "b_triple": "triple",
    "b_triple_e2": "triple_e2", "b_triple_star": "triple_star",
}  # fmt: skip


def main_minutes(rows, arm: str, dataset: str) -> float:
    """Minutes of one main run of ``arm`` on ``dataset`` (two runs side by side, as measured).
    The narrowed streams are priced inside ``b_triple_star`` (triple_star's rows hold its
    private narrow streams' time), so they count 0 here."""
    if arm in DIGITS_ARMS:
        _, n, net = DIGITS_ARMS[arm]
        per = [r["wall_time_s"] / r["steps"] for r in rows if r["stage"] == "main"
               and r["dataset"] == DIGITS and r["family"] == net and r["n_train"] == n
               and r["seed"] < FIRST_SEED]  # fmt: skip
        return statistics.median(per) * DIGITS_MIN_STEPS / 60
    if arm.endswith("_n"):
        return 0.0
    proxy = PROXY[arm]
    if arm == "b_triple":  # its streams are b_std, b_e2 and b_scale's own runs
        return _median_minutes(rows, "main", ROT, proxy, "phase2_wall_time_s", N_M)
    if arm == "b_triple_e2":  # two private E(2) copies and the head
        head = _median_minutes(rows, "main", ROT, proxy, "phase2_wall_time_s", N_M)
        return head + 2 * _median_minutes(rows, "main", ROT, "e2", n_train=N_M)
    return _median_minutes(rows, "main", dataset, proxy, n_train=N_M)


def tune_minutes(rows, arm: str, dataset: str) -> float:
    """Minutes of the tuning of ``arm`` on ``dataset`` at the most candidates it can reach
    (its base grid and :data:`EXTEND_EDGES` extensions): a stream at its proxy's tuning runs,
    a head at its proxy's phase 2 on the rotated data, the narrowed streams at triple_star's
    tuning runs (which train all three and a head), the digits arms at their main runs'."""
    wds = WDS_DIGITS if arm in DIGITS_ARMS else WDS_M
    n = (len(LRS) + EXTEND_EDGES) * len(wds)
    if arm in DIGITS_ARMS:
        return n * main_minutes(rows, arm, dataset)
    if arm.endswith("_n"):
        return n * _median_minutes(rows, "tune", dataset, "triple_star") / 3
    if arm in HEADS:
        head = _median_minutes(rows, "main", ROT, PROXY[arm], "phase2_wall_time_s", N_M)
        extra = 2 * _median_minutes(rows, "tune", ROT, "e2") if arm == "b_triple_e2" else 0.0
        return n * head + extra
    return n * _median_minutes(rows, "tune", dataset, PROXY[arm])


def budget_rows(rows: Sequence[dict]) -> list[dict]:
    """Per arm and dataset: its realisations, the minutes of one main run and of its tuning, and
    the process hours of both (two runs side by side on the 2 cores, as the record's times were
    measured; wall hours are about half)."""
    out = []
    for arm in [*STREAMS, *HEADS, *DIGITS_ARMS]:
        for dataset in where(arm):
            k = len(_arm_seeds(arm))
            main, tune = main_minutes(rows, arm, dataset), tune_minutes(rows, arm, dataset)
            out.append(
                {
                    "arm": arm,
                    "dataset": dataset,
                    "realisations": k,
                    "main_minutes": main,
                    "tune_minutes": tune,
                    "hours": (k * main + tune) / 60,
                }
            )
    return out


# ----------------------------------------------------------------------------- as Markdown


def power_markdown(rows: Sequence[dict]) -> str:
    """:func:`power_rows` as the README's table."""
    m = len(CLAIMS)
    out = [
        f"{m} claims, two-sided paired t-tests, Holm at alpha = {ALPHA} over these {m} (first "
        f"level {ALPHA / m:.3f}); each claim's realisations are the fewest (at least 10) that "
        f"detect its target with power {POWER} at the first level, given the sd of the paired "
        "differences the record shows for the same comparison on realisations 0-9 (points):",
        "",
        "| claim | dataset | N_t | A < B | sd from (A - B, 10 pairs) | sd | target | needed "
        "| realisations | MDE, Holm first | MDE, Holm last |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        _, a, b, n = r["sd_source"]
        lo, hi = r["seeds"]
        out.append(
            f"| {r['claim']} | {r['dataset']} | {r['n_train']} | {r['comparison']} "
            f"| `{a}` - `{b}` at {n} | {r['sd']:.2f} | {r['target']:.2f} | {r['needed']} "
            f"| {r['realisations']} ({lo}-{hi}) | {r['mde_first']:.2f} | {r['mde_last']:.2f} |"
        )
    return "\n".join(out)


def budget_markdown(rows: Sequence[dict]) -> str:
    """:func:`budget_rows` as the README's table, with the totals."""
    out = [
        "Process hours on this project's 2-core CPU at the record's measured times (medians of "
        "`wall_time_s`, two runs side by side, so wall hours are about half); tuning at its most "
        f"candidates ({len(LRS) + EXTEND_EDGES} learning rates):",
        "",
        "| arm | dataset | realisations | min a main run | min of tuning | process hours |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['arm']} | {r['dataset']} | {r['realisations']} | {r['main_minutes']:.1f} "
            f"| {r['tune_minutes']:.0f} | {r['hours']:.1f} |"
        )
    digits = sum(r["hours"] for r in rows if r["dataset"] == DIGITS)
    total = sum(r["hours"] for r in rows)
    out += [
        "",
        f"All: {total:.0f} process hours; B1-B3 (the multi-stream arms) {total - digits:.0f}, "
        f"B4 and B5 (the digits arms) {digits:.0f}.",
    ]
    return "\n".join(out)
