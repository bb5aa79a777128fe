"""Offline datasets from scikit-learn's handwritten digits, in MNIST's format and scaled.

scikit-learn ships 1797 digits of 8x8 pixels with values 0..16 (``load_digits``). invjax brings
them to MNIST's format: values divided by 16, the 8x8 frame upsampled bicubically
(:func:`invjax.groups.resize`) into a 20x20 box centred in a 28x28 zero image (MNIST's digits
fill a 20x20 box centred in 28x28), clipped to [0, 1]. This is ``digits``.

``scaled_digits`` then treats them as Scaled-MNIST treats MNIST: each image shrunk about its
centre by ``s ~ U(0.3, 1)`` with bicubic interpolation and zeros outside, clipped to [0, 1].
``rotscaled_digits`` also rotates each one by ``theta ~ U(0, 360)`` degrees about the centre (one
bicubic resampling of the 20x20-box digit by ``s R(theta)``), so rotation is a nuisance as well
(6 and 9 then differ only by the stroke shapes the rotation keeps).

Splits (fixed, chosen here): stratified 60/20/20, i.e. 1079 train / 359 validation / 359 test
images with the class proportions of the whole set, drawn by the realisation seed (0..5, as
Scaled-MNIST's six realisations); the scales are drawn by the same seed.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import os

import jax
import jax.numpy as jnp
import numpy as np

from invjax import groups
from invjax.data.augment import scale_images
from invjax.data.subsets import _rng, stratified_split

IMAGE_SIZE = 28
DIGIT_BOX = 20  # MNIST's digits are normalised into a 20x20 box centred in 28x28
SHRINK_RANGE = (0.3, 1.0)  # Scaled-MNIST's scale factors (SESN)
ANGLE_RANGE = (0.0, 360.0)  # rotscaled_digits: rotation angles in degrees
SPLIT_SIZES = (1079, 359, 359)  # stratified 60/20/20 of the 1797 digits
DIGITS_FILE = ("datasets", "data", "digits.csv.gz")  # inside the sklearn package


def _sklearn_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits file as ``load_digits`` reads it: ``(float64 [1797, 8, 8], [1797])``.

    Read from the installed package's ``datasets/data/digits.csv.gz`` (64 pixel columns, then the
    label) without importing scikit-learn: ``sklearn.datasets`` imports scipy and several hundred
    more modules at every digits command's start, for one small file.
    """
    spec = importlib.util.find_spec("sklearn")  # finds the package without importing it
    path = None
    if spec is not None and spec.submodule_search_locations:
        path = os.path.join(spec.submodule_search_locations[0], *DIGITS_FILE)
    if path is None or not os.path.isfile(path):
        raise FileNotFoundError(
            f"scikit-learn's digits file {'/'.join(DIGITS_FILE)} was not found "
            f"({path or 'scikit-learn is not installed'}): install scikit-learn "
            "(python3 -m pip install -e .)"
        )
    with gzip.open(path, "rt") as f:
        table = np.loadtxt(f, delimiter=",")
    return table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype(int)


@functools.lru_cache(maxsize=1)
def _digits_28() -> tuple[np.ndarray, np.ndarray]:
    """All 1797 digits in MNIST's format: ``(float32 [1797, 28, 28, 1] in [0, 1], int32 [1797])``."""
    pixels, target = _sklearn_digits()
    x = (pixels.astype(np.float32) / 16.0)[..., None]
    resize = jax.jit(groups.resize, static_argnames=("size", "order", "axes"))
    box = resize(jnp.asarray(x), (DIGIT_BOX, DIGIT_BOX), order="bicubic")
    margin = (IMAGE_SIZE - DIGIT_BOX) // 2
    out = jnp.pad(jnp.clip(box, 0.0, 1.0), ((0, 0), (margin, margin), (margin, margin), (0, 0)))
    images = np.asarray(out, np.float32)
    images.setflags(write=False)
    labels = target.astype(np.int32)
    labels.setflags(write=False)
    return images, labels


def digits() -> tuple[np.ndarray, np.ndarray]:
    """The 1797 digits in MNIST's 28x28 format (copies): ``(images, labels)``."""
    images, labels = _digits_28()
    return images.copy(), labels.copy()


def shrink(images: np.ndarray, scales: np.ndarray, chunk: int = 2048) -> np.ndarray:
    """``L_s x`` per image (bicubic, zeros outside), clipped to [0, 1]; float32 ``[N, H, W, C]``.

    Processed in fixed-size chunks so that one compiled function serves any ``N``.
    """
    images = np.asarray(images, np.float32)
    scales = np.asarray(scales, np.float32)
    n = len(images)
    out = np.empty_like(images)
    step = min(chunk, max(n, 1))
    for start in range(0, n, step):
        x = images[start : start + step]
        s = scales[start : start + step]
        k = len(x)
        if k < step:  # pad the last chunk to the compiled shape
            x = np.concatenate([x, np.zeros((step - k, *x.shape[1:]), x.dtype)])
            s = np.concatenate([s, np.ones(step - k, s.dtype)])
        y = jnp.clip(scale_images(x, s, fill="zero"), 0.0, 1.0)
        out[start : start + k] = np.asarray(jax.device_get(y))[:k]
    return out


def draw_scales(n: int, seed: int, scale_range=SHRINK_RANGE) -> np.ndarray:
    """``n`` scale factors ``s ~ U(scale_range)`` from ``seed`` (float32)."""
    lo, hi = scale_range
    return _rng(seed).uniform(lo, hi, size=n).astype(np.float32)


