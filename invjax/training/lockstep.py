"""K prepared runs trained side by side in one process, by one compiled step (``config.seeds``).

:func:`run` takes the :class:`~invjax.training.experiment.Experiment` of each model (the same
config but for the seed, so the same network, optimiser and step shapes) and trains them in
lock-step. Everything a single run does per model (epoch ends, the model's ``on_epoch_end``,
evaluation, checkpoints, ``metrics.jsonl``, TensorBoard, ``results.json``, SIGTERM) is the
single run's own code: one :class:`invjax.training.loop._Loop` per model, whose jitted steps
are replaced by the shared ones. Only the stepping is here, in one of two strategies:

``'loop'``
    One compiled train step ``(state, images, labels, mean, std)`` called once per model per
    step (:func:`invjax.training.steps.jit_steps`: the channel statistics of each model's
    training subset are arguments), so the step compiles once for all K models. It is the
    single run's own program: model k equals the run with seed k bit for bit.
``'vmap'``
    ``jax.vmap`` of that step over the models' stacked states and batches ``[K, B, ...]``:
    one program per step for all K. On a ``('model', 'data')`` mesh (:func:`model_mesh`) the
    models are spread over the devices, each model's batch over the devices of its row. A
    convolution vmapped over its weights becomes a grouped convolution, whose speed depends on
    the backend (docs/many_models.md: on CPU it is slower than the loop). The stacked state is
    split into the models' own states at every epoch end and checkpoint, and stacked again
    after; the results equal the loop's up to float32 rounding.

Every model's batch is the single run's ``batch_indices(n, B, seed_k, epoch, index)``, its
dropout and augmentation keys come from its own state's ``rng``: model k is the run with seed k.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import signal

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from invjax import checkpoint, parallel
from invjax.data import fingerprint
from invjax.training import loop as loop_lib
from invjax.training import signals
from invjax.training.experiment import Experiment, config_text, describe, flat_config
from invjax.training.signals import Interrupted, Stopped, StopRequest, StopVote
from invjax.training.steps import batch_indices, jit_steps, under_precision, with_stats

MODEL_AXIS = "model"
STRATEGIES = ("loop", "vmap")


def model_mesh(num_models: int, devices=None) -> Mesh:
    """A ``('model', 'data')`` mesh: ``gcd(K, devices)`` rows of models, each row's batch split
    over the rest (1 device: one row and one column)."""
    devices = list(jax.devices() if devices is None else devices)
    rows = math.gcd(num_models, len(devices))
    grid = np.asarray(devices).reshape(rows, len(devices) // rows)
    return Mesh(grid, (MODEL_AXIS, parallel.DATA_AXIS))


def step_key(exp: Experiment) -> str:
    """What must agree for two models to share one compiled step: the network, the optimiser
    recipe (its ``init_from`` sources aside), the augmentation, shapes and arithmetic."""
    train = {
        k: v
        for k, v in flat_config(exp.config).items()
        if k.startswith("train.") and k != "train.init_from"
    }
    return json.dumps(
        [
            {k: v for k, v in flat_config(exp.config).items() if k.startswith("model.")},
            train,
            exp.dataset.augment,
            list(exp.dataset.image_shape),
            exp.steps_per_epoch,
            exp.precision,
            exp.eval_precision,
            [str(d) for d in exp.mesh.devices.flat],
        ],
        sort_keys=True,
        default=str,
    )


class SharedSteps:
    """The jitted train and eval steps of one network, with the subset's ``mean``/``std`` as
    arguments: compiled once, used by every model (``'loop'``), and the vmapped train step over
    stacked models (``'vmap'``, built on first use)."""

    def __init__(self, exp: Experiment):
        self.exp = exp
        self.train, self.eval, self._train = jit_steps(
            exp.model, exp.tx, exp.dataset.augment, exp.mesh, exp.precision, exp.eval_precision
        )
        self._vmapped = {}

    def bind(self, lp) -> None:
        """Give a model's loop the shared steps, with its own subset's statistics."""
        lp.train_step, lp.eval_step = with_stats(
            self.train, self.eval, lp.ds.mean, lp.ds.std, lp.mesh
        )

    def vmapped(self, num_models: int):
        """``(step, mesh)``: the train step over ``K`` stacked models on :func:`model_mesh`."""
        if num_models not in self._vmapped:
            mesh = model_mesh(num_models)
            m = NamedSharding(mesh, P(MODEL_AXIS))
            mb = NamedSharding(mesh, P(MODEL_AXIS, parallel.DATA_AXIS))
            step = jax.jit(
                jax.vmap(self._train), in_shardings=(m, mb, mb, m, m), out_shardings=(m, m)
            )
            self._vmapped[num_models] = (under_precision(step, self.exp.precision), mesh)
        return self._vmapped[num_models]


class _Stacked:
    """The models' states stacked on a leading axis ``[K, ...]`` on the ``('model', 'data')``
    mesh, and each step's batches ``[K, B, ...]`` gathered from the models' own subsets."""

    def __init__(self, steps: SharedSteps, loops):
        self.loops = loops
        self.step, self.mesh = steps.vmapped(len(loops))
        self.models = NamedSharding(self.mesh, P(MODEL_AXIS))
        self.batches = NamedSharding(self.mesh, P(MODEL_AXIS, parallel.DATA_AXIS))
        self.mean = jax.device_put(np.stack([lp.ds.mean for lp in loops]), self.models)
        self.std = jax.device_put(np.stack([lp.ds.std for lp in loops]), self.models)
        self.state = None

    def stack(self) -> None:
        trees = [lp.state for lp in self.loops]
        stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *trees)
        self.state = jax.device_put(stacked, self.models)

    def unstack(self) -> None:
        """Each model's loop gets its own slice (replicated on its mesh) back."""
        if self.state is None:
            return
        for k, lp in enumerate(self.loops):
            lp.state = parallel.replicate(jax.tree.map(lambda a, k=k: a[k], self.state), lp.mesh)
        self.state = None

    def train_step(self):
        if self.state is None:
            self.stack()
        idx = [
            batch_indices(len(lp.ds.train), lp.bsz, lp.exp.config.seed, *divmod(lp.step, lp.spe))
            for lp in self.loops
        ]
        images = np.stack([np.asarray(lp.ds.train.images[i]) for lp, i in zip(self.loops, idx)])
        labels = np.stack([np.asarray(lp.ds.train.labels[i]) for lp, i in zip(self.loops, idx)])
        self.state, metrics = self.step(
            self.state,
            jax.device_put(images, self.batches),
            jax.device_put(labels, self.batches),
            self.mean,
            self.std,
        )
        return metrics


