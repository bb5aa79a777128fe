"""Prepare a TFDS dataset once so that training can read it offline with ``tfds.data_source``.

Usage (on a machine with internet access; needs the ``prepare`` extra: ``pip install -e ".[prepare]"``)::

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
#: What installs the modules that downloading and preparing need (pyproject's ``prepare`` extra).
EXTRA = 'pip install -e ".[prepare]"'


class MissingExtraError(RuntimeError):
    """A module of the ``prepare`` extra is not installed; the message names it and the extra."""


def _missing(name: str, module: str) -> MissingExtraError:
    return MissingExtraError(
        f"preparing {name!r} needs the module {module!r} of the 'prepare' extra, which is not "
        f"installed: {EXTRA} (in a checkout; or pip install 'invjax[prepare]')"
    )


def _builder(tfds_name: str, data_dir: str | None):
    import tensorflow_datasets as tfds

    return tfds.builder(tfds_name, data_dir=data_dir, file_format=sources.FILE_FORMAT)


def prepare(
    name: str, data_dir: str | None = None, realisations=scaled_mnist.PAPER_REALISATIONS
) -> None:
    """Download and prepare ``name`` (and for ``mnist_scale`` generate its realisations)."""
    if name in OFFLINE:
        print(f"{name} ships with scikit-learn: nothing to prepare")
        return
    if name not in NAMES:
        raise ValueError(f"unknown dataset {name!r}: valid names are {[*NAMES, *OFFLINE]}")
    tfds_name = "mnist" if name == "mnist_scale" else name
    try:  # TFDS imports TensorFlow and its downloaders' modules only when it prepares
        builder = _builder(tfds_name, data_dir)
        builder.download_and_prepare()
    except ModuleNotFoundError as e:
        raise _missing(name, e.name or str(e)) from e
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
    try:
        prepare(args.name, args.data_dir)
    except (MissingExtraError, ValueError) as e:  # refused: one line, exit status 2
        print(f"invjax: error: {e}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
