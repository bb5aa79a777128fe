"""Training augmentations as jit-able JAX functions on normalised float batches ``[B, H, W, C]``.

They run on the device inside the jitted train step: ``apply(name, rng, images)`` with a static
``name``. The paper's "standard data augmentations" (Section 4):

``none``              SVHN (and every evaluation).
``scale``             Scaled-MNIST: each image rescaled about its centre by ``s ~ U(0.5, 2)``,
                      bicubic (SESN's ``RandomAffine(0, scale=(0.5, 2), resample=BICUBIC)``).
``crop_flip``         CIFAR-10: zero-pad 4, random 32x32 crop, horizontal flip with p = 1/2.
``crop_flip_cutout``  STL-10: zero-pad 12, random 96x96 crop, flip, then Cutout of one 32x32
                      square (SESN/DISCO's STL-10 loader: ``Cutout(1, 32)`` after normalisation;
                      e2cnn_experiments' STL-10 loader used 60 instead).
``crop_flip_cutout_rot90_scale``  the paper's STL-10 ablation (Section 5): a random 90-degree
                      rotation and a rescaling by ``s ~ U(0.25, 1)`` (bicubic, mean-colour fill),
                      then ``crop_flip_cutout``.

Fill values. The images are normalised, so 0 is the train-set mean colour: padding and Cutout
write 0 (Cutout's own code also zeroes after normalisation; torchvision's padded crop pads black
before normalising, a mean-coloured border instead is the one difference). ``scale`` fills the
area uncovered by a shrink with the mean of each image's 1-pixel border, which for digits is
their background (black before normalisation), exactly what SESN's augmentation fills in.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from invjax import groups

AUGMENTATIONS = ("none", "scale", "crop_flip", "crop_flip_cutout", "crop_flip_cutout_rot90_scale")
ROT90_SCALE_RANGE = (0.25, 1.0)  # the STL-10 augmentation ablation of the paper
SCALE_RANGE = (0.5, 2.0)  # Scaled-MNIST augmentation (SESN / DISCO, the paper's appendix)
CROP_PAD = {"crop_flip": 4, "crop_flip_cutout": 12}
CUTOUT_SIZE = 32  # STL-10, SESN / DISCO


def check_name(name: str) -> str:
    if name not in AUGMENTATIONS:
        raise ValueError(f"unknown augmentation {name!r}: valid names are {list(AUGMENTATIONS)}")
    return name


def _check_batch(images) -> jnp.ndarray:
    images = jnp.asarray(images)
    if images.ndim != 4:
        raise ValueError(
            f"augmentation expects a batch [B, H, W, C], got an array of shape {images.shape}"
        )
    if not jnp.issubdtype(images.dtype, jnp.floating):
        raise ValueError(
            f"augmentation expects normalised float images, got dtype {images.dtype}: "
            "convert with invjax.data.to_float(images, mean, std) first"
        )
    return images


def border_mean(images) -> jnp.ndarray:
    """Mean of each image's outermost 1-pixel frame, per channel: ``[B, 1, 1, C]``."""
    x = jnp.asarray(images)
    h, w = x.shape[1], x.shape[2]
    total = x[:, 0].sum(1) + x[:, -1].sum(1) + x[:, 1:-1, 0].sum(1) + x[:, 1:-1, -1].sum(1)
    return (total / (2 * w + 2 * (h - 2)))[:, None, None, :]


@functools.partial(jax.jit, static_argnames=("fill",))
def scale_images(images, scales, fill: str = "border"):
    """``L_s x(p) = x(p / s)`` per image (``s < 1`` shrinks about the centre), bicubic.

    images: ``[B, H, W, C]`` float; scales: ``[B]``. ``fill='zero'``: zeros where the source
    lies outside the image (:func:`invjax.groups.scale`); ``fill='border'``: the mean of the
    image's border instead (its background). The Keys bicubic kernel may overshoot the input's
    range slightly near sharp edges.
    """
    if fill not in ("zero", "border"):
        raise ValueError(f"fill={fill!r} is invalid: choose 'zero' or 'border'")
    images = jnp.asarray(images)
    bg = border_mean(images) if fill == "border" else jnp.zeros((), images.dtype)
    one = lambda img, s: groups.scale(img, s, order="bicubic")
    return jax.vmap(one)(images - bg, jnp.asarray(scales, images.dtype)) + bg


