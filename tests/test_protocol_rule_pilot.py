"""launch/protocol_rule_pilot.py: a pilot run reads only the tuning split and trains for the
length of the rule under test (not the tuning runs' fixed length); a finished run is judged
and copied to the record; bad input exits 2."""

from __future__ import annotations

import json
import os
import pathlib
import runpy

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
PILOT = runpy.run_path(str(REPO / "launch" / "protocol_rule_pilot.py"), run_name="pilot_under_test")
P = PILOT["P"]


def test_a_pilot_run_is_the_tuning_run_at_the_rules_length():
    hps = {"e2_ii": {"learning_rate": 0.01, "weight_decay": 1e-5}}
    rule = P["Rule"](min_epochs=300)
    ov = PILOT["pilot_overrides"]("e2_ii", "rotscaled_digits", 300, hps, rule)
    tuning = P["network_overrides"]("e2_ii", "rotscaled_digits", 300, 0, hps, rule, True)
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
        (["--min-epochs", "0"], "--min-epochs=0 is invalid"),
        (["--min-epochs", "300", "--sizes", "900"], "--sizes='900' is invalid"),
        (["--min-epochs", "300", "--families", "nope"], "'nope' is invalid"),
    ],
)
def test_bad_input_exits_2_naming_the_value(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        PILOT["main"](argv + ["--dry-run"])
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_a_finished_pilot_run_is_judged_and_copied_to_the_record(tmp_path, capsys):
    run = tmp_path / "runs" / "E300" / "rotscaled_digits" / "e2_ii" / "n300"
    run.mkdir(parents=True)
    (run / "results.json").write_text(json.dumps({"test_error": 1.0}))
    with open(run / "metrics.jsonl", "w") as f:  # 1/epoch: still falling 10% a tenth, above 0.02
        for epoch in range(1, 21):
            f.write(json.dumps({"epoch": epoch, "split": "train", "loss": 1 / epoch, "error": 1}))
            f.write("\n")
    argv = ["--min-epochs", "300", "--families", "e2_ii", "--sizes", "300"]
    out = tmp_path / "out"
    assert PILOT["main"](argv + ["--runs-dir", str(tmp_path / "runs"), "--out", str(out)]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["run"] == "E300/rotscaled_digits/e2_ii/n300" and line["epochs"] == 20
    assert line["converged"] is False and line["train_loss"] == 1 / 20
    copied = out / "E300" / "rotscaled_digits" / "e2_ii" / "n300"
    assert sorted(os.listdir(copied)) == ["curve.json", "results.json"]
