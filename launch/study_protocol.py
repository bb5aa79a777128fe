"""The sample-complexity study on the offline digits under a reviewer's protocol (issue 19).

    python launch/study_protocol.py --stage tune|main|all|report
        [--datasets scaled_digits,rotscaled_digits] [--families F,F,...] [--sizes 20,50,100,300,0]
        [--seeds 0,1,2,3,4,5] [--runs-dir /work/runs/study_protocol] [--out docs/results/protocol]
        [--min-steps 600] [--min-epochs 300] [--batch-size 64] [--width-divisor 2]
        [--test t|signflip|wilcoxon] [--holm-family all|claim] [--budget-minutes 0]
        [--parallel 1] [--runs-per-gpu 1] [--platform auto] [--commit] [--seeds-in-one] [--dry-run]
        [--rerun main/DATASET/FAMILY/LABEL,...]

Protocol (``docs/results/protocol/README.md`` states it with the figures):

1. **Tuning, once per family and dataset** (``--stage tune``): every family trains on the digits'
   80:20 split of the full 1079-image training split (863 train / 216 held out,
   ``data.val_source='train'``, realisation 0, seed 0; the 359 validation and 359 test digits are
   not used) with each of the same six candidates: learning rate x {1/3, 1, 3} of its config's
   x weight decay {1e-5, 3e-4} (:data:`LR_FACTORS`, :data:`WEIGHT_DECAYS`); the RBF-SVM gets six
   too (C x gamma, :data:`SVM_GRID`). The candidate with the lowest held-out error of its *last*
   epoch wins (ties: lower held-out loss, then the earlier candidate), and is fixed for every
   N_t. The two-phase networks tune their head (phase 2's learning rate and weight decay, the
   same six candidates) on their streams' chosen runs; their controls inherit: the stars and the
   three-standard-streams triple take the head of ``dual`` / ``triple`` and each stream its
   family's choice, the step-matched single streams their family's.
2. **Main runs** (``--stage main``): every family at every N_t in ``--sizes`` and realisation in
   ``--seeds`` (seed k = realisation k and the class-balanced subset drawn by k: the same
   splits for every family, the SVM included), with the chosen HPs and the training-length rule
   :func:`schedule` (at least ``--min-steps`` optimiser steps and ``--min-epochs`` epochs, x0.1
   after 2/3; :data:`MAIN_RULE`, which replaced :data:`FIRST_RULE` where the two differ, at
   N_t >= 300). The tuning runs keep the first rule's length whatever the main rule
   (:func:`tune_rule`). The *last* epoch's model is reported (``train.select_best=False``): the 359
   validation digits are only watched, never used to select. Each run's epoch-mean training
   loss and error are kept; :func:`study_stats.convergence` counts the unconverged runs.
3. **Claims** (:data:`CLAIMS`): paired differences over the realisations, the paired t-test
   (``--test``; the exact sign-flip p beside it), Holm's correction over every complete
   comparison of the table (``--holm-family all``; ``claim``: per claim and dataset), a verdict
   per claim and N_t: supported / contradicted / inconclusive (pending while a comparison has
   fewer than ``len(--seeds)`` realisations).

Runs: ``RUNS/tune/DATASET/FAMILY/<candidate>`` and
``RUNS/main/DATASET/FAMILY/<label>/seed_<k>`` with :func:`run_label`: ``n<N_t>`` (``nall`` =
1079) where the rule trains the point as the first rule did, else ``n<N_t>_<tag>`` (e.g.
``n300_e300``), so that two rules' runs never mix. The report counts the runs of the rule given
(``--min-*``) and lists the first rule's runs that it replaced in a section of their own. A run
whose ``results.json`` exists is skipped and an interrupted one resumes from its checkpoint,
so the same command finishes a study stopped anywhere. After every finished group of runs the
small results (``results.json``, the training curve) are copied into ``OUT/runs/`` (same
layout), the report in ``OUT`` is rewritten from that copy, and with ``--commit`` both are
committed to the git repository holding ``OUT`` (those paths only). ``--stage report`` rewrites
the report from ``OUT/runs`` alone (no run directory needed).

``--rerun PATH,...``: those runs train again (:func:`rerun_prepare`: a path already holding a
checkpoint in RUNS is kept and resumes; any other is moved to ``RUNS/replaced/``), and as they
finish their results *replace* the record's in ``OUT/runs`` (the first results stay in git
history). For a two-phase network whose streams landed from a machine that is gone, with their
small results but without the final checkpoint that phase 1 needs; decide the replacement
before the runs (``launch/protocol_window.sh``'s ``RERUN`` brings them back apart instead).

``--seeds-in-one``: single-stream families run a (dataset, family, N_t) group of seeds as one
``python -m invjax.main --config.seeds=(0,1,...)`` invocation with workdir ``.../n<N_t>``,
which writes ``seed_<k>/`` exactly as the single runs do (issue 19 item 3; refused while
``invjax/configs/base.py`` has no ``seeds`` key). Multi-stream runs stay one per seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import pathlib
import runpy
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
study = runpy.run_path(str(REPO / "launch" / "study.py"), run_name="protocol_study")
stats = runpy.run_path(str(REPO / "launch" / "study_stats.py"), run_name="protocol_stats")
sweep = study["sweep"]

DATASETS = study["DATASETS"]
ROT = ("rotscaled_digits",)
N_ALL = study["N_ALL"]
VAL_FRACTION = 0.2
N_TUNE = N_ALL - round(N_ALL * VAL_FRACTION)  # 863 training images in the 80:20 split
TUNE_REALISATION = 0
LR_FACTORS = (1 / 3, 1.0, 3.0)
WEIGHT_DECAYS = (1e-5, 3e-4)
SVM_GRID = tuple((c, g) for c in (1.0, 10.0, 100.0) for g in (0.3, 1.0))  # gamma x 'scale'
SIZES = (20, 50, 100, 300, 0)
SEEDS = (0, 1, 2, 3, 4, 5)
FIGURES_EVERY = 10  # landed runs between two redraws of the figures
# Float32 products on every backend, so that runs on CPUs and GPUs compute the same arithmetic
# ('default' is float32 on CPUs, identical to this, but TF32 on NVIDIA GPUs since Ampere).
PRECISION = "highest"
DUAL_STEPS = 2 + 1 / 4  # two streams of S steps and a head of S / 4
TRIPLE_STEPS = 3 + 1 / 4


@dataclasses.dataclass(frozen=True)
class Family:
    """One row of the study.

    ``stem``: config (None: the RBF-SVM). ``tune``: ``'own'`` (the grid on its learning rate and
    weight decay), ``'head'`` (the grid on phase 2's, streams from :attr:`streams`' choices) or
    ``'inherit'`` (:attr:`hp_from`'s choice, no tuning of its own). ``streams``: slot -> the
    family whose choice trains that stream. ``steps_factor``: the training length x this.
    """

    stem: str | None
    overrides: dict = dataclasses.field(default_factory=dict)
    tune: str = "own"
    streams: tuple[tuple[str, str], ...] = ()
    hp_from: str | None = None
    steps_factor: float = 1.0
    datasets: tuple[str, ...] = DATASETS


def _ws_net_overrides() -> dict:
    """The monomial family's network (``configs/digits_monomials.py``, study.py's ``MONO_STEM``)
    with the WS head: the model keys of the WS config that the monomial config sets otherwise
    (widths, kernel, scales, ...), the head excepted (the pruning and monomial keys are the
    monomials' own)."""
    mono = sweep["load_config"](study["MONO_STEM"], {}).model
    ws = sweep["load_config"]("mnist_ii_disco_ws", {}).model
    return {f"model.{k}": mono[k] for k in mono if k in ws and k != "head" and mono[k] != ws[k]}


_STREAMS2 = (("e2", "e2_ii"), ("scale", "scale_iiws_disco"))
_STREAMS3 = (*_STREAMS2, ("std", "wrn_std"))
FAMILIES: dict[str, Family] = {
    "cnn": Family("digits_cnn"),
    "svm": Family(None),
    "wrn_std": Family("digits_std"),
    "e2_pool": Family("digits_e2", {"model.head": "pool"}),
    "e2_ii": Family("digits_e2"),
    "e2rot_pool": Family("digits_e2_rot", {"model.head": "pool"}, datasets=ROT),
    "e2rot_ii": Family("digits_e2_rot", datasets=ROT),
    **{f: Family(*study["FAMILIES"][f]) for f in ("scale_pool_disco", "scale_pool_hermite")},
    **{f: Family(*study["FAMILIES"][f]) for f in ("scale_iiws_disco", "scale_iiws_hermite")},
    "scale_iimono_disco": Family(*study["FAMILIES"]["scale_iimono_disco"]),
    "scale_iiws_mnet_disco": Family("mnist_ii_disco_ws", _ws_net_overrides()),
    "dual": Family("digits_dual", tune="head", streams=_STREAMS2),
    "triple": Family("digits_triple", tune="head", streams=_STREAMS3),
    # controls: size (constant parameters), ensembling (three standard streams), optimiser steps
    "dual_star": Family("digits_dual_star", tune="inherit", streams=_STREAMS2, hp_from="dual"),
    "triple_star": Family(
        "digits_triple_star", tune="inherit", streams=_STREAMS3, hp_from="triple"
    ),
    "triple_std": Family(
        "digits_triple_std",
        tune="inherit",
        streams=(("e2", "wrn_std"), ("scale", "wrn_std"), ("std", "wrn_std")),
        hp_from="triple",
    ),
    "e2_ii_steps_dual": Family(
        "digits_e2", tune="inherit", hp_from="e2_ii", steps_factor=DUAL_STEPS
    ),
    "scale_iiws_disco_steps_dual": Family(
        "digits_scale", tune="inherit", hp_from="scale_iiws_disco", steps_factor=DUAL_STEPS
    ),
    "wrn_std_steps_triple": Family(
        "digits_std", tune="inherit", hp_from="wrn_std", steps_factor=TRIPLE_STEPS
    ),
}
# The paper's claims as (claim, the family claimed better, the one it should beat, datasets).
CLAIMS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("E(2)-II beats pooling (II over flips)", "e2_ii", "e2_pool", DATASETS),
    ("E(2)-II beats pooling (II over rotations)", "e2rot_ii", "e2rot_pool", ROT),
    ("Scale-II WS beats pooling (DISCO)", "scale_iiws_disco", "scale_pool_disco", DATASETS),
    ("Scale-II WS beats pooling (Hermite)", "scale_iiws_hermite", "scale_pool_hermite", DATASETS),
    ("Scale-II WS beats monomials", "scale_iiws_mnet_disco", "scale_iimono_disco", DATASETS),
    ("dual beats its E(2) stream", "dual", "e2_ii", DATASETS),
    ("dual beats its Scale stream", "dual", "scale_iiws_disco", DATASETS),
    ("triple beats its E(2) stream", "triple", "e2_ii", DATASETS),
    ("triple beats its Scale stream", "triple", "scale_iiws_disco", DATASETS),
    ("triple beats its std stream", "triple", "wrn_std", DATASETS),
    ("triple beats dual", "triple", "dual", DATASETS),
    ("dual* (one stream's size) beats the E(2) stream", "dual_star", "e2_ii", DATASETS),
    ("dual* beats the Scale stream", "dual_star", "scale_iiws_disco", DATASETS),
    ("triple* (one stream's size) beats the std WRN", "triple_star", "wrn_std", DATASETS),
    ("triple beats three std streams (ensembling)", "triple", "triple_std", DATASETS),
    ("dual beats the E(2) stream at dual's steps", "dual", "e2_ii_steps_dual", DATASETS),
    (
        "dual beats the Scale stream at dual's steps",
        "dual",
        "scale_iiws_disco_steps_dual",
        DATASETS,
    ),
    ("triple beats the std WRN at triple's steps", "triple", "wrn_std_steps_triple", DATASETS),
)