def draw_angles(n: int, seed, angle_range=ANGLE_RANGE) -> np.ndarray:
    """``n`` rotation angles in degrees, ``theta ~ U(angle_range)`` from ``seed`` (float32)."""
    lo, hi = angle_range
    return _rng(seed).uniform(lo, hi, size=n).astype(np.float32)


def rotate_shrink(images: np.ndarray, scales, angles, chunk: int = 2048) -> np.ndarray:
    """``L_(s R(theta)) x`` per image (one bicubic resampling, zeros outside), clipped to [0, 1].

    ``images`` float32 ``[N, H, W, C]``, ``scales`` ``[N]``, ``angles`` ``[N]`` in degrees
    (counter-clockwise). Fixed-size chunks, so one compiled function serves any ``N``.
    """
    images = np.asarray(images, np.float32)
    scales = np.asarray(scales, np.float32)
    radians = np.deg2rad(np.asarray(angles, np.float32))
    n = len(images)
    out = np.empty_like(images)
    step = min(chunk, max(n, 1))
    for start in range(0, n, step):
        x, s, t = (a[start : start + step] for a in (images, scales, radians))
        k = len(x)
        if k < step:  # pad the last chunk to the compiled shape
            x = np.concatenate([x, np.zeros((step - k, *x.shape[1:]), x.dtype)])
            s = np.concatenate([s, np.ones(step - k, s.dtype)])
            t = np.concatenate([t, np.zeros(step - k, t.dtype)])
        out[start : start + k] = np.asarray(jax.device_get(_rotate_shrink(x, s, t)))[:k]
    return out


def scaled_digits(
    n: int | None = None, seed: int = 0, scale_range=SHRINK_RANGE
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scaled digits: ``(images float32 [N, 28, 28, 1] in [0, 1], labels int32 [N], scales [N])``.

    Every one of the 1797 digits gets a scale ``s ~ U(scale_range)`` drawn by ``seed`` (in
    scikit-learn's order) and is shrunk by it. ``n=None`` returns all of them in that order;
    otherwise ``n`` of them chosen at random by ``seed``. Deterministic given the arguments.
    """
    images, labels = _digits_28()
    total = len(labels)
    if n is not None and not 1 <= int(n) <= total:
        raise ValueError(f"n={n} is invalid: choose 1..{total} (or None for all digits)")
    scales = draw_scales(total, seed, scale_range)
    idx = np.arange(total) if n is None else np.sort(_rng(seed, 1).permutation(total)[: int(n)])
    return shrink(images[idx], scales[idx]), labels[idx].copy(), scales[idx]


@jax.jit
def _rotate_shrink(images, scales, angles):
    """``L_(s R(theta)) x`` per image (bicubic, zeros outside), clipped; angles in radians."""

    def one(img, s, t):
        c, d = jnp.cos(t), jnp.sin(t)
        return groups.affine(img, s * jnp.array([[c, -d], [d, c]]), order="bicubic")

    return jnp.clip(jax.vmap(one)(images, scales, angles), 0.0, 1.0)


def rotscaled_digits(
    n: int | None = None, seed: int = 0, scale_range=SHRINK_RANGE, angle_range=ANGLE_RANGE
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rotated and scaled digits: ``(images [N, 28, 28, 1], labels [N], scales [N], angles [N])``.

    As :func:`scaled_digits` (the same scales for the same ``seed``), and each digit is also
    rotated counter-clockwise by ``theta ~ U(angle_range)`` degrees (``angles``, float32, drawn by
    ``seed`` in scikit-learn's order): ``x -> L_(s R(theta)) x`` in one bicubic resampling.
    """
    images, labels = _digits_28()
    total = len(labels)
    if n is not None and not 1 <= int(n) <= total:
        raise ValueError(f"n={n} is invalid: choose 1..{total} (or None for all digits)")
    scales = draw_scales(total, seed, scale_range)
    angles = draw_angles(total, (seed, 3), angle_range)
    idx = np.arange(total) if n is None else np.sort(_rng(seed, 1).permutation(total)[: int(n)])
    out = _rotate_shrink(images[idx], scales[idx], np.deg2rad(angles[idx]))
    return np.asarray(out, np.float32), labels[idx].copy(), scales[idx], angles[idx]


def realisation(variant: str | None, r: int) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """``(train, val, test)`` of ``digits`` (``variant=None``), ``scaled_digits`` (``'scaled'``)
    or ``rotscaled_digits`` (``'rotscaled'``) for realisation ``r``: ``(images, labels)`` each,
    the fixed splits of :func:`splits` and the scales (and angles) drawn by ``r``. Fresh arrays
    at every call (the K models of one ``--config.seeds`` command load one realisation K times:
    it is drawn once per process)."""
    if variant not in (None, "scaled", "rotscaled"):
        raise ValueError(
            f"digits variant {variant!r} is unknown: choose None, 'scaled', 'rotscaled'"
        )
    images, labels = _variant(variant, r)
    return tuple((images[i], labels[i]) for i in splits(r))  # indexing copies


@functools.lru_cache(maxsize=2)
def _variant(variant: str | None, r: int) -> tuple[np.ndarray, np.ndarray]:
    """All 1797 images and labels of ``variant`` in realisation ``r`` (read-only: callers get
    copies from :func:`realisation`)."""
    if variant is None:
        images, labels = digits()
    elif variant == "scaled":
        images, labels, _ = scaled_digits(None, seed=r)
    else:
        images, labels, _, _ = rotscaled_digits(None, seed=r)
    for a in (images, labels):
        a.setflags(write=False)
    return images, labels


def splits(realisation: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fixed stratified 60/20/20 ``(train, val, test)`` indices into the 1797 digits."""
    _, labels = _digits_28()
    train, val, test = stratified_split(labels, SPLIT_SIZES, (realisation, 2))
    return train, val, test
