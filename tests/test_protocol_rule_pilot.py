"""launch/protocol_rule_pilot.py: a pilot run reads only the tuning split and trains for the
length of the rule under test (not the tuning runs' fixed length); bad input exits 2."""

from __future__ import annotations

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
