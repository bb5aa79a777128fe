"""invjax.data.augment on real images (scikit-image photos, scikit-learn digits)."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from invjax import groups
from invjax.data import augment
from invjax.data import digits as digits_lib


@pytest.fixture(scope="module")
def photos(photo_batch):
    """Two normalised 32x32 RGB photos (mean 0.5, std 0.25 units)."""
    return (photo_batch - 0.5) / 0.25


@pytest.fixture(scope="module")
def digit_batch():
    """Four real digits in MNIST format, normalised like Scaled-MNIST (background < 0)."""
    images, _ = digits_lib.digits()
    return (images[[0, 11, 22, 33]] - 0.1) / 0.3


def _apply(name):
    return jax.jit(lambda rng, x: augment.apply(name, rng, x))


def test_none_is_identity(photos):
    out = _apply("none")(jax.random.key(0), photos)
    np.testing.assert_array_equal(out, photos)


@pytest.mark.parametrize("name", augment.AUGMENTATIONS)
def test_shapes_dtypes_and_determinism(name, photos):
    f = _apply(name)
    a = f(jax.random.key(1), photos)
    chex.assert_shape(a, photos.shape)
    chex.assert_type(a, jnp.float32)
    chex.assert_tree_all_finite(a)
    np.testing.assert_array_equal(a, f(jax.random.key(1), photos))
    if name != "none":
        b = f(jax.random.key(2), photos)
        assert not np.array_equal(a, b)


def test_translate_zero_shift_is_identity_and_matches_reference(photos):
    x = np.asarray(photos)
    np.testing.assert_array_equal(augment.translate(x, np.zeros((2, 2), int), 4), x)
    shifts = np.array([[3, -4], [-2, 1]])
    out = np.asarray(augment.translate(x, shifts, 4))
    for b, (dy, dx) in enumerate(shifts):  # out[i, j] = x[i + dy, j + dx], zero outside
        ref = np.zeros_like(x[b])
        h, w = x.shape[1:3]
        for i in range(h):
            for j in range(w):
                if 0 <= i + dy < h and 0 <= j + dx < w:
                    ref[i, j] = x[b, i + dy, j + dx]
        np.testing.assert_array_equal(out[b], ref)


def test_flip_twice_is_identity_and_is_the_group_mirror(photos):
    mask = np.array([True, False])
    once = augment.hflip(photos, mask)
    np.testing.assert_array_equal(augment.hflip(once, mask), photos)
    np.testing.assert_array_equal(once[0], groups.flip(photos[0]))
    np.testing.assert_array_equal(once[1], photos[1])


def test_crop_flip_output_is_a_shifted_possibly_mirrored_input(photos):
    x = np.asarray(photos)
    out = np.asarray(_apply("crop_flip")(jax.random.key(3), jnp.asarray(np.repeat(x, 8, 0))))
    flipped = 0
    for b in range(len(out)):
        padded = np.pad(x[b // 8], ((4, 4), (4, 4), (0, 0)))  # NumPy reference crops
        hits = [
            (dy, dx, f)
            for dy in range(9)
            for dx in range(9)
            for f in (False, True)
            if np.array_equal(out[b][:, ::-1] if f else out[b], padded[dy : dy + 32, dx : dx + 32])
        ]
        assert hits, f"augmented image {b} is not a pad-4 crop (+ flip) of its input"
        flipped += hits[0][2]
    assert 2 <= flipped <= 14  # p = 1/2 over 16 images


def test_cutout_square_size_and_clipping(photos):
    x = jnp.asarray(np.repeat(np.asarray(photos[:1]), 2, 0)) + 10.0  # no zeros in the input
    out = np.asarray(augment.cutout(x, np.array([[16, 16], [0, 31]]), size=8))
    holes = out == 0.0
    assert holes[0].sum() == 8 * 8 * 3  # rows/cols [12, 20)
    assert holes[0, 12:20, 12:20].all() and not holes[0, 11].any() and not holes[0, 20].any()
    # clipped at the border: rows [-4, 4) -> [0, 4), cols [27, 35) -> [27, 32)
    assert holes[1].sum() == 4 * 5 * 3 and holes[1, :4, 27:].all()
    np.testing.assert_array_equal(out[0][~holes[0]], np.asarray(x[0])[~holes[0]])


def test_crop_flip_cutout_on_stl_size():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(3, 96, 96, 3)).astype(np.float32) + 10.0)  # never 0
    out = np.asarray(_apply("crop_flip_cutout")(jax.random.key(4), x))
    chex.assert_shape(out, (3, 96, 96, 3))
    zeros = (out == 0.0).all(-1).sum((1, 2))
    # padding (<= 12 rows and cols) plus one Cutout square of at most 32x32
    assert (zeros <= 12 * 96 * 2 + 32 * 32).all() and (zeros > 0).all()


def test_scale_unit_is_identity_and_shrink_scales_ink(digit_batch):
    x = jnp.asarray(digit_batch)
    np.testing.assert_allclose(augment.scale_images(x, jnp.ones(4)), x, atol=1e-5)
    bg = float(x[0, 0, 0, 0])  # the normalised background (0 before normalisation)
    for s in (0.5, 0.8):
        y = np.asarray(augment.scale_images(x, jnp.full(4, s)))
        # the uncovered area is filled with the background, so the border stays background
        np.testing.assert_allclose(y[:, :3], bg, atol=1e-5)
        ink = lambda im: (im - bg).sum((1, 2, 3))
        # shrinking by s scales the ink by s^2; measured ratio/s^2: 1.0000 (s=0.5),
        # 0.9977..0.9994 (s=0.8)
        np.testing.assert_allclose(ink(y) / ink(np.asarray(x)) / s**2, 1.0, atol=0.01)


def test_scale_augmentation_range(digit_batch):
    x = jnp.asarray(np.repeat(digit_batch, 4, 0))
    y = np.asarray(_apply("scale")(jax.random.key(5), x))
    bg = float(x[0, 0, 0, 0])
    ratio = (y - bg).sum((1, 2, 3)) / (np.asarray(x) - bg).sum((1, 2, 3))
    # s ~ U(0.5, 2): ink ratio s^2 in [0.25, 4] (less when an enlarged digit is cut off)
    assert (ratio > 0.25 * 0.95).all() and (ratio < 4.0 * 1.05).all()
    assert ratio.min() < 0.9 and ratio.max() > 1.1  # both shrinks and enlargements occur


def test_bad_input_is_refused(photos):
    with pytest.raises(ValueError, match=r"unknown augmentation 'rotate'.*'crop_flip_cutout'"):
        augment.apply("rotate", jax.random.key(0), photos)
    with pytest.raises(ValueError, match=r"normalised float images, got dtype uint8"):
        augment.apply("crop_flip", jax.random.key(0), np.zeros((1, 32, 32, 3), np.uint8))
    with pytest.raises(
        ValueError, match=r"batch \[B, H, W, C\], got an array of shape \(32, 32, 3\)"
    ):
        augment.apply("none", jax.random.key(0), np.zeros((32, 32, 3), np.float32))
