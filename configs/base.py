"""python -m invjax.main --config=configs/base.py --workdir=runs/base

Shared defaults of every invjax experiment; the variants import it and change what differs.

Run by itself it trains the tiny plain CNN on the offline "scaled digits" data (SGD, 30 epochs).
Every key is commented below; a key that is not here cannot be set from the command line
(``--config.train.foo=1`` is rejected with the list of valid keys).
"""

from __future__ import annotations

import ml_collections
from ml_collections import config_dict


def get_config() -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    # One seed drives the model initialisation, dropout, augmentation and the epoch order, and
    # (through the shared reference) the choice of the limited training set in data.seed.
    seed = ml_collections.FieldReference(0)
    config.seed = seed
    config.multi_host = False  # call jax.distributed.initialize() (also if JAX_COORDINATOR_ADDRESS)
    # Arithmetic (invjax/precision.py, README "Precision and the guarantee"): 'default' (the
    # backend's fastest float32: TF32 on NVIDIA GPUs, not exact there), 'highest' (true float32,
    # exact everywhere) or 'bf16' (mixed precision convolutions, not exact). Train steps use
    # `precision`; evaluation and the run's invariance certificate use `eval_precision`, so the
    # reported errors and the certificate are those of the exactly invariant arithmetic.
    config.precision = "default"
    config.eval_precision = "highest"

    config.data = ml_collections.ConfigDict()
    config.data.name = "scaled_digits"
    config.data.n_train = 0  # N_t: class-balanced training-set size; 0 = the whole training split
    config.data.seed = seed  # which N_t samples (same for every model given seed and N_t)
    config.data.realisation = 0  # Scaled-MNIST / scaled digits realisation (0..5)
    config.data.val_fraction = 0.2  # validation share where the dataset defines none (80:20)
    # 'predefined' (the dataset's validation split, if any) or 'train' (val_fraction of the
    # training split even where one is predefined: the digits study's 80:20 HP search)
    config.data.val_source = "predefined"
    config.data.data_dir = config_dict.placeholder(str)  # TFDS dir; None = $TFDS_DATA_DIR or ~
    config.data.augment = "default"  # 'default' = the dataset's standard augmentation, or a name

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
    config.train.lr_boundaries = (20,)  # epochs after which the learning rate is multiplied
    config.train.lr_decay_factor = 0.1  # ... by this factor
    config.train.select_best = False  # report the epoch with the lowest validation error
    config.train.eval_every_epochs = 1
    config.train.log_every_steps = 50
    config.train.checkpoint_every_steps = 0  # 0 = at epoch ends only
    config.train.keep_checkpoints = 3
    # Two-phase multi-stream training. trainable: parameter path prefixes that train (None =
    # all), e.g. ('map_e2', 'combine', 'head'); the rest get zero updates. init_from: tuples
    # (workdir, source_prefix, target_prefix) copying variables (params, batch_stats) of a
    # finished run into this model before training; '' = the whole tree.
    config.train.trainable = config_dict.placeholder(tuple)
    config.train.init_from = ()
    # 'single' (one run), 'two_phase' (multi-stream: each stream's own run, then the head on the
    # frozen streams; needs config.phase1) or 'end_to_end' (multi-stream from scratch); see
    # invjax/experiment.py.
    config.train.phases = "single"
    return config