@dataclasses.dataclass(frozen=True)
class Rule:
    """The training-length rule and the shared settings of every network run."""

    min_steps: int = 600
    min_epochs: int = 60
    batch_size: int = 64
    width_divisor: float = 2.0

    def tag(self) -> str:
        """The fields that differ from :data:`FIRST_RULE`, e.g. ``'e300'`` (``''``: none)."""
        short = {"min_steps": "s", "min_epochs": "e", "batch_size": "b", "width_divisor": "w"}
        return "".join(
            f"{short[f.name]}{getattr(self, f.name):g}"
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(FIRST_RULE, f.name)
        )


# The rule the study started with (2026-11-25): run directories are named by N_t alone under it.
FIRST_RULE = Rule()
# The tuning runs' length stays the first rule's (60 epochs of the 863 images, 840 steps) under
# any main rule: the HPs were chosen once, at that length, for every family.
TUNE_RULE_FIELDS = ("min_steps", "min_epochs")
# The main runs' rule since 2026-11-27: at least 300 epochs. N_t <= 100 train exactly as under
# the first rule (600 or 300 epochs already); N_t = 300 and 1079 train 300 epochs instead of
# 120 and 60. 137 of the first rule's 612 main runs had ended unconverged, 105 of them at
# N_t >= 300; the length was fixed by launch/protocol_rule_pilot.py on the tuning split alone
# (docs/results/protocol/README.md: at 150 epochs 3 of 4 pilot runs were unconverged).
MAIN_RULE = Rule(min_epochs=300)


