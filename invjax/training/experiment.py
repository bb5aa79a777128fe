"""One run, checked and loaded: :func:`prepare` builds the :class:`Experiment` that the loop runs.

Preparing validates the config, loads the dataset (once: :func:`invjax.training.loop.run` and the
multi-stage plan of :mod:`invjax.training.plan` both use what it built), builds the model and
checks its shapes abstractly, builds the optimiser, loads the ``init_from`` sources and reads the
workdir's checkpoints (same experiment, readable). No training compute; nothing is written.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
from absl import logging

from invjax import checkpoint, models, parallel
from invjax import data as data_lib
from invjax import precision as P
from invjax.contract import EpochHooks
from invjax.data import fingerprint
from invjax.layers.scale import describe_lowerings
from invjax.logging_utils import banner
from invjax.run import check_resume_config, flat_config
from invjax.training import memory
from invjax.training.optimizer import (
    count_trainable,
    is_int,
    make_optimizer,
    resolve_train,
    validate_train_config,
)
from invjax.training.state import graft, init_variables, state_factory
from invjax.trees import count_params

#: The longest run :func:`prepare` accepts, in optimiser steps (``num_epochs`` x steps per epoch):
#: 10^7 steps are 28 h at 10 ms a step, 100x the paper's longest schedule (CIFAR-10, 200 epochs
#: of 391 steps = 78,200); a larger ``train.num_epochs`` is a typo (``1e12``), not a plan.
MAX_STEPS = 10**7

#: The share of their initial values (mean 0, variance 1) that BatchNorm's running statistics may
#: still hold at the end of a run before :func:`bn_statistics_warning` speaks: ``momentum ** steps``.
BN_RESIDUAL_LIMIT = 0.01


def config_text(config) -> str:
    """The config as a Markdown table for TensorBoard's TEXT tab."""
    rows = [f"| {k} | {v!r} |" for k, v in sorted(flat_config(config).items())]
    return "\n".join(["| key | value |", "|---|---|", *rows])


@dataclasses.dataclass
class Experiment:
    """A validated run, ready to compute: built by :func:`prepare`, run by :func:`run`."""

    config: Any
    workdir: str
    dataset: Any
    model: Any
    mesh: Any
    tx: Any
    steps_per_epoch: int
    num_steps: int
    sources: list | None  # None: prepared with load_sources=False (see with_sources)
    restored: checkpoint.Restored | None
    num_params: int
    num_trainable: int
    precision: str = "default"  # arithmetic of the train steps (invjax.precision)
    eval_precision: str = P.EXACT  # arithmetic of evaluation and of the certificate
    state_bytes: int = 0  # of one checkpoint's arrays (the start-up free-space check)
    variables: Any = None  # the model's abstract variables (ShapeDtypeStructs)
    activation_bytes: int = 0  # one image's largest intermediate (training.memory)


def _abstract(tree, sharding):
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding), tree)


