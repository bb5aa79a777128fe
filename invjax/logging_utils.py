"""Feedback of a training run: progress bar or log lines, ``metrics.jsonl``, TensorBoard.

- ``WORKDIR/metrics.jsonl``: one JSON object per evaluation, ``{"step", "epoch", "split",
  "loss", "error", ...}`` with ``error`` in percent. A resumed run first drops the records of
  steps after its checkpoint, so the file reads as if the run had never stopped.
- ``WORKDIR/tensorboard/``: TensorBoard event files written by tensorboardX (no TensorFlow):
  ``train/*`` running loss, error, images/s and learning rate every ``log_every_steps``;
  ``train|val/loss|error`` per evaluation; the final evaluation of the reported model under
  ``final/*`` (so the step of the last epoch gets one ``val`` point, not two); the config as text
  (``config``) and, at the end, the hyper-parameters with the final errors (HPARAMS tab).
- Before the first step a start-up banner (:func:`banner`): devices, parameters, dataset sizes,
  steps, precision, workdir and whether the run resumes.
- On an interactive terminal a tqdm bar (steps, ETA) with loss, error and images/s; otherwise
  (a log file, a batch job) one plain line every ``log_every_steps`` steps with the learning
  rate, the ETA and images/s, and one line per evaluation, on stdout.

Only process 0 writes; the others keep quiet.

Why hand-written: ``clu.periodic_actions`` and ``clu.metric_writers`` import TensorFlow
(checked with clu 0.0.12), which invjax does not need for training; tqdm and tensorboardX
do the terminal and the event files.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_SUBDIR = "tensorboard"


def read_records(path: str, last_step: int) -> list[dict] | None:
    """The records of ``metrics.jsonl`` with ``step <= last_step``, without the final evaluation
    and broken lines; None if there is no file.

    Records after a restored checkpoint belong to work that is about to be redone, and the final
    evaluation (``"final": true``) is always redone.
    """
    if not os.path.exists(path):
        return None
    kept = []
    with open(path) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line cut short by a kill
            if int(rec.get("step", 0)) <= last_step and not rec.get("final"):
                kept.append(rec)
    return kept


def truncate_metrics(path: str, last_step: int) -> None:
    """Keep only :func:`read_records` of ``metrics.jsonl`` (resuming at ``last_step``)."""
    kept = read_records(path, last_step)
    if kept is None:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("".join(json.dumps(k) + "\n" for k in kept))
    os.replace(tmp, path)


FINAL_KEYS = ("final", "model_epoch", "selected_by")


def _fmt(rec: dict) -> str:
    num = lambda v, f: "nan" if v is None else format(v, f)
    skip = ("step", "epoch", "split", "loss", "error", *FINAL_KEYS)
    extra = "".join(f" {k}={v}" for k, v in rec.items() if k not in skip)
    figures = f"loss {num(rec['loss'], '.4f')} error {num(rec['error'], '.2f')}%{extra}"
    if rec.get("final"):
        # The final evaluation may use an earlier epoch's variables (best validation): say whose.
        return (
            f"final: {rec['split']} of epoch {rec.get('model_epoch', rec['epoch'])}'s model "
            f"({rec.get('selected_by', 'last epoch')}), after step {rec['step']}: {figures}"
        )
    return f"epoch {rec['epoch']} step {rec['step']} {rec['split']}: {figures}"


def format_duration(seconds: float) -> str:
    """``H:MM:SS`` (``?`` for an unknown or infinite duration)."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def banner(
    *,
    workdir: str,
    devices: Sequence,
    processes: int,
    model: str,
    num_params: int,
    num_trainable: int,
    dataset: str,
    sizes: dict[str, int],
    image_shape: Sequence[int],
    augment: str,
    num_steps: int,
    steps_per_epoch: int,
    batch_size: int,
    optimizer: str,
    learning_rate: float,
    precision: str,
    resumed_step: int | None,
) -> str:
    """The start-up lines of a run (what it is about to do), e.g.::

    run: runs/digits_cnn (fresh start)
      devices: 1 x cpu (1 process)
      model: cnn, 103,978 parameters (all trainable)
      data: scaled_digits 28x28x1, train 1,079 / val 359 / test 359 images, augment scale
      steps: 510 = 30 epochs x 17 steps of batch 64; adam, learning rate 0.01
      precision: train default, evaluation highest (exact on this backend)
    """
    kinds: dict[str, int] = {}
    for d in devices:
        kinds[d.device_kind] = kinds.get(d.device_kind, 0) + 1
    where = (
        f"resuming from the checkpoint of step {resumed_step:,} of {num_steps:,}"
        if resumed_step is not None
        else "fresh start"
    )
    trainable = (
        "all trainable"
        if num_trainable == num_params
        else f"{num_trainable:,} trainable, the rest frozen"
    )
    epochs = num_steps // max(steps_per_epoch, 1)
    return "\n".join(
        [
            f"run: {workdir} ({where})",
            "  devices: "
            + ", ".join(f"{n} x {k}" for k, n in kinds.items())
            + f" ({processes} process{'es' if processes != 1 else ''})",
            f"  model: {model}, {num_params:,} parameters ({trainable})",
            f"  data: {dataset} {'x'.join(map(str, image_shape))}, "
            + " / ".join(f"{k} {v:,}" for k, v in sizes.items())
            + f" images, augment {augment}",
            f"  steps: {num_steps:,} = {epochs} epochs x {steps_per_epoch:,} steps of batch "
            f"{batch_size}; {optimizer}, learning rate {learning_rate:g}",
            f"  precision: {precision}",
        ]
    )