def schedule(n_train: int, rule: Rule, factor: float = 1.0) -> dict:
    """``train.*`` overrides of one run with ``n_train`` images (0 = all 1079).

    ``E = ceil(factor * max(min_epochs, ceil(min_steps / ceil(N / B))))`` epochs (an epoch has
    ``ceil(N / B)`` batches of ``min(B, N)``), one x0.1 decay after ``round(2E/3)``, the
    held-out / validation split evaluated and a checkpoint saved every ``max(1, E // 10)`` epochs
    (the evaluation is watched only), the last epoch reported.
    """
    n = n_train or N_ALL
    per_epoch = math.ceil(n / rule.batch_size)
    epochs = math.ceil(factor * max(rule.min_epochs, math.ceil(rule.min_steps / per_epoch)))
    return {
        # a training set smaller than a batch is one batch (invjax refuses a larger batch)
        "batch_size": min(rule.batch_size, n),
        "num_epochs": epochs,
        "lr_boundaries": (min(max(1, round(2 * epochs / 3)), epochs - 1),),
        "eval_every_epochs": max(1, epochs // 10),
        # a save every 10% of the run (and at its end, and on SIGTERM): at N_t = 20 a save per
        # epoch is a save per step (docs/many_models.md's profile: 45% of the steps' time)
        "checkpoint_every_epochs": max(1, epochs // 10),
        "select_best": False,
    }


def head_schedule(n_train: int, rule: Rule) -> dict:
    """Phase 2 of the two-phase networks: the head's epochs are the streams' / 4 (the paper)."""
    s = schedule(n_train, rule)
    epochs = max(2, math.ceil(s["num_epochs"] / 4))
    return s | {
        "num_epochs": epochs,
        "lr_boundaries": (min(max(1, round(2 * epochs / 3)), epochs - 1),),
        "eval_every_epochs": max(1, epochs // 10),
        "checkpoint_every_epochs": max(1, epochs // 10),
    }


def _fmt_num(x: float) -> str:
    return f"{x:.3g}"


def candidates(family: str) -> list[tuple[str, dict]]:
    """The tuning candidates ``[(label, HPs)]`` of a family that tunes (the same six for all)."""
    fam = FAMILIES[family]
    if fam.stem is None:
        return [(f"C{c:g}_g{g:g}", {"svm_C": c, "svm_gamma": g}) for c, g in SVM_GRID]
    base = sweep["load_config"](fam.stem, fam.overrides).train.learning_rate
    out = []
    for f in LR_FACTORS:
        for wd in WEIGHT_DECAYS:
            lr = float(_fmt_num(base * f))
            out.append((f"lr{_fmt_num(lr)}_wd{wd:.0e}", {"learning_rate": lr, "weight_decay": wd}))
    return out


def _data(dataset: str, n_train: int, seed: int, tune: bool) -> dict:
    d = {"data.name": dataset, "data.n_train": n_train, "seed": seed}
    d["data.realisation"] = TUNE_REALISATION if tune else seed
    if tune:
        d |= {"data.val_source": "train", "data.val_fraction": VAL_FRACTION}
    return d


def _model_overrides(family: str) -> dict:
    """The ``model.*`` overrides a family's network takes (also as a stream of another)."""
    return {k: v for k, v in FAMILIES[family].overrides.items() if k.startswith("model.")}


def network_overrides(
    family: str, dataset: str, n_train: int, seed: int, hps: dict, rule: Rule, tune: bool
) -> dict:
    """All ``--config.*`` overrides of one network run.

    ``hps``: family -> ``{'learning_rate', 'weight_decay'}`` chosen (for the multi-stream
    families also their streams' families); the tuning stage passes the candidate under
    ``family`` itself. A tuning run trains for :func:`tune_rule`'s length whatever ``rule``.
    """
    fam = FAMILIES[family]
    n_eff = N_TUNE if tune else n_train
    rule = tune_rule(rule) if tune else rule
    ov = _data(dataset, n_train, seed, tune) | dict(fam.overrides)
    own = hps[fam.hp_from or family]
    if fam.streams:
        config = sweep["load_config"](fam.stem, {})
        for slot, slot_family in fam.streams:
            for k, v in _model_overrides(slot_family).items():
                ov[f"model.streams.{slot}.{k.removeprefix('model.')}"] = v
            star = float(config.model.streams[slot].get("width_divisor", 1.0) or 1.0)
            ov[f"model.streams.{slot}.width_divisor"] = star * rule.width_divisor
            train = schedule(n_eff, rule) | hps[slot_family]
            ov.update({f"phase1.{slot}.train.{k}": v for k, v in train.items()})
        train = head_schedule(n_eff, rule) | own
    else:
        train = schedule(n_eff, rule, fam.steps_factor) | own
        if fam.stem in sweep_wrn_stems():
            ov["model.width_divisor"] = rule.width_divisor
        if fam.stem == study["MONO_STEM"]:
            ov["model.prune_epochs"] = study["prune_epochs"](train["num_epochs"])
    ov.update({f"train.{k}": v for k, v in train.items()})
    ov["precision"] = PRECISION
    return ov


def sweep_wrn_stems() -> tuple[str, ...]:
    return (*study["WRN_STEMS"], "digits_e2_rot")


def run_label(n_train: int, rule: Rule = FIRST_RULE) -> str:
    """A main run's directory name at ``n_train``: ``n<N_t>`` (``nall``) where ``rule`` trains
    the point as :data:`FIRST_RULE` does (same schedule and widths), else with the rule's
    :meth:`Rule.tag`, e.g. ``n300_e300``. The runs of two rules then never share a directory,
    and a rule's runs that are identical to the first rule's are the same runs."""
    base = f"n{n_train}" if n_train else "nall"
    same = schedule(n_train, rule) == schedule(n_train, FIRST_RULE)
    if same and rule.width_divisor == FIRST_RULE.width_divisor:
        return base
    return f"{base}_{rule.tag()}"


def family_label(family: str, n_train: int, rule: Rule) -> str:
    """:func:`run_label` of ``family``'s runs: the SVM has no epochs, so every rule fits it as
    the first rule did and its runs keep their directories."""
    return run_label(n_train, rule if FAMILIES[family].stem is not None else FIRST_RULE)


def parse_label(label: str) -> int | None:
    """N_t of a :func:`run_label` (1079 for ``nall``, ``nall_e300``), None for other names."""
    size = label.partition("_")[0]
    if size == "nall":
        return N_ALL
    if size[:1] == "n" and size[1:].isdigit():
        return int(size[1:])
    return None


def tune_rule(rule: Rule) -> Rule:
    """The rule of the tuning runs under main rule ``rule``: its batch and widths, the first
    rule's length (:data:`TUNE_RULE_FIELDS`)."""
    return dataclasses.replace(rule, **{f: getattr(FIRST_RULE, f) for f in TUNE_RULE_FIELDS})


def _run(family: str, workdir: str, ov: dict, point: tuple) -> object:
    fam = FAMILIES[family]
    return sweep["Run"](family, fam.stem, ov, point, workdir, bool(fam.streams))


# ----------------------------------------------------------------------------- planning


def plan_tune(runs_dir: str, dataset: str, families: Sequence[str], rule: Rule, chosen: dict):
    """The tuning runs of one dataset: ``(network runs, SVM fits, families waiting)``.

    Single-stream families with ``tune='own'`` first (cheap ones first, the order of
    ``families``); the heads of ``tune='head'`` families only once their streams' families
    have a choice in ``chosen`` (else they wait: listed in the third item), on those chosen
    runs (shared phase 1).
    """
    runs, svm, waiting = [], [], []
    for family in families:
        fam = FAMILIES[family]
        if dataset not in fam.datasets or fam.tune == "inherit":
            continue
        if fam.tune == "head" and not all(f in chosen for _, f in fam.streams):
            waiting.append(family)
            continue
        base = os.path.join(runs_dir, "tune", dataset, family)
        point = []
        if fam.tune == "head":  # the chosen stream runs, so that phase 1 reuses them
            for _, f in fam.streams:
                label = chosen[f]["label"]
                ov = network_overrides(f, dataset, 0, 0, {f: chosen[f]["hps"]}, rule, True)
                run = _run(f, os.path.join(runs_dir, "tune", dataset, f, label), ov, (dataset,))
                if all(r.workdir != run.workdir for r in point):
                    point.append(run)
        for label, hp in candidates(family):
            workdir = os.path.join(base, label)
            if fam.stem is None:
                svm.append(_data(dataset, 0, 0, True) | hp | {"workdir": workdir})
                continue
            hps = {family: hp} | {f: chosen[f]["hps"] for _, f in fam.streams}
            ov = network_overrides(family, dataset, 0, 0, hps, rule, True)
            point.append(_run(family, workdir, ov, (dataset, family)))
        if fam.tune == "head":
            from invjax.training import plan

            sweep["_share_streams"](point, plan)
            point = [r for r in point if r.multi]  # the stream runs are the families' own
        runs += point
    return runs, svm, waiting


def plan_main(
    runs_dir: str,
    dataset: str,
    families: Sequence[str],
    sizes: Sequence[int],
    seeds: Sequence[int],
    rule: Rule,
    chosen: dict,
):
    """The main runs of one dataset: ``(network runs, SVM fits, families without HPs)``.

    Ordered by N_t, then seed; within one point the single-stream runs first so that the
    multi-stream runs reuse them as phase 1 (:func:`launch.sweep._share_streams`): a two-phase
    family brings its stream families along, whether ``families`` names them or not. A family
    (or a stream of it) whose tuning is not finished is left out and named.
    """
    from invjax.training import plan

    def need(f: str) -> set[str]:
        fam = FAMILIES[f]
        return {fam.hp_from or f} | {s for _, s in fam.streams}

    fams = [f for f in families if dataset in FAMILIES[f].datasets]
    # A two-phase family's streams are planned with it (the finished ones are skipped), so that
    # phase 1 reuses their families' runs of the point instead of training private copies in
    # DIR/streams (which, on another device than the family's run, would differ from it).
    # (triple_std names wrn_std in all three slots: each family is planned once.)
    for family in list(fams):
        fams += [s for _, s in FAMILIES[family].streams]
    fams = list(dict.fromkeys(fams))
    missing = [f for f in fams if not need(f) <= set(chosen)]
    fams = [f for f in fams if f not in missing]
    hps = {f: c["hps"] for f, c in chosen.items()}
    runs, svm = [], []
    for n in sizes:
        for seed in seeds:
            point = []
            for family in fams:
                workdir = os.path.join(
                    runs_dir, "main", dataset, family, family_label(family, n, rule), f"seed_{seed}"
                )
                if FAMILIES[family].stem is None:
                    svm.append(_data(dataset, n, seed, False) | hps["svm"] | {"workdir": workdir})
                    continue
                ov = network_overrides(family, dataset, n, seed, hps, rule, False)
                point.append(_run(family, workdir, ov, (dataset, n, seed)))
            point = [r for r in point if not r.multi] + [r for r in point if r.multi]
            sweep["_share_streams"](point, plan)
            runs += point
    return runs, svm, missing


def seeds_in_one(runs: Sequence) -> list:
    """Group single-stream runs of one (dataset, family, N_t) over seeds into one K-model run
    (``--config.seeds``, workdir ``.../n<N_t>``); multi-stream runs stay as they are.

    Model k of the group uses realisation k (``--config.realisation_from_seed=True``), as the
    single runs do; refused (ValueError) if the config keys are missing or a run does not. A
    group stands where its first run stood, so that a point's seed groups come before the
    multi-stream runs that reuse them as phase 1 (``--parallel 1`` trains in this order; every
    multi-stream run used to come first, ahead of the streams it reuses)."""
    from invjax.configs import base

    if "seeds" not in base.get_config():
        raise ValueError(
            "--seeds-in-one needs invjax.main's --config.seeds, which invjax/configs/base.py "
            "does not have: run without it"
        )
    groups: dict[tuple, list] = {}
    order: list = []  # a multi-stream run, or the key of a group where its first run stood
    for r in runs:
        if r.multi:
            order.append(r)
            continue
        key = (r.experiment, os.path.dirname(r.workdir))
        if key not in groups:
            order.append(key)
        groups.setdefault(key, []).append(r)
    out = []
    for item in order:
        if not isinstance(item, tuple):
            out.append(item)
            continue
        family, workdir = item
        rs = groups[item]
        ov = {k: v for k, v in rs[0].overrides.items() if k not in ("seed", "data.realisation")}
        if any(r.overrides.get("data.realisation") != r.overrides["seed"] for r in rs):
            raise ValueError(f"--seeds-in-one: {family}'s runs do not use realisation = seed")
        ov["seeds"] = tuple(r.overrides["seed"] for r in rs)
        ov["realisation_from_seed"] = True
        out.append(_run(family, workdir, ov, rs[0].point[:2]))
    return out


# ----------------------------------------------------------------------------- the RBF-SVM


def run_svm(point: dict) -> dict:
    """The RBF-SVM with fixed ``svm_C`` and ``svm_gamma`` (x scikit-learn's 'scale', i.e.
    ``1 / (784 var(X_train))``) on the point's exact splits (``launch/study.py``'s
    ``svm_fit``); writes ``results.json``."""
    fit, error = study["svm_fit"](point, [(point["svm_C"], point["svm_gamma"])])
    errors = {split + "_error": error(split) for split in ("test", "val", "train")}
    hps = {"svm_C": point["svm_C"], "svm_gamma_times_scale": point["svm_gamma"]}
    return study["write_svm_results"](point, fit, errors, hps)


# ----------------------------------------------------------------------------- results


def curve(run_dir: str) -> dict:
    """The run's epoch records from ``metrics.jsonl``: ``train`` / ``val`` as ``[[epoch, loss,
    error], ...]`` (the final evaluation excluded)."""
    out: dict[str, list] = {"train": [], "val": []}
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(path):
        return out
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except json.JSONDecodeError:  # a line cut by a kill
                continue
            if r.get("split") in out and "final" not in r and "model_epoch" not in r:
                out[r["split"]].append([r.get("epoch"), r.get("loss"), r.get("error")])
    for k in out:  # a resumed run re-logs nothing twice, but keep the last record per epoch
        out[k] = list({e[0]: e for e in out[k]}.values())
    return out


def sync(runs_dir: str, mirror: str, replace: Sequence[str] = ()) -> int:
    """Copy every finished run's ``results.json`` and its curve (``curve.json``) from
    ``runs_dir`` into ``mirror`` (same relative paths); returns how many were new.

    A run the mirror already holds is left as it is, except under a path of ``replace``
    (:func:`rerun_prepare`): there a run trained in ``runs_dir`` (it has its checkpoints) whose
    results differ from the mirror's replaces them, and counts as new."""
    new = 0
    for root, dirs, files in os.walk(runs_dir):
        dirs[:] = [d for d in dirs if d not in ("checkpoints", "xla_cache", "tensorboard")]
        if root == runs_dir:  # what --rerun moved aside is not a run of the study any more
            dirs[:] = [d for d in dirs if d != "replaced"]
        if "results.json" not in files:
            continue
        rel = os.path.relpath(root, runs_dir)
        dst = os.path.join(mirror, rel)
        if os.path.isfile(os.path.join(dst, "results.json")):
            under = any(rel == r or rel.startswith(r.rstrip("/") + "/") for r in replace)
            here = os.path.isdir(os.path.join(root, "checkpoints"))
            if not (under and here) or _same_file(root, dst, "results.json"):
                continue
        os.makedirs(dst, exist_ok=True)
        with open(os.path.join(dst, "curve.json"), "w") as f:
            json.dump(curve(root), f)
        shutil.copyfile(os.path.join(root, "results.json"), os.path.join(dst, "results.json"))
        new += 1
    return new


def _same_file(a_dir: str, b_dir: str, name: str) -> bool:
    with open(os.path.join(a_dir, name), "rb") as a, open(os.path.join(b_dir, name), "rb") as b:
        return a.read() == b.read()


def rerun_prepare(
    runs_dir: str, paths: Sequence[str], dry_run: bool = False
) -> list[tuple[str, bool]]:
    """Make the runs under ``paths`` (relative to ``runs_dir``) train again: a run that landed on
    another machine has its small results here (copied from the record) but not the final
    checkpoint that a two-phase network's phase 1 needs. A path under which ``runs_dir`` holds a
    checkpoint (trained here, finished or not) is kept, so the same command resumes it; any
    other is moved to ``runs_dir/replaced/<path>`` (nothing is deleted). Returns per path a
    line to print and whether its finished runs were moved aside (with ``dry_run``: would be).
    :func:`sync` then lets the retrained results replace the record's."""
    out = []
    for path in paths:
        src = os.path.join(runs_dir, path)
        if any("checkpoints" in dirs for _, dirs, _ in os.walk(src)):
            out.append((f"{path}: kept (it has checkpoints here)", False))
        elif not os.path.isdir(src):
            out.append((f"{path}: not here: it trains", False))
        elif dry_run:
            out.append((f"{path}: would move to replaced/{path} and train again", True))
        else:
            dst = os.path.join(runs_dir, "replaced", path)
            if os.path.exists(dst):
                dst += time.strftime("-%Y%m%d-%H%M%S")
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.move(src, dst)
            out.append(
                (f"{path}: moved to {os.path.relpath(dst, runs_dir)}: it trains again", True)
            )
    return out


def _load(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return None


def short_device(kind: str | None) -> str:
    """'cpu' -> 'CPU', 'NVIDIA H100 80GB HBM3' -> 'H100'; '?' where a run did not record it."""
    if not kind:
        return "?"
    if kind.lower() == "cpu":
        return "CPU"
    words = [w for w in kind.split() if w.upper() not in ("NVIDIA", "TESLA")]
    return words[0] if words else kind


def _split_run_path(path: str) -> tuple[str, str] | None:
    """``ROOT/main/...`` or ``ROOT/tune/...`` -> (ROOT, the rest from ``main``/``tune`` on),
    at the last such component (a run directory's own path may hold one: /work/main/runs)."""
    parts = os.path.normpath(path).split(os.sep)
    at = [i for i, p in enumerate(parts) if p in ("main", "tune")]
    if not at:
        return None
    return os.sep.join(parts[: at[-1]]), os.sep.join(parts[at[-1] :])


def run_devices(run_dir: str, r: dict) -> list[str]:
    """The devices that trained a run: its own and, for a two-phase network, each phase-1
    stream's: a stream trained inside the run (``streams/<slot>``), or a stream family's run
    that it reuses, found by its recorded workdir from ``main/`` (``tune/``) on, under the
    same root as ``run_dir`` (the record's copy, wherever the run trained)."""
    # the SVM (scikit-learn) records no device: it runs on the CPU
    devices = {short_device(r.get("device_kind") or ("cpu" if "svm_C" in r else None))}
    here = _split_run_path(run_dir)
    for slot, p1 in (r.get("phase1") or {}).items():
        stream = _load(os.path.join(run_dir, "streams", slot, "results.json"))
        there = _split_run_path(str(p1.get("workdir", "")))
        if stream is None and here and there:
            stream = _load(os.path.join(here[0], there[1], "results.json"))
        devices.add(short_device(stream.get("device_kind")) if stream else "?")
    return sorted(devices)


def run_record(run_dir: str) -> dict | None:
    """One finished run: its results plus ``train_loss`` / ``train_error`` (last epoch), the
    convergence verdict of :func:`study_stats.convergence` and ``trained_on``
    (:func:`run_devices`)."""
    r = _load(os.path.join(run_dir, "results.json"))
    if r is None:
        return None
    r["trained_on"] = run_devices(run_dir, r)
    c = _load(os.path.join(run_dir, "curve.json")) or curve(run_dir)
    train = [e for e in c.get("train", []) if e[1] is not None]
    conv = stats["convergence"]([e[1] for e in train]) if train else {"converged": None}
    r = dict(r, curve=c, convergence=conv)
    if train:
        r["train_loss"], r["train_error"] = train[-1][1], train[-1][2]
    return r


def tuning_results(roots: Sequence[str], dataset: str, family: str) -> dict[str, dict]:
    """label -> record of the family's finished tuning runs (the first root that has it)."""
    out = {}
    for label, _ in candidates(family):
        for root in roots:
            r = run_record(os.path.join(root, "tune", dataset, family, label))
            if r is not None:
                out[label] = r
                break
    return out


def choose(results: dict[str, dict], family: str) -> dict | None:
    """The winning candidate once all of the family's candidates finished, else None.

    Lowest held-out error of the last epoch; ties: lower held-out loss (the SVM has none), then
    the earlier candidate in :func:`candidates`."""
    cands = candidates(family)
    if any(label not in results for label, _ in cands):
        return None

    def key(item):
        i, (label, _) = item
        r = results[label]
        loss = r.get("val_loss")
        return (r["val_error"], loss if isinstance(loss, int | float) else 0.0, i)

    i, (label, hp) = min(enumerate(cands), key=key)
    return {"label": label, "hps": hp, "val_error": results[label]["val_error"]}


def chosen_hps(roots: Sequence[str], dataset: str, families: Sequence[str] | None = None):
    """family -> :func:`choose` for every tuning family of ``dataset`` that finished."""
    out = {}
    for family in families or FAMILIES:
        fam = FAMILIES[family]
        if fam.tune == "inherit" or dataset not in fam.datasets:
            continue
        c = choose(tuning_results(roots, dataset, family), family)
        if c is not None:
            out[family] = c
    return out


def main_errors(root: str, rule: Rule = FIRST_RULE, sizes: Sequence[int] | None = None):
    """(dataset, family, N_t) -> {seed: record} of the finished main runs under ``root`` that
    ``rule`` trains (directories named :func:`run_label` ``(N_t, rule)``; other rules' runs are
    left out), at the N_t in ``sizes`` (None: every N_t)."""
    out: dict[tuple, dict] = {}
    base = os.path.join(root, "main")
    if not os.path.isdir(base):
        return out
    for dataset in sorted(os.listdir(base)):
        for family in sorted(os.listdir(os.path.join(base, dataset))):
            fdir = os.path.join(base, dataset, family)
            for size in sorted(os.listdir(fdir)):
                n = parse_label(size)
                if n is None:
                    continue
                if family not in FAMILIES or size != family_label(
                    family, 0 if n == N_ALL else n, rule
                ):
                    continue
                if sizes is not None and n not in sizes:
                    continue
                for sd in sorted(os.listdir(os.path.join(fdir, size))):
                    if not sd.startswith("seed_"):
                        continue
                    r = run_record(os.path.join(fdir, size, sd))
                    if r is not None and math.isfinite(r.get("test_error", math.nan)):
                        out.setdefault((dataset, family, n), {})[int(sd[5:])] = r
    return out


def claims_table(errors: dict, need: int, test: str = "t", family: str = "all") -> list[dict]:
    """Every claim of :data:`CLAIMS` at every (dataset, N_t) that has runs of both families:
    :func:`study_stats.compare` plus Holm (over the whole table, or per claim and dataset)."""
    points = sorted({(d, n) for d, _, n in errors})
    recs = []
    for claim, better, worse, datasets in CLAIMS:
        for dataset, n in points:
            a = errors.get((dataset, better, n), {})
            b = errors.get((dataset, worse, n), {})
            if dataset not in datasets or not a or not b:
                continue
            ea = {s: r["test_error"] for s, r in a.items()}
            eb = {s: r["test_error"] for s, r in b.items()}
            c = stats["compare"](ea, eb, need, test)
            recs.append({"claim": claim, "better": better, "worse": worse, "dataset": dataset})
            recs[-1] |= {"n_train": n, **c}
            # which devices trained each side (a paired difference across devices carries
            # their spread too: README, caveats)
            for side, rs in (("better", a), ("worse", b)):
                on = sorted({d for r in rs.values() for d in r.get("trained_on", ["?"])})
                recs[-1][f"trained_on_{side}"] = on
    for g in holm_groups(recs, family):
        stats["adjust"](g)
    return recs


def holm_groups(recs: list[dict], family: str) -> list[list[dict]]:
    """The comparisons of each Holm family: all together (``'all'``) or per claim and dataset
    (``'claim'``), each in the order of ``recs``."""
    groups: dict[tuple, list[dict]] = {}
    for r in recs:
        groups.setdefault(("all",) if family == "all" else (r["claim"], r["dataset"]), []).append(r)
    return list(groups.values())


HOLM_FAMILIES = {"all": "every complete comparison", "claim": "each claim and dataset"}


def with_other_holm(claims: list[dict], errors: dict, need: int, test: str, family: str) -> str:
    """Add ``p_holm_<other>`` and ``verdict_<other>`` to each of ``claims`` (Holm over the
    other family of :data:`HOLM_FAMILIES`, a sensitivity check of the primary correction);
    return that other family's name."""
    other = next(f for f in HOLM_FAMILIES if f != family)
    for c, o in zip(claims, claims_table(errors, need, test, other), strict=True):
        c[f"p_holm_{other}"], c[f"verdict_{other}"] = o["p_holm"], o["verdict"]
    return other


def planned_family_size(family: str, sizes=SIZES) -> int:
    """How many comparisons one Holm family holds once every run of the plan has landed."""
    return len(sizes) * (sum(len(ds) for *_, ds in CLAIMS) if family == "all" else 1)


def with_planned_holm(claims: list[dict], family: str, sizes=SIZES) -> None:
    """Add ``p_holm_planned`` and ``verdict_planned`` to each of ``claims``: Holm over the whole
    planned family (every claim of :data:`CLAIMS` on its datasets at every N_t of ``sizes``;
    with ``family='claim'`` each claim and dataset's ``len(sizes)``), the comparisons not yet
    complete counted at p = 1. Holm's adjusted p-values never rise when another p-value falls,
    so each bounds every Holm p its comparison can get as the rest lands (its own runs
    unchanged): a verdict supported here cannot turn."""
    per_group = planned_family_size(family, sizes)
    for recs in holm_groups(claims, family):
        ps = [r["p"] for r in recs]
        missing = per_group - sum(not math.isnan(p) for p in ps)
        if missing < 0:
            raise ValueError(f"{len(recs)} comparisons in a planned family of {per_group}")
        for r, a in zip(recs, stats["holm"](ps + [1.0] * missing), strict=False):
            r["p_holm_planned"] = a
            r["verdict_planned"] = (
                "pending" if math.isnan(a) else stats["verdict"](r["diff_mean"], a)
            )


def sensitivity_markdown(claims: list[dict], family: str, other: str) -> list[str]:
    """A report section: the verdicts counted under both Holm families, a table of the
    comparisons whose verdict differs between them, and (where :func:`with_planned_holm` ran)
    the verdicts that no later landing can turn."""
    if not claims:
        return []
    _p = report["_p"]  # p-values as the claims tables print them

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
        m = planned_family_size(family)
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


def _git(repo: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True)


def commit(out: str, message: str) -> bool:
    """Commit ``out`` (only that path) in the git repository that holds it; False if nothing
    changed or git refused (another commit holding the index lock: the next one takes it)."""
    top = _git(out, "rev-parse", "--show-toplevel")
    if top.returncode:
        print(f"protocol: {out} is not in a git repository: not committed", flush=True)
        return False
    repo = top.stdout.strip()
    _git(repo, "add", "--", out)
    if not _git(repo, "diff", "--cached", "--quiet", "--", out).returncode:
        return False
    done = _git(repo, "commit", "-q", "-m", message, "--", out)
    if done.returncode:
        print(f"protocol: git commit failed: {done.stderr.strip()[:300]}", flush=True)
    return not done.returncode


# ----------------------------------------------------------------------------- driver


def _run_groups(runs: Sequence, args, after) -> int:
    """Train ``runs``, ``after()`` after each, so that each result is copied as it lands.

    ``--parallel 1``: one at a time, in order (a point's single streams before the runs that
    reuse them). ``--parallel P``: two waves, the single-stream runs, then the multi-stream runs
    (whose phase 1 is among the first wave's, :func:`plan_main`), ``P`` runs side by side
    (``--runs-per-gpu`` of them sharing a GPU): the first wave's runs each on their own, the
    second's by point (a point's multi-stream runs may share streams with each other, in order);
    no run starts once the budget is spent.
    """
    if getattr(args, "parallel", 1) > 1:
        status = 0
        for multi in (False, True):
            wave = [r for r in runs if r.multi == multi]
            if wave and not _over_budget(args):
                code = sweep["run_local"](
                    wave,
                    args.parallel,
                    None,
                    args.platform,
                    per_gpu=args.runs_per_gpu,
                    independent=not multi,
                    on_done=lambda run, code: after(),
                    stop=lambda: _over_budget(args),
                )
                if code >= STOPPED:  # a signal stopped the runs: start nothing more
                    return code
                status |= code
        return status
    status = 0
    for run in runs:
        if sweep["finished"](run):
            continue
        if _over_budget(args):
            return status
        code = sweep["run_local"]([run], 1, None, args.platform)
        after()
        if code >= STOPPED:
            return code
        status |= code
    return status


# run_local's status after a signal n is 128 + n (launch/sweep.py): the runs saved a checkpoint
# and stopped, and so does the protocol (the same command resumes).
STOPPED = 128


def _over_budget(args) -> bool:
    if args.budget_minutes and time.perf_counter() - args.t0 > 60 * args.budget_minutes:
        if not args.budget_said:
            print(
                f"protocol: time budget of {args.budget_minutes:g} min spent: no new run "
                "starts (the same command resumes)",
                flush=True,
            )
            args.budget_said = True
        return True
    return False


def _svm_finished(point: dict) -> bool:
    return os.path.isfile(os.path.join(point["workdir"], "results.json"))


def _svms(points: Sequence[dict], args, after) -> None:
    for p in points:
        if _svm_finished(p) or _over_budget(args):
            continue
        r = run_svm(p)
        print(
            f"svm {p['data.name']} N_t={r['n_train']} seed={p['seed']} C={p['svm_C']:g} "
            f"gamma={p['svm_gamma']:g}x: held-out/val {r['val_error']:.2f}%",
            flush=True,
        )
    after()


def parse(argv: Sequence[str] | None):
    p = argparse.ArgumentParser(
        prog="python launch/study_protocol.py", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--stage", choices=("tune", "main", "all", "report"), default="all")
    p.add_argument("--datasets", default=",".join(DATASETS))
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--sizes", default=",".join(map(str, SIZES)), help="N_t list (0 = all 1079)")
    p.add_argument("--seeds", default=",".join(map(str, SEEDS)), help="realisations 0..5")
    p.add_argument("--runs-dir", default="runs/study_protocol")
    p.add_argument("--out", default="docs/results/protocol")
    p.add_argument("--min-steps", type=int, default=MAIN_RULE.min_steps)
    p.add_argument("--min-epochs", type=int, default=MAIN_RULE.min_epochs)
    p.add_argument("--batch-size", type=int, default=MAIN_RULE.batch_size)
    p.add_argument("--width-divisor", type=float, default=MAIN_RULE.width_divisor)
    p.add_argument("--test", choices=stats["TESTS"], default="t", help="the primary paired test")
    p.add_argument("--holm-family", choices=("all", "claim"), default="all")
    p.add_argument("--budget-minutes", type=float, default=0.0, help="0 = none")
    p.add_argument("--platform", choices=("auto", "cpu", "gpu"), default="auto")
    p.add_argument("--parallel", type=int, default=1, help="runs side by side")
    p.add_argument("--runs-per-gpu", type=int, default=1, help="parallel runs sharing one GPU")
    p.add_argument("--commit", action="store_true", help="commit OUT after every group")
    p.add_argument("--seeds-in-one", action="store_true", help="K seeds per invocation")
    p.add_argument("--dry-run", action="store_true", help="print the commands only")
    p.add_argument(
        "--rerun",
        default="",
        help="run paths under --runs-dir (main/DATASET/FAMILY/LABEL, comma-separated) to train "
        "again; their results replace the record's",
    )
    args = p.parse_args(argv)
    try:
        args.datasets = _names(args.datasets, DATASETS, "--datasets")
        args.families = _names(args.families, tuple(FAMILIES), "--families")
        args.sizes = _ints(
            args.sizes,
            "--sizes",
            lambda n: n == 0 or (10 <= n < N_ALL and n % 10 == 0),
            "give 0 (all 1079) or multiples of 10 in 10..1070 (class-balanced subsets)",
        )
        args.seeds = _ints(args.seeds, "--seeds", lambda s: 0 <= s <= 5, "give realisations 0..5")
        for name in ("min_steps", "min_epochs", "batch_size"):
            if getattr(args, name) < 1:
                raise ValueError(
                    f"--{name.replace('_', '-')}={getattr(args, name)} is invalid: it must be >= 1"
                )
        if args.width_divisor < 1:
            raise ValueError(f"--width-divisor={args.width_divisor} is invalid: it must be >= 1")
        args.rerun = tuple(x.strip().rstrip("/") for x in args.rerun.split(",") if x.strip())
        for path in args.rerun:
            parts = path.split("/")
            if os.path.isabs(path) or ".." in parts or parts[0] != "main" or len(parts) < 2:
                raise ValueError(
                    f"--rerun: {path!r} is invalid: give main runs' paths relative to "
                    "--runs-dir (e.g. main/scaled_digits/e2_ii/nall_e300; a tuning run's first "
                    "result fixes a choice and is not replaced)"
                )
        if args.budget_minutes < 0:
            raise ValueError(f"--budget-minutes={args.budget_minutes} is invalid: it must be >= 0")
        if args.stage not in ("report",) and not args.dry_run:
            sweep["slot_envs"](args.parallel, 1, args.platform, args.runs_per_gpu)
    except ValueError as e:
        p.error(str(e))
    args.rule = Rule(args.min_steps, args.min_epochs, args.batch_size, args.width_divisor)
    args.runs_dir = os.path.abspath(args.runs_dir)
    args.out = os.path.abspath(args.out)
    args.t0, args.budget_said = time.perf_counter(), False
    args.argv = list(argv if argv is not None else sys.argv[1:])
    return args


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


def write_report(args, figures: bool = True) -> None:
    """Rewrite ``OUT/results.md``, ``tuning.json``, ``results.json``, ``claims.json`` and (with
    ``figures``) the figures from ``OUT/runs`` (the committed copy) alone."""
    mirror = os.path.join(args.out, "runs")
    # the whole study, whatever this invocation ran: a command for one dataset or a few families
    # must not drop the others' tables from the report it rewrites
    fams, datasets = tuple(FAMILIES), DATASETS
    text = [
        "# Sample-complexity study under the protocol: results",
        "",
        "Written by `python launch/study_protocol.py " + shlex.join(args.argv) + "` from the "
        "runs copied into `runs/` here (README.md: the protocol and the commands). "
        f"Rule: at least {args.rule.min_steps} steps and {args.rule.min_epochs} epochs at batch "
        f"{args.rule.batch_size}, WRN widths / {args.rule.width_divisor:g}; last-epoch models "
        f"(tuning: {tune_rule(args.rule).min_epochs} epochs).",
        "",
    ]
    top = len(text)  # the verdicts at a glance go here, before the tuning
    tuning = {}
    for dataset in datasets:
        results = {
            f: tuning_results([mirror], dataset, f)
            for f in fams
            if FAMILIES[f].tune != "inherit" and dataset in FAMILIES[f].datasets
        }
        chosen = {f: c for f in results if (c := choose(results[f], f)) is not None}
        tuning[dataset] = {
            f: {
                "chosen": chosen.get(f),
                "candidates": {
                    k: {x: r.get(x) for x in ("val_error", "val_loss", "train_loss", "train_error")}
                    | {"converged": r["convergence"].get("converged")}
                    for k, r in rs.items()
                },
            }
            for f, rs in results.items()
        }
        if any(results.values()):
            text += [
                f"## Tuning: {dataset}",
                "",
                report["tuning_table"](
                    dataset, {f: r for f, r in results.items() if r}, chosen, candidates
                ),
                "",
            ]
        if figures:
            report["plot_curves"](
                {(dataset, f): rs for f, rs in results.items()},
                os.path.join(args.out, "convergence"),
                "tune",
            )
    errors = main_errors(mirror, args.rule)
    need = len(args.seeds)
    claims = claims_table(errors, need, args.test, args.holm_family)
    other = with_other_holm(claims, errors, need, args.test, args.holm_family)
    with_planned_holm(claims, args.holm_family)
    sizes = [N_ALL if n == 0 else n for n in SIZES]
    glance = [(d, report["verdict_matrix"](claims, d, CLAIMS, sizes, need)) for d in datasets]
    if claims:
        at_a_glance = [
            "## Verdicts at a glance",
            "",
            "Mean paired difference (first - second, points; negative = the claim's direction) "
            f"per claim and N_t; **S** supported, **C** contradicted after Holm over "
            f"{HOLM_FAMILIES[args.holm_family]}, nothing for inconclusive; `-`: not yet run. "
            "The claims tables below give each comparison's interval and p-values.",
            "",
        ]
        for dataset, matrix in glance:
            at_a_glance += [f"{dataset}:", "", matrix, ""]
        text[top:top] = at_a_glance
    for dataset in datasets:
        table = report["results_table"](errors, dataset, fams, need)
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
        cm = report["claims_markdown"](claims, dataset)
        if cm:
            text += [
                f"### Claims: {dataset}",
                "",
                f"Paired over the common realisations (diff = first - second, points; negative"
                f" = the claim's direction); primary test `{args.test}` (two-sided), Holm over "
                f"{HOLM_FAMILIES[args.holm_family]}"
                f" at alpha = {stats['ALPHA']}; `pending` while fewer than {need} realisations;"
                " 95% CI: the Student t interval of the mean difference, not adjusted for"
                " the multiple comparisons.",
                "",
                cm,
                "",
            ]
        if figures:
            report["plot_curves"](
                {
                    (d, f): {f"N_t={n} seed {s}": r for s, r in rs.items()}
                    for (d, f, n), rs in errors.items()
                    if d == dataset
                },
                os.path.join(args.out, "convergence"),
                "main",
            )
    text += sensitivity_markdown(claims, args.holm_family, other)
    first, first_claims = _superseded(mirror, args, need)
    judged, bad, names = report["convergence_summary"](errors)
    if judged:
        text += [
            "## Convergence",
            "",
            f"{bad} of {judged} main runs unconverged (training loss over the last 10% of the "
            f"epochs more than {100 * stats['PLATEAU_REL']:g}% below the 10% before, and above "
            f"{stats['LOSS_FLOOR']}): " + (", ".join(names) if names else "none") + ".",
            "",
        ]
    text += first
    controls = [f for f in fams if FAMILIES[f].tune == "inherit"]
    if figures:
        report["plot_errors"](errors, args.out, fams, controls)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write("\n".join(text))
    with open(os.path.join(args.out, "tuning.json"), "w") as f:
        json.dump(tuning, f, indent=1)
    with open(os.path.join(args.out, "claims.json"), "w") as f:
        json.dump(claims, f, indent=1)
    first_path = os.path.join(args.out, "claims_first_rule.json")
    if first_claims:
        with open(first_path, "w") as f:
            json.dump(first_claims, f, indent=1)
    elif os.path.isfile(first_path):  # a report under the first rule itself
        os.remove(first_path)
    rows = [
        {"dataset": d, "family": fam, "n_train": n, "seed": s}
        | {k: r.get(k) for k in ("test_error", "val_error", "train_loss", "train_error")}
        | {"converged": r["convergence"].get("converged"), "params": r.get("params")}
        for (d, fam, n), rs in sorted(errors.items())
        for s, r in sorted(rs.items())
    ]
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(rows, f, indent=1)


def _superseded(mirror: str, args, need: int) -> tuple[list[str], list[dict]]:
    """The first rule's runs at the N_t that ``args.rule`` trains otherwise: a Markdown section
    (their tables and claims, Holm over these alone) and the claims; both empty where the rules
    agree at every N_t. Kept for the record, outside the report's verdicts."""
    changed = [n or N_ALL for n in SIZES if run_label(n, args.rule) != run_label(n, FIRST_RULE)]
    errors = main_errors(mirror, FIRST_RULE, changed) if changed else {}
    # the SVM's runs are the same under both rules: counted above, not superseded
    errors = {k: v for k, v in errors.items() if FAMILIES[k[1]].stem is not None}
    if not errors:
        return [], []
    claims = claims_table(errors, need, args.test, args.holm_family)
    r = FIRST_RULE
    text = [
        f"## Superseded: the first rule at N_t = {', '.join(map(str, changed))}",
        "",
        f"These runs trained under the first rule (at least {r.min_steps} steps and "
        f"{r.min_epochs} epochs), which the rule above replaced at these N_t before their "
        "retraining, for their convergence (count below). They are not among the verdicts "
        "above; their claims below are corrected among themselves only.",
        "",
    ]
    for dataset in DATASETS:
        table = report["results_table"](errors, dataset, tuple(FAMILIES), need)
        if table:
            text += [f"### {dataset} (first rule)", "", table, ""]
            cm = report["claims_markdown"](claims, dataset)
            text += [cm, ""] if cm else []
    judged, bad, _ = report["convergence_summary"](errors)
    text += [f"{bad} of these {judged} runs are unconverged.", ""]
    return text, claims


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    mirror = os.path.join(args.out, "runs")
    # The record (OUT/runs, in git) first: a run trained again later, e.g. on another machine to
    # regain its checkpoint for a two-phase network's phase 1, does not move a choice that its
    # first landing made (sync never overwrites the record either, but for --rerun's main runs).
    roots = (mirror, args.runs_dir)
    landed = [0]

    def after(final: bool = False) -> None:
        new = sync(args.runs_dir, mirror, args.rerun)
        landed[0] += new
        # the tables after every run, the figures every FIGURES_EVERY runs and at the end (each
        # commit of all PNGs would grow the history by ~1 MB)
        write_report(args, final or (new and landed[0] % FIGURES_EVERY < new))
        if args.commit and new:
            commit(args.out, f"docs/results/protocol: {new} more run(s) landed ({args.stage})")

    if args.stage == "report":  # copy what landed (if the runs are here), then the report
        if os.path.isdir(args.runs_dir):
            new = sync(args.runs_dir, mirror, args.rerun)
            print(f"protocol: {new} new run(s) copied", flush=True)
        write_report(args)
        if args.commit:
            commit(args.out, "docs/results/protocol: the runs landed so far")
        return 0
    prepared = rerun_prepare(args.runs_dir, args.rerun, args.dry_run)
    for line, _ in prepared:
        print(f"protocol: --rerun {line}", flush=True)
    # a dry run moves nothing, but lists what --rerun would train again as left to run
    moving = [
        os.path.join(args.runs_dir, path)
        for path, (_, moved) in zip(args.rerun, prepared, strict=True)
        if moved and args.dry_run
    ]
    # one compilation cache for the whole study (as launch/study.py)
    os.environ.setdefault("INVJAX_COMPILATION_CACHE", os.path.join(args.runs_dir, "xla_cache"))
    status = 0
    if args.stage in ("tune", "all"):
        for dataset in args.datasets:
            for _ in range(2):  # the single streams, then the heads that wait for them
                chosen = chosen_hps(roots, dataset)  # every family: streams tuned earlier count
                runs, svms, waiting = plan_tune(
                    args.runs_dir, dataset, args.families, args.rule, chosen
                )
                if args.dry_run:
                    _print(runs, svms, moving)
                    break
                _svms(svms, args, after)
                code = _run_groups(runs, args, after)
                if code >= STOPPED:
                    return _stopped(code, after, landed)
                status |= code
            if waiting:
                print(f"protocol: {dataset}: {waiting} wait for their streams' tuning", flush=True)
    if args.stage in ("main", "all"):
        for dataset in args.datasets:
            chosen = chosen_hps(roots, dataset, None)
            runs, svms, missing = plan_main(
                args.runs_dir, dataset, args.families, args.sizes, args.seeds, args.rule, chosen
            )
            if missing:
                print(f"protocol: {dataset}: {missing} have no tuned HPs yet: left out", flush=True)
            if args.seeds_in_one:
                try:
                    runs = seeds_in_one(runs)
                except ValueError as e:
                    print(f"protocol: error: {e}", file=sys.stderr)
                    return 2
            if args.dry_run:
                _print(runs, svms, moving)
                continue
            _svms(svms, args, after)
            code = _run_groups(runs, args, after)
            if code >= STOPPED:
                return _stopped(code, after, landed)
            status |= code
    if not args.dry_run:
        after(final=True)
        print(f"protocol: {landed[0]} run(s) landed in {mirror} by this command", flush=True)
    return status


def _stopped(code: int, after, landed: list) -> int:
    after(final=True)
    print(f"protocol: stopped by a signal; {landed[0]} run(s) landed by this command", flush=True)
    return code


def _print(runs, svms, moving: Sequence[str] = ()) -> None:
    """``--dry-run``: every planned command, the finished ones marked (a run of several seeds is
    finished when all its models are; one under a path of ``moving``, which ``--rerun`` would
    move aside, is not), then how many are left to train."""
    left = 0
    for r in runs:
        under = any(r.workdir == m or r.workdir.startswith(m + os.sep) for m in moving)
        done = sweep["finished"](r) and not under
        left += not done
        print(("# finished: " if done else "") + r.command("python"))
    for p in svms:
        done = _svm_finished(p)
        left += not done
        print(("# finished: " if done else "") + "svm " + json.dumps(p))
    print(f"# {left} of {len(runs) + len(svms)} commands left to run")


report = runpy.run_path(str(REPO / "launch" / "study_report.py"), run_name="protocol_report")

if __name__ == "__main__":
    sys.exit(main())
