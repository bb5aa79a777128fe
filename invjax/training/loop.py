"""The trainer of prepared runs: steps, epoch ends, checkpoints, stop requests, results.

:func:`run` trains an :class:`~invjax.training.experiment.Experiment` (resuming where its
checkpoints say), evaluates the reported model (best validation epoch or last) on val and test,
measures its invariance (:mod:`invjax.certificate`) and writes ``results.json``.

One trainer: :class:`Trainer` is one model's run (start, step, epoch end, save, finish) and
:func:`train` the one loop, which drives K of them through a stepper. A single run is K = 1
(:func:`run` is :func:`run_models` of one experiment); :mod:`invjax.training.lockstep` gives the
K models of one ``--config.seeds`` command one compiled step and, for ``'vmap'``, a stepper
that trains their lent states stacked.

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
from invjax import run as run_lib
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


class Trainer:
    """One model's run of an :class:`Experiment`, driven step by step (``meta``: module
    docstring): the one trainer of invjax. :func:`train` drives K of them through a stepper
    (:class:`OwnSteps`; a single run is K = 1), :mod:`invjax.training.lockstep` K of one config.

    The driver's calls, per step: the stepper advances every unfinished trainer (:meth:`advance`
    with its own compiled step, or :meth:`stepped` after a step taken elsewhere on the state it
    was lent, :meth:`lend_state`); where :meth:`due` says an epoch ends or a checkpoint is due,
    the stepper returns the states that :meth:`reads_state` asks for and :meth:`at_boundary`
    does the epoch end and the save; on a stop, :meth:`stop_save`; at the end :meth:`finish`,
    then :meth:`close`.
    """

    def __init__(
        self,
        exp: Experiment,
        stop: StopRequest | None = None,
        label=None,
        position=None,
        steps=None,
        init=None,
    ):
        """``label``/``position``: this model's among the K of one command (:class:`Reporter`);
        ``steps``: the ``(train, evaluate)`` pair of :func:`~invjax.training.steps.jit_steps`
        compiled for several models (their statistics are arguments; this model's are put in),
        None: this model's own; ``init``: the state factory (``make`` of
        :func:`~invjax.training.state.state_factory`) of a model of the same network, optimiser
        and ``init_from`` prefixes, traced once for several models (this model's seed and
        sources are its arguments), None: this model's own."""
        self.t_init = time.perf_counter()
        self.first_step_s = None  # loop start -> first finished step (compilation included)
        self.exp, self.tc, self.ds, self.mesh = exp, exp.config.train, exp.dataset, exp.mesh
        self.stop = stop or StopRequest()
        self.primary = jax.process_index() == 0
        self.spe, self.bsz = exp.steps_per_epoch, self.tc.batch_size
        self.epoch_end_images = None  # made where the model's hook first acts (epoch_end_call)
        # the model's epoch hooks, if it has them (invjax.contract.EpochHooks)
        self.on_epoch_end = exp.model.on_epoch_end if isinstance(exp.model, EpochHooks) else None
        if exp.restored is not None:
            self.state, self.meta = exp.restored.state, exp.restored.meta
            if self.primary:
                self.meta["records"] = restore_metrics(exp.workdir, exp.restored)
        else:
            make, args = state_factory(
                exp.model,
                exp.tx,
                self.ds.image_shape,
                exp.config.seed,
                bool(self.tc.select_best),
                exp.sources,
            )
            state = initial_state(
                make if init is None else init, args, parallel.replicated(self.mesh)
            )
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
        if steps is None:
            steps = jit_steps(
                exp.model, exp.tx, self.ds.augment, self.mesh, exp.precision, exp.eval_precision
            )[:2]
        self.train_step, self.eval_step = with_stats(*steps, self.ds.mean, self.ds.std, self.mesh)
        self.pending = None  # the last step's metrics, fetched one step later (stepped)
        self.lent = False  # the state is being trained elsewhere (lend_state)
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
        if self.epoch_end_images is None:
            images = self.ds.train.images[: min(self.bsz, len(self.ds.train))]
            self.epoch_end_images = data_lib.to_float(images, self.ds.mean, self.ds.std)
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
        if self.hook_acts(done):
            self.state = self.epoch_end_call(self._own_state(), done)
        s = self.sums
        self.record("train", s[0] / max(s[2], 1), 100.0 * s[1] / max(s[2], 1))
        self.sums = [0.0, 0.0, 0]
        if not self.validates_now():
            return
        loss, err = self.evaluate(self._own_state().variables(), self.ds.val)
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
        self.writer.save(self.step, self._own_state(), self.meta)

    def start(self) -> None:
        """What a run says and writes before its first step: the banner, the config (a fresh
        run) or where it resumes."""
        resumed = self.step if self.exp.restored is not None else None
        self.reporter.message(describe(self.exp, resumed))
        if self.exp.restored is None:  # a resumed run has these from its first start
            self.reporter.text("config", config_text(self.exp.config))
        else:
            self.reporter.message(
                f"resuming from the checkpoint of step {self.step} in {self.writer.directory}"
            )

    @property
    def done(self) -> bool:
        return self.step >= self.exp.num_steps

    def batch_indices(self) -> np.ndarray:
        """The training samples of the next step (``batch_indices`` of this run's seed)."""
        epoch, index = divmod(self.step, self.spe)
        return batch_indices(len(self.ds.train), self.bsz, self.exp.config.seed, epoch, index)

    def advance(self) -> None:
        """One train step on this model's own state with its own compiled step."""
        idx = self.batch_indices()
        self.state, metrics = self.train_step(
            self._own_state(),
            parallel.gather_batch(self.ds.train.images, idx, self.mesh),
            parallel.gather_batch(self.ds.train.labels, idx, self.mesh),
        )
        self.stepped(metrics)

    def stepped(self, metrics) -> None:
        """Count one step taken (by :meth:`advance`, or elsewhere on the lent state); its
        ``metrics`` (or a function returning them) are fetched one step later, so that the
        device runs ahead of the check of the previous step's loss."""
        self.step += 1
        self.flush()
        self.pending = (self.step, metrics)

    def flush(self) -> None:
        """Fetch and check the held step's metrics (:meth:`consume`)."""
        if self.pending is not None:
            step, metrics = self.pending
            self.pending = None
            self.consume(step, metrics() if callable(metrics) else metrics)

    def due(self) -> tuple[bool, bool]:
        """``(epoch end, checkpoint due)`` after the current step."""
        epoch_end = self.step % self.spe == 0
        return epoch_end, checkpoint_due(self.step, self.spe, self.exp.num_steps, self.tc)

    def reads_state(self) -> bool:
        """Whether :meth:`at_boundary` after the current step reads the state (a save, or an
        epoch end that reads it: :meth:`epoch_end_reads_state`)."""
        epoch_end, save = self.due()
        return save or (epoch_end and self.epoch_end_reads_state())

    def at_boundary(self) -> None:
        """The epoch end and the checkpoint that :meth:`due` names, after fetching the step's
        metrics (a NaN loss stops before anything saves that state)."""
        epoch_end, save = self.due()
        self.flush()
        if epoch_end:
            self.epoch_end()
        if save:
            self.save()

    def lend_state(self):
        """This model's state, handed to a stepper that trains it elsewhere (K models stacked
        into one program); :meth:`return_state` gives it back. Until then :meth:`advance` and
        whatever reads the state refuse to run."""
        state = self._own_state()
        self.state, self.lent = None, True
        return state

    def return_state(self, state) -> None:
        """Take back the state lent by :meth:`lend_state`, trained to the current step."""
        self.state, self.lent = state, False

    def _own_state(self):
        if self.lent:
            raise RuntimeError(
                f"the state of {self.exp.workdir} is lent to a stepper (lend_state): it must be "
                "returned (return_state) before this model reads it"
            )
        return self.state

    def stop_save(self) -> bool:
        """On a stop request: fetch the held metrics and save a checkpoint at this step (a no-op
        if it was just saved); False if no step has run since the start (nothing to save)."""
        self.flush()
        if self.step == self.step0:
            return False
        self.save()
        return True

    def finish(self) -> dict:
        """Evaluate the reported model (best validation epoch or last) on val and test."""
        exp, ds, tc = self.exp, self.ds, self.tc
        st = self._own_state()
        final = best_variables(st.best) if tc.select_best else st.variables()
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
            run_lib.write_json_atomic(os.path.join(exp.workdir, run_lib.RESULTS_FILE), results)
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


