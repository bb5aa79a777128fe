"""What a run tells its user: the start-up banner, ETA and learning rate in the log lines, the
final evaluation's label, and TensorBoard tags without duplicated points at the last step."""

from __future__ import annotations

import json
import types

import pytest

from invjax import logging_utils
from invjax.logging_utils import Reporter


class FakeWriter:
    """Records what the Reporter gives tensorboardX."""

    def __init__(self):
        self.scalars, self.texts, self.hparams = [], [], []

    def add_scalar(self, tag, value, step):
        self.scalars.append((tag, step, value))

    def add_text(self, tag, text, step):
        self.texts.append((tag, text))

    def add_hparams(self, hparam_dict, metric_dict, name=None):
        self.hparams.append((hparam_dict, metric_dict, name))

    def close(self):
        pass


def make_reporter(tmp_path, **kw):
    rep = Reporter(
        str(tmp_path),
        start_step=0,
        total_steps=4,
        steps_per_epoch=2,
        log_every_steps=2,
        interactive=False,
        **kw,
    )
    rep._tb.close()
    rep._tb = FakeWriter()
    return rep


def test_banner_names_devices_params_data_steps_precision_and_resume():
    cpu = types.SimpleNamespace(device_kind="cpu")
    kw = dict(
        workdir="runs/x",
        devices=[cpu, cpu],
        processes=1,
        model="cnn",
        num_params=103978,
        num_trainable=103978,
        dataset="scaled_digits",
        sizes={"train": 1079, "val": 359, "test": 359},
        image_shape=(28, 28, 1),
        augment="scale",
        num_steps=510,
        steps_per_epoch=17,
        batch_size=64,
        optimizer="adam",
        learning_rate=0.01,
        precision="train default, evaluation highest (exact on this backend)",
    )
    text = logging_utils.banner(**kw, resumed_step=None)
    assert text.splitlines() == [
        "run: runs/x (fresh start)",
        "  devices: 2 x cpu (1 process)",
        "  model: cnn, 103,978 parameters (all trainable)",
        "  data: scaled_digits 28x28x1, train 1,079 / val 359 / test 359 images, augment scale",
        "  steps: 510 = 30 epochs x 17 steps of batch 64; adam, learning rate 0.01",
        "  precision: train default, evaluation highest (exact on this backend)",
    ]
    resumed = logging_utils.banner(**{**kw, "num_trainable": 10}, resumed_step=340)
    assert "resuming from the checkpoint of step 340 of 510" in resumed
    assert "10 trainable, the rest frozen" in resumed


def test_log_lines_have_learning_rate_and_eta(tmp_path, capsys):
    rep = make_reporter(tmp_path, learning_rate=lambda count: 0.1 if count < 2 else 0.01)
    for s in range(1, 5):
        rep.step_done(s, loss=1.0, errors=2, n=8)
    rep.close()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("step 2/4 (epoch 1.00): loss 1.0000 error 25.00% lr 0.1 ETA 0:00:")
    assert " lr 0.01 ETA 0:00:00 " in lines[1] and lines[1].endswith(" images/s")
    lrs = [(step, v) for tag, step, v in rep._fake.scalars if tag == "train/learning_rate"]
    # Update 2 (count 1) still used 0.1; update 4 (count 3) 0.01.
    assert lrs == [(2, 0.1), (4, 0.01)]


@pytest.fixture(autouse=True)
def keep_fake(monkeypatch):
    """Keep the FakeWriter reachable after close() drops it."""
    orig = Reporter.close

    def close(self):
        if isinstance(self._tb, FakeWriter):
            self._fake = self._tb
        orig(self)

    monkeypatch.setattr(Reporter, "close", close)


def test_eta_from_the_mean_rate():
    rep = Reporter("", start_step=10, total_steps=110, steps_per_epoch=10, log_every_steps=5,
                   enabled=False)  # fmt: skip
    rep._t_start = 100.0
    assert rep.eta(20, now=110.0) == pytest.approx(90.0)  # 10 steps in 10 s, 90 to go
    assert logging_utils.format_duration(3725.4) == "1:02:05"
    assert logging_utils.format_duration(float("inf")) == "?"


def test_final_evaluation_is_labelled_and_gets_its_own_tags(tmp_path, capsys):
    rep = make_reporter(tmp_path)
    rep.record({"step": 4, "epoch": 2, "split": "val", "loss": 0.5, "error": 12.5})
    label = {"final": True, "model_epoch": 1, "selected_by": "best validation"}
    rep.record({"step": 4, "epoch": 2, "split": "val", "loss": 0.4, "error": 10.0, **label})
    rep.record({"step": 4, "epoch": 2, "split": "test", "loss": 0.6, "error": 15.0, **label})
    rep.finish({"train.learning_rate": 0.1}, {"final/test_error": 15.0, "bad": float("nan")})
    rep.close()
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == (
        "final: test of epoch 1's model (best validation), after step 4: loss 0.6000 error 15.00%"
    )
    scalars = rep._fake.scalars
    # One val/error point at step 4 (the epoch's); the final evaluation under final/*.
    assert [s for s in scalars if s[0] == "val/error"] == [("val/error", 4, 12.5)]
    assert ("final/val_error", 4, 10.0) in scalars and ("final/test_error", 4, 15.0) in scalars
    assert rep._fake.hparams == [({"train.learning_rate": 0.1}, {"final/test_error": 15.0},
                                  "hparams")]  # fmt: skip
    recs = [json.loads(x) for x in open(tmp_path / "metrics.jsonl")]
    assert recs[-1]["model_epoch"] == 1 and recs[-1]["final"] is True


def test_hparams_keep_scalars_and_stringify_the_rest():
    flat = {"seed": 0, "train.lr_boundaries": (20, 25), "data.data_dir": None, "x": True}
    assert logging_utils.hparams(flat) == {
        "data.data_dir": "None",
        "seed": 0,
        "train.lr_boundaries": "(20, 25)",
        "x": True,
    }
