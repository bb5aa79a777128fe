"""launch/studies/pilot.py: a pilot run reads only the tuning split and trains for the length of
the rule under test (not the tuning runs' fixed length); a finished run is judged and lands in
the record; bad input exits 2."""

from __future__ import annotations

import json

import pytest

from launch.studies import pilot, plan, record, run
from launch.studies.__main__ import main
from launch.studies.digits import STUDY


def test_a_pilot_run_is_the_tuning_run_at_the_rules_length():
    hps = {"e2_ii": {"learning_rate": 0.01, "weight_decay": 1e-5}}
    rule = plan.Rule(min_epochs=300)
    ov = pilot.pilot_overrides(STUDY, "e2_ii", "rotscaled_digits", 300, hps, rule)
    tuning = plan.network_overrides(STUDY, "e2_ii", "rotscaled_digits", 300, 0, hps, rule, True)
    # the tuning run's data: realisation 0, the 80:20 split of the training split
    assert (ov["data.realisation"], ov["data.val_source"], ov["data.val_fraction"]) == (
        0,
        "train",
        0.2,
    )
    assert ov["data.n_train"] == 300 and ov["train.learning_rate"] == 0.01
    assert tuning["train.num_epochs"] == 60  # tuning runs keep the first rule's length
    assert ov["train.num_epochs"] == 300 and ov["train.lr_boundaries"] == (200,)
    assert {k: v for k, v in ov.items() if not k.startswith("train.")} == {
        k: v for k, v in tuning.items() if not k.startswith("train.")
    }


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--min_epochs", "0"], "--min_epochs=0 is invalid"),
        (["--min_epochs", "300", "--sizes", "900"], "--sizes='900' is invalid"),
        (["--min_epochs", "300", "--families", "nope"], "'nope' is invalid"),
    ],
)
def test_bad_input_exits_2_naming_the_value(argv, message, capsys):
    assert main(["digits", "pilot", *argv, "--dry_run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("invjax: error: ") and message in err[0]


def _tuned_e2(tmp_path) -> str:
    """A record in which e2_ii's tuning on the rotated digits finished."""
    rec = tmp_path / "runs.jsonl"
    for i, (label, _) in enumerate(plan.candidates(STUDY, "e2_ii")):
        d = tmp_path / "tuned" / "tune" / "rotscaled_digits" / "e2_ii" / label
        d.mkdir(parents=True)
        (d / "results.json").write_text(json.dumps({"test_error": 9.0, "val_error": 10.0 + i}))
    run.land(str(tmp_path / "tuned"), str(rec))
    return str(rec)


def test_a_finished_pilot_run_is_judged_and_lands_in_the_record(tmp_path, capsys):
    rec = _tuned_e2(tmp_path)
    runs = tmp_path / "runs"
    d = runs / "pilot" / "E300" / "rotscaled_digits" / "e2_ii" / "n300"
    d.mkdir(parents=True)
    (d / "results.json").write_text(json.dumps({"test_error": 1.0}))
    with open(d / "metrics.jsonl", "w") as f:  # 1/epoch: still falling 10% a tenth, above 0.02
        for epoch in range(1, 21):
            f.write(json.dumps({"epoch": epoch, "split": "train", "loss": 1 / epoch, "error": 1}))
            f.write("\n")
    argv = ["digits", "pilot", "--min_epochs", "300", "--families", "e2_ii", "--sizes", "300"]
    assert main([*argv, "--runs_dir", str(runs), "--record", rec]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["run"] == "pilot/E300/rotscaled_digits/e2_ii/n300" and line["epochs"] == 20
    assert line["converged"] is False and line["train_loss"] == 1 / 20
    rows = {r["run"]: r for r in record.read(rec)}
    assert rows[line["run"]]["convergence"]["converged"] is False
    # the dry run marks it finished; a family without a tuning choice is refused
    assert main([*argv, "--runs_dir", str(runs), "--record", rec, "--dry_run"]) == 0
    assert capsys.readouterr().out.startswith("# finished: python -m invjax.main")
    argv[5] = "wrn_std"
    assert main([*argv, "--runs_dir", str(runs), "--record", rec]) == 2
    assert (
        "invjax: error: wrn_std has no tuning choice on rotscaled_digits" in capsys.readouterr().err
    )
