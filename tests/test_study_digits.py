"""launch/studies (the digits study): the training-length rule, the tuning and main planners
(which runs a point needs, controls included, streams shared), resume (finished runs skipped),
the landing of finished runs in the record, the report with its claims, bad input; and
``data.val_source='train'``."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib

import numpy as np
import pytest

from launch import sweep
from launch.studies import plan, record, report, run, stats, tables
from launch.studies.__main__ import main
from launch.studies.digits import CLAIMS, FIRST_RULE, MAIN_RULE, N_ALL, SIZES, STUDY

RULE = plan.Rule()
FAMILIES = STUDY.families
N_TUNE = STUDY.n_tune


def _all_chosen() -> dict:
    """Every tuning family's first candidate, as if its tuning had finished."""
    out = {}
    for f, fam in FAMILIES.items():
        if fam.tune != "inherit":
            label, hps = plan.candidates(STUDY, f)[0]
            out[f] = {"label": label, "hps": hps}
    return out


@pytest.mark.parametrize("n", [20, 50, 100, 300, 0, N_TUNE])
def test_rule_gives_min_steps_and_epochs_and_reports_the_last_epoch(n):
    s = plan.schedule(n, RULE, N_ALL)
    per_epoch = math.ceil((n or N_ALL) / RULE.batch_size)
    assert s["num_epochs"] >= RULE.min_epochs and s["num_epochs"] * per_epoch >= RULE.min_steps
    assert s["select_best"] is False  # no selection on labels the training set lacks
    assert 0 < s["lr_boundaries"][0] < s["num_epochs"]
    h = plan.head_schedule(n, RULE, N_ALL)
    assert h["num_epochs"] == max(2, math.ceil(s["num_epochs"] / 4))
    # invjax refuses a batch larger than the training set: N_t = 20 trains on batches of 20
    assert s["batch_size"] == min(RULE.batch_size, n or N_ALL)
    assert s["checkpoint_every_epochs"] == max(1, s["num_epochs"] // 10)  # not a save a step
    assert plan.schedule(n, RULE, N_ALL, 2.25)["num_epochs"] == math.ceil(2.25 * s["num_epochs"])


def test_every_tuning_family_gets_the_same_six_candidates():
    sizes = {
        f: len(plan.candidates(STUDY, f)) for f, fam in FAMILIES.items() if fam.tune != "inherit"
    }
    assert set(sizes.values()) == {6} and "svm" in sizes and "cnn" in sizes
    lrs = {hp["learning_rate"] for _, hp in plan.candidates(STUDY, "wrn_std")}
    assert lrs == {0.00333, 0.01, 0.03}  # digits_std's 1e-2 x {1/3, 1, 3}


def test_tuning_plan_uses_the_80_20_split_and_heads_wait_for_their_streams(tmp_path):
    from invjax import data

    runs, svm, waiting = plan.plan_tune(
        STUDY, str(tmp_path), "scaled_digits", list(FAMILIES), RULE, {}
    )
    assert waiting == ["dual", "triple"]  # no stream chosen yet
    assert len(svm) == 6 and all(p["data.val_source"] == "train" for p in svm)
    fams = {r.experiment for r in runs}
    assert "e2rot_ii" not in fams and "dual_star" not in fams  # rotated only; inherits
    for r in runs:
        cfg = sweep.load_config(r.config, r.overrides)
        d = data.check_config(cfg.data)
        assert (d["val_source"], d["val_fraction"], d["n_train"], d["realisation"]) == (
            "train",
            0.2,
            0,
            0,
        )
        assert cfg.train.select_best is False
        assert cfg.train.num_epochs == plan.schedule(N_TUNE, RULE, N_ALL)["num_epochs"]
    chosen = _all_chosen()
    runs, _, waiting = plan.plan_tune(STUDY, str(tmp_path), "scaled_digits", ["dual"], RULE, chosen)
    assert waiting == [] and len(runs) == 6 and all(r.multi for r in runs)
    for r in runs:  # phase 1 = the chosen stream runs of the tuning stage
        assert r.overrides["phase1.e2.workdir"] == os.path.join(
            str(tmp_path), "tune", "scaled_digits", "e2_ii", chosen["e2_ii"]["label"]
        )
        assert r.overrides["phase1.scale.workdir"].endswith(chosen["scale_iiws_disco"]["label"])


def test_main_plan_of_one_point_has_every_family_and_control(tmp_path):
    from invjax import data
    from invjax.training import plan as training_plan

    chosen = _all_chosen()
    runs, svm, missing = plan.plan_main(
        STUDY, str(tmp_path), "rotscaled_digits", list(FAMILIES), [100], [3], RULE, chosen
    )
    assert missing == [] and len(svm) == 1 and svm[0]["data.realisation"] == 3
    by = {r.experiment: r for r in runs}
    assert set(by) | {"svm"} == set(FAMILIES)  # rotated: both E(2) families, all controls
    base = os.path.join(str(tmp_path), "main", "rotscaled_digits")
    e = plan.schedule(100, RULE, N_ALL)["num_epochs"]
    for name, r in by.items():
        assert r.workdir == os.path.join(base, name, "n100", "seed_3")
        cfg = sweep.load_config(r.config, r.overrides)
        assert cfg.data.realisation == 3 and cfg.seed == 3 and cfg.data.n_train == 100
        assert data.check_config(cfg.data)["val_source"] == "predefined"
        assert cfg.train.select_best is False
        if r.multi:
            for s in training_plan.stream_names(cfg):
                assert training_plan.stream_config(cfg, s).train.num_epochs == e
    # single streams before the multi-stream runs that reuse them (same point, same config)
    order = [r.experiment for r in runs]
    assert order.index("e2_ii") < order.index("dual") and order.index("wrn_std") < order.index(
        "triple_std"
    )
    dual, triple = by["dual"].overrides, by["triple"].overrides
    assert dual["phase1.e2.workdir"] == by["e2_ii"].workdir
    assert dual["phase1.scale.workdir"] == by["scale_iiws_disco"].workdir
    assert triple["phase1.std.workdir"] == by["wrn_std"].workdir
    # the controls: constant-parameter streams (private, narrower), three standard streams,
    # single streams with the multi-stream network's optimiser steps
    star = by["dual_star"].overrides
    assert "phase1.e2.workdir" not in star
    assert star["model.streams.e2.width_divisor"] == pytest.approx(2 * math.sqrt(2))
    assert by["triple_star"].overrides["model.streams.std.width_divisor"] == pytest.approx(
        2 * math.sqrt(3)
    )
    tstd = sweep.load_config("digits_triple_std", by["triple_std"].overrides)
    assert {tstd.model.streams[s].family for s in tstd.model.streams} == {"std"}
    assert [tstd.phase1[s].seed_offset for s in ("e2", "scale", "std")] == [0, 1, 2]
    assert by["e2_ii_steps_dual"].overrides["train.num_epochs"] == math.ceil(2.25 * e)
    assert by["wrn_std_steps_triple"].overrides["train.num_epochs"] == math.ceil(3.25 * e)
    # the chosen HPs: the step control inherits e2_ii's, dual's streams theirs
    lr = chosen["e2_ii"]["hps"]["learning_rate"]
    assert by["e2_ii_steps_dual"].overrides["train.learning_rate"] == lr
    assert dual["phase1.e2.train.learning_rate"] == lr
    assert dual["train.learning_rate"] == chosen["dual"]["hps"]["learning_rate"]
    rot = sweep.load_config("digits_e2_rot", by["e2rot_ii"].overrides).model
    assert tuple(rot.groups) == ("D4", "D4", "C4") and rot.ii_group == "C4"
    # scaled digits: no rotation family; a family whose tuning is missing is left out
    del chosen["scale_iiws_disco"]
    runs, _, missing = plan.plan_main(
        STUDY, str(tmp_path), "scaled_digits", list(FAMILIES), [20], [0], RULE, chosen
    )
    assert "e2rot_ii" not in {r.experiment for r in runs}
    assert set(missing) == {
        "scale_iiws_disco",
        "dual",
        "triple",
        "dual_star",
        "triple_star",
        "scale_iiws_disco_steps_dual",
    }


def test_a_two_phase_family_alone_reuses_its_stream_families_runs(tmp_path):
    """``--families dual,triple`` without the stream families: their runs of the point are
    planned too (finished ones are skipped later), and phase 1 points at them, not at private
    copies in DIR/streams."""
    runs, _, missing = plan.plan_main(
        STUDY, str(tmp_path), "scaled_digits", ["dual", "triple"], [50], [2], RULE, _all_chosen()
    )
    by = {r.experiment: r for r in runs}
    assert missing == [] and set(by) == {"dual", "triple", "e2_ii", "scale_iiws_disco", "wrn_std"}
    assert [r.multi for r in runs] == [False, False, False, True, True]
    for name in ("dual", "triple"):
        ov = by[name].overrides
        assert ov["phase1.e2.workdir"] == by["e2_ii"].workdir
        assert ov["phase1.scale.workdir"] == by["scale_iiws_disco"].workdir
    assert by["triple"].overrides["phase1.std.workdir"] == by["wrn_std"].workdir


def test_triple_std_plans_its_stream_family_once_and_reuses_it_in_one_slot(tmp_path):
    """``triple_std`` names ``wrn_std`` in all three slots: each ``wrn_std`` run is planned once
    (two copies of one run would train side by side in one workdir), the slot with seed offset
    0 reuses it, and the other two slots (seeds k+1, k+2) train their own streams on the same
    data."""
    from invjax.training import plan as training_plan

    runs, _, missing = plan.plan_main(
        STUDY, str(tmp_path), "rotscaled_digits", ["triple_std"], [20], [1], RULE, _all_chosen()
    )
    assert missing == []
    assert [(r.experiment, r.multi) for r in runs] == [("wrn_std", False), ("triple_std", True)]
    std, tstd = runs
    ov = tstd.overrides
    assert ov["phase1.e2.workdir"] == std.workdir
    assert "phase1.scale.workdir" not in ov and "phase1.std.workdir" not in ov
    config = sweep.load_config(tstd.config, ov)
    streams = {s: training_plan.stream_config(config, s) for s in ("e2", "scale", "std")}
    assert [streams[s].seed for s in ("e2", "scale", "std")] == [1, 2, 3]
    for s in streams.values():  # one realisation and one N_t subset for the three slots
        assert (s.data.seed, s.data.realisation, s.data.n_train) == (1, 1, 20)


def _fake_run(run_dir: pathlib.Path, test_error: float, val_error: float = 10.0, **extra):
    run_dir.mkdir(parents=True, exist_ok=True)
    r = {"test_error": test_error, "val_error": val_error, "val_loss": 0.5, "params": 1} | extra
    (run_dir / "results.json").write_text(json.dumps(r))
    with open(run_dir / "metrics.jsonl", "w") as f:
        for epoch in range(1, 21):  # a flat loss: converged
            f.write(json.dumps({"epoch": epoch, "split": "train", "loss": 0.3, "error": 5.0}))
            f.write("\n")
        f.write(json.dumps({"epoch": 20, "split": "test", "loss": 1, "error": 9, "final": True}))


def _tuned(runs_dir: pathlib.Path, rec: pathlib.Path, val_errors: dict) -> None:
    """Every candidate of each family in ``val_errors`` finished tuning on the scaled digits
    with those held-out errors, landed in the record ``rec``."""
    for family, errs in val_errors.items():
        for (label, _), e in zip(plan.candidates(STUDY, family), errs, strict=True):
            _fake_run(runs_dir / "tune" / "scaled_digits" / family / label, 50.0, val_error=e)
    run.land(str(runs_dir), str(rec))


def _svm_main_argv(tmp_path: pathlib.Path, rec: pathlib.Path) -> list[str]:
    """``run``'s options for the SVM's two main runs on the scaled digits at N_t = 20 (seconds
    on a CPU), run in ``tmp_path/runs`` and landed in ``rec``."""
    runs = str(tmp_path / "runs")
    argv = ["--stage", "main", "--families", "svm", "--datasets", "scaled_digits"]
    return argv + ["--sizes", "20", "--seeds", "0,1", "--runs_dir", runs, "--record", str(rec)]


def _chosen(rec: pathlib.Path) -> dict:
    rows = {r["run"]: r for r in record.read(str(rec))}
    return plan.chosen_hps(STUDY, rows, "scaled_digits")


def _report(runs_dir: pathlib.Path, out: pathlib.Path) -> list[dict]:
    """Land ``runs_dir``'s finished runs in ``out/runs.jsonl`` and write the report from it."""
    rec = out / "runs.jsonl"
    run.land(str(runs_dir), str(rec))
    rows = record.read(str(rec))
    report.write_report(STUDY, rows, str(out), figures=False)
    return rows


def test_resume_runs_only_unfinished_runs(tmp_path, monkeypatch):
    chosen = _all_chosen()
    runs, _, _ = plan.plan_main(
        STUDY, str(tmp_path), "scaled_digits", ["wrn_std", "e2_ii"], [20], [0, 1], RULE, chosen
    )
    for r in runs:  # point (20, seed 0) finished, seed 1 only half
        if r.point[2] == 0 or r.experiment == "wrn_std":
            _fake_run(pathlib.Path(r.workdir), 20.0)
    called = []
    monkeypatch.setattr(sweep, "run_local", lambda g, *a, **k: called.append(g) or 0)
    opts = run.Options(budget_minutes=0, platform="cpu")
    done = lambda r: run.landed(str(tmp_path), r, rows={})  # noqa: E731
    assert run.run_groups(runs, opts, lambda: None, done) == 0
    assert [[(r.experiment, r.point) for r in g] for g in called] == [
        [("e2_ii", ("scaled_digits", 20, 1))]
    ]
    # a run whose row is in the record is not trained again, though this directory lacks it
    called.clear()
    rows = {run.rel(str(tmp_path), called_run.workdir): {} for called_run in runs[-1:]}
    done = lambda r: run.landed(str(tmp_path), r, rows=rows)  # noqa: E731
    assert run.run_groups(runs, opts, lambda: None, done) == 0 and called == []


def test_a_k_model_run_is_finished_only_when_every_model_is(tmp_path, capsys):
    """``--seeds_in_one``: a point's seeds are one run with ``seed_<k>/`` per model; it is skipped
    (and ``plan`` marks it) once every model's ``results.json`` exists, not before. ``plan``
    marks a landed SVM point too, and counts what is left."""
    rec, runs = tmp_path / "runs.jsonl", tmp_path / "runs"
    _tuned(tmp_path / "tuned", rec, {"cnn": [50.0] * 6, "svm": [50.0] * 6})
    argv = ["digits", "plan", "--stage", "main", "--families", "cnn,svm", "--datasets"]
    argv += ["scaled_digits", "--sizes", "20", "--seeds", "0,1", "--seeds_in_one"]
    argv += ["--runs_dir", str(runs), "--record", str(rec)]
    group = runs / "main" / "scaled_digits" / "cnn" / "n20"
    printed = []
    # nothing landed, then model 0, then both models and one SVM (two SVM points: seeds 0, 1)
    for landed in (
        [],
        [group / "seed_0"],
        [group / "seed_1", runs / "main/scaled_digits/svm/n20/seed_0"],
    ):
        for run_dir in landed:
            _fake_run(run_dir, 20.0)
        assert main(argv) == 0
        printed.append(capsys.readouterr().out)
    assert all(f"--workdir={group} " in out for out in printed)
    assert [out.count("# finished: ") for out in printed] == [0, 0, 2]
    assert [out.count("# finished: svm ") for out in printed] == [0, 0, 1]
    last = [out.splitlines()[-1] for out in printed]
    assert last == [f"# {n} of 3 commands left to run" for n in (3, 3, 1)]


def test_parallel_runs_go_to_one_sweep_single_streams_first_heads_after_their_streams(
    tmp_path, monkeypatch
):
    """--parallel P: one sweep of every run, the single-stream runs first, in which each
    multi-stream run waits for the stream runs of its point that its phase 1 reuses; the
    budget and --runs_per_gpu reach the sweep."""
    runs, _, _ = plan.plan_main(
        STUDY,
        str(tmp_path),
        "scaled_digits",
        ["wrn_std", "e2_ii", "dual"],
        [20],
        [0, 1],
        RULE,
        _all_chosen(),
    )
    calls = []
    monkeypatch.setattr(sweep, "run_local", lambda w, *a, **k: calls.append((w, a, k)) or 0)
    opts = run.Options(budget_minutes=0, platform="gpu", parallel=4, runs_per_gpu=4)
    assert run.run_groups(runs, opts, lambda: None, lambda r: False) == 0
    ((given, args, kwargs),) = calls
    # dual brings its Scale stream's family along (test_a_two_phase_family_alone_reuses_...)
    kinds = [r.experiment for r in given]
    assert set(kinds[:6]) == {"wrn_std", "e2_ii", "scale_iiws_disco"} and kinds[6:] == ["dual"] * 2
    for head, wait in zip(given[6:], sweep.needs(given)[6:]):
        streams = {given[i].experiment: given[i] for i in wait}
        assert set(streams) == {"e2_ii", "scale_iiws_disco"}  # dual's two streams, its seed's
        assert all(r.point == head.point for r in streams.values())
    assert all(not w for w in sweep.needs(given)[:6])
    assert args == (4, None, "gpu") and kwargs["per_gpu"] == 4
    assert kwargs["stop"]() is False


@pytest.mark.parametrize("parallel", [1, 4])
def test_a_signal_stops_the_study_after_the_runs_saved(tmp_path, monkeypatch, parallel):
    """SIGTERM to the study reaches its runs (sweep.run_local returns 128 + 15 once they
    saved): no later run, wave or stage starts, and the status says so."""
    runs, _, _ = plan.plan_main(
        STUDY,
        str(tmp_path),
        "scaled_digits",
        ["wrn_std", "dual"],
        [20],
        [0, 1],
        RULE,
        _all_chosen(),
    )
    calls = []
    monkeypatch.setattr(sweep, "run_local", lambda w, *a, **k: calls.append(w) or 143)
    opts = run.Options(budget_minutes=0, platform="cpu", parallel=parallel, runs_per_gpu=1)
    assert run.run_groups(runs, opts, lambda: None, lambda r: False) == 143
    assert len(calls) == 1  # neither the next run (one at a time) nor the multi-stream wave
    assert calls[0][0].experiment == "wrn_std"


@pytest.mark.parametrize("parallel", [1, 4])
def test_stop_minutes_stops_the_runs_training_and_the_study(tmp_path, monkeypatch, parallel):
    """``--stop_minutes``: before it, the sweep's watch lets runs train and its stop lets them
    start; once it has passed, the watch names a reason for every run (the sweep SIGTERMs it:
    it saves a checkpoint), nothing starts, and the study's status is SIGTERM's. With every run
    finished, the study is done (0), whatever the clock."""
    runs, _, _ = plan.plan_main(
        STUDY, str(tmp_path), "scaled_digits", ["wrn_std"], [20], [0, 1], RULE, _all_chosen()
    )
    opts = run.Options(stop_minutes=2, platform="cpu", parallel=parallel, runs_dir=str(tmp_path))
    opts.record = str(tmp_path / "runs.jsonl")
    calls = []

    def fake_run_local(given, *args, watch=None, stop=None, **kwargs):
        # one parallel sweep has a stop (no start after it); one-at-a-time sweeps start one run
        asked = lambda: ([watch(r) for r in given], stop and stop())  # noqa: E731
        before = asked()
        opts.t0 -= 121  # the clock passes the stop while they train
        calls.append((before, asked()))
        return 0

    monkeypatch.setattr(sweep, "run_local", fake_run_local)
    assert run.run_groups(runs, opts, lambda: None, lambda r: False) == 128 + 15
    ((before, after),) = calls  # one at a time: the second run never started
    n = len(runs) if parallel > 1 else 1
    assert before == ([None] * n, False if parallel > 1 else None)
    reason = "--stop_minutes=2 have passed: it saves a checkpoint and stops (the same command"
    assert after == ([f"{reason} resumes)"] * n, True if parallel > 1 else None)
    assert run.run_groups(runs, opts, lambda: None, lambda r: False) == 128 + 15
    assert len(calls) == 1  # past the stop, nothing reaches the sweep
    for r in runs:
        _fake_run(pathlib.Path(r.workdir), 20.0)
    assert run.run_groups(runs, opts, lambda: None, lambda r: False) == 0


def test_rerun_trains_a_landed_run_again_and_its_results_replace_the_record(tmp_path, capsys):
    """``--rerun``: a stream run that landed from a machine that is gone (its row, no
    checkpoint) is moved aside, nothing deleted; once retrained here its row replaces the
    record's, and only those; a path that has checkpoints here is kept (the command resumes)."""
    runs_dir, elsewhere, rec = tmp_path / "runs", tmp_path / "elsewhere", tmp_path / "runs.jsonl"
    path = "main/scaled_digits/e2_ii/nall_e300"
    for seed in (0, 1):  # the record, and a copy in the run directory (no checkpoints)
        _fake_run(elsewhere / path / f"seed_{seed}", 2.0 + seed)
        _fake_run(runs_dir / path / f"seed_{seed}", 2.0 + seed)
    assert run.land(str(elsewhere), str(rec)) == 2
    kept = "main/scaled_digits/wrn_std/nall_e300"
    _fake_run(runs_dir / kept / "seed_0", 1.5)
    (runs_dir / kept / "seed_0" / "checkpoints" / "5100").mkdir(parents=True)
    assert run.rerun_prepare(str(runs_dir), [path, kept], dry_run=True) == [
        (f"{path}: would move to replaced/{path} and train again", True),
        (f"{kept}: kept (it has checkpoints here)", False),
    ]
    assert (runs_dir / path / "seed_0" / "results.json").is_file()  # a dry run moves nothing
    done = run.rerun_prepare(str(runs_dir), [path, kept])
    assert done[0] == (f"{path}: moved to replaced/{path}: it trains again", True)
    assert not (runs_dir / path).exists()
    assert (runs_dir / "replaced" / path / "seed_1" / "results.json").is_file()
    assert (runs_dir / kept / "seed_0" / "results.json").is_file()
    # seed 0 trained again here (with its checkpoints); seed 1 not yet
    _fake_run(runs_dir / path / "seed_0", 2.7)
    (runs_dir / path / "seed_0" / "checkpoints").mkdir()

    def errors() -> dict:
        return {r["run"]: r["test_error"] for r in record.read(str(rec))}

    # without --rerun the record stays; the kept run is new to it, what was moved aside is not
    assert run.land(str(runs_dir), str(rec)) == 1
    assert errors()[f"{path}/seed_0"] == 2.0
    assert sorted({k.split("/")[0] for k in errors()}) == ["main"]
    assert run.land(str(runs_dir), str(rec), [path]) == 1
    assert errors()[f"{path}/seed_0"] == 2.7 and errors()[f"{path}/seed_1"] == 3
    assert run.land(str(runs_dir), str(rec), [path]) == 0  # replaced once
    # a finished run with checkpoints under a path not named is never replaced
    row = next(r for r in record.read(str(rec)) if r["run"] == f"{kept}/seed_0")
    record.append(str(rec), [row | {"test_error": 1.9}])
    assert run.land(str(runs_dir), str(rec), [path]) == 0
    assert errors()[f"{kept}/seed_0"] == 1.9
    # a second preparation keeps the path now that it has checkpoints
    assert run.rerun_prepare(str(runs_dir), [path]) == [
        (f"{path}: kept (it has checkpoints here)", False)
    ]


def test_a_run_trained_again_here_that_does_not_reproduce_its_row_is_named(tmp_path, capsys):
    """A run whose row came from elsewhere, trained again here (its checkpoints) with other
    errors (another CPU model's rounding, say): ``unreproduced`` names it with both errors, and
    ``status`` lists it, unless ``--rerun`` names its path (its row is then replaced). A rerun
    that reproduces its row, or a finished run copied here without checkpoints, is not named."""
    rec, elsewhere, runs_dir = tmp_path / "runs.jsonl", tmp_path / "elsewhere", tmp_path / "runs"
    moved, same, copied = (f"main/scaled_digits/wrn_std/n20/seed_{k}" for k in range(3))
    there, here = ({"cpu": c, "jax": "0.10.2", "jaxlib": "0.10.2"} for c in ("CPU A", "CPU B"))
    for path in (moved, same, copied):
        _fake_run(elsewhere / path, 2.5, val_error=12.0, host=there)
    assert run.land(str(elsewhere), str(rec)) == 3
    assert [r["host"] for r in record.read(str(rec))] == [there] * 3  # rows keep the host
    for path, test_error in ((moved, 2.8), (same, 2.5), (copied, 2.9)):
        _fake_run(runs_dir / path, test_error, val_error=12.0, host=here)
    for path in (moved, same):
        (runs_dir / path / "checkpoints").mkdir()
    line = (
        f"{moved} (test_error 2.8 here, 2.5 in the record; "
        "trained on 'CPU A' for the record, on 'CPU B' here)"
    )
    assert run.unreproduced(str(runs_dir), str(rec)) == [line]
    assert run.unreproduced(str(runs_dir), str(rec), [os.path.dirname(moved)]) == []
    argv = ["digits", "status", "--stage", "main", "--datasets", "scaled_digits"]
    argv += ["--runs_dir", str(runs_dir), "--record", str(rec)]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2:] == [
        "runs trained again here that did not reproduce their rows: 1",
        f"  {line}",
    ]
    assert main([*argv, "--rerun", moved]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("did not reproduce their rows: 0")
    # ``run`` says so as it lands (here: nothing to train, its families untuned)
    run_argv = ["digits", "run", *argv[2:], "--families", "wrn_std", "--platform", "cpu"]
    assert main([*run_argv, "--out", str(tmp_path / "out")]) == 0
    said = [x for x in capsys.readouterr().out.splitlines() if "not reproducing" in x]
    assert len(said) == 1 and line in said[0] and "--rerun" in said[0]


def _head(runs_dir: pathlib.Path, stream: str, name: str) -> sweep.Run:
    """A two-phase run ``name`` at N_t = 20, seed 0, whose phase 1 freezes the record run
    ``stream`` (a path under ``runs_dir``)."""
    overrides = {"phase1.std.workdir": str(runs_dir / stream), "seed": 0}
    workdir = str(runs_dir / "main/scaled_digits" / name / "n20/seed_0")
    return sweep.Run(name, "digits_triple", overrides, ("n20", 0), workdir, True)


def test_a_head_on_a_stream_that_did_not_reproduce_its_row_does_not_train(tmp_path, capsys):
    """A head whose phase 1 would freeze a stream run of the record that was trained again
    here with other errors is not started (one line naming the stream, both errors, both
    processors and the way out), in one slot or in several; a head on a stream that
    reproduced, or whose path ``--rerun`` names, would train."""
    rec, elsewhere, runs_dir = tmp_path / "runs.jsonl", tmp_path / "elsewhere", tmp_path / "runs"
    moved, same = (f"main/scaled_digits/wrn_std/n20/seed_{k}" for k in range(2))
    there = {"cpu": "AMD EPYC", "cpu_id": "AuthenticAMD 25/1/1", "jax": "0.10.2"}
    here = there | {"cpu_id": "AuthenticAMD 23/49/0"}
    for path in (moved, same):
        _fake_run(elsewhere / path, 2.5, val_error=12.0, host=there)
    assert run.land(str(elsewhere), str(rec)) == 2
    for path, test_error in ((moved, 2.8), (same, 2.5)):
        _fake_run(runs_dir / path, test_error, val_error=12.0, host=here)
        (runs_dir / path / "checkpoints").mkdir()

    why = run.unreproduced_stream(str(runs_dir), str(rec))
    bad, good = _head(runs_dir, moved, "bad"), _head(runs_dir, same, "good")
    said = why(bad)
    assert said.startswith("the stream run it would freeze, trained again here, did not ")
    assert (
        f"{moved} (test_error 2.8 here, 2.5 in the record; trained on cpu_id "
        "'AuthenticAMD 25/1/1' for the record, 'AuthenticAMD 23/49/0' here)" in said
    )
    assert "--rerun" in said
    assert why(good) is None
    assert why(dataclasses.replace(bad, multi=False)) is None  # a single stream trains
    assert run.unreproduced_stream(str(runs_dir), str(rec), [moved])(bad) is None
    # before training: which record runs to train again came from another processor
    rows = {r["run"]: r for r in record.read(str(rec))}
    rows["main/old"] = {"host": {"cpu": "AMD EPYC", "jax": "0.10.2"}}  # no cpu_id: unknown
    assert run.elsewhere(rows, [same, "main/old", moved], there) == ([], ["main/old"])
    line = "trained on cpu_id 'AuthenticAMD 25/1/1' for the record, 'AuthenticAMD 23/49/0' here"
    assert run.elsewhere(rows, [moved, "main/old"], here) == ([f"{moved} ({line})"], ["main/old"])
    # the runner does not start it, alone or side by side (nothing else to train here)
    for parallel in (1, 2):
        opts = run.Options(runs_dir=str(runs_dir), record=str(rec), parallel=parallel)
        assert run.run_groups([bad], opts, lambda: None, lambda r: False) == 0
        out = capsys.readouterr().out
        assert f"sweep: not starting {bad.workdir}: {said}" in out
        assert not os.path.exists(bad.workdir)


def test_a_stream_trained_again_that_departs_from_its_row_is_stopped_and_named(tmp_path):
    """A record run trained again here is compared with its row's curve as it trains
    (``departing``, the runner's watch): the first epoch whose training loss, at the row's 4
    significant digits, differs stops it. Unfinished, with its checkpoints, it is then named by
    ``unreproduced``, not started again, and the heads that would freeze it do not train; a run
    that keeps to its row's curve, a run not in the record and ``--rerun``'s paths go on."""
    rec, elsewhere, runs_dir = tmp_path / "runs.jsonl", tmp_path / "elsewhere", tmp_path / "runs"
    moved, same = (f"main/scaled_digits/wrn_std/n20/seed_{k}" for k in range(2))
    for path in (moved, same):
        _fake_run(elsewhere / path, 2.5)
    assert run.land(str(elsewhere), str(rec)) == 2
    for path in (moved, same):  # training again, at epoch 5 of 20; one at another loss
        d = runs_dir / path
        (d / "checkpoints").mkdir(parents=True)
        loss = 0.3001 if path == moved else 0.30001  # the latter rounds to the row's 0.3
        lines = [{"epoch": e, "split": "train", "loss": 0.3, "error": 5.0} for e in (1, 2)]
        lines += [{"epoch": e, "split": "train", "loss": loss, "error": 5.0} for e in (3, 4, 5)]
        (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    rows = {r["run"]: r for r in record.read(str(rec))}
    assert run.curve_departs(str(runs_dir / same), rows[same]) is None
    departs = "training loss at epoch 3 0.3001 here, 0.3 in the record"
    assert run.curve_departs(str(runs_dir / moved), rows[moved]) == departs

    def single(path: str) -> sweep.Run:
        return sweep.Run("wrn_std", "digits_wrn", {}, ("n20", 0), str(runs_dir / path))

    watch = run.departing(str(runs_dir), str(rec))
    assert watch(single(moved)) == (
        f"trained again here, its {departs}: it will not reproduce its row, and the heads "
        "that would freeze it do not train here"
    )
    assert watch(single(same)) is None and watch(single("main/not/in/record")) is None
    assert run.departing(str(runs_dir), str(rec), [moved])(single(moved)) is None
    assert run.unreproduced(str(runs_dir), str(rec)) == [f"{moved} (unfinished: {departs})"]
    skip = run.unreproduced_stream(str(runs_dir), str(rec))
    assert skip(single(moved)).startswith(
        f"trained again here, it does not reproduce its row: {moved} (unfinished: {departs})"
    )
    assert skip(single(same)) is None
    head = _head(runs_dir, moved, "triple")
    assert f"{moved} (unfinished: {departs})" in skip(head)
    assert run.unreproduced_stream(str(runs_dir), str(rec), [moved])(head) is None


def test_plan_lists_what_rerun_would_train_again_as_left(tmp_path, capsys):
    rec, runs_dir = tmp_path / "runs.jsonl", tmp_path / "runs"
    _tuned(tmp_path / "tuned", rec, {"wrn_std": [50.0] * 6, "e2_ii": [50.0] * 6})
    runs, _, _ = plan.plan_main(
        STUDY,
        str(runs_dir),
        "scaled_digits",
        ["wrn_std", "e2_ii"],
        [20],
        [0],
        RULE,
        _chosen(rec),
    )
    for r in runs:
        _fake_run(pathlib.Path(r.workdir), 3.0)
    e2 = next(r for r in runs if r.experiment == "e2_ii")
    argv = ["digits", "plan", "--stage", "main", "--families", "wrn_std,e2_ii", "--sizes", "20"]
    argv += ["--seeds", "0", "--datasets", "scaled_digits", "--runs_dir", str(runs_dir)]
    argv += ["--record", str(rec), "--min_epochs", "60"]
    rerun = run.rel(str(runs_dir), os.path.dirname(e2.workdir))
    assert main([*argv, "--rerun", rerun]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"# --rerun {rerun}: would move to replaced/{rerun} and train again"
    assert out[-1] == "# 1 of 2 commands left to run"
    assert [line.startswith("# finished") for line in out[1:-1]] == [r is not e2 for r in runs]
    assert (runs_dir / rerun).is_dir()  # plan moves nothing


@pytest.mark.parametrize(
    "value", ["/work/runs/main/x", "main/../tune/x", "tune/scaled_digits/e2_ii/lr_x1", "main"]
)
def test_rerun_refuses_paths_outside_the_main_runs(value, capsys):
    assert main(["digits", "plan", "--rerun", value]) == 2
    err = capsys.readouterr().err
    assert f"invjax: error: --rerun: {value!r} is invalid" in err


def test_land_appends_each_finished_run_once_and_report_gives_verdicts(tmp_path):
    runs_dir, out, rec = tmp_path / "runs", tmp_path / "out", tmp_path / "out" / "runs.jsonl"
    # e2_ii better than e2_pool by 2-3 points on all six realisations at N_t = 20
    for seed in range(6):
        for family, err in (("e2_ii", 30.0 + seed), ("e2_pool", 32.5 + seed + 0.1 * seed)):
            d = runs_dir / "main" / "scaled_digits" / family / "n20" / f"seed_{seed}"
            _fake_run(d, err)
            (d / "checkpoints").mkdir()
            (d / "checkpoints" / "big.bin").write_bytes(b"x" * 1000)
    assert run.land(str(runs_dir), str(rec)) == 12
    assert run.land(str(runs_dir), str(rec)) == 0  # finished runs are not appended again
    rows = record.read(str(rec))
    first = next(r for r in rows if r["run"] == "main/scaled_digits/e2_ii/n20/seed_0")
    assert len(first["curve"]["train_loss"]) == 20 and "checkpoints" not in json.dumps(first)
    report.write_report(STUDY, rows, str(out))
    claims = json.loads((out / "claims.json").read_text())
    assert len(claims) == 1
    c = claims[0]
    diffs = [-(2.5 + 0.1 * s) for s in range(6)]
    assert c["n"] == 6 and c["wins"] == 6 and math.isclose(c["diff_mean"], np.mean(diffs))
    assert math.isclose(c["p"], stats.paired_t_p(diffs))
    assert c["p_signflip"] == 2 / 64 and c["p_holm"] == c["p"] and c["verdict"] == "supported"
    md = (out / "results.md").read_text()
    assert "| e2_ii | 32.50 ± 1.87 |" in md and "**supported**" in md
    assert "0 of 12 main runs unconverged" in md
    assert (out / "error_vs_n_train_scaled_digits.png").stat().st_size > 5000
    report.write_curves(STUDY, rows, str(out / "curves"))
    assert (out / "curves" / "main_scaled_digits_e2_ii.png").is_file()
    assert not (out / "convergence").exists()  # convergence figures only on demand
    # the same record gives the same report, whatever else was asked before
    before = (out / "results.md").read_bytes(), (out / "claims.json").read_bytes()
    report.write_report(STUDY, rows, str(out), figures=False)
    assert ((out / "results.md").read_bytes(), (out / "claims.json").read_bytes()) == before


def test_a_longer_rule_renames_only_the_points_it_trains_otherwise(tmp_path):
    """The main rule (at least 300 epochs) trains N_t <= 100 exactly as the first rule did, so
    those runs keep their directories; N_t = 300 and 1079 go to ``n300_e300`` / ``nall_e300``;
    the tuning runs keep the first rule's length."""
    first, main = FIRST_RULE, MAIN_RULE
    labels = [plan.run_label(STUDY, n, main) for n in (20, 50, 100, 300, 0)]
    assert labels == ["n20", "n50", "n100", "n300_e300", "nall_e300"]
    assert [plan.run_label(STUDY, n, first) for n in (100, 300, 0)] == ["n100", "n300", "nall"]
    assert [plan.schedule(n, main, N_ALL)["num_epochs"] for n in (300, 0)] == [300, 300]
    assert plan.parse_label(STUDY, "nall_e300") == N_ALL
    assert plan.parse_label(STUDY, "n300") == 300 and plan.parse_label(STUDY, "seeds.json") is None
    args = (str(tmp_path), "scaled_digits", ["dual"], [100, 300], [0])
    runs_first, _, _ = plan.plan_main(STUDY, *args, first, _all_chosen())
    runs_main, _, _ = plan.plan_main(STUDY, *args, main, _all_chosen())
    for a, b in zip(runs_first, runs_main, strict=True):
        label = os.path.basename(os.path.dirname(b.workdir))
        if b.point[1] == 100:  # the same runs: same directory, same command
            assert (a.workdir, a.overrides) == (b.workdir, b.overrides) and label == "n100"
        else:
            assert label == "n300_e300" and a.workdir != b.workdir
    dual = next(r for r in runs_main if r.multi and r.point[1] == 300)
    assert "/e2_ii/n300_e300/" in dual.overrides["phase1.e2.workdir"]  # shared at the new rule
    assert dual.overrides["phase1.e2.train.num_epochs"] == 300
    assert dual.overrides["train.num_epochs"] == 75  # the head: 300 / 4
    svm = [
        plan.plan_main(STUDY, str(tmp_path), "scaled_digits", ["svm"], [300], [0], r, _all_chosen())
        for r in (first, main)
    ]
    assert svm[0][1] == svm[1][1] and "/svm/n300/" in svm[1][1][0]["workdir"]  # no epochs
    tune = [
        plan.plan_tune(STUDY, str(tmp_path), "scaled_digits", ["e2_ii"], r, {})
        for r in (first, main)
    ]
    assert [r.overrides for r in tune[0][0]] == [r.overrides for r in tune[1][0]]
    assert tune[1][0][0].overrides["train.num_epochs"] == 60


def test_report_counts_the_rules_runs_and_keeps_the_first_rules_apart(tmp_path):
    out, runs_dir = tmp_path / "out", tmp_path / "runs"
    mirror = runs_dir / "main" / "scaled_digits"
    for seed in range(6):
        for label, better in (("n20", 2.0), ("n300", -2.0), ("n300_e300", 3.0)):
            _fake_run(mirror / "e2_ii" / label / f"seed_{seed}", 20.0 + seed)
            _fake_run(
                mirror / "e2_pool" / label / f"seed_{seed}", 20.0 + seed + better + 0.1 * seed
            )
        _fake_run(mirror / "svm" / "n300" / f"seed_{seed}", 30.0)  # the same under both rules
    rows = _report(runs_dir, out)
    claims = {c["n_train"]: c for c in json.loads((out / "claims.json").read_text())}
    assert sorted(claims) == [20, 300]
    assert claims[300]["diff_mean"] < -3 and claims[300]["verdict"] == "supported"
    first = json.loads((out / "claims_first_rule.json").read_text())
    assert [(c["n_train"], c["verdict"]) for c in first] == [(300, "contradicted")]
    md = (out / "results.md").read_text()
    assert "## Superseded: the first rule at N_t = 300, 1079" in md
    counted = plan.main_errors(STUDY, rows, MAIN_RULE)
    assert sum(len(rs) for rs in counted.values()) == 30  # n20 and n300_e300, the SVM's n300
    assert {f for _, f, n in counted if n == 300} == {"e2_ii", "e2_pool", "svm"}
    superseded = md[md.index("## Superseded") :]
    assert "| e2_ii |" in superseded and "| svm |" not in superseded


@pytest.mark.parametrize(
    "p, shown",
    [(0.0499, "0.0499"), (0.0502, "0.0502"), (0.05, "0.05"), (0.048, "0.048"), (0.51, "0.51")]
    + [(0.0012, "0.0012"), (5e-5, "5.0e-05"), (float("nan"), "-")],
)
def test_a_p_value_near_the_level_keeps_the_digit_that_decides_it(p, shown):
    """A Holm p of 0.0499 is supported; at two digits it would print as 0.05 and read as not."""
    assert tables.p_text(p) == shown


def test_verdicts_at_a_glance_give_every_claim_at_every_n_t_once():
    claims = (
        ("A beats B", "a", "b", ("scaled_digits", "rotscaled_digits")),
        ("C beats D", "c", "d", ("rotscaled_digits",)),  # not a claim on the scaled digits
        ("E beats F", "e", "f", ("scaled_digits",)),
    )

    def rec(claim, n, diff, verdict, k=6, dataset="scaled_digits"):
        keys = ("claim", "dataset", "n_train", "n", "diff_mean", "verdict")
        return dict(zip(keys, (claim, dataset, n, k, diff, verdict), strict=True))

    recs = [
        rec("A beats B", 20, -3.0, "supported"),
        rec("A beats B", 1079, 2.5, "contradicted"),
        rec("E beats F", 20, -0.4, "inconclusive"),
        rec("E beats F", 50, 1.0, "pending", k=4),
        rec("A beats B", 50, 9.0, "supported", dataset="rotscaled_digits"),
    ]
    md = tables.verdict_matrix(recs, "scaled_digits", claims, [20, 50, 1079], 6)
    assert md.splitlines() == [
        "| claim | N_t = 20 | N_t = 50 | N_t = 1079 |",
        "|---|---|---|---|",
        "| A beats B (`a` - `b`) | -3.00 **S** | - | +2.50 **C** |",
        "| E beats F (`e` - `f`) | -0.40 | pending 4/6 | - |",
    ]
    assert tables.verdict_matrix(recs, "scaled_digits", claims[1:2], [20], 6) == ""


def test_report_gives_each_verdict_under_the_other_holm_family_too(tmp_path):
    """Two claims at p = 0.048 each: supported when Holm corrects per claim, not when it
    corrects over both; the report keeps the primary verdicts and lists the two that move."""
    out, runs_dir = tmp_path / "out", tmp_path / "runs"
    mirror = runs_dir / "main" / "scaled_digits"
    diffs = [-1.0, -2.0, -0.5, -1.5, 0.5, -1.0]
    assert 0.04 < stats.paired_t_p(diffs) < 0.05
    for better, worse in (("e2_ii", "e2_pool"), ("scale_iiws_disco", "scale_pool_disco")):
        for seed, d in enumerate(diffs):
            _fake_run(mirror / worse / "n20" / f"seed_{seed}", 30.0 + seed)
            _fake_run(mirror / better / "n20" / f"seed_{seed}", 30.0 + seed + d)
    _report(runs_dir, out)
    claims = json.loads((out / "claims.json").read_text())
    assert len(claims) == 2
    for c in claims:
        assert c["verdict"] == "inconclusive" and math.isclose(c["p_holm"], 2 * c["p"])
        assert c["verdict_claim"] == "supported" and math.isclose(c["p_holm_claim"], c["p"])
    md = (out / "results.md").read_text()
    section = md[md.index("## Sensitivity: the other Holm family") :]
    assert "0 supported, 0 contradicted; over each claim and dataset: 2 supported" in section
    assert "| scaled_digits | E(2)-II beats pooling (II over flips) | 20 | -0.92 |" in section
    m = report.planned_family_size(STUDY, "all")  # every claim on its datasets at every N_t
    assert m == len(SIZES) * sum(len(ds) for *_, ds in CLAIMS) > 100
    for c in claims:  # the 2 complete ones first, then m - 2 at p = 1
        assert math.isclose(c["p_holm_planned"], min(1.0, m * c["p"]))
    assert f"Holm over the whole planned family ({m} comparisons;" in section


@pytest.mark.parametrize("family", ["all", "claim"])
@pytest.mark.parametrize("seed", range(4))
def test_the_planned_holm_p_bounds_every_later_holm_p(family, seed):
    """Holm over the planned family, the missing comparisons at p = 1, is never below the Holm p
    the same comparison gets once the rest has landed, whatever their p-values: its verdict
    cannot turn. Some landed comparisons are pending (NaN p), counted as missing."""
    rng = np.random.default_rng(seed)
    sizes = (20, 50, 100)
    points = [(c, d, n) for c, *_, ds in CLAIMS for d in ds for n in sizes]
    landed = [points[i] for i in rng.choice(len(points), size=len(points) // 3, replace=False)]
    landed_set = set(landed)

    def rec(point, p):
        return {
            "claim": point[0],
            "dataset": point[1],
            "n_train": point[2],
            "p": p,
            "diff_mean": -1.0,
        }

    ps = rng.uniform(0, 0.02, len(landed)) ** rng.uniform(0.5, 3, len(landed))
    ps[:3] = math.nan  # pending: fewer realisations than the protocol's
    now = [rec(pt, float(p)) for pt, p in zip(landed, ps, strict=True)]
    report.with_planned_holm(dataclasses.replace(STUDY, sizes=sizes), now, family)
    later = [dict(r) for r in now] + [
        rec(pt, float(rng.uniform(0, 1) ** 4)) for pt in points if pt not in landed_set
    ]
    for r in later[:3]:
        r["p"] = float(rng.uniform(0, 0.01))  # the pending ones complete too
    if family == "all":
        stats.adjust(later)
    else:
        groups = {}
        for r in later:
            groups.setdefault((r["claim"], r["dataset"]), []).append(r)
        for g in groups.values():
            stats.adjust(g)
    for a, b in zip(now[3:], later[3 : len(now)], strict=True):
        assert b["p_holm"] <= a["p_holm_planned"] + 1e-12
    assert all(r["verdict_planned"] == "pending" for r in now[:3])
    assert any(r["verdict_planned"] == "supported" for r in now)  # the bound is not vacuous


def test_each_comparison_names_the_devices_that_trained_both_sides(tmp_path):
    """A two-phase network's devices are its head's and its streams': one reused from a stream
    family's run (found under the run directory's root, though that sits below a folder named
    main and the run trained elsewhere), one trained inside the run."""
    runs_dir = tmp_path / "main" / "runs"
    mirror = runs_dir / "main" / "scaled_digits"
    for seed in range(6):
        e2 = mirror / "e2_ii" / "n20" / f"seed_{seed}"
        _fake_run(e2, 30.0 + seed, device_kind="NVIDIA H100 80GB HBM3")
        elsewhere = f"/scratch/main/runs/main/scaled_digits/e2_ii/n20/seed_{seed}"
        phase1 = {"e2": {"workdir": elsewhere}, "scale": {"workdir": "/x/streams/scale"}}
        dual = mirror / "dual" / "n20" / f"seed_{seed}"
        times = {"wall_time_s": 50.0, "phase2_wall_time_s": 5.0}  # the head's 5 s of 50
        _fake_run(dual, 28.0 + seed, device_kind="cpu", phase1=phase1, **times)
        _fake_run(dual / "streams" / "scale", 31.0, device_kind="NVIDIA H200")
    out = tmp_path / "main" / "out"
    rows = _report(runs_dir, out)
    (c,) = json.loads((out / "claims.json").read_text())
    assert (c["better"], c["worse"]) == ("dual", "e2_ii")
    assert c["trained_on_better"] == ["CPU", "H100", "H200"] and c["trained_on_worse"] == ["H100"]
    assert "| CPU+H100+H200 vs H100 |" in (out / "results.md").read_text()
    assert record.short_device(None) == "?" and record.short_device("TPU v5 lite") == "TPU"
    dual = next(r for r in rows if r["run"] == "main/scaled_digits/dual/n20/seed_0")
    assert dual["phase1"]["e2"]["run"] == "main/scaled_digits/e2_ii/n20/seed_0"
    assert dual["phase1"]["scale"] | {} == {
        "test_error": None,
        "val_error": None,
        "epochs": None,
        "device": "NVIDIA H200",
        "run": "streams/scale",
    }
    assert (dual["wall_time_s"], dual["phase2_wall_time_s"]) == (50.0, 5.0)
    e2 = next(r for r in rows if r["family"] == "e2_ii")
    assert "phase2_wall_time_s" not in e2  # a single-stream row: one phase, one time
    assert len(rows) == 12  # the streams inside a run are part of its row, not rows


def test_tuning_choice_needs_every_candidate_and_takes_the_lowest_held_out_error(tmp_path):
    cands = plan.candidates(STUDY, "cnn")
    rec = tmp_path / "runs.jsonl"
    _tuned(tmp_path / "runs", rec, {"cnn": [12.0, 9.5, 9.5, 11.0, 30.0, 40.0]})
    rows = {r["run"]: r for r in record.read(str(rec))}
    res = plan.tuning_results(STUDY, rows, "scaled_digits", "cnn")
    c = plan.choose(STUDY, res, "cnn")
    assert c["label"] == cands[1][0] and c["val_error"] == 9.5  # tie: the earlier candidate
    del res[cands[5][0]]
    assert plan.choose(STUDY, res, "cnn") is None


def test_the_recorded_tuning_choice_stands_when_a_run_is_trained_again(tmp_path, capsys):
    """A candidate retrained in the run directory (e.g. to regain its checkpoint on another
    machine) with another held-out error does not move the choice of the record."""
    cands = plan.candidates(STUDY, "cnn")
    rec, runs = tmp_path / "runs.jsonl", tmp_path / "runs"
    _tuned(tmp_path / "tuned", rec, {"cnn": [12.0, 11.0, 10.0, 9.5, 30.0, 40.0]})
    _fake_run(runs / "tune" / "scaled_digits" / "cnn" / cands[3][0], 50.0, val_error=99.0)
    argv = ["digits", "plan", "--stage", "main", "--families", "cnn", "--datasets"]
    argv += ["scaled_digits", "--sizes", "20", "--seeds", "0", "--runs_dir", str(runs)]
    assert main([*argv, "--record", str(rec)]) == 0
    printed = capsys.readouterr().out
    hp = cands[3][1]  # the record's winner, not the retrained run's runner-up (cands[2])
    assert f"--config.train.learning_rate={hp['learning_rate']} " in printed
    assert f"--config.train.weight_decay={hp['weight_decay']} " in printed
    # and landing the run directory (run, report --runs_dir) does not replace the record's row
    assert run.land(str(runs), str(rec)) == 0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--sizes", "5"], "--sizes='5' is invalid: give 0 (all 1079) or multiples of 10"),
        (["--sizes", "20,25"], "--sizes='20,25' is invalid"),
        (["--families", "cnn,vit"], "'vit' is invalid: choose from"),
        (["--seeds", "6"], "--seeds='6' is invalid: give realisations 0..5"),
        (["--min_steps", "0"], "--min_steps=0 is invalid"),
        (["--stage", "report"], "argument --stage: invalid choice: 'report'"),
    ],
)
@pytest.mark.parametrize("command", ["plan", "run", "status"])
def test_bad_input_exits_2_naming_the_value(command, argv, message, capsys, tmp_path):
    try:
        code = main(["digits", command, "--runs_dir", str(tmp_path / "r"), *argv])
    except SystemExit as e:  # argparse's own refusals
        code = e.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("invjax: error: ")
    assert message in err[0]
    assert not (tmp_path / "r").exists()  # refused before any work


@pytest.mark.parametrize("flag", ["--budget_minutes", "--stop_minutes", "--parallel"])
def test_run_refuses_a_negative_time_or_slot_count_naming_it(flag, capsys, tmp_path):
    code = main(["digits", "run", "--runs_dir", str(tmp_path / "r"), flag, "-1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith(f"invjax: error: {flag}=-1")
    assert "is invalid: it must be >= " in err[0]
    assert not (tmp_path / "r").exists()  # refused before any work


def test_seeds_in_one_groups_a_points_seeds_into_one_k_model_run(tmp_path):
    runs, _, _ = plan.plan_main(
        STUDY, str(tmp_path), "scaled_digits", ["wrn_std"], [20], [0, 1], RULE, _all_chosen()
    )
    grouped = plan.seeds_in_one(STUDY, runs)
    assert len(grouped) == 1 and grouped[0].overrides["seeds"] == (0, 1)
    # model k uses realisation k, as the single run with seed k does
    assert grouped[0].overrides["realisation_from_seed"] is True
    assert "seed" not in grouped[0].overrides and "data.realisation" not in grouped[0].overrides
    assert grouped[0].workdir == os.path.dirname(runs[0].workdir)


def test_seeds_in_one_puts_a_points_seed_groups_before_the_runs_that_reuse_them(tmp_path):
    """``--parallel 1`` trains in the list's order: dual's phase 1 reuses the point's e2_ii and
    scale_iiws_disco runs, so their 2-seed groups must come before dual's runs of that point
    (they came after every multi-stream run before), and N_t = 20's before N_t = 50's."""
    runs, _, _ = plan.plan_main(
        STUDY, str(tmp_path), "scaled_digits", ["dual"], [20, 50], [0, 1], RULE, _all_chosen()
    )
    grouped = plan.seeds_in_one(STUDY, runs)
    order = [
        (r.experiment, "multi" if r.multi else r.overrides["seeds"], r.point[1]) for r in grouped
    ]
    assert len(grouped) == 8  # per N_t: two 2-seed groups and dual's two runs
    for n in (20, 50):
        groups = [i for i, (e, seeds, m) in enumerate(order) if m == n and seeds != "multi"]
        multi = [i for i, (e, seeds, m) in enumerate(order) if m == n and seeds == "multi"]
        assert len(groups) == 2 and len(multi) == 2 and max(groups) < min(multi), order
        assert all(order[i][1] == (0, 1) for i in groups)
    assert max(i for i, o in enumerate(order) if o[2] == 20) < min(
        i for i, o in enumerate(order) if o[2] == 50
    )
    for r in grouped:  # each dual run's phase 1 points at a group's model directory
        if r.multi:
            stream_dirs = [v for k, v in r.overrides.items() if k.endswith(".workdir")]
            assert len(stream_dirs) == 2
            assert all(
                os.path.dirname(d) in {g.workdir for g in grouped if not g.multi}
                for d in stream_dirs
            )


def test_val_source_train_holds_out_a_fifth_of_the_training_split():
    from invjax import data

    cfg = data.default_config()
    default = data.load(cfg)
    cfg.val_source = "train"
    held = data.load(cfg)
    assert (len(held.train), len(held.val), len(held.test)) == (N_TUNE, 216, 359)
    np.testing.assert_array_equal(held.test.images, default.test.images)
    # both parts come from the 1079 training images: none is a predefined validation image
    pool = {x.tobytes() for x in default.train.images}
    assert all(x.tobytes() in pool for x in np.concatenate([held.train.images, held.val.images]))
    assert np.bincount(held.val.labels).min() >= 21  # stratified: ~21.6 per class
    cfg.val_source = "test"
    with pytest.raises(ValueError, match="val_source='test' is invalid"):
        data.load(cfg)


@pytest.mark.slow
def test_rotation_ii_family_is_exactly_invariant_to_90_degree_rotations_of_digits():
    """``configs/digits_e2_rot.py`` (D4, D4, C4, E(2)-II over C4) at a tiny width with random
    parameters: the logits of rotated-and-scaled test digits and of the same digits turned by
    90, 180 and 270 degrees agree to float32 rounding (measured: 2e-7 to 4e-7 relative)."""
    import jax
    import jax.numpy as jnp

    from invjax import data, models

    cfg = data.default_config()
    cfg.name = "rotscaled_digits"
    ds = data.load(cfg)
    x = data.datasets.to_float(ds.test.images[:8], ds.mean, ds.std)
    m = sweep.load_config("digits_e2_rot", {}).model
    m.stem_width, m.width_divisor = 4, 4.0
    net = models.build(m)
    # shapes only (running init takes minutes on shared cores); then random parameters and
    # BatchNorm statistics: the invariance holds for any values
    shapes = jax.eval_shape(net.init, jax.random.PRNGKey(0), x[:2])
    leaves, tree = jax.tree_util.tree_flatten(shapes)
    keys = jax.random.split(jax.random.PRNGKey(1), len(leaves))
    values = [
        0.3 * jax.random.normal(k, a.shape, a.dtype) + (1.0 if a.shape and a.ndim == 1 else 0.0)
        for k, a in zip(keys, leaves)
    ]
    v = jax.tree_util.tree_unflatten(tree, values)
    apply = jax.jit(lambda v, x: net.apply(v, x))
    with jax.default_matmul_precision("highest"):
        y = apply(v, x)
        spread = max(
            float(jnp.abs(apply(v, jnp.rot90(x, k, axes=(1, 2))) - y).max()) for k in (1, 2, 3)
        ) / float(jnp.abs(y).max())
    assert float(jnp.abs(y - y.mean(0)).max()) > 1e-3  # the logits depend on the image
    assert spread < 1e-5, spread


def test_run_trains_what_the_record_lacks_lands_it_and_rewrites_the_report(tmp_path, capsys):
    """The RBF-SVM anchor (seconds, no network): ``run`` fits the two planned points, appends
    their rows and writes the report beside the record; run again, it trains and lands
    nothing; ``status`` counts them as landed."""
    out = tmp_path / "out"
    rec = out / "runs.jsonl"
    _tuned(tmp_path / "tuned", rec, {"svm": [50.0] * 6})
    argv = _svm_main_argv(tmp_path, rec)
    assert main(["digits", "run", *argv, "--platform", "cpu"]) == 0
    assert "study: 2 run(s) landed" in capsys.readouterr().out
    rows = [r for r in record.read(str(rec)) if r["stage"] == "main"]
    assert [r["run"] for r in rows] == [f"main/scaled_digits/svm/n20/seed_{k}" for k in (0, 1)]
    for r in rows:
        assert 0.0 <= r["test_error"] <= 100.0 and r["n_train"] == 20
        assert (r["device"], r["trained_on"]) == ("cpu", ["CPU"])
        assert r["overrides"]["svm_C"] == 1.0 and r["overrides"]["data.realisation"] == r["seed"]
    md = (out / "results.md").read_text()
    assert "## Test error: scaled_digits" in md and "| svm |" in md
    assert main(["digits", "run", *argv, "--platform", "cpu"]) == 0
    assert "study: 0 run(s) landed" in capsys.readouterr().out
    assert len(record.read(str(rec))) == 8  # six tuning rows and the two main runs
    assert main(["digits", "status", *argv]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-5].split() == ["main", "scaled_digits", "2", "2", "0", "0", "0"]
    assert (
        lines[-3] == "stream runs in the record that heads still to train will train again here: 0"
    )
    assert lines[-2] == "two-phase runs whose frozen streams are not the record's runs: 0"
    assert lines[-1] == "runs trained again here that did not reproduce their rows: 0"


def test_a_second_run_command_on_one_run_directory_is_refused_before_any_run(tmp_path, capsys):
    """While one ``run`` command holds the run directory, another on it exits 2 naming the
    holder and touches nothing (no row, no report, no run started); once the first has
    finished, the same command runs. The pack of unfinished runs leaves the lock out."""
    out = tmp_path / "out"
    rec = out / "runs.jsonl"
    _tuned(tmp_path / "tuned", rec, {"svm": [50.0] * 6})
    argv = _svm_main_argv(tmp_path, rec)
    runs_dir = argv[argv.index("--runs_dir") + 1]
    before = rec.read_bytes()
    with run.runs_dir_locked(runs_dir):  # the first command, still running
        assert main(["digits", "run", *argv, "--platform", "cpu"]) == 2
        err = capsys.readouterr().err
        assert f"--runs_dir={runs_dir} is in use by another run command" in err
        assert f"pid {os.getpid()}" in err and err.count("invjax: error:") == 1
        assert rec.read_bytes() == before and not (out / "results.md").exists()
        assert record.finished_runs(runs_dir) == []
        assert run.unfinished_files(runs_dir) == []
    assert main(["digits", "run", *argv, "--platform", "cpu"]) == 0  # released: it runs
    assert "study: 2 run(s) landed" in capsys.readouterr().out
    assert main(["digits", "run", *argv, "--platform", "cpu"]) == 0  # and released again
    assert run.RUNS_DIR_LOCK not in " ".join(run.unfinished_files(runs_dir))


def test_the_run_directory_lock_of_another_process_holds_until_it_is_killed(tmp_path):
    """The lock is another process's too (named by its pid), and a command killed with
    SIGKILL leaves none behind: the next one takes the directory."""
    import signal
    import subprocess
    import sys

    runs_dir = str(tmp_path / "runs")
    code = (
        "import sys, time; from launch.studies import run\n"
        f"with run.runs_dir_locked({runs_dir!r}):\n"
        "    print('held', flush=True); time.sleep(600)\n"
    )
    root = pathlib.Path(__file__).resolve().parents[1]
    holder = subprocess.Popen(
        [sys.executable, "-c", code], cwd=root, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(
            ValueError, match=rf"in use by another run command \(host .*, pid {holder.pid},"
        ):
            with run.runs_dir_locked(runs_dir):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    with run.runs_dir_locked(runs_dir) as path:
        assert os.path.isfile(path)


def test_a_run_directory_without_locks_warns_and_goes_on(tmp_path, monkeypatch, capsys):
    import errno
    import fcntl

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with run.runs_dir_locked(str(tmp_path / "runs")) as path:
        assert os.path.isfile(path)
    assert "does not support locks" in capsys.readouterr().out
    # A run's own error inside the block is its own, not one raised "during handling of" the
    # file system's refusal.
    with pytest.raises(RuntimeError, match="a run failed") as failed:
        with run.runs_dir_locked(str(tmp_path / "runs")):
            raise RuntimeError("a run failed")
    assert failed.value.__context__ is None


def test_a_run_directory_that_cannot_be_made_is_refused_with_its_path(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValueError, match=r"--runs_dir=.*/file/runs is invalid"):
        with run.runs_dir_locked(str(blocker / "runs")):
            pass


def test_run_stops_rewriting_the_report_once_the_study_code_changes(
    tmp_path, git_repo, capsys, monkeypatch
):
    """A long ``run`` keeps the code it started with: after an edit of launch/studies it would
    write the old code's report over the new one's. It lands and commits the rows alone and
    says how to rewrite the report; nothing else in the report's folder is committed."""
    git = git_repo
    out = tmp_path / "out"
    rec = out / "runs.jsonl"
    _tuned(tmp_path / "tuned", rec, {"svm": [50.0] * 6})
    (out / "notes.md").write_text("being written")
    digests = iter(["as started"])
    monkeypatch.setattr(run, "code_digest", lambda: next(digests, "edited since"))
    argv = _svm_main_argv(tmp_path, rec)
    assert main(["digits", "run", *argv, "--platform", "cpu", "--commit"]) == 0
    printed = capsys.readouterr().out
    assert "study: 2 run(s) landed" in printed
    assert printed.count("changed after this command started") == 1
    assert f"python -m launch.studies digits report --record {rec} --out {out}" in printed
    rows = [r for r in record.read(str(rec)) if r["stage"] == "main"]
    assert [r["run"] for r in rows] == [f"main/scaled_digits/svm/n20/seed_{k}" for k in (0, 1)]
    assert not (out / "results.md").exists()
    committed = git("show", "--name-only", "--format=", "HEAD").stdout.split()
    assert committed == ["out/runs.jsonl"]
    assert git("status", "--porcelain", "out/notes.md").stdout.startswith("??")


def test_a_command_that_lands_nothing_leaves_the_figures_alone(tmp_path, git_repo, capsys):
    """The figures are drawn at a command's end only for rows it landed since it last drew
    them: a second command with nothing to land neither redraws them (another machine's
    matplotlib would change their bytes alone) nor commits anything."""
    git = git_repo
    out = tmp_path / "out"
    rec = out / "runs.jsonl"
    _tuned(tmp_path / "tuned", rec, {"svm": [50.0] * 6})
    argv = _svm_main_argv(tmp_path, rec)
    assert main(["digits", "run", *argv, "--platform", "cpu", "--commit"]) == 0
    assert "study: 2 run(s) landed" in capsys.readouterr().out
    figures = sorted(out.glob("*.png"))
    assert figures, sorted(p.name for p in out.iterdir())  # the first command drew them
    for f in figures:
        f.write_bytes(b"as drawn elsewhere")
    git("add", "out")
    git("commit", "-qm", "figures from another machine")
    head = git("rev-parse", "HEAD").stdout
    assert main(["digits", "run", *argv, "--platform", "cpu", "--commit"]) == 0
    assert "study: 0 run(s) landed" in capsys.readouterr().out
    assert all(f.read_bytes() == b"as drawn elsewhere" for f in figures)
    assert git("rev-parse", "HEAD").stdout == head
    assert git("status", "--porcelain", "out").stdout == ""


def test_a_landing_commits_the_record_and_what_the_report_wrote_and_nothing_else(
    tmp_path, git_repo, capsys
):
    """A landing commits the record and the report's files; a README edited beside them in the
    report's folder (tracked, so ``git add`` of the folder would take it) stays uncommitted."""
    git = git_repo
    out = tmp_path / "out"
    rec = out / "runs.jsonl"
    _tuned(tmp_path / "tuned", rec, {"svm": [50.0] * 6})
    (out / "README.md").write_text("the plan\n")
    git("add", "out")
    git("commit", "-qm", "start")
    (out / "README.md").write_text("the plan, being edited\n")
    argv = _svm_main_argv(tmp_path, rec)
    assert main(["digits", "run", *argv, "--platform", "cpu", "--commit"]) == 0
    assert "study: 2 run(s) landed" in capsys.readouterr().out
    log = git("log", "--format=@%s", "--name-only").stdout
    commits = [c.strip().split("\n") for c in log.split("@")[1:]]
    landed = [[f for f in c[1:] if f] for c in commits if "more run(s) landed" in c[0]]
    assert landed, log
    for files in landed:
        assert "out/runs.jsonl" in files and "out/results.md" in files, files
        assert all(f.startswith("out/") and f != "out/README.md" for f in files), files
    assert git("status", "--porcelain", "out/README.md").stdout.startswith(" M")
    assert git("status", "--porcelain", "out/runs.jsonl").stdout == ""
