"""launch/studies/record.py and the committed digits record: the report regenerated from
``docs/results/digits/runs.jsonl`` alone is byte for byte the committed one; every row is
well formed and its convergence verdict agrees with its window means; the rule pilot's
verdicts in the README are the record's; a damaged record is refused naming its line."""

from __future__ import annotations

import json
import math
import pathlib
import re

import pytest

from launch.studies import digits, record, report, stats
from launch.studies.__main__ import main

REPO = pathlib.Path(__file__).resolve().parents[1]
DIGITS = REPO / "docs" / "results" / "digits"
RECORD = DIGITS / "runs.jsonl"
REPORT_FILES = (
    "results.md",
    "claims.json",
    "claims_first_rule.json",
    "error_vs_n_train_scaled_digits.png",
    "error_vs_n_train_rotscaled_digits.png",
)


@pytest.fixture(scope="module")
def rows():
    return record.read(str(RECORD))


def test_the_report_regenerates_byte_for_byte_from_the_record(rows, tmp_path):
    written = report.write_report(digits.STUDY, rows, str(tmp_path))
    assert sorted(pathlib.Path(p).name for p in written) == sorted(REPORT_FILES)
    for name in REPORT_FILES:
        got, want = (tmp_path / name).read_bytes(), (DIGITS / name).read_bytes()
        assert got == want, f"{name} differs from the committed one ({len(got)} vs {len(want)} B)"


def test_the_report_command_reads_the_record_only(tmp_path, capsys):
    argv = ["digits", "report", "--record", str(RECORD), "--out", str(tmp_path), "--no_figures"]
    assert main(argv) == 0
    assert "from 1616 rows" in capsys.readouterr().out
    for name in ("results.md", "claims.json"):
        assert (tmp_path / name).read_bytes() == (DIGITS / name).read_bytes()
    assert not list(tmp_path.glob("*.png"))


def test_the_record_holds_every_run_of_the_study_once(rows):
    assert len(rows) == len({r["run"] for r in rows}) == 1616
    stages = {s: sum(r["stage"] == s for r in rows) for s in record.STAGES}
    assert stages == {"main": 1440, "tune": 168, "pilot": 8}
    under_rule = digits.STUDY.main_rule
    from launch.studies import plan

    errors = plan.main_errors(digits.STUDY, rows, under_rule)
    # every family on its datasets at every N_t and realisation of the plan
    want = sum(len(f.datasets) for f in digits.STUDY.families.values()) * 5
    assert len(errors) == want and all(len(rs) == 6 for rs in errors.values())
    bad = sum(r["convergence"]["converged"] is False for rs in errors.values() for r in rs.values())
    assert (sum(len(rs) for rs in errors.values()), bad) == (1200, 119)


def test_each_rows_convergence_verdict_follows_from_its_window_means(rows):
    judged = 0
    for r in rows:
        c = r["convergence"]
        if c["converged"] is None:
            continue
        judged += 1
        before, last = c["before"], c["last"]
        assert math.isclose(c["drop"], (before - last) / before, rel_tol=1e-12), r["run"]
        assert c["converged"] == (not (c["drop"] > stats.PLATEAU_REL and last > stats.LOSS_FLOOR))
        assert r["train_loss"] == c["final_loss"]
        # the thinned curve keeps the last epoch, at 4 significant digits
        assert r["curve"]["train_loss"][-1][0] == r["epochs"]
        assert math.isclose(r["curve"]["train_loss"][-1][1], r["train_loss"], rel_tol=1e-3)
    assert judged == len(rows) - sum(r["family"] == "svm" for r in rows)


