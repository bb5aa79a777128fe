"""Image sources: TensorFlow Datasets (``tfds.data_source``) and MNIST-format IDX directories.

One interface for every source of labelled images: :func:`read_all` returns each split the
source has (``'train'`` and, where it has one, ``'test'``) as ``(images uint8 [N, H, W, C],
labels int32 [N])``. The MNIST-format datasets (:data:`MNIST_FORMAT`: ``mnist``,
``fashion_mnist``) come either from a prepared TFDS copy or, with ``path``, from a directory of
the four IDX files (:mod:`invjax.data.idx`); both give the same arrays for the same files.

TFDS sources are read with ``tfds.data_source`` (random access, no TensorFlow).

A dataset must have been prepared once in the ``array_record`` file format by
``python -m invjax.data.prepare NAME`` (needs TensorFlow and the internet:
``pip install 'invjax[prepare]'``). Reading it back needs neither.

Testing: ``tfds.testing.mock_data(num_examples=N, policy=tfds.testing.MockPolicy.USE_CODE)``
replaces the stored records by random examples of the right feature shapes, and this module's
real code path runs unchanged under it. Two details of tfds 4.9.10 matter: the mock serves
``data_source[i]`` but its ``__getitems__`` is broken (a ``functools.partial`` stored on a
``MagicMock`` is not bound, so ``self`` is missing), hence records are read one index at a time;
and every split of the mock holds the same ``N`` examples.
"""

from __future__ import annotations

import os

import numpy as np

from invjax.data import idx

# name -> (splits invjax reads, image shape, number of classes). SVHN: the core 'train' split
# only, without 'extra' (as the paper); STL-10: the labelled 'train'/'test', not 'unlabelled'.
TFDS_DATASETS: dict[str, tuple[tuple[str, ...], tuple[int, int, int], int]] = {
    "mnist": (("train", "test"), (28, 28, 1), 10),
    "fashion_mnist": (("train", "test"), (28, 28, 1), 10),
    "cifar10": (("train", "test"), (32, 32, 3), 10),
    "svhn_cropped": (("train", "test"), (32, 32, 3), 10),
    "stl10": (("train", "test"), (96, 96, 3), 10),
}
#: Sources that a directory of IDX files (``data.path``) can provide instead of TFDS.
MNIST_FORMAT = ("mnist", "fashion_mnist")
#: Where Debian's ``dataset-fashion-mnist`` package puts the four IDX files.
DEBIAN_FASHION_MNIST = "/usr/share/datasets/fashion-mnist"
FILE_FORMAT = "array_record"  # the random-access format that tfds.data_source reads


class DatasetNotPreparedError(FileNotFoundError, ValueError):
    """A TFDS dataset is not on disk in the readable format; the message names the fix."""


def default_data_dir() -> str:
    """TFDS's data dir: ``$TFDS_DATA_DIR`` if set, else ``~/tensorflow_datasets``."""
    env = os.environ.get("TFDS_DATA_DIR")
    return os.path.expanduser(env) if env else os.path.expanduser("~/tensorflow_datasets")


def prepare_command(name: str, data_dir: str | None) -> str:
    cmd = f"python -m invjax.data.prepare {name}"
    return cmd + (f" --data_dir={data_dir}" if data_dir else "")


def _check_name(name: str) -> None:
    if name not in TFDS_DATASETS:
        raise ValueError(f"unknown TFDS dataset {name!r}: valid names are {sorted(TFDS_DATASETS)}")


def open_split(name: str, split: str, data_dir: str | None = None):
    """``tfds.data_source`` for one split, or :class:`DatasetNotPreparedError` naming the fix."""
    _check_name(name)
    import tensorflow_datasets as tfds

    try:
        return tfds.data_source(
            name,
            split=split,
            data_dir=data_dir,
            download=False,  # never download at training time; `prepare` does that once
            builder_kwargs={"file_format": FILE_FORMAT},
        )
    # tfds 4.9.10 reports a missing dataset as KeyError (no splits), one prepared in another
    # format as NotImplementedError, missing files as FileNotFoundError/OSError.
    except (KeyError, NotImplementedError, OSError, ValueError, AssertionError) as e:
        where = data_dir or default_data_dir()
        raise DatasetNotPreparedError(
            f"dataset {name!r} (split {split!r}) is not prepared in {where} in the "
            f"{FILE_FORMAT} format that tfds.data_source reads. Prepare it once, on a machine "
            f"with internet access: `pip install 'invjax[prepare]'` (adds TensorFlow) and then "
            f"`{prepare_command(name, data_dir)}`"
            + (
                f", or read the IDX files from a directory: data.path=DIR ({idx.expected_files()})"
                if name in MNIST_FORMAT
                else ""
            )
            + f". (tfds said: {type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''})"
        ) from e


def read_split(name: str, split: str, data_dir: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """All of one split in memory: ``(images uint8 [N, H, W, C], labels int32 [N])``."""
    _check_name(name)
    _, shape, num_classes = TFDS_DATASETS[name]
    source = open_split(name, split, data_dir)
    n = len(source)
    images = np.empty((n, *shape), np.uint8)
    labels = np.empty((n,), np.int32)
    for i in range(n):  # one index at a time: see the module docstring
        example = source[i]
        img = np.asarray(example["image"])
        if img.shape != shape:
            raise ValueError(
                f"{name}/{split} example {i} has image shape {img.shape}, expected {shape}"
            )
        images[i] = img
        labels[i] = int(example["label"])
    if n and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"{name}/{split} has labels outside 0..{num_classes - 1}")
    return images, labels


def check_path(name: str, path) -> str | None:
    """Validate ``data.path`` for source ``name`` before any reading (files exist); ``None`` ok."""
    if path is None:
        return None
    if name not in MNIST_FORMAT:
        raise ValueError(
            f"data.path={path!r} is read only by the MNIST-format sources {list(MNIST_FORMAT)} "
            f"and by data.name='image_folder', not by source {name!r}"
        )
    idx.find_dir(path)
    return os.path.abspath(os.path.expanduser(str(path)))


def read_all(
    name: str, data_dir: str | None = None, path: str | None = None
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every split of source ``name``: ``{'train': (images, labels)[, 'test': ...]}``.

    ``path`` (MNIST-format sources only): a directory of IDX files, whose test pair may be
    absent; otherwise the prepared TFDS copy in ``data_dir``.
    """
    _check_name(name)
    if check_path(name, path) is not None:
        out = idx.read_dir(path)
        _, shape, num_classes = TFDS_DATASETS[name]
        for split, (images, labels) in out.items():
            if images.shape[1:] != shape or labels.min() < 0 or labels.max() >= num_classes:
                raise idx.IDXError(
                    f"{path}: {split} images {images.shape[1:]} with labels "
                    f"{labels.min()}..{labels.max()} are not {name} ({shape}, labels 0.."
                    f"{num_classes - 1})"
                )
        return out
    return {s: read_split(name, s, data_dir) for s in TFDS_DATASETS[name][0]}


def describe(name: str, data_dir: str | None = None, path: str | None = None) -> str:
    """Where :func:`read_all` reads ``name`` from, for logs and cache metadata."""
    if path is not None:
        return f"idx:{os.path.abspath(os.path.expanduser(str(path)))}"
    return f"tfds:{name}@{data_dir or default_data_dir()}"