def prepare(config, workdir: str, load_sources: bool = True, dataset=None) -> Experiment:
    """Check everything and load what is on disk; no training compute. ValueError if bad input.

    Order: config values, dataset (N_t, shapes), model on the dataset's image shape (abstractly),
    optimiser and trainable prefixes, init_from sources, then the workdir's checkpoints (config
    match, readability). Nothing in ``workdir`` is written.

    ``load_sources=False`` checks everything but the ``init_from`` sources (runs that do not
    exist yet: phase 2 while phase 1 still has to train); :func:`with_sources` loads them later.
    ``dataset``: the already loaded ``data_lib.load(config.data)`` (stages of one plan share
    it); None loads it.
    """
    for section in ("data", "model", "train"):
        if section not in config:
            raise ValueError(
                f"config has no {section!r} section: start from invjax/configs/base.py"
            )
    seed = config.seed
    if not is_int(seed) or not 0 <= seed < 2**31:
        raise ValueError(f"seed={seed!r} is invalid: it must be an integer in [0, 2**31)")
    validate_train_config(config.train)
    with config.unlocked():  # the schedule in epochs, as runs store it (plan.resolve)
        config.train = resolve_train(config.train)
    tc = config.train
    precision = P.check(config.get("precision", "default"), "precision")
    eval_precision = P.check(config.get("eval_precision", P.EXACT), "eval_precision")
    mesh = parallel.make_mesh()
    parallel.check_batch_size(tc.batch_size, mesh, "train.batch_size")

    data_lib.check_config(config.data)
    ds = data_lib.load(config.data) if dataset is None else dataset
    if tc.select_best and len(ds.val) == 0:
        raise ValueError(
            "train.select_best=True needs a validation split, but data.val_fraction="
            f"{config.data.val_fraction} leaves none: set data.val_fraction > 0 or "
            "train.select_best=False"
        )
    num_classes = config.model.get("num_classes")
    if num_classes is None:
        with config.unlocked():
            config.model.num_classes = ds.num_classes
    elif num_classes != ds.num_classes:
        raise ValueError(
            f"model.num_classes={num_classes} but dataset {ds.name!r} has {ds.num_classes} "
            "classes: leave model.num_classes unset (None) or set it to the dataset's "
            f"(--config.model.num_classes={ds.num_classes})"
        )
    model = models.build(config.model)
    variables, largest = _abstract_model(model, config.model.name, ds)
    steps_per_epoch = _steps_per_epoch(tc, ds, config.data.n_train)
    tx = make_optimizer(tc, steps_per_epoch, variables["params"])

    sources = _load_sources(tc.init_from, variables) if load_sources else []
    make, trees = state_factory(model, tx, ds.image_shape, seed, bool(tc.select_best), sources)
    abstract_state = _abstract(jax.eval_shape(make, trees), parallel.replicated(mesh))
    check_resume_config(checkpoint.read_config(workdir), config, workdir)
    if checkpoint.list_steps(workdir):  # a run to resume, or a finished one: on its own data
        fingerprint.check(workdir, ds)
    restored = checkpoint.restore_latest(workdir, abstract_state)
    params = variables["params"]
    trainable = None if tc.trainable is None else tuple(tc.trainable)
    exp = Experiment(
        config=config,
        workdir=workdir,
        dataset=ds,
        model=model,
        mesh=mesh,
        tx=tx,
        steps_per_epoch=steps_per_epoch,
        num_steps=steps_per_epoch * tc.num_epochs,
        sources=sources if load_sources or not tc.init_from else None,
        restored=restored,
        num_params=count_params(params),
        num_trainable=count_trainable(params, trainable),
        state_bytes=sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(abstract_state)),
        precision=precision,
        eval_precision=eval_precision,
        variables=variables,
        activation_bytes=largest,
    )
    memory.check(exp)  # data, state and one step's activations fit, before any compute
    return exp