def test_the_rule_pilots_verdicts_are_the_readmes(rows):
    """The README's pilot table: at 150 epochs 3 of 4 unconverged; at 300 the two all-data runs
    flagged, with their drops of 18.4% and 21.6%."""
    pilot = {r["run"]: r for r in rows if r["stage"] == "pilot"}
    at = {e: [r for k, r in sorted(pilot.items()) if f"/E{e}/" in k] for e in (150, 300)}
    assert [r["convergence"]["converged"] for r in at[150]].count(False) == 3
    flagged = {
        r["run"]: r["convergence"]["drop"] for r in at[300] if not r["convergence"]["converged"]
    }
    assert sorted(flagged) == [
        "pilot/E300/rotscaled_digits/e2_ii/n0",
        "pilot/E300/rotscaled_digits/wrn_std/n0",
    ]
    assert [round(100 * d, 1) for _, d in sorted(flagged.items())] == [21.6, 18.4]
    text = (DIGITS / "README.md").read_text()
    assert "| E(2)-II, 863 images | 300 | 0.016 | 0.22 | 0.0261 / 0.0205 | no (21.6%) |" in text


def _row(run="main/scaled_digits/cnn/n20/seed_0", **extra) -> dict:
    r = {"run": run, **record.identity(run), "n_train": 20, "overrides": {}}
    r |= {"test_error": 10.0, "convergence": {"converged": True}, "trained_on": ["CPU"]}
    return r | {"curve": {"train_loss": [], "val_error": []}} | extra


def test_a_later_row_of_the_same_run_replaces_the_earlier(tmp_path):
    path = tmp_path / "r.jsonl"
    assert record.append(str(path), [_row(), _row("main/scaled_digits/cnn/n20/seed_1")]) == 2
    record.append(str(path), [_row(test_error=7.5)])
    got = record.read(str(path))
    assert [(r["seed"], r["test_error"]) for r in got] == [(0, 7.5), (1, 10.0)]
    assert record.read(str(tmp_path / "none.jsonl")) == []


@pytest.mark.parametrize(
    "row, message",
    [
        (_row(seed=1), "seed=1 disagrees with its path (0)"),
        (_row(test_error=140.0), "test_error=140.0 is not a % in [0, 100]"),
        (_row(trained_on="CPU"), "trained_on='CPU' is invalid: it must be list"),
        (_row() | {"run": "main/x"}, "run path 'main/x' is invalid"),
        (_row(convergence={"converged": "yes"}), "convergence.converged must be a boolean"),
    ],
)
def test_an_invalid_row_is_refused_and_nothing_is_appended(row, message, tmp_path):
    path = tmp_path / "r.jsonl"
    with pytest.raises(ValueError, match=re.escape(message)):
        record.append(str(path), [_row(), row])
    assert not path.exists()


def test_a_damaged_record_is_refused_naming_its_line(tmp_path, capsys):
    path = tmp_path / "runs.jsonl"
    record.append(str(path), [_row()])
    with open(path, "a") as f:
        f.write('{"run": "main/scaled_digits/cnn/n20/seed_1", "stage": "ma\n')
    with pytest.raises(ValueError, match=r"runs.jsonl:2: "):
        record.read(str(path))
    assert main(["digits", "report", "--record", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("invjax: error: ") and "runs.jsonl:2" in err[0]
    assert not (tmp_path / "o").exists()  # refused before anything was written


def test_a_missing_record_or_an_unknown_study_exits_2_with_one_line(tmp_path, capsys):
    assert main(["digits", "report", "--record", str(tmp_path / "no.jsonl")]) == 2
    assert main(["nope", "report"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"invjax: error: --record={str(tmp_path / 'no.jsonl')!r} is invalid: no such file",
        "invjax: error: study 'nope' is invalid: choose from ['digits', 'realimages']",
    ]


def test_curves_are_drawn_on_demand_from_the_thinned_record(rows, tmp_path):
    few = [r for r in rows if "/scaled_digits/cnn/" in r["run"]]
    written = report.write_curves(digits.STUDY, few, str(tmp_path))
    assert sorted(pathlib.Path(p).name for p in written) == [
        "main_scaled_digits_cnn.png",
        "tune_scaled_digits_cnn.png",
    ]
    assert all(pathlib.Path(p).stat().st_size > 5000 for p in written)
    assert max(len(r["curve"]["train_loss"]) for r in rows) <= record.CURVE_POINTS + 1
    assert json.loads(record.dumps(few[0])) == few[0]
