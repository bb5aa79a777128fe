"""The real-image study's second registered family (B): its realisations from the record's sds,
its arms' runs as the study plans them, the grid extended past an edge, and the budget."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys

import pytest

from launch import sweep
from launch.studies import plan, power, realimages, record, stats
from launch.studies import realimages_second as second

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORD = os.path.join(ROOT, "docs", "results", "realimages", "runs.jsonl")


@pytest.fixture(scope="module")
def rows():
    return record.read(RECORD)


def test_the_fixed_realisations_are_what_the_records_sds_ask_for(rows):
    """REALISATIONS, fixed at registration, are the fewest that detect each target at Holm's
    first level of five (at least 10), raised to the most any claim on the same dataset and
    N_t needs; all of them lie past the first family's 0..9."""
    need = {c.id: None for c in second.CLAIMS}
    for c in second.CLAIMS:
        sd, pairs = second.observed_sd(rows, c.sd_source)
        assert pairs == 10
        need[c.id] = r = second.realisations_needed(sd, c.target, len(second.CLAIMS))
        assert power.minimum_detectable_effect(sd, r, 0.05 / 5, 0.8) <= c.target
        if r > 10:  # the fewest: one fewer would miss the target
            assert power.minimum_detectable_effect(sd, r - 1, 0.05 / 5, 0.8) > c.target
    for c in second.CLAIMS:
        same = [d.id for d in second.CLAIMS if (d.dataset, d.n_train) == (c.dataset, c.n_train)]
        assert second.REALISATIONS[c.id] == max(need[d] for d in same), c.id
        assert min(second.seeds(c.id)) == 10 and len(second.seeds(c.id)) >= 6


def test_the_observed_sd_is_the_records_paired_differences(rows):
    """B1's sd is X6's: `triple` - `triple_e2` on the rotated data's realisations 0-9."""
    err = {(r["family"], r["seed"]): r["test_error"] for r in rows if r["stage"] == "main"
           and r["dataset"] == second.ROT and r["n_train"] == 1000}  # fmt: skip
    d = [err["triple", s] - err["triple_e2", s] for s in range(10)]
    assert second.observed_sd(rows, second.CLAIMS[0].sd_source) == (stats.mean_sd(d)[1], 10)
    with pytest.raises(ValueError, match="holds 0 pairs"):
        second.observed_sd(rows, (second.ROT, "triple", "nothing", 1000))


def test_realisations_needed_grows_with_the_sd_and_refuses_nonsense():
    assert second.realisations_needed(0.1, 1.0, 5) == 10  # the floor
    assert second.realisations_needed(1.0, 1.0, 5) < second.realisations_needed(2.0, 1.0, 5)
    with pytest.raises(ValueError, match="sd=0"):
        second.realisations_needed(0, 1.0, 5)


def test_family_b_arms_train_only_their_claims_realisations_and_points():
    study = realimages.STUDY
    for c in second.CLAIMS:
        for arm in (c.better, c.worse):
            fam = study.families[arm]
            assert set(second.seeds(c.id)) <= set(fam.seeds)
            assert (c.dataset, c.n_train) in fam.points
    # the first family keeps its ten realisations; family B never uses them
    assert study.seeds_of("triple") == tuple(range(10))
    for name in second.families(realimages.recipe("M"), realimages.recipe("T")):
        assert min(study.seeds_of(name)) >= second.FIRST_SEED
    assert study.all_seeds == tuple(range(26))


def _main_runs(study, dataset, families, seeds, chosen):
    runs, _, missing = plan.plan_main(
        study, "runs/x", dataset, families, [1000 if dataset != second.DIGITS else 100],
        seeds, study.main_rule, chosen,
    )  # fmt: skip
    return runs, missing


def _all_chosen(study, dataset):
    hp = {"label": "lr0.03_wd1e-04", "hps": {"learning_rate": 0.03, "weight_decay": 1e-4}}
    return {f: hp for f, fam in study.families.items() if dataset in fam.datasets}


def test_the_size_controls_phase_1_reuses_the_tuned_narrow_stream_runs():
    """b_triple_star's streams are the narrowed stream families' own runs (their config equals
    the head's stream config, width divided by sqrt(3)), and b_triple's the full ones'."""
    study = realimages.STUDY
    chosen = _all_chosen(study, second.ROT)
    runs, missing = _main_runs(study, second.ROT, ["b_triple_star", "b_triple"], [10], chosen)
    assert not missing
    by = {r.experiment: r for r in runs}
    assert set(by) == {"b_triple_star", "b_triple", "b_std_n", "b_e2_n", "b_scale_n",
                       "b_std", "b_e2", "b_scale"}  # fmt: skip
    for head, suffix in (("b_triple_star", "_n"), ("b_triple", "")):
        reused = sorted(sweep.reused_workdirs(by[head]))
        want = sorted(by[f"b_{s}{suffix}"].workdir for s in second.STREAM_SLOTS)
        assert reused == want, head
    narrow = sweep.load_config(by["b_e2_n"].config, by["b_e2_n"].overrides)
    assert narrow.model.width_divisor == pytest.approx(math.sqrt(3))
    assert by["b_e2_n"].overrides["seed"] == 10 == by["b_e2_n"].overrides["data.realisation"]


