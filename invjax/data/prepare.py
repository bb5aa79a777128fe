"""Prepare a TFDS dataset once so that training can read it offline with ``tfds.data_source``.

Usage (on a machine with internet access; needs TensorFlow: ``pip install 'invjax[prepare]'``)::

    python -m invjax.data.prepare cifar10 [--data_dir=DIR]
    python -m invjax.data.prepare mnist_scale   # MNIST, then Scaled-MNIST realisations 0..5

Writes the dataset in the ``array_record`` format (the one ``tfds.data_source`` reads) under
``DIR`` (default ``$TFDS_DATA_DIR`` or ``~/tensorflow_datasets``). The offline datasets
(``digits``, ``scaled_digits``) need no preparation.
"""

from __future__ import annotations

import argparse
import sys

from invjax.data import scaled_mnist, sources

NAMES = (*sources.TFDS_DATASETS, "mnist_scale")
OFFLINE = ("digits", "scaled_digits", "rotscaled_digits")


def prepare(
    name: str, data_dir: str | None = None, realisations=scaled_mnist.PAPER_REALISATIONS
) -> None:
    """Download and prepare ``name`` (and for ``mnist_scale`` generate its realisations)."""
    if name in OFFLINE:
        print(f"{name} ships with scikit-learn: nothing to prepare")
        return
    if name not in NAMES:
        raise ValueError(f"unknown dataset {name!r}: valid names are {[*NAMES, *OFFLINE]}")
    import tensorflow_datasets as tfds

    tfds_name = "mnist" if name == "mnist_scale" else name
    builder = tfds.builder(tfds_name, data_dir=data_dir, file_format=sources.FILE_FORMAT)
    try:
        builder.download_and_prepare()
    except ModuleNotFoundError as e:
        if "tensorflow" not in str(e):
            raise
        raise SystemExit(
            f"preparing {tfds_name!r} needs TensorFlow ({e}): pip install 'invjax[prepare]'"
        ) from e
    print(f"prepared {tfds_name} in {builder.data_dir}")
    if name == "mnist_scale":
        for r in realisations:
            scaled_mnist.load_realisation(r, data_dir)
            print(f"Scaled-MNIST realisation {r}: {scaled_mnist.cache_path(data_dir, r)}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m invjax.data.prepare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("name", choices=[*NAMES, *OFFLINE], help="dataset to prepare")
    parser.add_argument("--data_dir", default=None, help="TFDS data dir (default: TFDS's)")
    args = parser.parse_args(argv)
    prepare(args.name, args.data_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