def resolve(strategy: str | None) -> str:
    """``'auto'``/None -> ``'loop'`` on CPU (a vmapped convolution's weight gradient is a slow
    grouped convolution there, docs/many_models.md), ``'vmap'`` on accelerators; ``'vmap'``
    needs one process (the stacked batches are gathered on the host)."""
    strategy = "auto" if strategy is None else strategy
    if strategy == "auto":
        strategy = "loop" if jax.default_backend() == "cpu" else "vmap"
    if strategy == "vmap" and jax.process_count() > 1:
        strategy = "loop"
    return strategy


def run(exps: list[Experiment], strategy: str = "loop", say=print) -> list[dict]:
    """Train (resuming where each model's checkpoints say) and evaluate the models of ``exps``
    side by side; writes and returns each model's results, as :func:`invjax.training.loop.run`
    does for one. The caller holds the workdirs' locks."""
    for exp in exps:
        if exp.sources is None:
            raise ValueError("experiments must be prepared with their init_from sources")
    primary = jax.process_index() == 0
    with contextlib.ExitStack() as stack:
        for exp in exps:
            os.makedirs(exp.workdir, exist_ok=True)
        request = signals.command_request() or stack.enter_context(signals.stop_on_signals())
        try:
            return _run(exps, strategy, request, primary, say)
        except checkpoint.SaveError:
            raise
        except OSError as e:
            raise loop_lib.RunIOError(
                f"cannot write in the models' workdirs ({loop_lib._short_os_error(e)}): stopped. "
                "Each model keeps its last good checkpoint; free some space (or fix the problem) "
                "and run the same command to resume."
            ) from e


def _run(exps, strategy: str, request: StopRequest, primary: bool, say) -> list[dict]:
    if primary:
        for exp in exps:
            with open(os.path.join(exp.workdir, "config.json"), "w") as f:
                f.write(exp.config.to_json_best_effort(indent=2) + "\n")
            if exp.restored is None:  # as invjax.training.loop records a single run's
                fingerprint.record(exp.workdir, exp.dataset)
    request.defer = True
    loops = []
    try:
        if request.signum is not None:
            raise Interrupted(request.signum)
        shared: dict[str, SharedSteps] = {}
        for k, exp in enumerate(exps):  # every line a model prints starts with its seed
            lp = loop_lib._Loop(exp, request, label=f"seed {exp.config.seed}", position=k)
            loops.append(lp)
            key = step_key(exp)
            shared.setdefault(key, SharedSteps(exp)).bind(lp)
        stacked = None
        if strategy == "vmap":
            if len(shared) == 1 and len({lp.step for lp in loops}) == 1:
                stacked = _Stacked(next(iter(shared.values())), loops)
            else:
                say(
                    "models at different steps (or of different networks): trained one by one "
                    "by the shared step this time ('loop')"
                )
        _train(loops, request, stacked)
        if stacked is not None:  # the last step is an epoch end, which unstacked already
            stacked.unstack()
        return [lp.finish() for lp in loops]
    finally:
        for lp in loops:
            lp.close()
        request.defer = False