def translate(images, shifts, pad: int):
    """Padded crop: ``out[i, j] = x[i + dy, j + dx]`` (0 outside), ``shifts [B, 2]`` ints in ``[-pad, pad]``.

    The same as zero-padding by ``pad`` and cropping the original size at offset ``pad + shift``;
    a zero shift is the identity.
    """
    images = jnp.asarray(images)
    _, h, w, c = images.shape
    padded = jnp.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    starts = jnp.clip(jnp.asarray(shifts, jnp.int32) + pad, 0, 2 * pad)

    def crop(img, start):
        return jax.lax.dynamic_slice(img, (start[0], start[1], 0), (h, w, c))

    return jax.vmap(crop)(padded, starts)


def hflip(images, mask):
    """Mirror (reverse the column axis of) the images where ``mask [B]`` is true."""
    images = jnp.asarray(images)
    return jnp.where(jnp.asarray(mask)[:, None, None, None], images[:, :, ::-1], images)


def cutout(images, centres, size: int = CUTOUT_SIZE):
    """Zero a ``size x size`` square per image centred at ``centres [B, 2]`` (row, col), clipped.

    As DeVries & Taylor: rows ``[cy - size//2, cy + size//2)`` and likewise columns, cut at the
    image border, so a square near the border covers less.
    """
    images = jnp.asarray(images)
    _, h, w, _ = images.shape
    centres = jnp.asarray(centres, jnp.int32)
    rows = jnp.arange(h)[None, :]
    cols = jnp.arange(w)[None, :]
    cy, cx = centres[:, :1], centres[:, 1:]
    in_r = (rows >= cy - size // 2) & (rows < cy + size // 2)
    in_c = (cols >= cx - size // 2) & (cols < cx + size // 2)
    hole = in_r[:, :, None] & in_c[:, None, :]
    return jnp.where(hole[..., None], jnp.zeros((), images.dtype), images)


def apply(name: str, rng, images):
    """Apply augmentation ``name`` (static) with key ``rng`` to a normalised batch ``[B, H, W, C]``.

    Returns an array of the same shape and dtype. ``'none'`` returns the input unchanged.
    """
    check_name(name)
    images = _check_batch(images)
    if name == "none":
        return images
    b, h, w, _ = images.shape
    if name == "scale":
        s = jax.random.uniform(rng, (b,), images.dtype, *SCALE_RANGE)
        return scale_images(images, s, fill="border")
    if name == "crop_flip_cutout_rot90_scale":
        k_rot, k_scale, rng = jax.random.split(rng, 3)
        quarter = jax.random.randint(k_rot, (b,), 0, 4)
        turned = jnp.stack([jnp.rot90(images, q, axes=(1, 2)) for q in range(4)])  # square
        images = jnp.take_along_axis(turned, quarter[None, :, None, None, None], axis=0)[0]
        s = jax.random.uniform(k_scale, (b,), images.dtype, *ROT90_SCALE_RANGE)
        images = scale_images(images, s, fill="zero")  # 0 = the mean colour (normalised)
        name = "crop_flip_cutout"
    k_crop, k_flip, k_cut = jax.random.split(rng, 3)
    pad = CROP_PAD[name]
    shifts = jax.random.randint(k_crop, (b, 2), -pad, pad + 1)
    out = hflip(translate(images, shifts, pad), jax.random.bernoulli(k_flip, 0.5, (b,)))
    if name == "crop_flip_cutout":
        centres = jax.random.randint(k_cut, (b, 2), 0, jnp.array([h, w]))
        out = cutout(out, centres, CUTOUT_SIZE)
    return out