class OwnSteps:
    """The stepper of :func:`train` where each model steps with its own compiled step on its own
    state (a single run; K models of one config by one shared step, lockstep's ``'loop'``)."""

    def step(self, trainers: list[Trainer]) -> None:
        for t in trainers:
            t.advance()

    def hand_back(self, trainers: list[Trainer]) -> None:
        """Every model holds its own state already."""


def train(trainers: list[Trainer], stop: StopRequest, stepper=None) -> None:
    """Train ``trainers`` to their last step, each step of every unfinished model by
    ``stepper`` (:class:`OwnSteps` when None; it has ``step(trainers)``, which calls each
    trainer's :meth:`~Trainer.advance` or :meth:`~Trainer.stepped`, and ``hand_back(trainers)``,
    which returns their lent states), each model's epoch ends and checkpoints where it is due.
    On SIGTERM/SIGINT every model saves at its step and :class:`Stopped` is raised (several
    processes stop at one agreed step: :class:`~invjax.training.signals.StopVote`)."""
    stepper = OwnSteps() if stepper is None else stepper
    for t in trainers:
        t.start()
    vote = StopVote(stop, trainers[0].mesh)
    if vote.now():  # arrived while compiling: no step to finish
        _stop(trainers, stop, stepper)
    while active := [t for t in trainers if not t.done]:
        stepper.step(active)
        due = [t for t in active if any(t.due())]
        if due:
            stepper.hand_back([t for t in due if t.reads_state()])
            for t in due:
                t.at_boundary()
        if vote.step():
            _stop(trainers, stop, stepper)
    if vote.now():  # after the last step: its checkpoint is saved
        _stop(trainers, stop, stepper)
    stepper.hand_back(trainers)