def test_the_digits_arms_share_one_recipe_and_train_1500_steps():
    study = realimages.STUDY
    chosen = _all_chosen(study, second.DIGITS)
    runs, _ = _main_runs(study, second.DIGITS, ["b_disco_100", "b_ii_ws_100"], [10], chosen)
    assert [r.experiment for r in runs] == ["b_disco_100", "b_ii_ws_100"]
    for r in runs:
        ov = r.overrides
        assert ov["model.dropout"] == 0.1 and ov["model.bn_momentum"] == 0.99
        assert ov["train.num_epochs"] * math.ceil(100 / ov["train.batch_size"]) >= 1500
        assert ov["train.learning_rate"] == 0.03 and ov["data.n_train"] == 100
    assert {k: v for k, v in runs[0].overrides.items() if k != "train.learning_rate"} == {
        k: v for k, v in runs[1].overrides.items() if k != "train.learning_rate"
    }


def _row(val_error):
    return {"val_error": val_error, "val_loss": 1.0}


def test_a_grid_whose_choice_lies_on_its_edge_is_extended_past_it():
    study = realimages.STUDY
    fam = "b_scale"
    base = [label for label, _ in plan.candidates(study, fam)]
    assert base == [f"lr{lr}_wd{wd}" for lr in ("0.001", "0.003", "0.01", "0.03")
                    for wd in ("1e-05", "1e-04")]  # fmt: skip
    # the best on the upper edge: one more learning rate (x3), then, if it wins again, another
    done = {label: _row(50.0 - i) for i, label in enumerate(base)}
    more = [label for label, _ in plan.candidates(study, fam, done)]
    assert more == base + ["lr0.1_wd1e-05", "lr0.1_wd1e-04"]
    assert plan.choose(study, done, fam) is None  # the extension has not run yet
    done |= {"lr0.1_wd1e-05": _row(10.0), "lr0.1_wd1e-04": _row(60.0)}
    assert len(plan.candidates(study, fam, done)) == 12  # 0.3 next, the last extension
    done |= {"lr0.3_wd1e-05": _row(70.0), "lr0.3_wd1e-04": _row(70.0)}
    assert len(plan.candidates(study, fam, done)) == 12  # EXTEND_EDGES = 2: no further
    assert plan.choose(study, done, fam)["label"] == "lr0.1_wd1e-05"
    # the lower edge extends downwards; an interior choice does not extend
    low = {label: _row(i) for i, label in enumerate(base)}
    assert plan.candidates(study, fam, low)[0][0] == "lr0.0003_wd1e-05"
    mid = {label: _row(abs(i - 3)) for i, label in enumerate(base)}
    assert [x for x, _ in plan.candidates(study, fam, mid)] == base
    assert plan.choose(study, mid, fam)["label"] == "lr0.003_wd1e-04"
    # the first family's grid never extends (its tuning is fixed as it ran)
    edge = {f"lr{lr}_wd{wd}": _row(-lr) for lr in (0.001, 0.003, 0.01) for wd in ("1e-05", "1e-04")}
    assert len(plan.candidates(study, "scale", edge)) == 6


