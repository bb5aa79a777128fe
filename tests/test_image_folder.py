"""``data.name=image_folder``: your own images in tensorflow-datasets' ImageFolder layout, and
the README's example (scikit-learn's digits written as a folder, then trained on)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import flax.linen as nn
import numpy as np
import pytest
from PIL import Image

from invjax import data as data_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def _cfg(path, **kw):
    cfg = data_lib.default_config()
    cfg.name, cfg.path = "image_folder", str(path)
    for k, v in kw.items():
        cfg[k] = v
    return cfg


@pytest.fixture(scope="module")
def digits_folder(tmp_path_factory):
    """The README's first command: ``python -m invjax.data.image_folder --make-digits DIR``."""
    path = str(tmp_path_factory.mktemp("folders") / "digits")
    proc = subprocess.run(
        [sys.executable, "-m", "invjax.data.image_folder", "--make-digits", path],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "wrote" in proc.stdout and "10 classes" in proc.stdout and "28x28x1" in proc.stdout
    assert "train: 1079 images" in proc.stdout and "test: 359 images" in proc.stdout
    return path


@pytest.mark.slow
def test_the_digits_folder_is_the_digits_dataset(digits_folder):
    """Read back, the folder is ``data.name=digits`` quantised to 8 bits: the same splits (val/
    is the validation split) as sets of (image, label) (the folder orders them by class and file
    name), the same normalisation up to that rounding; N_t subsets class-balanced."""
    mine = data_lib.load(_cfg(digits_folder))
    ref_cfg = data_lib.default_config()
    ref_cfg.name = "digits"
    ref = data_lib.load(ref_cfg)
    assert mine.image_shape == (28, 28, 1) and mine.num_classes == 10
    assert mine.class_names == tuple(str(k) for k in range(10))
    assert mine.augment == "none"

    def rows(split, quantise):
        x = np.rint(split.images * 255).astype(np.uint8) if quantise else split.images
        return sorted(img.tobytes() + bytes([lab]) for img, lab in zip(x, split.labels))

    for split in ("train", "val", "test"):
        a, b = getattr(mine, split), getattr(ref, split)
        assert a.images.dtype == np.uint8 and len(a) == len(b)
        assert rows(a, False) == rows(b, True), split
    np.testing.assert_allclose(mine.mean, ref.mean, atol=2e-3)
    np.testing.assert_allclose(mine.std, ref.std, atol=2e-3)
    subset = data_lib.load(_cfg(digits_folder, n_train=100))
    assert np.bincount(subset.train.labels).tolist() == [10] * 10  # class-balanced N_t
    # No val/: the stratified 80:20 split of train/, as for the TFDS datasets.
    no_val = data_lib.load(_cfg(digits_folder, val_fraction=0.2, n_train=0))
    assert len(no_val.val) == 359  # val/ present: it is used as it is
    os.rename(os.path.join(digits_folder, "val"), os.path.join(digits_folder, "val_off"))
    try:
        split = data_lib.load(_cfg(digits_folder))
        assert (len(split.train), len(split.val)) == (863, 216)  # 1079 = 80:20
    finally:
        os.rename(os.path.join(digits_folder, "val_off"), os.path.join(digits_folder, "val"))


@pytest.mark.slow
def test_train_on_the_folder_with_any_config(digits_folder, tmp_path):
    """The README's second command: a config of the built-in datasets, pointed at the folder."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "invjax.main",
            "--config=configs/digits_cnn.py",
            "--config.data.name=image_folder",
            f"--config.data.path={digits_folder}",
            "--config.data.n_train=100",
            "--config.data.augment=scale",
            "--config.model.width=4",
            "--config.train.batch_size=50",
            "--config.train.num_epochs=1",
            "--config.train.lr_boundaries=()",
            f"--workdir={tmp_path / 'run'}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "data: image_folder 28x28x1" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1].startswith("test_error=")


def _write(path, size=(6, 5), mode="L", value=0):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.new(mode, size, value).save(path)


def _tiny(root, classes=("cat", "dog"), size=(6, 5), mode="L"):
    for split in ("train", "test"):
        for k, name in enumerate(classes):
            for i in range(3):
                _write(str(root / split / name / f"{i}.png"), size, mode, 40 * k + i)
    return root


def test_sizes_channels_and_resizing(tmp_path):
    root = _tiny(tmp_path / "f")
    (root / "train" / "cat" / "notes.txt").write_text("ignored: not an image")
    ds = data_lib.load(_cfg(root, val_fraction=0.0))
    assert ds.image_shape == (5, 6, 1) and ds.class_names == ("cat", "dog")
    assert ds.train.images.shape == (6, 5, 6, 1) and ds.train.labels.tolist() == [0] * 3 + [1] * 3
    # One RGB image: every image is read as RGB (C = 3).
    _write(str(root / "test" / "dog" / "rgb.png"), (6, 5), "RGB", (200, 10, 10))
    ds = data_lib.load(_cfg(root, val_fraction=0.0))
    assert ds.image_shape == (5, 6, 3) and ds.test.images[-1, 0, 0].tolist() == [200, 10, 10]
    # Another size: one message naming both and the fix; data.image_size resizes all.
    _write(str(root / "train" / "dog" / "big.png"), (12, 10), "L", 90)
    with pytest.raises(ValueError, match=r"2 sizes, e\.g\. 5x6 .* and 10x12 .*image_size"):
        data_lib.load(_cfg(root))
    ds = data_lib.load(_cfg(root, image_size=(8, 8), val_fraction=0.0))
    assert ds.image_shape == (8, 8, 3) and ds.train.images.shape[1:] == (8, 8, 3)
    assert int(ds.train.images[-1].min()) == int(ds.train.images[-1].max()) == 90  # flat: kept


@pytest.mark.parametrize(
    "damage, match",
    [
        ("no_path", "data.path is not set"),
        ("missing", "no such directory"),
        ("no_test", "has no test/ folder"),
        ("one_class", r"1 class folder\(s\) \['cat'\]: a classifier needs at least 2"),
        ("unknown_test_class", r"has classes \['bird'\] that train/ has not"),
        ("empty_class", "holds no image"),
        ("broken", "is not an image Pillow can read"),
        ("bad_size", r"data.image_size=\(0, 8\) is invalid"),
    ],
)
def test_bad_folders_are_one_message(tmp_path, damage, match):
    root = _tiny(tmp_path / "f")
    cfg = _cfg(root)
    if damage == "no_path":
        cfg.path = None
    elif damage == "missing":
        cfg.path = str(tmp_path / "nope")
    elif damage == "no_test":
        os.rename(root / "test", root / "other")
    elif damage == "one_class":
        for split in ("train", "test"):
            for f in os.listdir(root / split / "dog"):
                os.remove(root / split / "dog" / f)
            os.rmdir(root / split / "dog")
    elif damage == "unknown_test_class":
        _write(str(root / "test" / "bird" / "0.png"))
    elif damage == "empty_class":
        os.makedirs(root / "train" / "fish")
    elif damage == "broken":
        (root / "train" / "cat" / "3.png").write_bytes(b"not a png")
    elif damage == "bad_size":
        cfg.image_size = (0, 8)
    with pytest.raises(ValueError, match=match):
        data_lib.check_config(cfg)  # the checks, before any loading


class _NeedsEightPixels(nn.Module):
    """A network that refuses images below 8 x 8 (as one whose pooling would leave no pixel)."""

    @nn.compact
    def __call__(self, x, train: bool = False):
        if x.shape[1] < 8 or x.shape[2] < 8:
            raise ValueError(f"this network takes images of at least 8x8, not {x.shape[1:3]}")
        return nn.Dense(2)(x.reshape(x.shape[0], -1))


def test_a_size_the_model_cannot_take_names_the_fix(tmp_path, monkeypatch):
    """The trainer's shape check (before any compute) adds the resizing hint for a folder; with
    data.image_size the same folder fits."""
    from invjax import configs as invjax_configs
    from invjax import models
    from invjax.training import experiment

    monkeypatch.setattr(models, "build", lambda cfg: _NeedsEightPixels())
    root = _tiny(tmp_path / "f", size=(3, 3))
    config = invjax_configs.load(os.path.join(REPO, "configs", "digits_cnn.py"))
    config.data = _cfg(root, val_fraction=0.0)
    config.train.batch_size, config.train.select_best = 2, False
    with pytest.raises(ValueError, match=r"3x3x1: resize them .*data.image_size=\(H, W\)"):
        experiment.prepare(config, str(tmp_path / "run"))
    config.data.image_size = (8, 8)
    assert experiment.prepare(config, str(tmp_path / "run")).dataset.image_shape == (8, 8, 1)
    assert not os.path.exists(tmp_path / "run")  # prepare writes nothing
    config.model.num_classes = 10  # a config written for the 10 digits
    with pytest.raises(ValueError, match=r"has 2 classes: .*--config.model.num_classes=2"):
        experiment.prepare(config, str(tmp_path / "run"))


# --------------------------------------------------------------------------- pixel formats


def _png_bytes(width, height, bit_depth, colour_type, rows=None):
    """A PNG written byte by byte (Pillow writes neither 16-bit colour nor forged headers):
    ``rows`` the raw scanlines (filter byte 0 added), or a few zero bytes for a forged header."""
    import struct
    import zlib

    def chunk(kind, data):
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    raw = b"".join(b"\0" + r for r in rows) if rows is not None else b"\0" * 100
    header = struct.pack(">IIBBBBB", width, height, bit_depth, colour_type, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def _read_file(path):
    """One file as the folder reads it: ``uint8 [H, W]`` or ``[H, W, 3]``."""
    from invjax.data import image_folder

    with image_folder._opened(str(path)) as img:
        return image_folder.to_uint8(img, str(path))


def _scaled16(v):
    return np.rint(np.asarray(v, np.float64) * 255 / 65535).astype(np.uint8)


V16 = np.array([[0, 128, 129, 1000], [30000, 35000, 65406, 65535]], np.uint16)


def test_every_pixel_format_is_read_by_its_rule(tmp_path):
    """Real files of each Pillow mode, read back by the folder's rule (module docstring): exact
    values, 16-bit scaled (not clipped), palette colours, alpha composited on black."""
    f = lambda name: str(tmp_path / name)  # noqa: E731
    # 1-bit: 0 / 255.
    bits = np.array([[0, 1, 1], [1, 0, 0]], bool)
    Image.fromarray(bits).save(f("bits.png"))
    assert Image.open(f("bits.png")).mode == "1"
    assert _read_file(f("bits.png")).tolist() == [[0, 255, 255], [255, 0, 0]]
    # L and RGB: as stored.
    grey = np.array([[0, 7, 128], [200, 254, 255]], np.uint8)
    Image.fromarray(grey).save(f("l.png"))
    assert _read_file(f("l.png")).tolist() == grey.tolist()
    # 16-bit greyscale, three byte orders: round(v * 255 / 65535), never 255 for all.
    Image.fromarray(V16).save(f("i16.png"))
    assert Image.open(f("i16.png")).mode == "I;16"
    want = _scaled16(V16)
    assert want.tolist() == [[0, 0, 1, 4], [117, 136, 254, 255]]
    assert _read_file(f("i16.png")).tolist() == want.tolist()
    Image.frombytes("I;16B", (4, 2), V16.astype(">u2").tobytes()).save(f("i16b.tif"))
    assert Image.open(f("i16b.tif")).mode == "I;16B"
    assert _read_file(f("i16b.tif")).tolist() == want.tolist()
    little = Image.frombytes("I;16L", (4, 2), V16.astype("<u2").tobytes())
    assert image_folder_to_uint8(little).tolist() == want.tolist()
    # 32-bit integers (TIFF): read as 16-bit; outside 0..65535 refused naming the file.
    Image.fromarray(V16.astype(np.int32)).save(f("i32.tif"))
    assert Image.open(f("i32.tif")).mode == "I"
    assert _read_file(f("i32.tif")).tolist() == want.tolist()
    Image.fromarray(np.array([[0, 70000]], np.int32)).save(f("i32_big.tif"))
    with pytest.raises(ValueError, match=r"i32_big\.tif has 32-bit integer pixels .* 0 to 70000"):
        _read_file(f("i32_big.tif"))
    # Float (TIFF): [0, 1] -> round(255 v); anything else refused naming the file and range.
    Image.fromarray(np.array([[0.0, 0.5, 1.0, 0.2]], np.float32)).save(f("f.tif"))
    assert Image.open(f("f.tif")).mode == "F"
    assert _read_file(f("f.tif")).tolist() == [[0, 128, 255, 51]]
    Image.fromarray(np.array([[0.0, 1.5]], np.float32)).save(f("f_big.tif"))
    with pytest.raises(ValueError, match=r"f_big\.tif has 32-bit float pixels .* from 0 to 1\.5"):
        _read_file(f("f_big.tif"))
    Image.fromarray(np.array([[0.0, np.nan]], np.float32)).save(f("f_nan.tif"))
    with pytest.raises(ValueError, match=r"f_nan\.tif .*NaN or inf"):
        _read_file(f("f_nan.tif"))
    # Palette: its colours.
    pal = Image.new("P", (2, 1))
    pal.putpalette([0, 0, 0, 200, 100, 50, 10, 20, 30] + [0] * 759)
    pal.putpixel((0, 0), 1)
    pal.putpixel((1, 0), 2)
    pal.save(f("p.png"))
    assert Image.open(f("p.png")).mode == "P"
    assert _read_file(f("p.png")).tolist() == [[[200, 100, 50], [10, 20, 30]]]
    # Alpha: composited on black, round(c * a / 255); opaque pixels as stored.
    la = np.array([[[200, 128], [200, 255], [200, 0]]], np.uint8)
    Image.fromarray(la, "LA").save(f("la.png"))
    assert _read_file(f("la.png")).tolist() == [[100, 200, 0]]  # 200 * 128 / 255 = 100.4
    rgba = np.array([[[200, 100, 50, 128], [9, 8, 7, 255]]], np.uint8)
    Image.fromarray(rgba, "RGBA").save(f("rgba.png"))
    assert _read_file(f("rgba.png")).tolist() == [[[100, 50, 25], [9, 8, 7]]]
    pa = Image.new("PA", (2, 1))
    pa.putpalette([0, 0, 0, 200, 100, 50] + [0] * 762)
    pa.putpixel((0, 0), (1, 128))
    pa.putpixel((1, 0), (1, 255))
    pa.save(f("pa.tif"))
    assert Image.open(f("pa.tif")).mode == "PA"
    assert _read_file(f("pa.tif")).tolist() == [[[100, 50, 25], [200, 100, 50]]]
    # A transparent colour (PNG tRNS) of a palette or grey image is alpha 0.
    pal.save(f("p_trns.png"), transparency=2)
    assert _read_file(f("p_trns.png")).tolist() == [[[200, 100, 50], [0, 0, 0]]]
    Image.fromarray(grey).save(f("l_trns.png"), transparency=128)
    assert _read_file(f("l_trns.png")).tolist() == [[0, 7, 0], [200, 254, 255]]
    # Premultiplied alpha: composited already.
    assert image_folder_to_uint8(Image.new("La", (1, 1), (90, 128))).tolist() == [[90]]
    # CMYK, YCbCr: Pillow's conversion to RGB; RGBX: the padding dropped.
    Image.new("CMYK", (2, 2), (255, 0, 30, 20)).save(f("cmyk.tif"))
    assert _read_file(f("cmyk.tif"))[0, 0].tolist() == [0, 235, 207]
    Image.new("YCbCr", (2, 2), (120, 90, 200)).save(f("ycbcr.tif"))
    assert Image.open(f("ycbcr.tif")).mode == "YCbCr"
    ycc = Image.new("YCbCr", (1, 1), (120, 90, 200)).convert("RGB").getpixel((0, 0))
    assert _read_file(f("ycbcr.tif"))[0, 0].tolist() == list(ycc) == [220, 81, 52]
    assert image_folder_to_uint8(Image.new("RGBX", (1, 1), (1, 2, 3, 0))).tolist() == [[[1, 2, 3]]]
    # 16-bit colour PNG: Pillow keeps the high byte, within one level of the 16-bit rule.
    rgb16 = np.array([[[65535, 0, 32768], [1000, 30000, 257]]], np.uint16)
    (tmp_path / "rgb16.png").write_bytes(_png_bytes(2, 1, 16, 2, [rgb16.astype(">u2").tobytes()]))
    got = _read_file(f("rgb16.png")).astype(int)
    assert np.abs(got - _scaled16(rgb16)).max() <= 1 and got[0, 0].tolist() == [255, 0, 128]
    # A mode without a rule: refused naming the file and the mode.
    Image.new("LAB", (2, 2), (50, 10, 10)).save(f("lab.tif"))
    with pytest.raises(ValueError, match=r"lab\.tif has the pixel format \(Pillow mode\) 'LAB'"):
        _read_file(f("lab.tif"))


def image_folder_to_uint8(img):
    from invjax.data import image_folder

    return image_folder.to_uint8(img, "in memory")


def _class_folder(root, images_by_class, splits=("train", "test")):
    """``root/<split>/<class>/<i>.<ext>`` from ``{class: [(PIL image, ext), ...]}``."""
    for split in splits:
        for name, images in images_by_class.items():
            os.makedirs(root / split / name, exist_ok=True)
            for i, (img, ext) in enumerate(images):
                img.save(str(root / split / name / f"{i}.{ext}"))
    return root


def test_sixteen_bit_classes_stay_apart(tmp_path):
    """The reported failure: 16-bit PNGs of a 'dark' (1000-30000) and a 'bright' (35000-65535)
    class loaded as all-white. Now each pixel is round(v * 255 / 65535), so the classes are
    apart, and the same images as 8-bit load within one level."""
    rng = np.random.default_rng(0)
    v16 = {
        "dark": rng.integers(1000, 30001, (4, 6, 7)),
        "bright": rng.integers(35000, 65536, (4, 6, 7)),
    }
    root16 = _class_folder(
        tmp_path / "f16",
        {k: [(Image.fromarray(x.astype(np.uint16)), "png") for x in v] for k, v in v16.items()},
    )
    root8 = _class_folder(
        tmp_path / "f8",
        {k: [(Image.fromarray(_scaled16(x)), "png") for x in v] for k, v in v16.items()},
    )
    ds16 = data_lib.load(_cfg(root16, val_fraction=0.0))
    ds8 = data_lib.load(_cfg(root8, val_fraction=0.0))
    assert ds16.image_shape == (6, 7, 1) and ds16.class_names == ("bright", "dark")
    x, y = ds16.train.images, ds16.train.labels
    assert int(x[y == 1].max()) <= 117 < 136 <= int(x[y == 0].min())  # dark below bright
    assert int(x.max()) < 255 or int(x.min()) < 255  # not all white
    np.testing.assert_array_equal(x, ds8.train.images)  # the 8-bit copy: identical
    want = np.concatenate([_scaled16(v16["bright"]), _scaled16(v16["dark"])])[..., None]
    np.testing.assert_array_equal(x, want)


def test_one_scene_in_every_mode_loads_as_one_array(tmp_path):
    """A folder mixing modes comes out consistent: the same grey ramp stored as 8-bit, 16-bit,
    32-bit integer, float, opaque LA, grey-palette and RGB files loads as the same array (C = 3
    because of the colour files, grey repeated into R = G = B); without the colour files the
    folder is C = 1, with the same values."""
    ramp = np.arange(0, 240, 10, dtype=np.uint8).reshape(4, 6)
    grey_files = [
        (Image.fromarray(ramp), "png"),
        (Image.fromarray(ramp.astype(np.uint16) * 257), "png"),
        (Image.fromarray(ramp.astype(np.int32) * 257), "tif"),
        (Image.fromarray(ramp.astype(np.float32) / 255), "tif"),
        (Image.fromarray(np.stack([ramp, np.full_like(ramp, 255)], -1), "LA"), "png"),
    ]
    colour_files = [
        (Image.fromarray(ramp).convert("P"), "png"),  # Pillow's grey palette
        (Image.fromarray(ramp).convert("RGB"), "jpg"),  # lossy: compared within its error
    ]
    modes = [img.mode for img, _ in grey_files + colour_files]
    assert modes == ["L", "I;16", "I", "F", "LA", "P", "RGB"]
    root = _class_folder(tmp_path / "grey", {"a": grey_files, "b": grey_files})
    ds = data_lib.load(_cfg(root, val_fraction=0.0))
    assert ds.image_shape == (4, 6, 1) and len(ds.train) == 10
    for img in ds.train.images:
        np.testing.assert_array_equal(img[..., 0], ramp)
    root = _class_folder(tmp_path / "mixed", {"a": grey_files + colour_files, "b": grey_files})
    ds = data_lib.load(_cfg(root, val_fraction=0.0))
    assert ds.image_shape == (4, 6, 3) and len(ds.train) == 12
    jpeg = 6  # class a's files in name order: 0.png ... 5.png, 6.jpg; then class b's 5
    for i, img in enumerate(ds.train.images):
        if i != jpeg:
            np.testing.assert_array_equal(img, np.repeat(ramp[..., None], 3, -1))
    assert np.abs(ds.train.images[jpeg].astype(int) - ramp[..., None]).max() <= 8


# --------------------------------------------------------------------------- damaged and absurd


def _truncate(path):
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])


def test_a_truncated_file_is_one_message_naming_it(tmp_path):
    root = _tiny(tmp_path / "f")
    noise = np.random.default_rng(1).integers(0, 256, (5, 6), dtype=np.uint8)
    target = root / "train" / "dog" / "0.png"
    Image.fromarray(noise).save(str(target))
    _truncate(str(target))
    data_lib.check_config(_cfg(root))  # the header is whole: the layout checks pass
    with pytest.raises(ValueError, match=rf"{target} cannot be decoded \(damaged or truncated\)"):
        data_lib.load(_cfg(root))


def test_a_forged_header_is_one_message_naming_the_file_and_size(tmp_path):
    root = _tiny(tmp_path / "f")
    target = root / "train" / "dog" / "0.png"
    target.write_bytes(_png_bytes(30000, 30000, 8, 0))  # 900 Mpx claimed by 100 bytes
    for size in (None, (8, 8)):  # resizing needs the pixels decoded: refused either way
        with pytest.raises(
            ValueError, match=rf"{target} claims 30000 x 30000 pixels \(900,000,000\)"
        ):
            data_lib.check_config(_cfg(root, image_size=size))


def test_absurd_sizes_are_refused_before_allocating(tmp_path, monkeypatch):
    from invjax.data import image_folder

    root = _tiny(tmp_path / "f")
    with pytest.raises(
        ValueError, match=r"data.image_size=\(100000, 100000\) is 10,000,000,000 pixels per image"
    ):
        data_lib.check_config(_cfg(root, image_size=(100000, 100000)))
    # Under the per-image limit, but the dataset would not fit: 12 images of 8192 x 8192 x 1
    # are 0.75 GiB; on a machine of 1 GiB the half-memory budget refuses them, naming the value.
    monkeypatch.setattr(image_folder, "memory_bytes", lambda: 2**30)
    with pytest.raises(
        ValueError,
        match=r"the 12 images of .* at data.image_size=\(8192, 8192\) \(8192x8192x1\) take "
        r"0\.8 GiB as uint8, more than 50% of this machine's 1\.0 GiB",
    ):
        data_lib.check_config(_cfg(root, image_size=(8192, 8192)))
    assert data_lib.check_config(_cfg(root, image_size=(64, 64)))["image_shape"] == (64, 64, 1)


def test_a_file_as_the_folder_says_so(tmp_path):
    for name, hint in (("images.png", ""), ("images.zip", "; unpack the archive")):
        (tmp_path / name).write_bytes(b"x")
        with pytest.raises(
            ValueError, match=rf"is a file, not a directory: .*train/<class>.*{hint}"
        ):
            data_lib.check_config(_cfg(tmp_path / name))
    with pytest.raises(ValueError, match="no such directory"):
        data_lib.check_config(_cfg(tmp_path / "missing"))


# --------------------------------------------------------------------------- the validation split


def test_the_validation_split_never_takes_a_class_whole(tmp_path):
    """One image per class: the 80:20 split would give whole classes to validation (the model
    would never see them); refused with one message naming the class and its counts. With a
    val/ folder or data.val_fraction=0 the same folder trains on every class."""
    from invjax.data import subsets

    labels = np.arange(10)  # ten classes of one image each
    with pytest.raises(
        ValueError, match=r"class 0 \(and 1 more class\(es\) alike\) has 1 training"
    ):
        subsets.validation_split(labels, 0.2)
    names = [f"c{k}" for k in range(10)]
    with pytest.raises(ValueError, match=r"class 'c0' \(label 0\) .* has 1 training image\(s\)"):
        subsets.validation_split(labels, 0.2, 0, names)
    many = np.repeat(np.arange(10), 5)  # five per class: each keeps four
    tr, va = subsets.validation_split(many, 0.2, 0, names)
    assert np.bincount(many[tr]).tolist() == [4] * 10 and len(va) == 10

    root = tmp_path / "f"  # the reported folder: one image per class
    for split in ("train", "test"):
        for k in range(5):
            _write(str(root / split / f"c{k}" / "0.png"), value=50 * k)
    with pytest.raises(
        ValueError,
        match=r"class 'c0' \(label 0\) has 1 training image\(s\) and the validation split "
        r"\(data.val_fraction=0.2\) takes all of them, leaving none to train on: give that "
        r"class more images, .*val/\), or data.val_fraction=0",
    ):
        data_lib.load(_cfg(root, val_fraction=0.2))
    assert np.bincount(data_lib.load(_cfg(root, val_fraction=0.0)).train.labels).tolist() == [1] * 5
    _write(str(root / "train" / "c0" / "1.png"), value=1)
    _write(str(root / "train" / "c0" / "2.png"), value=2)
    ds = data_lib.load(_cfg(root, val_fraction=0.2))  # 7 images: c0 gives one, keeps two
    assert np.bincount(ds.train.labels).tolist() == [2, 1, 1, 1, 1] and ds.val.labels.tolist() == [
        0
    ]
    for k in range(5):
        _write(str(root / "val" / f"c{k}" / "0.png"), value=50 * k)
    ds = data_lib.load(_cfg(root, val_fraction=0.2))  # val/ is the validation split
    assert np.bincount(ds.train.labels).tolist() == [3, 1, 1, 1, 1] and len(ds.val) == 5


# --------------------------------------------------------------------------- the commands


def _main(args, tmp_path, cwd=REPO):
    return subprocess.run(
        [sys.executable, "-m", "invjax.main", "--config=configs/digits_cnn.py", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _one_error_line(proc) -> str:
    """The command's whole stderr: one ``invjax: error:`` line (no traceback)."""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("invjax: error: "), proc.stderr[-3000:]
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize(
    "damage, dry_run",
    [
        ("truncated", True),
        ("truncated", False),
        ("forged_header", False),
        ("absurd_size", False),
        ("file_as_folder", True),
        ("one_image_per_class", False),
    ],
)
def test_the_trainer_refuses_bad_images_in_one_line(tmp_path, damage, dry_run):
    """The reported attacks, as a user runs them: exit 2, one line naming the file or value,
    nothing written (the workdir is not created)."""
    root = _tiny(tmp_path / "f", size=(8, 8))
    extra, classes = [], 2
    target = root / "train" / "dog" / "0.png"
    if damage == "truncated":
        noise = np.random.default_rng(1).integers(0, 256, (8, 8), dtype=np.uint8)
        Image.fromarray(noise).save(str(target))
        _truncate(str(target))
        named = rf"{target} cannot be decoded \(damaged or truncated\)"
    elif damage == "forged_header":
        target.write_bytes(_png_bytes(30000, 30000, 8, 0))
        named = rf"{target} claims 30000 x 30000 pixels"
    elif damage == "absurd_size":
        extra = ["--config.data.image_size=(100000, 100000)"]
        named = r"data.image_size=\(100000, 100000\) is 10,000,000,000 pixels per image"
    elif damage == "file_as_folder":
        root = tmp_path / "images.png"
        root.write_bytes(b"x")
        named = rf"data.path='{root}' is a file, not a directory"
    else:  # five classes of one image each: the 80:20 split gives class c0's to validation
        root = tmp_path / "one_each"
        for split in ("train", "test"):
            for k in range(5):
                _write(str(root / split / f"c{k}" / "0.png"), (8, 8), value=40 * k)
        classes = 5
        named = r"class 'c0' \(label 0\) has 1 training image\(s\) and the validation split"
    run = tmp_path / "run"
    proc = _main(
        [
            f"--workdir={run}",
            "--config.data.name=image_folder",
            f"--config.data.path={root}",
            f"--config.model.num_classes={classes}",
            *extra,
            *(["--dry_run"] if dry_run else []),
        ],
        tmp_path,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert re.search(named, _one_error_line(proc)), proc.stderr
    assert not run.exists()


def _make_digits(dest, cwd):
    return subprocess.run(
        [sys.executable, "-m", "invjax.data.image_folder", "--make-digits", dest],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": REPO},
    )


@pytest.mark.slow
def test_make_digits_checks_its_folder_before_writing(tmp_path):
    """``--make-digits`` onto "", a file, a path under a file, a folder of other things, a
    read-only place: exit 2, one line, nothing written."""
    here = tmp_path / "cwd"
    here.mkdir()
    proc = _make_digits("", here)  # was: 1,797 PNGs written into the current folder, then exit 2
    assert proc.returncode == 2 and "needs the folder to write" in _one_error_line(proc)
    assert os.listdir(here) == []
    (here / "a_file").write_text("keep me")
    for dest, says in (
        ("a_file", "it is a file, not a folder"),
        ("a_file/sub", r"a_file is a file, not a folder"),
    ):
        proc = _make_digits(dest, here)
        assert proc.returncode == 2 and re.search(says, _one_error_line(proc)), proc.stderr
    assert os.listdir(here) == ["a_file"] and (here / "a_file").read_text() == "keep me"
    (here / "mine").mkdir()
    (here / "mine" / "notes.txt").write_text("mine")
    proc = _make_digits("mine", here)
    line = _one_error_line(proc)
    assert proc.returncode == 2 and "not a digits folder written by --make-digits" in line
    assert "notes.txt" in line and os.listdir(here / "mine") == ["notes.txt"]
    # A read-only place: a folder without write permission (for root, who ignores it, /sys).
    if os.geteuid() != 0:
        locked = here / "locked"
        locked.mkdir(mode=0o555)
        dest = str(locked / "digits")
    else:
        dest = "/sys/invjax_digits"
        try:
            os.mkdir(dest)
            os.rmdir(dest)
            pytest.skip("/sys is writable here: no read-only place to try")
        except OSError:
            pass
    proc = _make_digits(dest, here)
    assert proc.returncode == 2 and "cannot write there" in _one_error_line(proc), proc.stderr
    assert not os.path.exists(dest)


@pytest.mark.slow
def test_make_digits_completes_an_interrupted_export(digits_folder, tmp_path):
    """A previous export (here one cut short: files missing, one half-written ``.partial``) is
    written again whole, byte-identical to a fresh one."""
    import shutil

    copy = tmp_path / "digits"
    shutil.copytree(digits_folder, copy)
    removed = [copy / "test" / "3", copy / "val" / "0" / sorted(os.listdir(copy / "val" / "0"))[0]]
    shutil.rmtree(removed[0])
    os.remove(removed[1])
    (copy / "train" / "1" / "9999.png.partial").write_bytes(b"half")  # not a digit's name
    proc = _make_digits(str(copy), tmp_path)
    assert proc.returncode == 2 and "9999.png.partial" in _one_error_line(proc)
    os.remove(copy / "train" / "1" / "9999.png.partial")
    name = sorted(os.listdir(copy / "train" / "1"))[0]
    (copy / "train" / "1" / (name + ".partial")).write_bytes(b"half")
    proc = _make_digits(str(copy), tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "wrote" in proc.stdout and "train: 1079 images" in proc.stdout
    for split in ("train", "val", "test"):
        for label in range(10):
            a, b = copy / split / str(label), os.path.join(digits_folder, split, str(label))
            assert sorted(os.listdir(a)) == sorted(os.listdir(b))
            for f in os.listdir(b):
                assert (a / f).read_bytes() == open(os.path.join(b, f), "rb").read()


@pytest.mark.slow
def test_the_folder_command_decodes_every_image(tmp_path):
    """``python -m invjax.data.image_folder DIR`` reads every pixel: a truncated file is named
    (exit 2, one line), as is a bad ``--image_size`` or an unknown flag."""
    root = _tiny(tmp_path / "f", size=(8, 8))
    target = root / "test" / "cat" / "1.png"
    Image.fromarray(np.random.default_rng(2).integers(0, 256, (8, 8), dtype=np.uint8)).save(
        str(target)
    )
    cmd = [sys.executable, "-m", "invjax.data.image_folder"]
    ok = subprocess.run([*cmd, str(root)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and "2 classes ['cat', 'dog'], images 8x8x1" in ok.stdout
    _truncate(str(target))
    for args, says in (
        ([str(root)], rf"{target} cannot be decoded"),
        ([str(root), "--image_size=8,x"], r"--image_size='8,x' is invalid"),
        ([str(root), "--bogus"], r"unrecognized arguments: --bogus"),
    ):
        proc = subprocess.run([*cmd, *args], cwd=REPO, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2 and re.search(says, _one_error_line(proc)), proc.stderr


@pytest.mark.slow
def test_make_digits_stopped_by_a_signal_is_one_line_and_resumable(tmp_path):
    """SIGTERM while the files are written (sent by the process to itself after its 10th file,
    so the moment is certain): exit 143, one line counting the files written; no file is
    half-written under its own name; the same command then completes the folder."""
    dest = tmp_path / "digits"
    code = (
        "import os, signal, sys\n"
        "from PIL import Image\n"
        "from invjax.data import image_folder\n"
        "save, n = Image.Image.save, [0]\n"
        "def counted(self, *a, **k):\n"
        "    save(self, *a, **k)\n"
        "    n[0] += 1\n"
        "    if n[0] == 10:\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "Image.Image.save = counted\n"
        "sys.exit(image_folder.main(['--make-digits', sys.argv[1]]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(dest)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 143, proc.stderr[-2000:]
    line = _one_error_line(proc)
    assert re.search(r"stopped by SIGTERM; (9|10) files written \(the same command", line), line
    written = [os.path.join(d, f) for d, _, fs in os.walk(dest) for f in fs]
    assert len([f for f in written if f.endswith(".png")]) in (9, 10)
    for f in written:
        if f.endswith(".png"):
            with Image.open(f) as img:
                assert img.size == (28, 28) and img.mode == "L"
                img.load()
    proc = _make_digits(str(dest), tmp_path)
    assert proc.returncode == 0 and "train: 1079 images" in proc.stdout, proc.stderr[-2000:]
    assert sum(len(fs) for _, _, fs in os.walk(dest)) == 1797


@pytest.mark.slow
def test_sixteen_bit_folder_trains(tmp_path):
    """The reported run, as a user types it: 16-bit PNGs of a 'dark' and a 'bright' class
    trained to test_error=50.00% (every pixel read as 255). Read by the 16-bit rule, the two
    classes are told apart."""
    rng = np.random.default_rng(0)
    root = tmp_path / "f16"
    for split, n in (("train", 30), ("test", 10)):
        for name, (lo, hi) in (("dark", (1000, 30000)), ("bright", (35000, 65535))):
            os.makedirs(root / split / name)
            for i in range(n):
                pixels = rng.integers(lo, hi + 1, (28, 28)).astype(np.uint16)
                Image.fromarray(pixels).save(str(root / split / name / f"{i}.png"))
    proc = _main(
        [
            f"--workdir={tmp_path / 'run'}",
            "--config.data.name=image_folder",
            f"--config.data.path={root}",
            "--config.model.num_classes=2",
            "--config.model.width=4",
            "--config.train.batch_size=12",
            "--config.train.num_epochs=3",
            "--config.train.lr_boundaries=()",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("test_error=") and float(last.split("=")[1].rstrip("%")) <= 10.0, last
