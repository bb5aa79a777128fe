"""K prepared runs trained side by side in one process, by one compiled step (``config.seeds``).

:func:`run` takes the :class:`~invjax.training.experiment.Experiment` of each model (the same
config but for the seed, so the same network, optimiser and step shapes) and trains them in
lock-step. Everything a single run does per model (epoch ends, the model's ``on_epoch_end``,
evaluation, checkpoints, ``metrics.jsonl``, TensorBoard, ``results.json``, SIGTERM) is the
single run's own code: :func:`invjax.training.loop.run_models` drives one
:class:`invjax.training.loop.Trainer` per model, given the shared compiled steps (a single run
is the same driver with K = 1). Only the stepping is here, in one of two strategies:

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
    lent by the models' trainers (:meth:`~invjax.training.loop.Trainer.lend_state`) and split
    back into their own states only where an epoch end or a checkpoint reads them, then stacked
    again; the results equal the loop's up to float32 rounding.

Every model's batch is the single run's ``batch_indices(n, B, seed_k, epoch, index)``, its
dropout and augmentation keys come from its own state's ``rng``: model k is the run with seed k.
"""

from __future__ import annotations

import functools
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from invjax import parallel
from invjax.training.experiment import Experiment, flat_config
from invjax.training.loop import OwnSteps, Trainer, run_models
from invjax.training.signals import StopRequest
from invjax.training.state import state_factory
from invjax.training.steps import jit_steps, under_precision

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
        self._makes = {}

    def make(self, exp: Experiment):
        """The state factory of the models of this network with ``exp``'s ``init_from``
        prefixes (:func:`~invjax.training.state.state_factory`: their seeds and source
        variables are its arguments), built once: their initialisation is traced once."""
        key = tuple((a, b) for _, a, b in exp.sources)
        if key not in self._makes:
            tc = exp.config.train
            self._makes[key] = state_factory(
                exp.model, exp.tx, exp.dataset.image_shape, 0, bool(tc.select_best), exp.sources
            )[0]
        return self._makes[key]

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
    """The stepper of K models at one step (``'vmap'``): their states, lent by their trainers,
    stacked on a leading axis ``[K, ...]`` on the ``('model', 'data')`` mesh, and each step's
    batches ``[K, B, ...]`` gathered from the models' own subsets."""

    def __init__(self, steps: SharedSteps, trainers: list[Trainer]):
        self.trainers = trainers
        self.step_fn, self.mesh = steps.vmapped(len(trainers))
        self.models = NamedSharding(self.mesh, P(MODEL_AXIS))
        self.batches = NamedSharding(self.mesh, P(MODEL_AXIS, parallel.DATA_AXIS))
        self.mean = jax.device_put(np.stack([t.ds.mean for t in trainers]), self.models)
        self.std = jax.device_put(np.stack([t.ds.std for t in trainers]), self.models)
        self.state = None

    def stack(self) -> None:
        trees = [t.lend_state() for t in self.trainers]
        stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *trees)
        self.state = jax.device_put(stacked, self.models)

    def unstack(self) -> None:
        """Each model's trainer gets its own slice (replicated on its mesh) back."""
        if self.state is None:
            return
        for k, t in enumerate(self.trainers):
            t.return_state(
                parallel.replicate(jax.tree.map(lambda a, k=k: a[k], self.state), t.mesh)
            )
        self.state = None

    def step(self, trainers: list[Trainer]) -> None:
        """One step of every model (all are at the same step: lock-step since the start)."""
        if self.state is None:
            self.stack()
        idx = [t.batch_indices() for t in self.trainers]
        images = np.stack([np.asarray(t.ds.train.images[i]) for t, i in zip(self.trainers, idx)])
        labels = np.stack([np.asarray(t.ds.train.labels[i]) for t, i in zip(self.trainers, idx)])
        self.state, metrics = self.step_fn(
            self.state,
            jax.device_put(images, self.batches),
            jax.device_put(labels, self.batches),
            self.mean,
            self.std,
        )
        host = functools.cache(lambda: jax.device_get(metrics))  # one transfer for all K
        for k, t in enumerate(self.trainers):
            t.stepped(functools.partial(_model_metrics, host, k))

    def hand_back(self, trainers: list[Trainer]) -> None:
        """The models' own states back where one of ``trainers`` reads its state: at N_t <= B
        every step is an epoch end, and splitting and stacking K states at each cost a quarter
        of the training loop's time on CPU (docs/many_models.md)."""
        if trainers:
            self.unstack()


def _model_metrics(host, k: int) -> dict:
    m = host()
    return {"loss": m["loss"][k], "errors": m["errors"][k]}


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


class _Strategy:
    """How :func:`invjax.training.loop.run_models` builds the K models' trainers (one
    :class:`SharedSteps` per network: :func:`step_key`) and their stepper."""

    def __init__(self, strategy: str, say):
        self.strategy, self.say = strategy, say
        self.shared: dict[str, SharedSteps] = {}

    def trainer(self, exp: Experiment, k: int, stop: StopRequest) -> Trainer:
        key = step_key(exp)
        if key not in self.shared:
            self.shared[key] = SharedSteps(exp)
        steps = self.shared[key]
        # every line a model prints starts with its seed
        label = f"seed {exp.config.seed}"
        return Trainer(
            exp,
            stop,
            label=label,
            position=k,
            steps=(steps.train, steps.eval),
            init=steps.make(exp),
        )

    def stepper(self, trainers: list[Trainer]):
        if self.strategy != "vmap":
            return OwnSteps()
        if len(self.shared) == 1 and len({t.step for t in trainers}) == 1:
            return _Stacked(next(iter(self.shared.values())), trainers)
        self.say(
            "models at different steps (or of different networks): trained one by one by the "
            "shared step this time ('loop')"
        )
        return OwnSteps()


def run(exps: list[Experiment], strategy: str = "loop", say=print) -> list[dict]:
    """Train (resuming where each model's checkpoints say) and evaluate the models of ``exps``
    side by side; writes and returns each model's results, as :func:`invjax.training.loop.run`
    does for one. The caller holds the workdirs' locks."""
    return run_models(exps, _Strategy(strategy, say), lock=False)