def hparams(flat_config: dict) -> dict:
    """The scalar entries of a flattened config (TensorBoard's HPARAMS tab takes int, float,
    str, bool); tuples and lists become their text."""
    out = {}
    for k, v in sorted(flat_config.items()):
        if v is None:
            out[k] = "None"
        elif isinstance(v, bool | int | float | str):
            out[k] = v
        else:
            out[k] = str(v)
    return out


class Reporter:
    """Progress and metrics of one run (see the module docstring).

    ``step_done(step, loss, errors, n)`` after every train step (host floats); ``record(rec)`` for every
    evaluation; ``message(text)``; ``text(tag, text)``; ``finish(hparams, metrics)`` with the
    final figures; ``close()``.
    """

    def __init__(
        self,
        workdir: str,
        *,
        start_step: int,
        total_steps: int,
        steps_per_epoch: int,
        log_every_steps: int,
        enabled: bool = True,
        interactive: bool | None = None,
        learning_rate: Callable[[int], float] | None = None,
        label: str | None = None,
        position: int | None = None,
    ):
        """``learning_rate(count)``: the rate of the update after ``count`` updates (an optax
        schedule), logged with the running figures. ``label`` (e.g. ``'seed 3'``, one of the K
        models of ``--config.seeds``) starts every line this reporter prints (``'seed 3: step
        4/8 ...'``) and names its bar, which stands on line ``position`` of the K bars."""
        self.enabled = enabled
        self._prefix = f"{label}: " if label else ""
        self._lr = learning_rate
        self.total_steps = total_steps
        self.steps_per_epoch = steps_per_epoch
        self.log_every = max(int(log_every_steps), 1)
        self.interactive = sys.stderr.isatty() if interactive is None else interactive
        self._window = [0.0, 0.0, 0]  # loss sum, errors, images since the last report
        self._t_last = self._t_start = time.perf_counter()
        self._step0 = start_step
        self._bar = None
        self._tb = None
        self._metrics = None
        if not enabled:
            return
        self.metrics_path = os.path.join(workdir, METRICS_FILE)
        truncate_metrics(self.metrics_path, start_step)
        self._metrics = open(self.metrics_path, "a")  # noqa: SIM115 (closed in close())
        from tensorboardX import SummaryWriter

        self._tb = SummaryWriter(os.path.join(workdir, TENSORBOARD_SUBDIR), flush_secs=30)
        if self.interactive:
            from tqdm import tqdm

            self._bar = tqdm(
                total=total_steps,
                initial=start_step,
                unit="step",
                dynamic_ncols=True,
                leave=True,
                desc=label,
                position=position,
            )

    def eta(self, step: int, now: float) -> float:
        """Seconds left at this run's mean rate (compilation included: an over-estimate
        early on that settles as the run goes)."""
        done = step - self._step0
        if done <= 0:
            return math.inf
        return (self.total_steps - step) * (now - self._t_start) / done

    def step_done(self, step: int, loss: float, errors: float, n: int) -> None:
        """Train step ``step`` (1-based count of updates) had mean ``loss`` and ``errors``/``n``."""
        if not self.enabled:
            return
        w = self._window
        w[0] += loss * n
        w[1] += errors
        w[2] += n
        if self._bar is not None:
            self._bar.update(1)
        if step % self.log_every and step != self.total_steps:
            return
        now = time.perf_counter()
        ips = w[2] / max(now - self._t_last, 1e-9)
        loss_avg, err_avg = w[0] / max(w[2], 1), 100.0 * w[1] / max(w[2], 1)
        self._tb.add_scalar("train/loss_running", loss_avg, step)
        self._tb.add_scalar("train/error_running", err_avg, step)
        self._tb.add_scalar("train/images_per_s", ips, step)
        lr = None if self._lr is None else float(self._lr(step - 1))  # update step-1 of 0..
        if lr is not None:
            self._tb.add_scalar("train/learning_rate", lr, step)
        if self._bar is not None:
            self._bar.set_postfix(loss=f"{loss_avg:.4f}", err=f"{err_avg:.2f}%", img_s=f"{ips:.0f}")
        else:
            epoch = step / self.steps_per_epoch
            rate = "" if lr is None else f"lr {lr:.3g} "
            print(
                f"{self._prefix}step {step}/{self.total_steps} (epoch {epoch:.2f}): "
                f"loss {loss_avg:.4f} "
                f"error {err_avg:.2f}% {rate}ETA {format_duration(self.eta(step, now))} "
                f"{ips:.0f} images/s",
                flush=True,
            )
        self._window = [0.0, 0.0, 0]
        self._t_last = now

    def record(self, rec: dict) -> None:
        """Write one evaluation record (``step``, ``epoch``, ``split``, ``loss``, ``error`` %)."""
        if not self.enabled:
            return
        rec = {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in rec.items()
        }
        self._metrics.write(json.dumps(rec) + "\n")
        self._metrics.flush()
        for key in ("loss", "error"):
            if rec.get(key) is not None:
                # The final evaluation repeats the last step with (maybe) another epoch's model:
                # its own tags, so that the val curve has one point per step.
                tag = f"final/{rec['split']}_{key}" if rec.get("final") else f"{rec['split']}/{key}"
                self._tb.add_scalar(tag, rec[key], rec["step"])
        self.message(_fmt(rec))

    def text(self, tag: str, text: str, step: int = 0) -> None:
        """A text entry in TensorBoard (e.g. the config)."""
        if self.enabled:
            self._tb.add_text(tag, text, step)

    def finish(self, hparam_dict: dict, metric_dict: dict) -> None:
        """The hyper-parameters with the final figures (TensorBoard's HPARAMS tab)."""
        if self.enabled:
            metrics = {
                k: v for k, v in metric_dict.items() if isinstance(v, float) and math.isfinite(v)
            }
            self._tb.add_hparams(hparam_dict, metrics, name="hparams")

    def message(self, text: str) -> None:
        if not self.enabled:
            return
        # Every line: the banners of K models interleave, and each line names its model.
        text = "\n".join(self._prefix + line for line in text.split("\n"))
        if self._bar is not None:
            self._bar.write(text, file=sys.stderr)
        else:
            print(text, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None
