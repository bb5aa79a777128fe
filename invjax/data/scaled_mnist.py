"""Scaled-MNIST (MNIST-scale) generated from MNIST as SESN did, deterministic and cached.

Protocol (SESN's ``prepare_datasets.py``, ISosnovik/sesn): MNIST's train and test images are
pooled (70k); a stratified 12k/50k split gives train+validation and test (the other 8k are not
used); a stratified 10k/2k split of the 12k gives train and validation. Every image is shrunk
about its centre by its own ``s ~ U(0.3, 1.0)`` with bicubic interpolation and zeros outside
(28x28), and stored as uint8 as SESN stored PNGs. Realisations 0..5 use seeds 0..5.

SESN's own generator no longer reproduces (unseeded torchvision RNG, a removed argument), so
invjax draws everything from seeded NumPy Generators and scales with its own
:func:`invjax.groups.scale`: the same realisation is bit-identical on every run with the
current libraries. It is generated on first use (a few seconds, needs the prepared ``mnist``
TFDS dataset) and cached as ``<data_dir>/invjax/mnist_scale/realisation_<r>.npz``.
"""

from __future__ import annotations

import logging
import os
import tempfile

import numpy as np

from invjax.data import sources
from invjax.data.digits import draw_scales, shrink
from invjax.data.subsets import stratified_split

SIZES = (10_000, 2_000, 50_000)  # train, validation, test
SCALE_RANGE = (0.3, 1.0)
REALISATIONS = tuple(range(6))
FORMAT_VERSION = 2
SPLITS = ("train", "val", "test")


def check_realisation(realisation) -> int:
    if isinstance(realisation, bool) or realisation not in REALISATIONS:
        raise ValueError(
            f"realisation={realisation!r} is invalid: Scaled-MNIST has the six realisations "
            f"{list(REALISATIONS)}"
        )
    return int(realisation)


def generate(images, labels, seed: int, sizes=SIZES, scale_range=SCALE_RANGE) -> dict:
    """One realisation from MNIST's pooled ``images [N, 28, 28, 1] uint8`` and ``labels``.

    Returns ``{split}_images`` (uint8), ``{split}_labels`` (int32), ``{split}_scales``
    (float32) and ``{split}_source`` (int64 index into the pooled input: MNIST train, then test)
    for ``split`` in train/val/test.
    """
    labels = np.asarray(labels, np.int32)
    n_train, n_val, n_test = (int(s) for s in sizes)
    trainval, test = stratified_split(labels, [n_train + n_val, n_test], (seed, 0))
    tr, va = stratified_split(labels[trainval], [n_train, n_val], (seed, 1))
    chosen = {"train": trainval[tr], "val": trainval[va], "test": test}
    order = np.concatenate([chosen[s] for s in SPLITS])
    scales = draw_scales(len(order), (seed, 2), scale_range)
    x = shrink(np.asarray(images)[order].astype(np.float32) / 255.0, scales)
    x = np.round(x * 255.0).astype(np.uint8)
    out, start = {}, 0
    for split in SPLITS:
        k = len(chosen[split])
        out[f"{split}_images"] = x[start : start + k]
        out[f"{split}_labels"] = labels[order[start : start + k]]
        out[f"{split}_scales"] = scales[start : start + k]
        out[f"{split}_source"] = order[start : start + k].astype(np.int64)
        start += k
    return out


def cache_path(data_dir: str | None, realisation: int) -> str:
    root = data_dir or sources.default_data_dir()
    return os.path.join(root, "invjax", "mnist_scale", f"realisation_{realisation}.npz")


def _meta(realisation: int, sizes, scale_range) -> dict:
    return {
        "format_version": np.int64(FORMAT_VERSION),
        "realisation": np.int64(realisation),
        "sizes": np.asarray(sizes, np.int64),
        "scale_range": np.asarray(scale_range, np.float64),
    }


def _read_cache(path: str, meta: dict) -> dict | None:
    try:
        with np.load(path) as f:
            if any(not np.array_equal(f[k], v) for k, v in meta.items()):
                return None
            return {k: f[k] for k in f.files if k not in meta}
    except (OSError, ValueError, KeyError, EOFError) as e:  # missing, truncated or foreign
        if os.path.exists(path):
            logging.warning("ignoring unreadable Scaled-MNIST cache %s (%s)", path, e)
        return None


def load_realisation(
    realisation: int, data_dir: str | None = None, sizes=None, scale_range=None
) -> dict:
    """The cached realisation (generated from the TFDS ``mnist`` dataset on first use).

    ``sizes``/``scale_range`` default to the module's ``SIZES``/``SCALE_RANGE`` (read at call
    time); the cache records them and is regenerated when they differ.
    """
    realisation = check_realisation(realisation)
    sizes = SIZES if sizes is None else sizes
    scale_range = SCALE_RANGE if scale_range is None else scale_range
    path = cache_path(data_dir, realisation)
    meta = _meta(realisation, sizes, scale_range)
    cached = _read_cache(path, meta)
    if cached is not None:
        return cached
    parts = [sources.read_split("mnist", s, data_dir) for s in ("train", "test")]
    images = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    logging.info("generating Scaled-MNIST realisation %d into %s", realisation, path)
    data = generate(images, labels, realisation, sizes, scale_range)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    # Written to a temporary file and renamed: a killed run never leaves a half-written cache.
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".npz.tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez_compressed(f, **data, **meta)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return data
