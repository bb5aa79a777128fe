"""Datasets as in-memory NumPy arrays; augmentation as jit-able functions run on the device.

Public API (used by the trainer)::

    ds = invjax.data.load(config.data)           # Dataset: train / val / test Splits
    x = invjax.data.to_float(images, ds.mean, ds.std)
    x = invjax.data.augment.apply(ds.augment, rng, x)
    order = invjax.data.epoch_order(len(ds.train), seed, epoch)
    invjax.data.check_images(images, ds.image_shape)

See :mod:`invjax.data.datasets` for the datasets, splits and config fields.
"""

from invjax.data import augment
from invjax.data.datasets import (
    DATASETS,
    DEFAULTS,
    IMAGE_FOLDER,
    NAMES,
    Dataset,
    Split,
    check_config,
    check_images,
    default_config,
    load,
    to_float,
)
from invjax.data.digits import scaled_digits
from invjax.data.sources import DatasetNotPreparedError
from invjax.data.subsets import balanced_subset, epoch_order

__all__ = [
    "DATASETS",
    "DEFAULTS",
    "IMAGE_FOLDER",
    "NAMES",
    "Dataset",
    "DatasetNotPreparedError",
    "Split",
    "augment",
    "balanced_subset",
    "check_config",
    "check_images",
    "default_config",
    "epoch_order",
    "load",
    "scaled_digits",
    "to_float",
]
