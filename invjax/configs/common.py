"""Helpers of the experiment configs (this module is not a config of its own).

A config imports the configs it varies (``from configs import cifar10_std``) and these helpers
(``from invjax.configs import common``). :func:`two_phase` turns a dataset recipe into the
paper's two-phase multi-stream config (Section 4.4, appendix C):

* ``config.model``: the multi-stream network (``freeze_streams=True``);
* ``config.phase1.<stream>.train``: the stream's own recipe, taken from its single-stream config
  (``cifar10_e2_ii.py`` ...), and ``config.phase1.<stream>.workdir`` (None =
  ``DIR/streams/<stream>``; or a finished single-stream run with the same data and seed, reused);
* ``config.train``: phase 2, the head: the same optimiser and augmentation, the head table's batch
  size, learning rate and weight decay, and "the number of training epochs as well as all
  epoch-dependent HPs" divided by ``epoch_divisor`` (4 for SVHN and CIFAR-10, 10 for STL-10).
"""

from __future__ import annotations

import ml_collections
from ml_collections import config_dict

from invjax.models.multistream import PHASE2_TRAINABLE


def schedule_fractions(tc, fractions: tuple) -> None:
    """Give ``config.train``'s schedule as ``fractions`` of its epochs: ``lr_boundary_fractions``
    set and ``lr_boundaries`` None (a typed placeholder, so that ``--config.train.lr_boundaries``
    can still give it in epochs; a plain None could not be overridden)."""
    tc.lr_boundaries = config_dict.placeholder(tuple)
    tc.lr_boundary_fractions = tuple(fractions)


def divide_epochs(tc, divisor: int) -> None:
    """Divide ``num_epochs`` and the schedule's boundaries of ``config.train`` by ``divisor``
    (boundaries given as fractions of the run stay as they are)."""
    bounds = () if tc.lr_boundaries is None else tuple(tc.lr_boundaries)
    if tc.num_epochs % divisor or any(b % divisor for b in bounds):
        raise ValueError(f"epochs {tc.num_epochs} / boundaries {bounds} do not divide by {divisor}")
    tc.num_epochs //= divisor
    if tc.lr_boundaries is not None:
        tc.lr_boundaries = tuple(b // divisor for b in bounds)


def multistream(streams: dict, head: str = "map_e2", freeze_streams: bool = True):
    """A multi-stream model section from ``{stream name: single-stream model section}``."""
    c = ml_collections.ConfigDict()
    c.name = "multistream"
    c.head = head
    c.num_classes = 10
    c.freeze_streams = freeze_streams
    c.streams = ml_collections.ConfigDict({k: v for k, v in streams.items()})
    return c


def two_phase(
    config: ml_collections.ConfigDict,
    model: ml_collections.ConfigDict,
    streams: dict,
    *,
    batch_size: int,
    learning_rate: float,
    weight_decay: float,
    epoch_divisor: int,
) -> ml_collections.ConfigDict:
    """Make ``config`` (a dataset recipe, e.g. ``svhn_std``'s) the two-phase config of ``model``.

    ``streams``: ``{stream name: that stream's single-stream config}``; their ``train`` sections
    become ``config.phase1``, and their data and seed must be the recipe's.
    """
    if set(streams) != set(model.streams):
        raise ValueError(f"recipes for {sorted(streams)} but the model has {sorted(model.streams)}")
    config.model = model
    config.phase1 = ml_collections.ConfigDict()
    for name, stream in streams.items():
        if stream.data.to_dict() != config.data.to_dict():
            raise ValueError(f"stream {name!r} trains on other data than the recipe")
        config.phase1[name] = ml_collections.ConfigDict(
            {"train": stream.train, "workdir": config_dict.placeholder(str)}
        )
        # None: the stream follows config.train.epochs_scale (a number: its own)
        config.phase1[name].train.epochs_scale = config_dict.placeholder(float)
    tc = config.train
    tc.phases = "two_phase"
    tc.trainable = PHASE2_TRAINABLE
    tc.batch_size = batch_size
    tc.learning_rate = learning_rate
    tc.weight_decay = weight_decay
    divide_epochs(tc, epoch_divisor)
    return config