def test_the_plan_command_lists_family_b_tuning_and_refuses_unknown_realisations(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    cmd = [sys.executable, "-m", "launch.studies", "realimages", "plan", "--stage", "tune",
           "--datasets", "scaled_mnist_10k", "--families", "b_disco_500,b_ii_ws_500",
           "--record", str(tmp_path / "none.jsonl"), "--runs_dir", str(tmp_path / "r")]  # fmt: skip
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    lines = [x for x in out.stdout.splitlines() if x.startswith("python -m invjax.main")]
    assert len(lines) == 8  # four learning rates, one weight decay, two arms
    assert all("--config.data.n_train=500" in x and "val_source=train" in x for x in lines)
    bad = cmd[:5] + ["--stage", "main", "--seeds", "26", "--record", str(tmp_path / "n.jsonl")]
    out = subprocess.run(bad, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 2 and "--seeds='26' is invalid: give realisations 0..25" in (
        out.stderr
    )


def test_the_budget_prices_every_arm_from_the_records_times(rows):
    budget = second.budget_rows(rows)
    arms = {(b["arm"], b["dataset"]) for b in budget}
    for name in second.families(realimages.recipe("M"), realimages.recipe("T")):
        for d in second.where(name):
            assert (name, d) in arms
    by = {(b["arm"], b["dataset"]): b for b in budget}
    # a digits run is its first-family arm's measured time per step x 1,500 steps
    per = [r["wall_time_s"] / r["steps"] for r in rows if r["stage"] == "main" and r["family"]
           == "disco" and r["n_train"] == 100 and r["dataset"] == second.DIGITS]  # fmt: skip
    got = by["b_disco_100", second.DIGITS]
    assert got["main_minutes"] == pytest.approx(statistics.median(per) * 1500 / 60)
    assert got["hours"] == pytest.approx((16 * got["main_minutes"] + got["tune_minutes"]) / 60)
    assert all(b["hours"] > 0 for b in budget)


def test_the_power_command_prints_the_second_family(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    cmd = [sys.executable, "-m", "launch.studies", "realimages", "power", "--second", "--json"]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [c["claim"] for c in doc["claims"]] == ["B1", "B2", "B3", "B4", "B5"]
    assert [c["realisations"] for c in doc["claims"]] == [11, 11, 11, 16, 10]
    out = subprocess.run(cmd + ["--record", str(tmp_path / "no")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert out.returncode == 2 and "no such file" in out.stderr


def test_a_family_with_its_own_seeds_is_planned_only_there():
    study = realimages.STUDY
    fam = dataclasses.replace(study.families["b_scale"], seeds=(12,))
    s = dataclasses.replace(study, families=study.families | {"b_scale": fam})
    chosen = _all_chosen(s, second.FASHION)
    runs, _ = _main_runs(s, second.FASHION, ["b_scale"], [10, 11, 12], chosen)
    assert [r.overrides["seed"] for r in runs] == [12]


def test_the_report_judges_family_b_on_its_own_realisations_and_holm():
    """B5 with all ten realisations (10-19) in, `b_ii_ws_500` 1 point worse +- a little: tested,
    Holm over the five (the four pending at p = 1, so its adjusted p is 5 x its p), a seed of
    the first family's (0) and one past its own (20) ignored; B4 with 15 of 16 pending."""
    from launch.studies import report

    def row(family, seed, err):
        return {"run": f"main/{second.DIGITS}/{family}/n500/seed_{seed}", "test_error": err,
                "trained_on": ["CPU"], "params": 1, "convergence": {"converged": True}}  # fmt: skip

    jitter = [0.3, -0.2, 0.1, 0.0, -0.3, 0.2, 0.1, -0.1, 0.25, -0.15]
    errors = {
        (second.DIGITS, "b_ii_ws_500", 500): {
            s: row("b_ii_ws_500", s, 5.0 + 1.0 + j) for s, j in zip(range(10, 20), jitter)
        }
        | {0: row("b_ii_ws_500", 0, 90.0), 20: row("b_ii_ws_500", 20, 90.0)},
        (second.DIGITS, "b_disco_500", 500): {
            s: row("b_disco_500", s, 5.0) for s in [0, *range(10, 21)]
        },
        (second.DIGITS, "b_ii_ws_100", 100): {10: row("b_ii_ws_100", 10, 9.0)},
    }
    recs = {r["claim"]: r for r in report.later_claims(realimages.STUDY, errors, second.FAMILY)}
    b5 = recs["B5"]
    d = [1.0 + j for j in jitter]
    assert b5["status"] == "tested" and b5["n"] == 10 and b5["realisations"] == 10
    assert b5["diff_mean"] == pytest.approx(statistics.mean(d))
    assert b5["p"] == pytest.approx(stats.paired_t_p(d))
    assert b5["p_holm"] == pytest.approx(min(1.0, 5 * b5["p"]))
    assert b5["verdict"] == "contradicted"
    want = power.minimum_detectable_effect(statistics.stdev(d), 10, 0.05 / 5)
    assert b5["mde"] == pytest.approx(want)
    assert recs["B4"]["verdict"] == "pending: 0 of its 16 realisations (10-25)"
    assert all(math.isnan(recs[c]["p_holm"]) for c in ("B1", "B2", "B3", "B4"))


def test_the_committed_family_b_report_is_what_the_committed_record_gives(tmp_path, rows):
    from launch.studies import report

    report.write_report(realimages.STUDY, rows, str(tmp_path), figures=False)
    here = os.path.join(ROOT, "docs", "results", "realimages")
    for name in ("results.md", "claims_B.json"):
        with open(os.path.join(here, name)) as f:
            assert (tmp_path / name).read_text() == f.read(), name


def test_the_readme_holds_what_power_second_prints(rows):
    """The plan's numbers in the study README are the command's, from the committed record."""
    with open(os.path.join(ROOT, "docs", "results", "realimages", "README.md")) as f:
        text = f.read()
    table = second.power_markdown(second.power_rows(rows))
    budget = second.budget_markdown(second.budget_rows(rows))
    assert table in text and budget in text