def _steps_per_epoch(tc, ds, n_train) -> int:
    """Steps of an epoch of ``train.batch_size`` on the training split; one ValueError where
    the batch is larger than the split or the run longer than :data:`MAX_STEPS`."""
    if tc.batch_size > len(ds.train):
        raise ValueError(
            f"train.batch_size={tc.batch_size} is larger than the training set: dataset "
            f"{ds.name!r} has {len(ds.train)} training images (data.n_train={n_train}"
            f", after the validation split): use train.batch_size <= {len(ds.train)}"
        )
    steps_per_epoch = -(-len(ds.train) // tc.batch_size)
    if steps_per_epoch * tc.num_epochs > MAX_STEPS:
        raise ValueError(
            f"train.num_epochs={tc.num_epochs} is invalid: {tc.num_epochs} epochs of "
            f"{steps_per_epoch} steps are {steps_per_epoch * tc.num_epochs:.3g} steps, more than "
            f"the {MAX_STEPS:,} a run may take (invjax.training.experiment.MAX_STEPS): use at "
            f"most {MAX_STEPS // steps_per_epoch} epochs"
        )
    return steps_per_epoch


def _abstract_model(model, name: str, ds) -> tuple[Any, int]:
    """``(the model's abstract variables, the bytes of its largest intermediate per image)``,
    checked on a batch of two of the dataset's images abstractly (shapes only, no compute): one
    ValueError naming the model and the image shape if it cannot take them or does not map them
    to one logit per class."""
    x = jax.ShapeDtypeStruct((2, *ds.image_shape), jnp.float32)
    try:
        variables = jax.eval_shape(
            functools.partial(init_variables, model, ds.image_shape), jax.random.PRNGKey(0)
        )
        logits, captured = jax.eval_shape(  # with every intermediate: the memory estimate
            lambda v, x: model.apply(
                v, x, train=False, capture_intermediates=True, mutable=["intermediates"]
            ),
            variables,
            x,
        )
    except ValueError as e:  # the model's own message about its config or input
        if ds.name != data_lib.IMAGE_FOLDER:
            raise
        raise ValueError(f"{e} {_resize_hint(ds)}") from e
    except Exception as e:  # noqa: BLE001 (shape errors surface as TypeError etc. deep in JAX)
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        hint = f" {_resize_hint(ds)}" if ds.name == data_lib.IMAGE_FOLDER else ""
        raise ValueError(
            f"model {name!r} cannot take images of shape {x.shape} (dataset "
            f"{ds.name!r}, [N, H, W, C]): {type(e).__name__}: {first}{hint}"
        ) from e
    if tuple(logits.shape) != (2, ds.num_classes):
        raise ValueError(
            f"model {name!r} maps images {(2, *ds.image_shape)} to logits of shape "
            f"{tuple(logits.shape)}, expected {(2, ds.num_classes)}"
        )
    return variables, memory.activation_bytes(captured, x.shape[0])


def _resize_hint(ds) -> str:
    h, w, c = ds.image_shape
    return (
        f"(the image folder's images are {h}x{w}x{c}: resize them to a size the model takes "
        "with --config.data.image_size=(H, W), e.g. the size of the dataset its config is for)"
    )


def _load_sources(init_from, variables) -> list:
    """``[(source variables, src_prefix, dst_prefix)]`` of ``train.init_from``, each read from its
    run's checkpoint and grafted onto the abstract ``variables`` to check paths and shapes."""
    sources = []
    for src_dir, src_prefix, dst_prefix in init_from:
        src = checkpoint.load_params(src_dir)
        sources.append((src, src_prefix, dst_prefix))
        variables, skipped = graft(variables, src, src_prefix, dst_prefix)  # checks shapes
        logging.info(
            "init_from %s: %r -> %r (%d leaves left out)", src_dir, src_prefix, dst_prefix, skipped
        )
    return sources


def with_sources(exp: Experiment) -> Experiment:
    """``exp`` with its ``init_from`` sources loaded (those of runs that finished since it was
    prepared with ``load_sources=False``); the rest of the preparation is kept. The state's
    shapes, and so the restored checkpoint, do not depend on the sources' values."""
    if exp.sources is not None:
        return exp
    return dataclasses.replace(
        exp, sources=_load_sources(exp.config.train.init_from, exp.variables)
    )


def _values_of(config, key: str) -> list:
    """Every value of ``key`` in a (nested) config: a multi-stream model holds one per stream."""
    found = []
    items = config.items() if hasattr(config, "items") else ()
    for k, v in items:
        if k == key:
            found.append(v)
        elif hasattr(v, "items"):
            found.extend(_values_of(v, key))
    return found


def bn_statistics_warning(model_config, num_steps: int) -> str | None:
    """A warning when a run is too short for its BatchNorm momentum, else None.

    Flax (and PyTorch) start the running statistics at mean 0, variance 1 and move them by
    ``running = m * running + (1 - m) * batch``: after ``T`` steps they still hold ``m ** T`` of
    the start, and evaluation reads them. Where a layer's batch variance is small that share
    dominates (Table 6's ``m = 0.99`` on the digits monomial network with the WS head: 204 steps,
    ``fc1`` variance 0.05 read as 0.19, 59.6% test error against 9.2% with the training set's
    statistics, docs/monomials.md). Reads ``bn_momentum`` anywhere in ``model_config`` (the
    WRNs' fixed 0.9 is not a key and needs only 44 steps).
    """
    momenta = [float(m) for m in _values_of(model_config, "bn_momentum")]
    if not momenta or num_steps <= 0:
        return None
    m = max(momenta)
    residual = m**num_steps
    if m <= 0.0 or residual <= BN_RESIDUAL_LIMIT:
        return None
    needed = math.ceil(math.log(BN_RESIDUAL_LIMIT) / math.log(m))
    return (
        f"model bn_momentum={m:g} with {num_steps:,} training steps: the BatchNorm running "
        f"statistics that evaluation reads still hold {residual:.1%} of their initial values "
        f"(mean 0, variance 1) at the end; train at least {needed:,} steps or set "
        f"bn_momentum <= {bn_momentum_fitting(num_steps):g}"
    )


def bn_momentum_fitting(num_steps: int, limit: float = BN_RESIDUAL_LIMIT) -> float:
    """The largest BatchNorm momentum, in steps of 0.001, whose running statistics hold at most
    ``limit`` of their initial values after ``num_steps`` steps: ``floor(1000 limit^(1 / T)) /
    1000`` (:func:`bn_statistics_warning`)."""
    if num_steps < 1:
        raise ValueError(f"bn_momentum_fitting: num_steps={num_steps} is invalid: it must be >= 1")
    return math.floor(limit ** (1.0 / num_steps) * 1000) / 1000


def schedule_warning(model_config, num_epochs: int) -> str | None:
    """The warning of the network built from ``model_config`` when a run of ``num_epochs``
    epochs would not complete its own epoch schedule (:meth:`invjax.contract.EpochHooks
    .schedule_warning`, e.g. a monomial head that never reaches its last pruning), else None."""
    return _schedule_warning(models.build(model_config), num_epochs)


#: The earlier name of :func:`schedule_warning` (the monomial head's pruning was its one case).
pruning_warning = schedule_warning


def _schedule_warning(model, num_epochs: int) -> str | None:
    return model.schedule_warning(num_epochs) if isinstance(model, EpochHooks) else None


def describe(exp: Experiment, resumed_step: int | None = None) -> str:
    """The start-up banner of an experiment (:func:`invjax.logging_utils.banner`), with the
    lines of :func:`bn_statistics_warning` and of the model's own :meth:`~invjax.contract
    .EpochHooks.schedule_warning` where they have one."""
    ds, tc = exp.dataset, exp.config.train
    warnings = [
        w
        for w in (
            bn_statistics_warning(exp.config.model, exp.num_steps),
            _schedule_warning(exp.model, int(tc.num_epochs)),
        )
        if w
    ]
    for warning in warnings:
        logging.warning("%s", warning)
    text = banner(
        workdir=exp.workdir,
        devices=list(exp.mesh.devices.flat),
        processes=jax.process_count(),
        model=str(exp.config.model.name),
        num_params=exp.num_params,
        num_trainable=exp.num_trainable,
        dataset=ds.name,
        sizes={"train": len(ds.train), "val": len(ds.val), "test": len(ds.test)},
        image_shape=ds.image_shape,
        augment=ds.augment,
        num_steps=exp.num_steps,
        steps_per_epoch=exp.steps_per_epoch,
        batch_size=int(tc.batch_size),
        optimizer=str(tc.optimizer),
        learning_rate=float(tc.learning_rate),
        precision=f"train {exp.precision}, evaluation {exp.eval_precision} "
        f"({'exact' if P.is_exact(exp.eval_precision) else 'not exact'} on this backend)",
        resumed_step=resumed_step,
    )
    # the lowering can depend on the batch (im2col's patch memory); the sharded train step is
    # traced at the global batch, so that is the shape the choice sees
    lowerings = describe_lowerings(exp.model, (int(tc.batch_size), *ds.image_shape), train=False)
    text = f"{text}\n  {lowerings}" if lowerings else text
    return "\n  warning: ".join([text, *warnings])