def _stop(trainers: list[Trainer], stop: StopRequest, stepper) -> None:
    """On SIGTERM/SIGINT: every model checks its step and saves a checkpoint there; Stopped."""
    stepper.hand_back(trainers)
    saved = [t.writer.directory for t in trainers if t.stop_save()]
    name = signal.Signals(stop.signum).name
    if len(trainers) == 1:
        t = trainers[0]
        where = f"after step {t.step} of {t.exp.num_steps} (epoch {t.step / t.spe:.2f})"
        what = (
            f"checkpoint saved in {saved[0]}"
            if saved
            else f"nothing to save (no step had run since step {t.step0})"
        )
        message = f"stopped by {name} {where}: {what}"
    else:
        where = ", ".join(f"seed {t.exp.config.seed} after step {t.step}" for t in trainers)
        what = f"checkpoints saved in {', '.join(saved)}" if saved else "nothing to save"
        message = f"stopped by {name} with {len(trainers)} models ({where}): {what}"
    raise Stopped(stop.signum, message + "; run the same command to resume")


def run(exp: Experiment) -> dict:
    """Train (resuming where the checkpoints say), evaluate, write results; returns them
    (:func:`run_models` of this one experiment)."""
    return run_models([exp])[0]


def run_models(exps: list[Experiment], strategy=None, lock: bool = True) -> list[dict]:
    """Train (resuming where each model's checkpoints say) and evaluate the experiments side by
    side, writing and returning each one's results; ``lock``: take each workdir's lock (the
    caller may hold them: re-entrant). ``strategy`` builds the trainers and their stepper:
    ``trainer(exp, k, stop)`` and ``stepper(trainers)`` (:mod:`invjax.training.lockstep`);
    None: each experiment its own :class:`Trainer` and :class:`OwnSteps`."""
    for exp in exps:
        if exp.sources is None:
            raise ValueError(
                "this experiment was prepared without its init_from sources (load_sources=False)"
                ": load them with invjax.training.experiment.with_sources once they exist"
            )
    primary = jax.process_index() == 0
    with contextlib.ExitStack() as stack:
        if primary and lock:  # re-entrant: invjax.main holds it already
            stack.enter_context(workdir_lib.locked([exp.workdir for exp in exps]))
        for exp in exps:
            os.makedirs(exp.workdir, exist_ok=True)
        request = signals.command_request() or stack.enter_context(signals.stop_on_signals())
        try:
            return _run_models(exps, strategy or _Own(), request, primary)
        except checkpoint.SaveError:
            raise  # its message names the step, the reason and the kept checkpoint
        except OSError as e:
            raise RunIOError(_io_message(exps, e)) from e


class _Own:
    """:func:`run_models`' default strategy: each experiment its own trainer and steps."""

    def trainer(self, exp: Experiment, k: int, stop: StopRequest) -> Trainer:
        del k
        return Trainer(exp, stop)

    def stepper(self, trainers: list[Trainer]) -> OwnSteps:
        del trainers
        return OwnSteps()


def _io_message(exps: list[Experiment], e: OSError) -> str:
    """The message of a failed write in the workdirs: what failed and the kept checkpoints."""
    if len(exps) > 1:
        return (
            f"cannot write in the models' workdirs ({short_os_error(e)}): stopped. Each model "
            "keeps its last good checkpoint; free some space (or fix the problem) and run the "
            "same command to resume."
        )
    workdir = exps[0].workdir
    kept = checkpoint.list_steps(workdir)
    return (
        f"cannot write in {workdir} ({short_os_error(e)}): stopped. "
        + (
            f"The last good checkpoint (step {kept[-1]}) is kept; "
            if kept
            else "No checkpoint had been saved; "
        )
        + "free some space (or fix the problem) and run the same command to resume."
    )


def short_os_error(e: OSError) -> str:
    """One line of an OSError: ``[Errno N] reason: path`` where it has them."""
    if e.errno is not None and e.strerror:
        where = f": {e.filename}" if e.filename else ""
        return f"[Errno {e.errno}] {e.strerror}{where}"
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def _run_models(exps, strategy, request: StopRequest, primary: bool) -> list[dict]:
    if primary:
        for exp in exps:
            with open(os.path.join(exp.workdir, run_lib.CONFIG_FILE), "w") as f:
                f.write(exp.config.to_json_best_effort(indent=2) + "\n")
            if exp.restored is None:  # the data this run trains on (checked when it is resumed)
                fingerprint.record(exp.workdir, exp.dataset)
    request.defer = True
    trainers: list[Trainer] = []
    try:
        if request.signum is not None:  # arrived while the runs were being prepared
            raise Interrupted(request.signum)
        for k, exp in enumerate(exps):
            trainers.append(strategy.trainer(exp, k, request))
        train(trainers, request, strategy.stepper(trainers))
        return [t.finish() for t in trainers]
    finally:
        for t in trainers:
            t.close()  # flushes metrics.jsonl and TensorBoard, also when stopping
        request.defer = False
