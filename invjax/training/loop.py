"""The training loop of one prepared run: steps, epoch ends, checkpoints, stop requests, results.

:func:`run` trains an :class:`~invjax.training.experiment.Experiment` (resuming where its
checkpoints say), evaluates the reported model (best validation epoch or last) on val and test,
measures its invariance (:mod:`invjax.certificate`) and writes ``results.json``.

Epoch ends, the one protocol between the trainer and a model: a model that is an
:class:`invjax.contract.EpochHooks` defines

    on_epoch_end(self, variables: dict, epochs_done: int, images) -> dict

``variables`` are the model's variables (``params``, ``batch_stats`` and its other collections,
e.g. ``ii_mask``); ``images`` a fixed normalised batch of training images ``float32 [B, H, W, C]``
(the first ``batch_size``, not augmented). It returns the variables to train on (the same object
if nothing changes). It is called after every epoch (``epochs_done`` = epochs completed, 1, 2,
...) before evaluation and checkpointing, and once with ``epochs_done=0`` before the first step
of a fresh run (Scale-II monomial pruning "after 0, 5 and 10 epochs",
:meth:`invjax.models.mnist.ScaledMNISTNet.on_epoch_end`). It must be a deterministic function of
its arguments, so that a resumed run repeats an uninterrupted one. A model whose hook acts only
at some epoch ends also defines

    acts_at_epoch_end(self, epochs_done: int) -> bool

False promises that ``on_epoch_end`` would return ``variables`` unchanged after ``epochs_done``
epochs; the trainer then skips the call, and K models trained as one vmapped program keep their
stacked state through that epoch end (:mod:`invjax.training.lockstep`). By default every epoch
end calls the hook.

``meta`` (checkpointed as JSON with each step) carries what is not an array: the running sums of
the current epoch (so a resumed epoch reports the same train loss), the best validation error and
epoch, the wall time so far and every evaluation record (``metrics.jsonl`` is rebuilt from it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import signal
import sys
import time

import jax
import numpy as np
from absl import logging

from invjax import certificate, checkpoint, parallel
from invjax import data as data_lib
from invjax import precision as P
from invjax import workdir as workdir_lib
from invjax.contract import EpochHooks
from invjax.data import fingerprint
from invjax.logging_utils import METRICS_FILE, Reporter, hparams, read_records
from invjax.training import signals
from invjax.training.experiment import Experiment, config_text, describe, flat_config
from invjax.training.optimizer import boundaries_in_epochs, lr_schedule
from invjax.training.signals import Interrupted, Stopped, StopRequest, StopVote
from invjax.training.state import best_variables, initial_state, state_factory
from invjax.training.steps import batch_indices, evaluate, jit_steps, with_stats


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or Inf; the message names the step and the kept checkpoint."""


class RunIOError(OSError):
    """Writing in the workdir failed during training (e.g. a full disk); the message names the
    failure and the last good checkpoint, which is kept."""


