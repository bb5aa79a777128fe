"""The TFDS path of invjax.data (``tfds.data_source``) under ``tfds.testing.mock_data``, the
missing-dataset message, Scaled-MNIST generation and its cache, and the prepare command."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

import invjax.data as data
from invjax.data import datasets, prepare, scaled_mnist, sources
from invjax.data import digits as digits_lib

tfds = pytest.importorskip("tensorflow_datasets")


def mock(n):
    # USE_CODE: features and splits come from the builder code, records are random examples.
    return tfds.testing.mock_data(num_examples=n, policy=tfds.testing.MockPolicy.USE_CODE)


def cfg(**kw):
    c = data.default_config()
    c.update(kw)
    return c


@pytest.mark.parametrize(
    "name,shape,aug",
    [
        ("cifar10", (32, 32, 3), "crop_flip"),
        ("svhn_cropped", (32, 32, 3), "none"),
        ("stl10", (96, 96, 3), "crop_flip_cutout"),
        ("mnist", (28, 28, 1), "none"),
    ],
)
def test_tfds_datasets_through_data_source(name, shape, aug, tmp_path):
    with mock(200):
        ds = data.load(cfg(name=name, data_dir=str(tmp_path)))
        again = data.load(cfg(name=name, data_dir=str(tmp_path), n_train=50, seed=3))
    assert ds.image_shape == shape and ds.num_classes == 10 and ds.augment == aug
    # the paper's 80:20 split of the training split; the mock serves 200 examples per split
    assert (len(ds.train), len(ds.val), len(ds.test)) == (160, 40, 200)
    for split in (ds.train, ds.val, ds.test):
        assert split.images.dtype == np.uint8 and split.images.shape[1:] == shape
        assert split.labels.dtype == np.int32 and 0 <= split.labels.min() <= split.labels.max() < 10
    # uniform random mock pixels: mean 0.5, std 0.289 in [0, 1] units
    np.testing.assert_allclose(ds.mean, 0.5, atol=0.02)
    np.testing.assert_allclose(ds.std, 1 / np.sqrt(12), atol=0.02)
    assert ds.mean.shape == ds.std.shape == (shape[2],)
    counts = np.bincount(again.train.labels, minlength=10)
    if datasets.DEFAULT_SUBSET.get(name) == "stratified":  # SVHN: the training split's class shares
        share = 50 * np.bincount(ds.train.labels, minlength=10) / len(ds.train)
        assert counts.sum() == 50 and np.all(np.abs(counts - share) < 1 + 1e-9), (counts, share)
    else:  # equal counts per class
        np.testing.assert_array_equal(counts, np.full(10, 5))
    np.testing.assert_array_equal(again.val.labels, ds.val.labels)  # fixed validation split


def test_val_fraction_zero_and_pool_too_small_message(tmp_path):
    with mock(200):
        full = data.load(cfg(name="cifar10", data_dir=str(tmp_path), val_fraction=0.0))
        split = data.load(cfg(name="cifar10", data_dir=str(tmp_path)))
        assert (len(full.train), len(full.val)) == (200, 0)
        # the largest balanced N_t of the whole training split no longer fits after 80:20
        n = int(np.bincount(full.train.labels, minlength=10).min()) * 10
        assert n > int(np.bincount(split.train.labels, minlength=10).min()) * 10
        assert (
            len(
                data.load(
                    cfg(name="cifar10", data_dir=str(tmp_path), val_fraction=0.0, n_train=n)
                ).train
            )
            == n
        )
        with pytest.raises(
            ValueError, match=r"after the validation split; set data\.val_fraction=0"
        ):
            data.load(cfg(name="cifar10", data_dir=str(tmp_path), n_train=n))


def test_missing_dataset_names_the_prepare_command(tmp_path):
    with pytest.raises(data.DatasetNotPreparedError) as e:
        data.load(cfg(name="svhn_cropped", data_dir=str(tmp_path)))
    msg = str(e.value)
    assert f"python -m invjax.data.prepare svhn_cropped --data_dir={tmp_path}" in msg
    assert "pip install 'invjax[prepare]'" in msg and str(tmp_path) in msg
    assert isinstance(e.value, FileNotFoundError) and isinstance(e.value, ValueError)
    # Scaled-MNIST needs MNIST first and says so
    with pytest.raises(data.DatasetNotPreparedError, match="prepare mnist"):
        data.load(cfg(name="mnist_scale", data_dir=str(tmp_path)))


def test_scaled_mnist_generation_on_real_digits():
    # generate() on real handwritten digits (sklearn's, in MNIST's 28x28 uint8 format)
    images, labels = digits_lib.digits()
    u8 = np.round(images * 255).astype(np.uint8)
    d = scaled_mnist.generate(u8, labels, seed=0, sizes=(200, 50, 1000))
    assert [len(d[f"{s}_labels"]) for s in scaled_mnist.SPLITS] == [200, 50, 1000]
    for s in scaled_mnist.SPLITS:
        assert d[f"{s}_images"].dtype == np.uint8 and d[f"{s}_images"].shape[1:] == (28, 28, 1)
        assert 0.3 <= d[f"{s}_scales"].min() and d[f"{s}_scales"].max() <= 1.0
    counts = np.bincount(d["train_labels"], minlength=10)
    assert counts.min() >= 18 and counts.max() <= 22  # stratified: 200 * class share
    # each image is its source shrunk by its scale: the ink (sum of pixels) scales by s^2.
    # Measured per image: ink ratio / s^2 = 1.003..1.009 mean, 0.017..0.020 std, 0.927..1.067
    # range (uint8 rounding and bicubic sampling of faint strokes).
    for s in scaled_mnist.SPLITS:
        src = u8[d[f"{s}_source"]].astype(np.float64).sum((1, 2, 3))
        ink = d[f"{s}_images"].astype(np.float64).sum((1, 2, 3))
        r = ink / src / d[f"{s}_scales"].astype(np.float64) ** 2
        assert abs(r.mean() - 1.0) < 0.02 and r.std() < 0.03 and 0.85 < r.min() and r.max() < 1.15
        np.testing.assert_array_equal(labels[d[f"{s}_source"]], d[f"{s}_labels"])
    again = scaled_mnist.generate(u8, labels, seed=0, sizes=(200, 50, 1000))
    for k in d:
        np.testing.assert_array_equal(d[k], again[k])
    other = scaled_mnist.generate(u8, labels, seed=1, sizes=(200, 50, 1000))
    assert not np.array_equal(d["train_scales"], other["train_scales"])


def test_scaled_mnist_through_tfds_mock_and_cache(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(scaled_mnist, "SIZES", (100, 20, 300))
    with mock(300):  # mnist train + test pooled: 600 images
        ds = data.load(cfg(name="mnist_scale", data_dir=str(tmp_path), n_train=50, realisation=2))
    assert (len(ds.train), len(ds.val), len(ds.test)) == (50, 20, 300)
    assert ds.augment == "scale" and ds.train.images.dtype == np.uint8
    path = scaled_mnist.cache_path(str(tmp_path), 2)
    assert os.path.exists(path)
    d0 = dict(np.load(path))

    def no_source(*a, **k):
        raise AssertionError("the cache should have been used")

    monkeypatch.setattr(sources, "read_split", no_source)
    cached = data.load(cfg(name="mnist_scale", data_dir=str(tmp_path), n_train=50, realisation=2))
    np.testing.assert_array_equal(cached.train.images, ds.train.images)
    monkeypatch.undo()
    monkeypatch.setattr(scaled_mnist, "SIZES", (100, 20, 300))
    # regenerated from scratch it is bit-identical; a corrupt cache is replaced with a warning
    with open(path, "wb") as f:
        f.write(b"not an npz")
    with mock(300), caplog.at_level(logging.WARNING):
        scaled_mnist.load_realisation(2, str(tmp_path))
    assert "ignoring unreadable Scaled-MNIST cache" in caplog.text
    d1 = dict(np.load(path))
    os.remove(path)
    with mock(300):
        d2 = scaled_mnist.load_realisation(2, str(tmp_path))
    assert d0.keys() == d1.keys() and set(d2) < set(d0)  # the file adds the generation metadata
    for k in d2:
        np.testing.assert_array_equal(d0[k], d2[k])
        np.testing.assert_array_equal(d1[k], d2[k])


def test_prepare_command(tmp_path, capsys):
    with mock(10):  # download_and_prepare is a no-op under the mock
        assert prepare.main(["cifar10", f"--data_dir={tmp_path}"]) == 0
    assert "prepared cifar10" in capsys.readouterr().out
    assert prepare.main(["scaled_digits"]) == 0
    assert "nothing to prepare" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        prepare.main(["imagenet"])
    with pytest.raises(ValueError, match="unknown dataset 'imagenet'"):
        prepare.prepare("imagenet")
