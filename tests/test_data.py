"""invjax.data: splits, class-balanced subsets, epoch orders, the offline digits datasets, config
and image-shape checks. Real data: scikit-learn's handwritten digits."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import chex
import jax
import numpy as np
import pytest

import invjax.data as data
from invjax.data import digits as digits_lib
from invjax.data import subsets

REPO = pathlib.Path(__file__).resolve().parents[1]


def cfg(**kw):
    c = data.default_config()
    c.update(kw)
    return c


# ----------------------------------------------------------------------------- subsets


def test_stratified_split_exact_sizes_disjoint_and_proportional():
    labels = np.random.default_rng(3).integers(0, 10, 7000).astype(np.int32)
    parts = subsets.stratified_split(labels, [1000, 200, 5000], seed=7)
    assert [len(p) for p in parts] == [1000, 200, 5000]
    union = np.concatenate(parts)
    assert len(np.unique(union)) == len(union)  # disjoint
    frac = np.bincount(labels, minlength=10) / len(labels)
    for p in parts:
        # each class within one sample (rounding) of its proportional share
        assert np.abs(np.bincount(labels[p], minlength=10) - frac * len(p)).max() <= 1.0 + 1e-9
    again = subsets.stratified_split(labels, [1000, 200, 5000], seed=7)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    other = subsets.stratified_split(labels, [1000, 200, 5000], seed=8)
    assert not np.array_equal(parts[0], other[0])


def test_balanced_subset_is_balanced_identical_and_nested():
    _, labels = digits_lib.digits()
    a = subsets.balanced_subset(labels, 50, 10, seed=1)
    chex.assert_shape(a, (50,))
    np.testing.assert_array_equal(np.bincount(labels[a], minlength=10), np.full(10, 5))
    np.testing.assert_array_equal(a, subsets.balanced_subset(labels, 50, 10, seed=1))
    small = subsets.balanced_subset(labels, 20, 10, seed=1)
    assert set(small) <= set(a)  # smaller subsets of one seed are nested in larger ones
    assert not np.array_equal(a, subsets.balanced_subset(labels, 50, 10, seed=2))
    np.testing.assert_array_equal(
        subsets.balanced_subset(labels, 0, 10, seed=1), np.arange(len(labels))
    )


def test_load_subset_identical_for_every_call_and_balanced():
    a = data.load(cfg(name="digits", n_train=100, seed=4))
    b = data.load(cfg(name="digits", n_train=100, seed=4))
    np.testing.assert_array_equal(a.train.images, b.train.images)
    np.testing.assert_array_equal(a.train.labels, b.train.labels)
    np.testing.assert_array_equal(np.bincount(a.train.labels, minlength=10), np.full(10, 10))
    c = data.load(cfg(name="digits", n_train=100, seed=5))
    assert not np.array_equal(a.train.images, c.train.images)
    # validation and test do not depend on the subset
    np.testing.assert_array_equal(a.val.images, c.val.images)
    np.testing.assert_array_equal(a.test.labels, c.test.labels)


@pytest.mark.parametrize("n", [55, 7, 1001])
def test_n_train_not_divisible_by_classes_is_refused(n):
    with pytest.raises(ValueError, match=rf"n_train={n} cannot be split evenly over the 10 "):
        data.load(cfg(name="digits", n_train=n))


def test_n_train_errors_name_the_valid_values():
    with pytest.raises(ValueError, match=r"use a multiple of 10 \(e\.g\. 50 or 60\)"):
        subsets.check_n_train(55, 10)
    with pytest.raises(ValueError, match="n_train=-10 is invalid"):
        data.load(cfg(name="digits", n_train=-10))
    # 1079 digits, smallest class 104 in the train split: 1040 is the largest balanced size.
    with pytest.raises(
        ValueError, match=r"class 8 has only 104.*largest class-balanced n_train here is 1040"
    ):
        data.load(cfg(name="digits", n_train=2000))
    assert len(data.load(cfg(name="digits", n_train=1040)).train) == 1040


def test_config_is_checked_before_any_loading(tmp_path):
    # cifar10 is not prepared in tmp_path; the bad n_train must be reported, not the missing data.
    with pytest.raises(ValueError, match="n_train=15 cannot be split") as e:
        data.load(cfg(name="cifar10", n_train=15, data_dir=str(tmp_path)))
    assert not isinstance(e.value, data.DatasetNotPreparedError)
    bad = [
        ({"name": "imagenet"}, r"unknown dataset 'imagenet' .*'scaled_digits'"),
        ({"augment": "mixup"}, r"unknown augmentation 'mixup' .*'crop_flip_cutout'"),
        ({"val_fraction": 1.0}, r"val_fraction=1\.0 is invalid .*\[0, 1\)"),
        ({"realisation": -1}, r"realisation=-1 is invalid.*integer from 0 to 2\*\*63 - 1"),
        ({"seed": -1}, r"seed=-1 is invalid"),
    ]
    for kw, msg in bad:
        with pytest.raises(ValueError, match=msg):
            data.load(cfg(data_dir=str(tmp_path), **kw))


def test_epoch_order_is_a_pure_function_of_seed_and_epoch():
    a = data.epoch_order(1000, seed=3, epoch=7)
    np.testing.assert_array_equal(np.sort(a), np.arange(1000))  # a permutation
    data.epoch_order(1000, seed=3, epoch=8)  # other calls in between change nothing
    np.testing.assert_array_equal(a, data.epoch_order(1000, seed=3, epoch=7))
    assert not np.array_equal(a, data.epoch_order(1000, seed=3, epoch=8))
    assert not np.array_equal(a, data.epoch_order(1000, seed=4, epoch=7))
    assert not np.array_equal(a, np.arange(1000))


# ----------------------------------------------------------------------------- digits


def test_digits_in_mnist_format():
    images, labels = digits_lib.digits()
    chex.assert_shape(images, (1797, 28, 28, 1))
    assert images.dtype == np.float32 and labels.dtype == np.int32
    assert images.min() == 0.0 and images.max() == 1.0
    # the digit lies in the central 20x20 box, the 4-pixel margin is empty (as MNIST)
    assert images[:, :4].max() == 0 and images[:, -4:].max() == 0
    assert images[:, :, :4].max() == 0 and images[:, :, -4:].max() == 0
    assert (images[:, 4:24, 4:24].sum((1, 2, 3)) > 5).all()


def test_digits_file_is_read_as_load_digits_reads_it():
    """The package file read without importing scikit-learn gives load_digits' arrays exactly."""
    from sklearn.datasets import load_digits

    pixels, target = digits_lib._sklearn_digits()
    ref = load_digits()
    assert pixels.dtype == ref.images.dtype and pixels.shape == ref.images.shape == (1797, 8, 8)
    assert pixels.tobytes() == ref.images.tobytes()
    np.testing.assert_array_equal(target, ref.target)