def _start(lp) -> None:
    """What a single run says and writes before its first step (``_Loop.train``)."""
    resumed = lp.step if lp.exp.restored is not None else None
    lp.reporter.message(describe(lp.exp, resumed))
    if lp.exp.restored is None:
        lp.reporter.text("config", config_text(lp.exp.config))
    else:
        lp.reporter.message(
            f"resuming from the checkpoint of step {lp.step} in {lp.writer.directory}"
        )


def _boundary(lp) -> tuple[bool, bool]:
    """(epoch end, checkpoint due) after ``lp.step``, as a single run decides them."""
    save = loop_lib.checkpoint_due(lp.step, lp.spe, lp.exp.num_steps, lp.tc)
    return lp.step % lp.spe == 0, save


def _train(loops, request: StopRequest, stacked: _Stacked | None) -> None:
    for lp in loops:
        _start(lp)
    pending = [None] * len(loops)
    vote = StopVote(request, loops[0].mesh)  # several processes stop at one agreed step
    if vote.now():
        _stop(loops, pending, request, stacked)
    while True:
        active = [k for k, lp in enumerate(loops) if lp.step < lp.exp.num_steps]
        if not active:
            break
        if stacked is not None:  # all models at the same step (lock-step since the start)
            metrics = stacked.train_step()
            for lp in loops:
                lp.step += 1
            _vmapped_done(loops, pending, metrics)
            epoch_end, save = _boundary(loops[0])
            if epoch_end or save:
                _consume_all(loops, pending)
                # each model's state back only where it is read: at N_t <= B every step is an
                # epoch end, and splitting and stacking K states at each cost a quarter of the
                # training loop's time on CPU (docs/many_models.md)
                if save or (epoch_end and any(lp.epoch_end_reads_state() for lp in loops)):
                    stacked.unstack()
                for lp in loops:
                    if epoch_end:
                        lp.epoch_end()
                    if save:
                        lp.save()
        else:
            for k in active:
                lp = loops[k]
                idx = batch_indices(
                    len(lp.ds.train), lp.bsz, lp.exp.config.seed, *divmod(lp.step, lp.spe)
                )
                lp.state, metrics = lp.train_step(
                    lp.state,
                    parallel.gather_batch(lp.ds.train.images, idx, lp.mesh),
                    parallel.gather_batch(lp.ds.train.labels, idx, lp.mesh),
                )
                lp.step += 1
                if pending[k] is not None:  # one step behind, as a single run
                    lp.consume(*pending[k])
                pending[k] = (lp.step, metrics)
                epoch_end, save = _boundary(lp)
                if epoch_end or save:
                    lp.consume(*pending[k])
                    pending[k] = None
                    if epoch_end:
                        lp.epoch_end()
                    if save:
                        lp.save()
        if vote.step():
            _stop(loops, pending, request, stacked)
    if vote.now():
        _stop(loops, pending, request, stacked)


def _vmapped_done(loops, pending, metrics) -> None:
    """Queue the stacked metrics of this step; consume the previous step's (one behind)."""
    _consume_all(loops, pending)
    host = functools.cache(lambda: jax.device_get(metrics))  # one transfer for all K
    for k, lp in enumerate(loops):
        pending[k] = (lp.step, functools.partial(_model_metrics, host, k))


def _model_metrics(host, k: int) -> dict:
    m = host()
    return {"loss": m["loss"][k], "errors": m["errors"][k]}


def _consume_all(loops, pending) -> None:
    for k, lp in enumerate(loops):
        if pending[k] is not None:
            step, metrics = pending[k]
            lp.consume(step, metrics() if callable(metrics) else metrics)
            pending[k] = None


def _stop(loops, pending, request: StopRequest, stacked) -> None:
    """On SIGTERM/SIGINT: every model checks its step and saves a checkpoint there; Stopped."""
    _consume_all(loops, pending)
    if stacked is not None:
        stacked.unstack()
    saved = []
    for lp in loops:
        if lp.step != lp.step0:
            lp.save()
            saved.append(lp.writer.directory)
    name = signal.Signals(request.signum).name
    where = ", ".join(f"seed {lp.exp.config.seed} after step {lp.step}" for lp in loops)
    raise Stopped(
        request.signum,
        f"stopped by {name} with {len(loops)} models ({where}): "
        + (f"checkpoints saved in {', '.join(saved)}" if saved else "nothing to save")
        + "; run the same command to resume",
    )
