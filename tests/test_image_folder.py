"""``data.name=image_folder``: your own images in tensorflow-datasets' ImageFolder layout (issue
20, 5), and the README's example (scikit-learn's digits written as a folder, then trained on)."""

from __future__ import annotations

import os
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
