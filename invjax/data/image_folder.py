"""Your own images: a folder in tensorflow-datasets' ``ImageFolder`` layout as a dataset.

    DIR/train/<class>/*.png        the training split (one sub-folder per class)
    DIR/val/<class>/*.png          optional: a predefined validation split
    DIR/test/<class>/*.png         the test split

    python -m invjax.main --config=configs/NAME.py --workdir=RUN \\
        --config.data.name=image_folder --config.data.path=DIR [--config.data.image_size=(H, W)]
    python -m invjax.data.image_folder DIR                    # what invjax reads there
    python -m invjax.data.image_folder --make-digits DIR      # scikit-learn's digits as a folder

Classes are the sub-folders of ``train/``, sorted by name (label ``k`` = the ``k``-th name);
``val/`` and ``test/`` may hold only classes of ``train/``. Files ending in ``.png``, ``.jpg``,
``.jpeg`` or ``.bmp`` (any case) are images; other files are ignored; a folder without any
image is an error. Images are read with Pillow and held as ``uint8 [N, H, W, C]`` (0..255), as
the TFDS datasets are, so the rest is the same as for them (:mod:`invjax.data.datasets`):
class-balanced ``N_t`` subsets, the stratified ``val_fraction`` split where ``val/`` is absent
(``val/`` present: it is the validation split), normalisation by the training split's mean/std,
and the augmentations (``data.augment``; default ``'none'``).

Channels: ``C = 1`` if every image is greyscale (Pillow modes ``1``, ``L``, ``I;16``, ``I``,
``F``), else ``C = 3`` (every image converted to RGB; an alpha channel is dropped).

Size rule: without ``data.image_size`` every image must have the same size, which becomes the
dataset's ``H x W``; images of several sizes are one error naming two of them and the fix. With
``data.image_size = (H, W)`` every image is resized to ``H x W`` (Pillow's bicubic filter, which
antialiases when shrinking; aspect ratio not kept: crop beforehand if it matters). Whether the
network takes that size is checked by the trainer before any compute (one message naming the
shape, :func:`invjax.training.experiment.prepare`).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

import numpy as np

NAME = "image_folder"  # its data.name (invjax.data.datasets.IMAGE_FOLDER)
SPLITS = ("train", "val", "test")
EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp")
GREY_MODES = ("1", "L", "I;16", "I", "F")
DEFAULT_AUGMENT = "none"


@dataclasses.dataclass(frozen=True)
class Folder:
    """What :func:`scan` found: class names, ``{split: [(file, label)]}``, image shape ``(H, W,
    C)`` after the size rule, and whether images are resized."""

    path: str
    classes: tuple[str, ...]
    files: dict[str, list[tuple[str, int]]]
    image_shape: tuple[int, int, int]
    resize: bool


def _images_in(directory: str) -> list[str]:
    return sorted(
        os.path.join(directory, f)
        for f in os.listdir(directory)
        if f.lower().endswith(EXTENSIONS) and os.path.isfile(os.path.join(directory, f))
    )


def check_image_size(image_size) -> tuple[int, int] | None:
    """``data.image_size``: None, or ``(H, W)`` positive integers; one ValueError otherwise."""
    if image_size is None:
        return None
    try:
        h, w = (int(v) for v in image_size)
        ok = (h, w) == tuple(image_size) and h >= 1 and w >= 1
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(
            f"data.image_size={image_size!r} is invalid: give (H, W), two positive integers "
            "(e.g. --config.data.image_size=(32, 32)), or None to keep the images' own size"
        )
    return h, w


def scan(path, image_size=None) -> Folder:
    """The layout of ``path`` checked, every image's header read (sizes and modes; no pixels).

    One ValueError naming the path and the fix for: a missing folder or ``train/``/``test/``, no
    class sub-folders, an empty class, a ``val/``/``test/`` class unknown to ``train/``, a file
    Pillow cannot open, several image sizes without ``data.image_size``.
    """
    from PIL import Image, UnidentifiedImageError

    size = check_image_size(image_size)
    if not path:
        raise ValueError(
            "data.path is not set: data.name='image_folder' reads DIR/train/<class>/*.png and "
            "DIR/test/<class>/*.png: give --config.data.path=DIR"
        )
    root = os.path.abspath(os.path.expanduser(str(path)))
    layout = "DIR/train/<class>/*.png, DIR/test/<class>/*.png (optional DIR/val/<class>/)"
    if not os.path.isdir(root):
        raise ValueError(f"data.path={path!r}: no such directory (an image folder is {layout})")
    for split in ("train", "test"):
        if not os.path.isdir(os.path.join(root, split)):
            raise ValueError(
                f"data.path={path!r} has no {split}/ folder: an image folder is {layout}"
            )
    classes = tuple(
        sorted(
            d
            for d in os.listdir(os.path.join(root, "train"))
            if os.path.isdir(os.path.join(root, "train", d))
        )
    )
    if len(classes) < 2:
        raise ValueError(
            f"{os.path.join(root, 'train')} has {len(classes)} class folder(s) {list(classes)}: "
            f"a classifier needs at least 2 ({layout})"
        )
    files: dict[str, list[tuple[str, int]]] = {}
    for split in SPLITS:
        where = os.path.join(root, split)
        if not os.path.isdir(where):
            continue  # only val/ may be absent (checked above)
        found = sorted(d for d in os.listdir(where) if os.path.isdir(os.path.join(where, d)))
        unknown = sorted(set(found) - set(classes))
        if unknown:
            raise ValueError(
                f"{where} has classes {unknown} that train/ has not: the classes are the "
                f"sub-folders of train/ {list(classes)}"
            )
        files[split] = []
        for label, name in enumerate(classes):
            directory = os.path.join(where, name)
            images = _images_in(directory) if os.path.isdir(directory) else []
            if split == "train" and not images:
                raise ValueError(
                    f"{directory} holds no image ({', '.join(EXTENSIONS)}): every class of "
                    "train/ needs at least one"
                )
            files[split] += [(f, label) for f in images]
        if not files[split]:
            raise ValueError(f"{where} holds no image ({', '.join(EXTENSIONS)}) in any class")
    sizes: dict[tuple[int, int], str] = {}
    grey = True
    for split_files in files.values():
        for f, _ in split_files:
            try:
                with Image.open(f) as img:
                    w, h = img.size
                    grey = grey and img.mode in GREY_MODES
            except (UnidentifiedImageError, OSError) as e:
                raise ValueError(f"{f} is not an image Pillow can read: {e}") from None
            sizes.setdefault((h, w), f)
    if size is None and len(sizes) > 1:
        (s1, f1), (s2, f2) = list(sizes.items())[:2]
        raise ValueError(
            f"the images of {root} have {len(sizes)} sizes, e.g. {s1[0]}x{s1[1]} ({f1}) and "
            f"{s2[0]}x{s2[1]} ({f2}): a dataset has one size; resize them all with "
            f"--config.data.image_size=(H, W) (bicubic), e.g. ({s1[0]}, {s1[1]})"
        )
    h, w = size if size is not None else next(iter(sizes))
    return Folder(root, classes, files, (h, w, 1 if grey else 3), size is not None)


def read_split(folder: Folder, split: str) -> tuple[np.ndarray, np.ndarray] | None:
    """``(images uint8 [N, H, W, C], labels int32 [N])`` of one split; None for an absent
    ``val/``. Images converted to the folder's channels and, with ``data.image_size``, resized
    (bicubic)."""
    from PIL import Image

    if split not in folder.files:
        return None
    h, w, c = folder.image_shape
    entries = folder.files[split]
    images = np.empty((len(entries), h, w, c), np.uint8)
    labels = np.empty((len(entries),), np.int32)
    for i, (f, label) in enumerate(entries):
        with Image.open(f) as img:
            img = img.convert("L" if c == 1 else "RGB")
            if folder.resize and img.size != (w, h):
                img = img.resize((w, h), Image.Resampling.BICUBIC)
            images[i] = np.asarray(img, np.uint8).reshape(h, w, c)
        labels[i] = label
    return images, labels


# --------------------------------------------------------------------------- the digits example


def make_digits(out: str) -> dict[str, int]:
    """Write scikit-learn's digits in MNIST's 28 x 28 format (the ``digits`` dataset of
    :mod:`invjax.data.datasets`) as an image folder: its fixed train / val / test splits as
    ``out/{train,val,test}/<digit>/<index>.png`` (8-bit greyscale). Returns images per split."""
    from PIL import Image

    from invjax.data import digits as digits_lib

    if os.path.exists(out) and os.listdir(out):
        raise ValueError(f"{out} exists and is not empty: give a new directory")
    images, labels = digits_lib.digits()
    pixels = np.clip(np.rint(images[..., 0] * 255.0), 0, 255).astype(np.uint8)
    counts = {}
    for split, idx in zip(SPLITS, digits_lib.splits(0)):
        for i in idx:
            directory = os.path.join(out, split, str(int(labels[i])))
            os.makedirs(directory, exist_ok=True)
            Image.fromarray(pixels[i], mode="L").save(os.path.join(directory, f"{int(i):04d}.png"))
        counts[split] = len(idx)
    return counts


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m invjax.data.image_folder", description=__doc__.split("\n")[0]
    )
    p.add_argument("path", metavar="DIR", help="an image folder (DIR/train/<class>/*.png ...)")
    p.add_argument(
        "--make-digits", action="store_true", help="write scikit-learn's digits to DIR first"
    )
    p.add_argument("--image_size", help="H,W: resize every image (as data.image_size)")
    args = p.parse_args(argv)
    try:
        if args.make_digits:
            counts = make_digits(args.path)
            print(f"wrote {args.path}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        size = tuple(int(v) for v in args.image_size.split(",")) if args.image_size else None
        folder = scan(args.path, size)
    except ValueError as e:
        print(f"invjax.data.image_folder: error: {e}", file=sys.stderr)
        return 2
    h, w, c = folder.image_shape
    print(
        f"{folder.path}: {len(folder.classes)} classes {list(folder.classes)}, images {h}x{w}x{c}"
    )
    for split, entries in folder.files.items():
        print(f"  {split}: {len(entries)} images")
    return 0


if __name__ == "__main__":
    sys.exit(main())
