"""python -m invjax.main --config=invjax/configs/base.py --workdir=runs/base

Every key of an invjax experiment and its default; the configs import it and change what differs
(``from invjax.configs import base``). The data section's defaults are those of
:func:`invjax.data.default_config` (their one home, which the data layer's checks also use).

Run by itself it trains the tiny plain CNN on the offline "scaled digits" data (SGD, 30 epochs).
Every key is commented below; a key that is not here cannot be set from the command line
(``--config.train.foo=1`` is rejected with the list of valid keys).
"""

from __future__ import annotations

import ml_collections
from ml_collections import config_dict

from invjax import data


def get_config() -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    # One seed drives the model initialisation, dropout, augmentation and the epoch order, and
    # (through the shared reference) the choice of the limited training set in data.seed.
    seed = ml_collections.FieldReference(0)
    config.seed = seed
    # Many models in one program (invjax/training/many.py, docs/many_models.md): seeds=(0, 1, 2)
    # trains one independent model per seed in DIR/seed_<k>/, each exactly the single run with
    # --config.seed=k (a single seed is that run in DIR itself). realisation_from_seed=True sets
    # data.realisation to each model's seed (the study's "seed = realisation"). seeds_strategy:
    # 'auto' (None), 'loop' (one compiled step called per model) or 'vmap' (one step over the
    # stacked models). None everywhere keeps a plain single run.
    config.seeds = config_dict.placeholder(tuple)
    config.realisation_from_seed = config_dict.placeholder(bool)
    config.seeds_strategy = config_dict.placeholder(str)
    config.multi_host = False  # call jax.distributed.initialize() (also if JAX_COORDINATOR_ADDRESS)
    # Arithmetic (invjax/precision.py, README "Precision and the guarantee"): 'default' (the
    # backend's fastest float32: TF32 on NVIDIA GPUs, not exact there), 'highest' (true float32,
    # exact everywhere) or 'bf16' (mixed precision convolutions, not exact). Train steps use
    # `precision`; evaluation and the run's invariance certificate use `eval_precision`, so the
    # reported errors and the certificate are those of the exactly invariant arithmetic.
    config.precision = "default"
    config.eval_precision = "highest"

    # data.name, n_train (N_t, 0 = all), realisation, val_fraction, val_source, data_dir,
    # augment, subset, path and image_size (data.name='image_folder'):
    # see invjax.data.DEFAULTS. data.seed (which N_t samples) follows config.seed.
    config.data = data.default_config()
    config.data.seed = seed

    config.model = ml_collections.ConfigDict()
    config.model.name = "cnn"
    config.model.num_classes = config_dict.placeholder(int)  # None = the dataset's

    config.train = ml_collections.ConfigDict()
    config.train.optimizer = "sgd"  # 'sgd' (momentum / Nesterov) or 'adam'
    config.train.learning_rate = 0.1
    config.train.momentum = 0.9  # SGD momentum (0 = plain SGD)
    config.train.nesterov = False
    config.train.weight_decay = 5e-4  # PyTorch-style L2: wd * param added to the gradient
    config.train.batch_size = 128  # global batch; must divide by the number of devices
    config.train.eval_batch_size = 500
    config.train.num_epochs = 30
    # The learning rate is multiplied by lr_decay_factor at each boundary, given either in
    # epochs (lr_boundaries) or, when lr_boundaries is None, as fractions of num_epochs
    # (lr_boundary_fractions: the paper's configs, so that a changed num_epochs keeps the
    # schedule's shape). lr_boundaries, when not None, is the schedule.
    config.train.lr_boundaries = (20,)
    config.train.lr_boundary_fractions = config_dict.placeholder(tuple)
    config.train.lr_decay_factor = 0.1
    # Scales every stage of the run: each trains max(1, round(num_epochs * epochs_scale)) epochs
    # with its schedule scaled alike (--config.train.epochs_scale=0.25 for a first try). The
    # streams of a two-phase run follow it unless config.phase1.<stream>.train.epochs_scale is
    # set; --dry_run prints every stage's resulting epochs and schedule.
    config.train.epochs_scale = 1.0
    config.train.select_best = False  # report the epoch with the lowest validation error
    config.train.eval_every_epochs = 1
    config.train.log_every_steps = 50
    config.train.checkpoint_every_steps = 0  # 0 = at epoch ends only
    # Epoch ends that save: every Nth and the last (short epochs: at N_t = 20 a save per step
    # took 45% of the steps' time, docs/many_models.md). SIGTERM saves anyway.
    config.train.checkpoint_every_epochs = 1
    config.train.keep_checkpoints = 3
    # Two-phase multi-stream training. trainable: parameter path prefixes that train (None =
    # all), e.g. ('map_e2', 'combine', 'head'); the rest get zero updates. init_from: tuples
    # (workdir, source_prefix, target_prefix) copying variables (params, batch_stats) of a
    # finished run into this model before training; '' = the whole tree.
    config.train.trainable = config_dict.placeholder(tuple)
    config.train.init_from = ()
    # 'single' (one run), 'two_phase' (multi-stream: each stream's own run, then the head on the
    # frozen streams; needs config.phase1) or 'end_to_end' (multi-stream from scratch); see
    # invjax/training/plan.py.
    config.train.phases = "single"
    return config