def test_a_missing_digits_file_names_what_to_install(monkeypatch):
    monkeypatch.setattr(digits_lib.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"digits\.csv\.gz .*scikit-learn is not installed"):
        digits_lib._sklearn_digits()


@pytest.mark.slow
def test_loading_the_digits_does_not_import_scikit_learn():
    """A digits command starts without scikit-learn (and the scipy it imports)."""
    code = (
        "import sys\n"
        "from invjax import main\n"
        "from invjax.data import digits\n"
        "digits.digits()\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'sklearn', 'scipy'}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"


def test_scaled_digits_deterministic_with_scale_stats():
    x, y, s = data.scaled_digits(None, seed=0)
    chex.assert_shape(x, (1797, 28, 28, 1))
    chex.assert_shape(s, (1797,))
    assert x.dtype == np.float32 and 0.0 <= x.min() and x.max() <= 1.0
    assert 0.3 <= s.min() and s.max() <= 1.0
    # U(0.3, 1): mean 0.65, std 0.202; the mean of 1797 draws is within 0.02 (4 sigma)
    assert abs(s.mean() - 0.65) < 0.02 and abs(s.std() - 0.7 / np.sqrt(12)) < 0.02
    x2, y2, s2 = data.scaled_digits(None, seed=0)
    np.testing.assert_array_equal(x, x2)
    np.testing.assert_array_equal(s, s2)
    _, _, s3 = data.scaled_digits(None, seed=1)
    assert not np.array_equal(s, s3)
    # Shrinking by s scales the ink (total intensity) by s^2. Measured: ratio / s^2 =
    # 1.004 +- 0.017 over the 1797 digits.
    base, _ = digits_lib.digits()
    ratio = x.sum((1, 2, 3)) / base.sum((1, 2, 3)) / s**2
    assert abs(ratio.mean() - 1.0) < 0.02 and ratio.std() < 0.04
    # a subset of n is the same digits with the same scales as in the full set
    xs, ys, ss = data.scaled_digits(100, seed=0)
    chex.assert_shape(xs, (100, 28, 28, 1))
    idx = np.flatnonzero(np.isin(s, ss))
    np.testing.assert_array_equal(ys, y[idx])
    np.testing.assert_allclose(xs, x[idx], atol=1e-6)
    with pytest.raises(ValueError, match="n=0 is invalid"):
        data.scaled_digits(0)


def test_load_scaled_digits_splits_stats_and_pooled_validation():
    ds = data.load(cfg(name="scaled_digits"))
    assert (len(ds.train), len(ds.val), len(ds.test)) == digits_lib.SPLIT_SIZES
    assert ds.image_shape == (28, 28, 1) and ds.num_classes == 10 and ds.augment == "scale"
    tr, va, te = digits_lib.splits(0)
    assert len(np.unique(np.concatenate([tr, va, te]))) == 1797  # disjoint, all used
    chex.assert_shape([ds.mean, ds.std], (1,))
    np.testing.assert_allclose(ds.mean, ds.train.images.mean(), rtol=1e-5)
    np.testing.assert_allclose(ds.std, ds.train.images.std(), rtol=1e-4)
    # realisations differ in scales and split
    other = data.load(cfg(name="scaled_digits", realisation=1))
    assert not np.array_equal(ds.test.images, other.test.images)
    pooled = data.load(cfg(name="scaled_digits", val_fraction=0.0))
    assert len(pooled.train) == 1079 + 359 and len(pooled.val) == 0
    chex.assert_shape(pooled.val.images, (0, 28, 28, 1))


# ----------------------------------------------------------------------------- to_float, shapes


def test_to_float_uint8_and_float_agree_and_jit():
    rng = np.random.default_rng(0)
    u8 = rng.integers(0, 256, (2, 4, 4, 3), dtype=np.uint8)
    mean, std = np.array([0.4, 0.5, 0.6], np.float32), np.array([0.2, 0.25, 0.3], np.float32)
    a = jax.jit(data.to_float)(u8, mean, std)
    b = data.to_float(u8.astype(np.float32) / 255.0, mean, std)
    assert a.dtype == np.float32
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(a, (u8 / 255.0 - mean) / std, rtol=1e-5, atol=1e-5)


def test_check_images_names_the_wrong_shape():
    data.check_images(np.zeros((2, 32, 32, 3)), (32, 32, 3))
    with pytest.raises(ValueError, match=r"have 1 channels .*expected 3 \(RGB"):
        data.check_images(np.zeros((2, 32, 32, 1)), (32, 32, 3))
    with pytest.raises(ValueError, match=r"channels-first NCHW"):
        data.check_images(np.zeros((2, 3, 32, 32)), (32, 32, 3))
    with pytest.raises(ValueError, match=r"are 28x28 .*expected 32x32"):
        data.check_images(np.zeros((2, 28, 28, 3)), (32, 32, 3))
    with pytest.raises(ValueError, match=r"4-D batch.*add a batch axis"):
        data.check_images(np.zeros((32, 32, 3)), (32, 32, 3))


# SVHN's (svhn_cropped) training labels per class 0..9: class "9" has 4,659 images.
SVHN_TRAIN_COUNTS = (4948, 13861, 10585, 8497, 7458, 6882, 5727, 5595, 5045, 4659)


def test_stratified_subset_draws_svhn_50k_with_its_priors():
    """N_t = 50,000 on SVHN (a size of the paper) has no equal-count subset; the stratified one
    keeps the training priors to one image per class."""
    labels = np.repeat(np.arange(10), SVHN_TRAIN_COUNTS)
    pool, _ = subsets.validation_split(labels, 0.2, seed=0)  # the 80:20 split: 58,606 left
    pool_labels = labels[pool]
    with pytest.raises(ValueError, match="largest class-balanced n_train"):
        subsets.balanced_subset(pool_labels, 50_000, 10, seed=0)
    idx = subsets.stratified_subset(pool_labels, 50_000, 10, seed=0)
    chex.assert_shape(idx, (50_000,))
    assert len(np.unique(idx)) == 50_000
    got = np.bincount(pool_labels[idx], minlength=10)
    want = np.bincount(pool_labels, minlength=10) * 50_000 / len(pool_labels)
    assert np.abs(got - want).max() < 1.0
    np.testing.assert_array_equal(idx, subsets.stratified_subset(pool_labels, 50_000, 10, 0))
    assert not np.array_equal(idx, subsets.stratified_subset(pool_labels, 50_000, 10, 1))
    with pytest.raises(ValueError, match="larger than the training pool of 58606"):
        subsets.stratified_subset(pool_labels, 60_000, 10, seed=0)


def test_stratified_equals_balanced_on_a_balanced_pool():
    labels = np.repeat(np.arange(10), 40)
    np.testing.assert_array_equal(
        subsets.stratified_subset(labels, 100, 10, seed=3),
        subsets.balanced_subset(labels, 100, 10, seed=3),
    )


def test_subset_kind_is_chosen_per_dataset_and_checked():
    assert data.datasets.check_config(cfg(name="svhn_cropped", n_train=50_000))["subset"] == (
        "stratified"
    )
    assert data.datasets.check_config(cfg(name="cifar10", n_train=100))["subset"] == "balanced"
    with pytest.raises(ValueError, match=r"unknown subset kind 'equal' \(data.subset\)"):
        data.datasets.check_config(cfg(name="digits", subset="equal"))
    # stratified sizes need not be multiples of the classes
    d = data.load(cfg(name="digits", n_train=105, subset="stratified", seed=2))
    assert len(d.train) == 105
    assert np.bincount(d.train.labels, minlength=10).min() >= 9


def test_rotscaled_digits_rotation_scale_and_loading():
    x, y, s, a = digits_lib.rotscaled_digits(None, seed=0)
    chex.assert_shape(x, (1797, 28, 28, 1))
    assert x.dtype == np.float32 and 0.0 <= x.min() and x.max() <= 1.0
    # the same scales as scaled_digits for the same seed; angles U(0, 360): mean 180, std 103.9
    _, y0, s0 = data.scaled_digits(None, seed=0)
    np.testing.assert_array_equal(s, s0)
    np.testing.assert_array_equal(y, y0)
    assert 0.0 <= a.min() and a.max() <= 360.0
    assert abs(a.mean() - 180.0) < 10.0 and abs(a.std() - 360.0 / np.sqrt(12)) < 6.0
    # a rotation keeps the ink (s^2 of the original's), as the shrink alone does
    base, _ = digits_lib.digits()
    ratio = x.sum((1, 2, 3)) / base.sum((1, 2, 3)) / s**2
    assert abs(ratio.mean() - 1.0) < 0.03 and ratio.std() < 0.06
    # angle 0 reproduces scaled_digits; angle 90 is the exact quarter turn of it
    xs, _, ss = data.scaled_digits(5, seed=0)
    sub = np.flatnonzero(np.isin(s0, ss))
    r0 = np.asarray(digits_lib._rotate_shrink(base[sub], ss, np.zeros(5, np.float32)))
    np.testing.assert_allclose(r0, xs, atol=1e-5)
    r90 = np.asarray(digits_lib._rotate_shrink(base[sub], ss, np.full(5, np.pi / 2, np.float32)))
    np.testing.assert_allclose(r90, np.rot90(xs, 1, axes=(1, 2)), atol=1e-4)
    # the dataset: same splits as scaled_digits, rotated images, scale augmentation by default
    ds = data.load(cfg(name="rotscaled_digits"))
    plain = data.load(cfg(name="scaled_digits"))
    assert (len(ds.train), len(ds.val), len(ds.test)) == digits_lib.SPLIT_SIZES
    np.testing.assert_array_equal(ds.test.labels, plain.test.labels)
    assert not np.allclose(ds.test.images, plain.test.images) and ds.augment == "scale"
    with pytest.raises(ValueError, match="n=0 is invalid"):
        digits_lib.rotscaled_digits(0)
