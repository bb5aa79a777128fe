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
``.jpeg``, ``.bmp``, ``.tif`` or ``.tiff`` (any case) are images; other files are ignored; a
folder without any image is an error. Images are read with Pillow and held as ``uint8 [N, H, W,
C]`` (0..255), as the TFDS datasets are, so the rest is the same as for them
(:mod:`invjax.data.datasets`): class-balanced ``N_t`` subsets, the stratified ``val_fraction``
split where ``val/`` is absent (``val/`` present: it is the validation split), normalisation by
the training split's mean/std, and the augmentations (``data.augment``; default ``'none'``).

Pixel formats (Pillow modes; :func:`to_uint8`): every mode is brought to 0..255 by a fixed rule
of the mode, never of the image's own values, so one scene stored in any two formats loads as
the same array (16-bit to within one level where Pillow itself keeps only the high byte):

    1                   0 -> 0, 1 -> 255
    L, RGB              as stored
    I;16, I;16B, I;16L  16-bit: round(v * 255 / 65535)
    I                   32-bit integers, read as 16-bit (how Pillow reads 16-bit PNGs): the same
                        rule; values outside 0..65535 are refused
    F                   32-bit float: round(v * 255) for values in [0, 1]; others (and NaN/inf)
                        are refused
    P                   its palette's colours
    CMYK, YCbCr, HSV    converted to RGB (Pillow's conversion)
    RGBX                the padding byte dropped
    LA, RGBA, PA        composited on black: round(c * a / 255) (an opaque image is as stored,
                        a fully transparent pixel is 0); La, RGBa (premultiplied) are that already;
                        a transparent colour of an L, RGB or P image (PNG tRNS) counts as alpha 0
    anything else       refused, naming the file and the mode (e.g. LAB: convert it to RGB)

Channels: ``C = 1`` if every image is greyscale (modes ``1``, ``L``, ``LA``, ``La``, ``I;16*``,
``I``, ``F``), else ``C = 3`` (a grey image is repeated into R = G = B). EXIF orientation is not
applied (the pixels as stored, as tensorflow-datasets reads them); a multi-frame file (TIFF
pages) gives its first frame.

Size rule: without ``data.image_size`` every image must have the same size, which becomes the
dataset's ``H x W``; images of several sizes are one error naming two of them and the fix. With
``data.image_size = (H, W)`` every image is resized to ``H x W`` (Pillow's bicubic filter, which
antialiases when shrinking; aspect ratio not kept: crop beforehand if it matters), after the
conversion to 8 bits above. Whether the network takes that size is checked by the trainer
before any compute (one message naming the shape, :func:`invjax.training.experiment.prepare`).

Limits, checked on the headers before any pixel is decoded: an image (its header's size, or
``data.image_size``) of at most :data:`MAX_PIXELS` pixels (8192 x 8192; Pillow's own
decompression-bomb guard is replaced by this one, which names the file and its size), and a
dataset (``N x H x W x C`` bytes over all splits) of at most :data:`MEMORY_SHARE` of this
machine's memory. A file Pillow cannot open or decode (truncated, damaged) is one error naming
it, raised while the splits are read (:func:`read_split`: before any training compute); the
command ``python -m invjax.data.image_folder DIR`` decodes every image, so it finds those too.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import signal
import sys

import numpy as np

NAME = "image_folder"  # its data.name (invjax.data.datasets.IMAGE_FOLDER)
SPLITS = ("train", "val", "test")
EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")
GREY_MODES = ("1", "L", "LA", "La", "I;16", "I;16L", "I;16B", "I;16N", "I", "F")
COLOUR_MODES = ("P", "PA", "RGB", "RGBA", "RGBa", "RGBX", "CMYK", "YCbCr", "HSV")
DEFAULT_AUGMENT = "none"
#: Pixels per image (header size or data.image_size): 8192 x 8192. Far above what these
#: classifiers take, far below what a forged header claims (30000 x 30000 in a PNG of 69 bytes).
MAX_PIXELS = 8192 * 8192
#: The largest share of this machine's memory the uint8 dataset (all splits) may take.
MEMORY_SHARE = 0.5
_ARCHIVES = (".zip", ".tar", ".tgz", ".tar.gz", ".tar.bz2", ".tar.xz", ".7z")


@dataclasses.dataclass(frozen=True)
class Folder:
    """What :func:`scan` found: class names, ``{split: [(file, label)]}``, image shape ``(H, W,
    C)`` after the size rule, and whether images are resized."""

    path: str
    classes: tuple[str, ...]
    files: dict[str, list[tuple[str, int]]]
    image_shape: tuple[int, int, int]
    resize: bool


def _listdir(directory: str) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError as e:  # a folder of the image folder, not the run's: one ValueError
        raise ValueError(f"cannot list {directory}: {e.strerror or e}") from None


def _images_in(directory: str) -> list[str]:
    return sorted(
        os.path.join(directory, f)
        for f in _listdir(directory)
        if f.lower().endswith(EXTENSIONS) and os.path.isfile(os.path.join(directory, f))
    )


def check_image_size(image_size) -> tuple[int, int] | None:
    """``data.image_size``: None, or ``(H, W)`` positive integers with ``H * W <=``
    :data:`MAX_PIXELS`; one ValueError naming the value otherwise."""
    if image_size is None:
        return None
    try:
        h, w = (int(v) for v in image_size)
        ok = (h, w) == tuple(image_size) and h >= 1 and w >= 1
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ValueError(
            f"data.image_size={image_size!r} is invalid: give (H, W), two positive integers "
            "(e.g. --config.data.image_size=(32, 32)), or None to keep the images' own size"
        )
    if h * w > MAX_PIXELS:
        raise ValueError(
            f"data.image_size={image_size!r} is {h * w:,} pixels per image, above the limit of "
            f"{MAX_PIXELS:,} (8192 x 8192): give a smaller (H, W), e.g. (224, 224)"
        )
    return h, w


def memory_bytes() -> int | None:
    """This machine's physical memory in bytes, or None where the OS does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


@contextlib.contextmanager
def _opened(file: str):
    """``Image.open(file)`` (lazy: the header only) with the size and mode checked; every
    failure one ValueError naming the file."""
    from PIL import Image

    # Pillow's decompression-bomb guard (a warning above 89 Mpx, an error naming no size above
    # twice that) is replaced by MAX_PIXELS, checked below with the file's size in the message.
    guard = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = None
    try:
        img = Image.open(file)
    except Exception as e:  # noqa: BLE001 (whatever Pillow raises, the file is what is wrong)
        raise ValueError(f"{file} is not an image Pillow can read: {e}") from None
    finally:
        Image.MAX_IMAGE_PIXELS = guard
    with img:
        w, h = img.size
        if w * h > MAX_PIXELS:
            raise ValueError(
                f"{file} claims {w} x {h} pixels ({w * h:,}), above the limit of {MAX_PIXELS:,} "
                "pixels per image (8192 x 8192): shrink it beforehand (it is not decoded) "
                "or remove it"
            )
        if img.mode not in GREY_MODES + COLOUR_MODES:
            raise ValueError(
                f"{file} has the pixel format (Pillow mode) {img.mode!r}, which invjax does not "
                f"read: convert it to 8-bit greyscale or RGB; readable modes are "
                f"{list(GREY_MODES + COLOUR_MODES)}"
            )
        yield img


def _composite(colour: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """``round(c * a / 255)`` for uint8 ``c [..., k]`` and ``a [..., 1]``: colour composited on
    black. Exact in integers (``c * a / 255`` is never a tie)."""
    c = colour.astype(np.uint32)
    a = alpha.astype(np.uint32)
    return ((c * a + 127) // 255).astype(np.uint8)


def _decode(img) -> tuple[str, np.ndarray]:
    """``(mode, pixels as stored)`` of a Pillow image, decoded, in one of the modes that
    :func:`pixels_to_uint8` takes: 1 -> L, a transparent colour -> LA / RGBA, PA -> RGBA, and P,
    RGBX, CMYK, YCbCr, HSV -> RGB (Pillow's conversions)."""
    img.load()
    mode = img.mode
    if mode in ("1", "L", "RGB", "P") and "transparency" in img.info:
        # A transparent colour (PNG tRNS) is alpha 0 for that colour: the alpha rule applies.
        img = img.convert("LA" if mode in ("1", "L") else "RGBA")
    elif mode == "1":
        img = img.convert("L")
    elif mode == "PA":
        img = img.convert("RGBA")
    elif mode in ("P", "RGBX", "CMYK", "YCbCr", "HSV"):
        img = img.convert("RGB")
    return img.mode, np.asarray(img)


def pixels_to_uint8(mode: str, pixels: np.ndarray, file: str = "the image") -> np.ndarray:
    """Pixels of Pillow ``mode`` (``L``, ``RGB``, ``LA``, ``RGBA``, ``La``, ``RGBa``, ``I;16*``,
    ``I``, ``F``; ``[H, W]`` or ``[H, W, k]``) as ``uint8 [H, W]`` (grey) or ``[H, W, 3]``:

        L, RGB                   as stored
        LA, RGBA                 round(c * a / 255) (composited on black)
        La, RGBa                 c (premultiplied: composited already)
        I;16*, I (0..65535)      round(v * 255 / 65535)
        F ([0, 1])               round(255 v)

    One ValueError naming ``file`` for values outside those ranges, or another mode."""
    if mode in ("L", "RGB"):
        return pixels.astype(np.uint8)
    if mode in ("LA", "RGBA"):
        out = _composite(pixels[..., :-1], pixels[..., -1:])
        return out[..., 0] if mode == "LA" else out
    if mode in ("La", "RGBa"):
        return pixels[..., 0] if mode == "La" else pixels[..., :3]
    if mode.startswith("I;16") or mode == "I":
        lo, hi = int(pixels.min(initial=0)), int(pixels.max(initial=0))
        if lo < 0 or hi > 65535:
            raise ValueError(
                f"{file} has 32-bit integer pixels (Pillow mode 'I') from {lo} to {hi}: invjax "
                "reads mode I as 16-bit, 0..65535 (how Pillow reads 16-bit PNGs); rescale it to "
                "0..65535, or save it as 8 or 16 bits"
            )
        # round(v * 255 / 65535) = round(v / 257) = (v + 128) // 257 (v / 257 is never a tie).
        return ((pixels.astype(np.uint32) + 128) // 257).astype(np.uint8)
    if mode == "F":
        v = pixels.astype(np.float32)
        finite = v[np.isfinite(v)]
        if finite.size < v.size or (v.size and not (finite.min() >= 0.0 and finite.max() <= 1.0)):
            what = (
                f"from {finite.min():g} to {finite.max():g}"
                if finite.size
                else "with no finite value"
            )
            nan = ", and NaN or inf" if 0 < finite.size < v.size else ""
            raise ValueError(
                f"{file} has 32-bit float pixels (Pillow mode 'F') {what}{nan}: invjax reads "
                "float images only in [0, 1] (as round(255 v)); rescale it to [0, 1], or save it "
                "as 8 or 16 bits"
            )
        return np.rint(v * 255.0).astype(np.uint8)
    raise ValueError(f"{file}: Pillow mode {mode!r} has no rule here (modes: module docstring)")


def to_uint8(img, file: str = "the image") -> np.ndarray:
    """The pixels of a Pillow image, decoded, as ``uint8 [H, W]`` (greyscale modes) or ``[H, W,
    3]`` by the rule of its mode (module docstring; :func:`pixels_to_uint8`). One ValueError
    naming ``file`` for a damaged file or pixels the rule refuses."""
    try:
        mode, pixels = _decode(img)
    except Exception as e:  # noqa: BLE001 (truncated, damaged: the file is what is wrong)
        raise ValueError(f"{file} cannot be decoded (damaged or truncated): {e}") from None
    return pixels_to_uint8(mode, pixels, file)


def _check_root(path) -> str:
    """``path`` as an absolute directory; one ValueError for no path, a missing one, a file."""
    layout = "DIR/train/<class>/*.png, DIR/test/<class>/*.png (optional DIR/val/<class>/)"
    if not path:
        raise ValueError(
            "data.path is not set: data.name='image_folder' reads DIR/train/<class>/*.png and "
            "DIR/test/<class>/*.png: give --config.data.path=DIR"
        )
    root = os.path.abspath(os.path.expanduser(str(path)))
    if os.path.isfile(root):
        archive = str(path).lower().endswith(_ARCHIVES)
        raise ValueError(
            f"data.path={path!r} is a file, not a directory: an image folder is a directory, "
            f"{layout}" + ("; unpack the archive and give its folder" if archive else "")
        )
    if not os.path.isdir(root):
        from invjax.data.idx import link_problem  # a dangling link or a loop: not "missing"

        what = link_problem(root) or "no such directory"
        raise ValueError(f"data.path={path!r}: {what} (an image folder is {layout})")
    for split in ("train", "test"):
        if not os.path.isdir(os.path.join(root, split)):
            raise ValueError(
                f"data.path={path!r} has no {split}/ folder: an image folder is {layout}"
            )
    return root


def scan(path, image_size=None) -> Folder:
    """The layout of ``path`` checked, every image's header read (sizes and modes; no pixels).

    One ValueError naming the path, file or value and the fix for: a missing folder, a file
    given as the folder, no ``train/``/``test/``, no class sub-folders, an empty class, a
    ``val/``/``test/`` class unknown to ``train/``, a file Pillow cannot open, an image above
    :data:`MAX_PIXELS` or in a mode without a rule, several image sizes without
    ``data.image_size``, and a dataset above :data:`MEMORY_SHARE` of this machine's memory.
    """
    size = check_image_size(image_size)
    root = _check_root(path)
    classes = tuple(
        sorted(
            d
            for d in _listdir(os.path.join(root, "train"))
            if os.path.isdir(os.path.join(root, "train", d))
        )
    )
    if len(classes) < 2:
        raise ValueError(
            f"{os.path.join(root, 'train')} has {len(classes)} class folder(s) {list(classes)}: "
            "a classifier needs at least 2 (DIR/train/<class>/*.png)"
        )
    files: dict[str, list[tuple[str, int]]] = {}
    for split in SPLITS:
        where = os.path.join(root, split)
        if not os.path.isdir(where):
            continue  # only val/ may be absent (checked above)
        found = sorted(d for d in _listdir(where) if os.path.isdir(os.path.join(where, d)))
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
            with _opened(f) as img:
                w, h = img.size
                grey = grey and img.mode in GREY_MODES
            sizes.setdefault((h, w), f)
    if size is None and len(sizes) > 1:
        (s1, f1), (s2, f2) = list(sizes.items())[:2]
        raise ValueError(
            f"the images of {root} have {len(sizes)} sizes, e.g. {s1[0]}x{s1[1]} ({f1}) and "
            f"{s2[0]}x{s2[1]} ({f2}): a dataset has one size; resize them all with "
            f"--config.data.image_size=(H, W) (bicubic), e.g. ({s1[0]}, {s1[1]})"
        )
    h, w = size if size is not None else next(iter(sizes))
    shape = (h, w, 1 if grey else 3)
    check_memory(sum(len(v) for v in files.values()), shape, root, size)
    return Folder(root, classes, files, shape, size is not None)


def check_memory(n: int, shape: tuple[int, int, int], root: str, image_size=None) -> int:
    """The bytes of ``n`` uint8 images of ``shape``; one ValueError naming the size (and
    ``data.image_size`` where given) if they exceed :data:`MEMORY_SHARE` of this machine's
    memory. Checked before anything is allocated."""
    h, w, c = shape
    need = n * h * w * c
    memory = memory_bytes()
    if memory is not None and need > MEMORY_SHARE * memory:
        what = f"data.image_size={tuple(image_size)!r}" if image_size else f"their size {h}x{w}"
        raise ValueError(
            f"the {n:,} images of {root} at {what} ({h}x{w}x{c}) take {_gib(need)} as uint8, "
            f"more than {MEMORY_SHARE:.0%} of this machine's {_gib(memory)} of memory: give a "
            "smaller --config.data.image_size=(H, W), or fewer images"
        )
    return need


def read_split(folder: Folder, split: str) -> tuple[np.ndarray, np.ndarray] | None:
    """``(images uint8 [N, H, W, C], labels int32 [N])`` of one split; None for an absent
    ``val/``. Each image converted by its mode's rule (:func:`to_uint8`; grey repeated into RGB
    where ``C = 3``) and, with ``data.image_size``, resized (bicubic). One ValueError naming the
    file for a damaged one, or one that changed since :func:`scan`."""
    from PIL import Image

    if split not in folder.files:
        return None
    h, w, c = folder.image_shape
    entries = folder.files[split]
    images = np.empty((len(entries), h, w, c), np.uint8)
    labels = np.empty((len(entries),), np.int32)
    for i, (f, label) in enumerate(entries):
        with _opened(f) as img:
            pixels = to_uint8(img, f)
        if pixels.ndim == 3 and c == 1:
            raise ValueError(
                f"{f} changed to colour since the folder was checked: run again to read it anew"
            )
        if folder.resize and pixels.shape[:2] != (h, w):
            resized = Image.fromarray(pixels).resize((w, h), Image.Resampling.BICUBIC)
            pixels = np.asarray(resized, np.uint8)
        if pixels.shape[:2] != (h, w):
            raise ValueError(
                f"{f} is {pixels.shape[0]}x{pixels.shape[1]}, not {h}x{w} as when the folder was "
                "checked: run again to read it anew"
            )
        images[i] = pixels.reshape(h, w, -1) if pixels.ndim == 3 else pixels[..., None]
        labels[i] = label
    return images, labels


# --------------------------------------------------------------------------- the digits example


def _digits_files() -> dict[str, tuple[np.ndarray, int]]:
    """``{relative path: (uint8 [28, 28] pixels, label)}`` of the digits export, its 1,797
    files ``{train,val,test}/<digit>/<index>.png`` (8-bit: round(255 x) of the digits)."""
    from invjax.data import digits as digits_lib

    images, labels = digits_lib.digits()
    pixels = np.clip(np.rint(images[..., 0] * 255.0), 0, 255).astype(np.uint8)
    out = {}
    for split, idx in zip(SPLITS, digits_lib.splits(0)):
        for i in idx:
            out[f"{split}/{int(labels[i])}/{int(i):04d}.png"] = (pixels[i], int(labels[i]))
    return out


_TMP = ".partial"  # a file being written: NAME.png.partial, renamed onto NAME.png when complete
_PROBE = ".invjax-probe-"  # the write test of check_destination


def _previous_export(root: str, expected) -> str | None:
    """None if ``root`` holds only files and folders of a digits export (a complete or an
    interrupted one), else the first entry that is not (relative path)."""
    folders = {os.path.dirname(p) for p in expected} | set(SPLITS)
    for here, dirs, names in os.walk(root):
        rel = os.path.relpath(here, root)
        for d in sorted(dirs):
            if os.path.normpath(os.path.join(rel, d)) not in folders:
                return os.path.join(rel, d).removeprefix("./") + "/"
        for n in sorted(names):
            p = os.path.normpath(os.path.join(rel, n))
            if p.removesuffix(_TMP) not in expected and not n.startswith(_PROBE):
                return p
    return None


def check_destination(out) -> str:
    """``--make-digits DIR``'s folder, checked before anything is written: given (not ``""``),
    not a file, under no file, writable (tried: the folder is created and a probe file written and
    removed; on failure nothing is left), and either empty/new or a previous digits export
    (then written again). Returns its absolute path; one ValueError naming it otherwise."""
    if not out or not str(out).strip():
        raise ValueError(
            f"--make-digits needs the folder to write the digits to, not {out!r} (e.g. "
            "--make-digits runs/digits_folder)"
        )
    root = os.path.abspath(os.path.expanduser(str(out)))
    if os.path.exists(root) and not os.path.isdir(root):
        raise ValueError(f"--make-digits {out}: it is a file, not a folder: give a new folder")
    above = root
    while not os.path.exists(above):
        above = os.path.dirname(above)
    if not os.path.isdir(above):
        raise ValueError(f"--make-digits {out}: {above} is a file, not a folder: give a new folder")
    entries = _listdir(root) if os.path.isdir(root) else []
    if entries:
        first = _previous_export(root, _digits_files())
        if first is not None:
            raise ValueError(
                f"--make-digits {out}: the folder is not empty and is not a digits folder written "
                f"by --make-digits (it holds {first}): give a new or empty folder"
            )
    created = None if os.path.isdir(root) else root
    while created and not os.path.exists(os.path.dirname(created)):
        created = os.path.dirname(created)
    try:
        os.makedirs(root, exist_ok=True)
        probe = os.path.join(root, f"{_PROBE}{os.getpid()}")
        with open(probe, "wb") as fh:
            fh.write(b"probe")
        os.remove(probe)
    except OSError as e:
        if created and os.path.isdir(created):
            import shutil

            shutil.rmtree(created, ignore_errors=True)
        raise ValueError(
            f"--make-digits {out}: cannot write there ({e.strerror or e}): give a writable folder"
        ) from None
    return root


def make_digits(out: str, progress=None) -> dict[str, int]:
    """Write scikit-learn's digits in MNIST's 28 x 28 format (the ``digits`` dataset of
    :mod:`invjax.data.datasets`) as an image folder: its fixed train / val / test splits as
    ``out/{train,val,test}/<digit>/<index>.png`` (8-bit greyscale). The folder is checked first
    (:func:`check_destination`: one ValueError, nothing written); each file is written whole
    (a ``.partial`` file renamed), so an interrupted export is completed by the same command.
    ``progress`` (a list) collects the files written. Returns images per split."""
    from PIL import Image

    root = check_destination(out)
    files = _digits_files()
    counts = dict.fromkeys(SPLITS, 0)
    for rel, (pixels, _) in files.items():
        target = os.path.join(root, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        Image.fromarray(pixels).save(target + _TMP, format="PNG")  # uint8 [28, 28]: mode L
        os.replace(target + _TMP, target)
        counts[rel.split("/", 1)[0]] += 1
        if progress is not None:
            progress.append(rel)
    return counts


# --------------------------------------------------------------------------- the command


class _Signal(Exception):  # noqa: N818 (a signal, not an error)
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_signal(signum, frame):
    raise _Signal(signum)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse prints the usage too)
        print(f"invjax: error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def _parse_size(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        return check_image_size(tuple(int(v) for v in text.replace("x", ",").split(",")))
    except ValueError:
        raise ValueError(
            f"--image_size={text!r} is invalid: give H,W, two positive integers (e.g. 32,32)"
        ) from None


def main(argv=None) -> int:
    """The command (module docstring). Exit 0: the folder reads (every image decoded); 2: bad
    input, refused before anything is written; 1: a write failed; 128 + n: signal n."""
    p = _Parser(prog="python -m invjax.data.image_folder", description=__doc__.split("\n")[0])
    p.add_argument("path", metavar="DIR", help="an image folder (DIR/train/<class>/*.png ...)")
    p.add_argument(
        "--make-digits", action="store_true", help="write scikit-learn's digits to DIR first"
    )
    p.add_argument("--image_size", help="H,W: resize every image (as data.image_size)")
    args = p.parse_args(argv)
    signums = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    previous = {signum: signal.signal(signum, _raise_signal) for signum in signums}
    try:
        return _run(args)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _run(args) -> int:
    written: list[str] = []
    try:
        size = _parse_size(args.image_size)
        if args.make_digits:
            counts = make_digits(args.path, written)
            print(f"wrote {args.path}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        folder = scan(args.path, size)
        for split in folder.files:
            read_split(folder, split)  # decodes every image: damaged files are found here
    except ValueError as e:
        print(f"invjax: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # scan and read_split report theirs as ValueError: a write failed
        done = f" after {len(written)} files (the same command completes the folder)"
        print(
            f"invjax: error: writing {args.path} failed{done if written else ''}: {e}",
            file=sys.stderr,
        )
        return 1
    except _Signal as e:
        done = f"; {len(written)} files written (the same command completes the folder)"
        print(f"invjax: error: stopped by {e}{done if args.make_digits else ''}", file=sys.stderr)
        return 128 + e.signum
    h, w, c = folder.image_shape
    print(
        f"{folder.path}: {len(folder.classes)} classes {list(folder.classes)}, images {h}x{w}x{c}"
        f"{' (resized)' if folder.resize else ''}"
    )
    for split, entries in folder.files.items():
        print(f"  {split}: {len(entries)} images")
    return 0


if __name__ == "__main__":
    sys.exit(main())