def host(cpuinfo: str = "/proc/cpuinfo") -> dict:
    """Where a run trained, beyond its ``device_kind``: ``cpu``, the processor's model name
    (Linux's ``/proc/cpuinfo``, else :func:`platform.processor`), and the ``jax`` and
    ``jaxlib`` versions. XLA can compile different CPU code for other processors and versions,
    and a run trained again elsewhere from the same seed has ended tens of test images apart:
    this says which runs could be bit-identical. A virtual machine may name different
    processors alike (``AMD EPYC``), so on Linux it adds what XLA's code depends on:
    ``cpu_id`` (vendor, family, model and stepping), ``cpu_flags`` (a digest of the
    instruction-set flags) and ``cpus``, the cores this process may use (the threads XLA
    splits its work over)."""
    import platform

    import jaxlib

    info: dict[str, str] = {}
    with contextlib.suppress(OSError):
        with open(cpuinfo) as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block describes them all
                key, _, value = line.partition(":")
                info[key.strip()] = " ".join(value.split())
    out = {
        "cpu": info.get("model name") or platform.processor() or platform.machine(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
    }
    ident = [info.get(k) for k in ("vendor_id", "cpu family", "model", "stepping")]
    if all(ident):
        out["cpu_id"] = f"{ident[0]} {'/'.join(ident[1:])}"
    flags = info.get("flags") or info.get("Features")  # x86, ARM
    if flags:
        digest = hashlib.sha256(" ".join(sorted(flags.split())).encode()).hexdigest()
        out["cpu_flags"] = digest[:12]
    if hasattr(os, "sched_getaffinity"):
        out["cpus"] = len(os.sched_getaffinity(0))
    return out


def checkpoint_due(step: int, steps_per_epoch: int, num_steps: int, tc) -> bool:
    """Whether a checkpoint is saved after ``step``: every ``train.checkpoint_every_steps``
    steps, at every ``train.checkpoint_every_epochs``-th epoch end (default 1: each), and at
    the last step (a stop signal saves where it lands, whatever these say)."""
    every = tc.checkpoint_every_steps
    if every and step % every == 0:
        return True
    if step % steps_per_epoch:
        return False
    epochs = tc.get("checkpoint_every_epochs", 1)
    return step == num_steps or (step // steps_per_epoch) % epochs == 0


def _fresh_meta() -> dict:
    return {
        "epoch_sums": [0.0, 0.0, 0],
        "best_val_error": None,
        "best_epoch": None,
        "wall_time_s": 0.0,
        "records": [],
    }


def _finite_record(rec: dict) -> dict:
    """A metrics record as ``metrics.jsonl`` holds it (NaN/Inf as null)."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in rec.items()}


def restore_metrics(workdir: str, restored: checkpoint.Restored) -> list[dict]:
    """Make ``metrics.jsonl`` agree with the checkpoint a run resumes from; returns the records
    up to its step (what the run's later checkpoints carry on).

    Since the checkpoint's meta holds every evaluation record up to its step, a deleted or
    damaged ``metrics.jsonl`` is rebuilt from it, with a message (the earlier file, if any, is
    kept as ``metrics.jsonl.bak``). A checkpoint written before records were stored cannot
    rebuild a deleted file: a warning says that it will hold the epochs from now on only; where
    the file exists, its records are taken as the history.
    """
    path = os.path.join(workdir, METRICS_FILE)
    records = restored.meta.get("records")
    have = read_records(path, restored.step)
    if records is None:
        if have is None:
            logging.warning(
                "%s is missing and the checkpoint of step %d holds no records to rebuild it: it "
                "will hold the evaluations from step %d on only",
                path,
                restored.step,
                restored.step,
            )
        return have or []
    if have == records:
        return records
    if have is None:
        note = "was missing"
    else:
        note = f"disagreed with the checkpoint (kept as {path}.bak)"
        os.replace(path, path + ".bak")
    with open(path + ".tmp", "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in records))
    os.replace(path + ".tmp", path)
    print(
        f"invjax: {path} {note}: rebuilt from the checkpoint of step {restored.step} "
        f"({len(records)} records)",
        file=sys.stderr,
        flush=True,
    )
    return records


class _Loop:
    """The training loop of one :class:`Experiment` (``meta``: module docstring); :func:`run` is
    its entry point."""

    def __init__(self, exp: Experiment, stop: StopRequest | None = None, label=None, position=None):
        """``label``/``position``: this model's among the K of one command (:class:`Reporter`)."""
        self.t_init = time.perf_counter()
        self.first_step_s = None  # loop start -> first finished step (compilation included)
        self.exp, self.tc, self.ds, self.mesh = exp, exp.config.train, exp.dataset, exp.mesh
        self.stop = stop or StopRequest()
        self.primary = jax.process_index() == 0
        self.spe, self.bsz = exp.steps_per_epoch, self.tc.batch_size
        images = self.ds.train.images[: min(self.bsz, len(self.ds.train))]
        self.epoch_end_images = data_lib.to_float(images, self.ds.mean, self.ds.std)
        # the model's epoch hooks, if it has them (invjax.contract.EpochHooks)
        self.on_epoch_end = exp.model.on_epoch_end if isinstance(exp.model, EpochHooks) else None
        if exp.restored is not None:
            self.state, self.meta = exp.restored.state, exp.restored.meta
            if self.primary:
                self.meta["records"] = restore_metrics(exp.workdir, exp.restored)
        else:
            make, trees = state_factory(
                exp.model,
                exp.tx,
                self.ds.image_shape,
                exp.config.seed,
                bool(self.tc.select_best),
                exp.sources,
            )
            state = initial_state(make, trees, parallel.replicated(self.mesh))
            self.state, self.meta = self.epoch_end_call(state, 0), _fresh_meta()
        self.step = self.step0 = int(jax.device_get(self.state.step))
        self.sums = list(self.meta["epoch_sums"])
        self.writer = checkpoint.Writer(
            exp.workdir,
            self.tc.keep_checkpoints,
            exp.restored.skipped if exp.restored else (),
            primary=self.primary,
        )
        self.reporter = Reporter(
            exp.workdir,
            start_step=self.step,
            total_steps=exp.num_steps,
            steps_per_epoch=self.spe,
            log_every_steps=self.tc.log_every_steps or self.spe,
            enabled=self.primary,
            learning_rate=lr_schedule(
                self.tc.learning_rate,
                boundaries_in_epochs(self.tc),
                self.tc.lr_decay_factor,
                self.spe,
            ),
            label=label,
            position=position,
        )
        # The subset's statistics are arguments of the steps, not constants: the compiled
        # programs serve other seeds too (JAX's persistent cache; invjax.training.many).
        train, evals, _ = jit_steps(
            exp.model, exp.tx, self.ds.augment, self.mesh, exp.precision, exp.eval_precision
        )
        self.train_step, self.eval_step = with_stats(
            train, evals, self.ds.mean, self.ds.std, self.mesh
        )
        self.t_start = time.perf_counter()
        self.elapsed0 = float(self.meta["wall_time_s"])

    def hook_acts(self, epochs_done: int) -> bool:
        """Whether the model's ``on_epoch_end`` may change the variables after ``epochs_done``
        epochs (its ``acts_at_epoch_end``, module docstring; every epoch where it has none)."""
        if self.on_epoch_end is None:
            return False
        return bool(self.exp.model.acts_at_epoch_end(epochs_done))

    def epoch_end_call(self, state, epochs_done: int):
        """The model's ``on_epoch_end`` (module docstring) applied to the state's variables."""
        if not self.hook_acts(epochs_done):
            return state
        variables = state.variables()
        new = self.on_epoch_end(variables, epochs_done, self.epoch_end_images)
        if new is not variables:
            state = state.replace_variables(new)
        return parallel.replicate(state, self.mesh)

    def consume(self, step: int, metrics) -> None:
        """Fetch one step's metrics; stop on a NaN/Inf loss before anything saves that state."""
        m = jax.device_get(metrics)
        if self.first_step_s is None:
            self.first_step_s = time.perf_counter() - self.t_init
        loss, errors = float(m["loss"]), int(m["errors"])
        if not math.isfinite(loss):
            kept = self.writer.last_saved
            raise NonFiniteLossError(
                f"training loss is {loss} at step {step} (epoch {(step - 1) // self.spe + 1}): "
                "stopped. "
                + (
                    f"The last good checkpoint (step {kept}) is kept in {self.writer.directory}."
                    if kept is not None
                    else "No checkpoint had been saved yet."
                )
                + " Lower train.learning_rate or check the data."
            )
        self.sums[0] += loss * self.bsz
        self.sums[1] += errors
        self.sums[2] += self.bsz
        self.reporter.step_done(step, loss, errors, self.bsz)

    def record(self, split: str, loss: float, error: float, **extra) -> None:
        rec = {
            "step": self.step,
            "epoch": self.step // self.spe,
            "split": split,
            "loss": loss,
            "error": error,
        }
        rec = _finite_record({**rec, **extra})
        if not extra.get("final"):  # the checkpoint carries the history (restore_metrics)
            self.meta.setdefault("records", []).append(rec)
        self.reporter.record(rec)

    def evaluate(self, variables, split) -> tuple[float, float]:
        return evaluate(self.eval_step, variables, split, self.tc.eval_batch_size, self.mesh)

    def validates_now(self) -> bool:
        """Whether the epoch end after ``self.step`` evaluates the validation split."""
        last = self.step == self.exp.num_steps
        done = self.step // self.spe
        return bool(len(self.ds.val)) and (not done % self.tc.eval_every_epochs or last)

    def epoch_end_reads_state(self) -> bool:
        """Whether :meth:`epoch_end` after ``self.step`` reads or changes ``self.state`` (the
        model's hook or a validation); if not, a caller holding the state elsewhere (the
        vmapped models, lockstep) need not hand it back for this epoch end."""
        return self.hook_acts(self.step // self.spe) or self.validates_now()

    def epoch_end(self) -> None:
        """Hooks, the epoch's train record, validation and best-model selection."""
        done = self.step // self.spe
        self.state = self.epoch_end_call(self.state, done)
        s = self.sums
        self.record("train", s[0] / max(s[2], 1), 100.0 * s[1] / max(s[2], 1))
        self.sums = [0.0, 0.0, 0]
        if not self.validates_now():
            return
        loss, err = self.evaluate(self.state.variables(), self.ds.val)
        self.record("val", loss, err)
        best = self.meta["best_val_error"]
        if self.tc.select_best and (best is None or err < best):
            self.meta.update(best_val_error=err, best_epoch=done)
            st = self.state
            self.state = st.replace(
                best={"params": st.params, "batch_stats": st.batch_stats, "extra": st.extra}
            )

    def save(self) -> None:
        self.meta.update(
            epoch_sums=list(self.sums),
            wall_time_s=self.elapsed0 + time.perf_counter() - self.t_start,
            epoch=self.step // self.spe,
            config=json.loads(self.exp.config.to_json_best_effort()),
        )
        self.writer.save(self.step, self.state, self.meta)

    def train(self) -> None:
        tc, ds, n = self.tc, self.ds, len(self.ds.train)
        resumed = self.step if self.exp.restored is not None else None
        self.reporter.message(describe(self.exp, resumed))
        if self.exp.restored is None:  # a resumed run has these from its first start
            self.reporter.text("config", config_text(self.exp.config))
        else:
            self.reporter.message(
                f"resuming from the checkpoint of step {self.step} in {self.writer.directory}"
            )
        # Several processes stop at one agreed step (signals.StopVote); one reads its request.
        vote = StopVote(self.stop, self.mesh)
        if vote.now():  # arrived while compiling: no step to finish
            self.stop_here(None)
        pending = None
        while self.step < self.exp.num_steps:
            idx = batch_indices(n, self.bsz, self.exp.config.seed, *divmod(self.step, self.spe))
            self.state, metrics = self.train_step(
                self.state,
                parallel.gather_batch(ds.train.images, idx, self.mesh),
                parallel.gather_batch(ds.train.labels, idx, self.mesh),
            )
            self.step += 1
            if pending is not None:  # one step behind, so the device runs ahead of this check
                self.consume(*pending)
            pending = (self.step, metrics)
            epoch_end = self.step % self.spe == 0
            save = checkpoint_due(self.step, self.spe, self.exp.num_steps, tc)
            if epoch_end or save:
                self.consume(*pending)
                pending = None
                if epoch_end:
                    self.epoch_end()
                if save:
                    self.save()
            if vote.step():
                self.stop_here(pending)
        if vote.now():  # after the last step: its checkpoint is saved
            self.stop_here(None)

    def stop_here(self, pending) -> None:
        """On SIGTERM/SIGINT: check the step, save a checkpoint at this position, raise Stopped."""
        if pending is not None:
            self.consume(*pending)
        saved = self.step != self.step0
        if saved:
            self.save()  # a no-op if this step was just saved (epoch end, interval)
        name = signal.Signals(self.stop.signum).name
        where = f"after step {self.step} of {self.exp.num_steps} (epoch {self.step / self.spe:.2f})"
        raise Stopped(
            self.stop.signum,
            f"stopped by {name} {where}: "
            + (
                f"checkpoint saved in {self.writer.directory}"
                if saved
                else f"nothing to save (no step had run since step {self.step0})"
            )
            + "; run the same command to resume",
        )

    def finish(self) -> dict:
        """Evaluate the reported model (best validation epoch or last) on val and test."""
        exp, ds, tc = self.exp, self.ds, self.tc
        final = best_variables(self.state.best) if tc.select_best else self.state.variables()
        val_loss, val_err = self.evaluate(final, ds.val)
        test_loss, test_err = self.evaluate(final, ds.test)
        model_epoch = self.meta["best_epoch"] if tc.select_best else self.step // self.spe
        label = {
            "model_epoch": model_epoch,
            "selected_by": "best validation" if tc.select_best else "last epoch",
        }
        for split, loss, err in (("val", val_loss, val_err), ("test", test_loss, test_err)):
            if math.isfinite(loss):
                self.record(split, loss, err, final=True, **label)
        finite = lambda v: v if math.isfinite(v) else None
        now = time.perf_counter()
        results = {
            "test_error": test_err,
            "test_loss": test_loss,
            "val_error": finite(val_err),
            "val_loss": finite(val_loss),
            "params": exp.num_params,
            "trainable_params": exp.num_trainable,
            "n_train": len(ds.train),
            "n_val": len(ds.val),
            "n_test": len(ds.test),
            "seed": exp.config.seed,
            "dataset": ds.name,
            "model": exp.config.model.name,
            "epochs": self.step // self.spe,
            "steps": self.step,
            "batch_size": self.bsz,
            "selected_epoch": self.meta["best_epoch"] if tc.select_best else self.step // self.spe,
            # All segments of a resumed run (up to their last checkpoint) plus this one.
            "wall_time_s": self.elapsed0 + now - self.t_start,
            # Training images per second of this process, compilation and evaluation included.
            "first_step_s": self.first_step_s,
            "images_per_s": (self.step - self.step0) * self.bsz / max(now - self.t_start, 1e-9),
            "devices": int(self.mesh.devices.size),
            "device_kind": jax.devices()[0].device_kind,
            "host": host(),
            "precision": exp.precision,
            "eval_precision": exp.eval_precision,
            "certificate": self.certificate(final),
        }
        self.reporter.finish(
            hparams(flat_config(exp.config)),
            {"final/test_error": test_err, "final/val_error": val_err},
        )
        if self.primary:
            path = os.path.join(exp.workdir, "results.json")
            with open(path + ".tmp", "w") as f:
                json.dump(results, f, indent=2)
            os.replace(path + ".tmp", path)
        return results

    def certificate(self, variables) -> dict:
        """The final model's measured invariance (:mod:`invjax.certificate`) on test images."""
        images = self.ds.test.images[: certificate.N_IMAGES]
        images = images.astype(np.float32) / (255.0 if images.dtype == np.uint8 else 1.0)
        # Replicated arrays of a multi-process run are not fully addressable: each process
        # measures its own local copy.
        local = jax.tree.map(
            lambda a: a.addressable_data(0) if isinstance(a, jax.Array) else a, variables
        )
        return certificate.certify(
            self.exp.model,
            jax.device_get(local),
            images,
            self.ds.mean,
            self.ds.std,
            (self.exp.eval_precision, P.EXACT, self.exp.precision),
        )

    def close(self) -> None:
        self.reporter.close()
        self.writer.close()


def run(exp: Experiment) -> dict:
    """Train (resuming where the checkpoints say), evaluate, write results; returns them."""
    if exp.sources is None:
        raise ValueError(
            "this experiment was prepared without its init_from sources (load_sources=False): "
            "load them with invjax.training.experiment.with_sources once they exist"
        )
    primary = jax.process_index() == 0
    with contextlib.ExitStack() as stack:
        if primary:  # re-entrant: invjax.main holds it already
            stack.enter_context(workdir_lib.locked([exp.workdir]))
        os.makedirs(exp.workdir, exist_ok=True)
        request = signals.command_request() or stack.enter_context(signals.stop_on_signals())
        try:
            return _run_loop(exp, request, primary)
        except checkpoint.SaveError:
            raise  # its message names the step, the reason and the kept checkpoint
        except OSError as e:
            kept = checkpoint.list_steps(exp.workdir)
            raise RunIOError(
                f"cannot write in {exp.workdir} ({_short_os_error(e)}): stopped. "
                + (
                    f"The last good checkpoint (step {kept[-1]}) is kept; "
                    if kept
                    else "No checkpoint had been saved; "
                )
                + "free some space (or fix the problem) and run the same command to resume."
            ) from e


def _short_os_error(e: OSError) -> str:
    if e.errno is not None and e.strerror:
        where = f": {e.filename}" if e.filename else ""
        return f"[Errno {e.errno}] {e.strerror}{where}"
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def _run_loop(exp: Experiment, request: StopRequest, primary: bool) -> dict:
    if primary:
        with open(os.path.join(exp.workdir, "config.json"), "w") as f:
            f.write(exp.config.to_json_best_effort(indent=2) + "\n")
        if exp.restored is None:  # the data this run trains on (checked when it is resumed)
            fingerprint.record(exp.workdir, exp.dataset)
    request.defer = True
    try:
        if request.signum is not None:  # arrived while this run was being prepared
            raise Interrupted(request.signum)
        loop = _Loop(exp, request)
        try:
            loop.train()
            return loop.finish()
        finally:
            loop.close()  # flushes metrics.jsonl and TensorBoard, also when stopping
    finally:
        request.defer = False
