"""Feedback of a training run: progress bar or log lines, ``metrics.jsonl``, TensorBoard.

- ``WORKDIR/metrics.jsonl``: one JSON object per evaluation, ``{"step", "epoch", "split",
  "loss", "error", ...}`` with ``error`` in percent. A resumed run first drops the records of
  steps after its checkpoint, so the file reads as if the run had never stopped.
- ``WORKDIR/tensorboard/``: TensorBoard event files written by tensorboardX (no TensorFlow).
- On an interactive terminal a tqdm bar with loss, error and images/s; otherwise (a log file, a
  batch job) one plain line every ``log_every_steps`` steps and one per evaluation, on stdout.

Only process 0 writes; the others keep quiet.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_SUBDIR = "tensorboard"


def truncate_metrics(path: str, last_step: int) -> None:
    """Keep the records of ``metrics.jsonl`` with ``step <= last_step`` (and drop broken lines).

    Records after the restored checkpoint belong to work that is about to be redone, and the
    final evaluation (``"final": true``) is always redone.
    """
    if not os.path.exists(path):
        return
    kept = []
    with open(path) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line cut short by a kill
            if int(rec.get("step", 0)) <= last_step and not rec.get("final"):
                kept.append(json.dumps(rec))
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("".join(k + "\n" for k in kept))
    os.replace(tmp, path)


def _fmt(rec: dict) -> str:
    num = lambda v, f: "nan" if v is None else format(v, f)
    extra = "".join(
        f" {k}={v}" for k, v in rec.items() if k not in ("step", "epoch", "split", "loss", "error")
    )
    return (
        f"epoch {rec['epoch']} step {rec['step']} {rec['split']}: loss {num(rec['loss'], '.4f')} "
        f"error {num(rec['error'], '.2f')}%{extra}"
    )


class Reporter:
    """Progress and metrics of one run (see the module docstring).

    ``step_done(step, loss, errors, n)`` after every train step (host floats);
    ``record(rec)`` for every evaluation; ``message(text)``; ``close()``.
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
    ):
        self.enabled = enabled
        self.total_steps = total_steps
        self.steps_per_epoch = steps_per_epoch
        self.log_every = max(int(log_every_steps), 1)
        self.interactive = sys.stderr.isatty() if interactive is None else interactive
        self._window = [0.0, 0.0, 0]  # loss sum, errors, images since the last report
        self._t_last = time.perf_counter()
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
                total=total_steps, initial=start_step, unit="step", dynamic_ncols=True, leave=True
            )

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
        if self._bar is not None:
            self._bar.set_postfix(loss=f"{loss_avg:.4f}", err=f"{err_avg:.2f}%", img_s=f"{ips:.0f}")
        else:
            epoch = step / self.steps_per_epoch
            print(
                f"step {step}/{self.total_steps} (epoch {epoch:.2f}): loss {loss_avg:.4f} "
                f"error {err_avg:.2f}% {ips:.0f} images/s",
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
                self._tb.add_scalar(f"{rec['split']}/{key}", rec[key], rec["step"])
        self.message(_fmt(rec))

    def message(self, text: str) -> None:
        if not self.enabled:
            return
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
