"""The tiny digits runs that test_main, test_faults and test_export_run start as real
subprocesses: the repository root, the common flags, one runner and the one-line-error check."""

from __future__ import annotations

import os
import subprocess
import sys

import faults

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tiny_digits(batch_size: int, num_epochs: int, lr_boundaries: str, *extra: str) -> list[str]:
    """``invjax.main`` flags of a width-4 digits CNN on 100 training images (``100 / batch_size``
    steps an epoch), then ``extra``."""
    return [
        "--config=configs/digits_cnn.py",
        "--config.data.name=digits",
        "--config.data.n_train=100",
        "--config.model.width=4",
        f"--config.train.batch_size={batch_size}",
        f"--config.train.num_epochs={num_epochs}",
        f"--config.train.lr_boundaries={lr_boundaries}",
        *extra,
    ]


# The shared finished run (conftest's ``tiny_digits_run``, read by test_faults and test_export_run):
# batch 50, 2 steps per epoch, 3 epochs (steps 2, 4, 6, a checkpoint at each epoch end).
SHARED_RUN = tiny_digits(
    50, 3, "(2,)", "--config.train.eval_batch_size=400", "--config.train.log_every_steps=0"
)


def run_module(module: str, *args: str, fault: str | None = None, timeout: float = 300, env=None):
    """``python -m module args`` in the repository root, with ``fault`` (tests/faults.py) installed
    from outside invjax if given; the finished process, its output captured as text."""
    argv = faults.command(fault, module, *args) if fault else [sys.executable, "-m", module, *args]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)


def one_line_error(proc, status: int = 2) -> str:
    """The run ended with ``status`` and a single ``invjax: error:`` line, no traceback."""
    assert proc.returncode == status, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [x for x in proc.stderr.splitlines() if x.startswith("invjax: error: ")]
    assert len(errors) == 1 and proc.stderr.strip().splitlines()[-1] == errors[0], proc.stderr
    return errors[0]
