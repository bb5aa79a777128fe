"""Invariance error Delta of layers and models (paper Section 5.1, Table 1; README, "Contracts", 2).

    python -m invjax.invariance --table1 [--json] [--n_samples=100] [--columns=input,input_x2,cnn]
    python -m invjax.invariance --config=configs/NAME.py [--workdir=DIR] [--images=FILE.npy] \\
        [--transforms=rot90,flip,rot45,scale] [--json]

Delta
  For one sample ``x`` and a set of ``S`` transforms ``L_s``,
  ``Delta(x) = 1/S sum_s ||psi(x) - psi(L_s x)||_2^2 / ||psi(x)||_2^2`` (Section 5.1), with
  ``psi(x)`` flattened to a vector. The figure reported for a set of samples is the *mean over
  samples of Delta(x)* (each sample weighs the same, whatever the norm of its features).

Transforms (``--transforms``)
  ``rot90``: rotations by 90, 180, 270 degrees (exact); ``flip``: the mirror (exact); ``rot45``:
  rotations by 45, 135, 225, 315 degrees (bilinear); ``scale``: ``s in {0.5, 0.55, ..., 1.0}``
  (11 scales, ``s = 1`` included as in the paper; bicubic, zeros outside; ``s < 1`` shrinks).
  All act about the image centre (:mod:`invjax.groups`).

Table 1 (``--table1``)
  100 samples of the offline scaled-digits set (:func:`invjax.data.digits.scaled_digits`,
  seed 0: scikit-learn digits in MNIST's 28 x 28 format, shrunk by ``s ~ U(0.3, 1)``), the scale
  transforms above, the layers of :data:`TABLE1_ROWS` (average pooling, DISCO's mixed pooling,
  Scale-II monomials in the variants of :data:`TABLE1_MONOMIALS`, Scale-II WS with as many
  outputs as inputs) and the
  columns: ``Input`` applies the layer to the 28 x 28 image itself; ``Input x2`` to the x2
  nearest-upsampled 56 x 56 image (what the network's first convolution sees; the paper's
  "directly processing the input" does not say which, so both are reported); ``CNN`` applies it
  on top of a randomly initialised scale-equivariant CNN of the Scaled-MNIST architecture: the
  II-DISCO WS network of :mod:`invjax.models.mnist` itself (x2 nearest upsampling, ScaleLiftConv
  32, ReLU, max pool, BN, ScaleConv 63, ReLU, max pool, BN, ScaleConv 95, BN, ReLU, scale max
  projection; DISCO basis, k = 15, effective size 7, scales 2^(i/3) for i < 4; BN in inference
  mode) up to the map its II layer reads (:func:`table1_backbone`), the same for all four rows.
  At initialisation every BN is the multiplication by ``1/sqrt(1 + 1e-5)`` and the biases are 0,
  which commute with ReLU and max pooling, so this is also the order conv -> BN -> ReLU -> pool.
  Every random draw is seeded by ``--seed``.

  Aggregation over samples. Section 5.1 defines Delta per sample and does not say how the 100
  samples are combined, so three readings are reported: ``mean`` (the mean of the per-sample
  Deltas, the headline ``table1``), ``median`` and ``pooled`` (the ratio of sums
  ``sum_x 1/S sum_s ||psi(x) - psi(L_s x)||^2 / sum_x ||psi(x)||^2``, the relative squared error
  of this literature's equivariance error pooled over the batch; a sample weighs by its feature
  norm, so a few samples with a tiny ``||psi(x)||`` cannot dominate).

  Scale-II monomials on the raw 28 x 28 input (measured with the ``(pairs)`` row; the other
  monomial rows and the settings that meet a 10x margin over pooling: docs/monomials.md): the
  smallest digits (data scale 0.3 times
  ``s = 0.5``) cover about 3 x 3 pixels, no wider than the monomials' fixed 3 x 3 offsets, so some
  monomials have no position where all their factors lie on the digit; their translation sum
  collapses to terms in ``epsilon`` and the ratio grows like ``epsilon^-k`` (measured: the mean
  Delta moves from 7e18 to 3e8 to 3e4 for epsilon 1e-6, 1e-3, 1e-2 while the median stays 1.18).
  It is a property of equation (6) with offsets that do not shrink with the image, not a
  numerical fault (the fast path matches a float64 reference); on the x2 upsampled input it
  disappears (mean 0.53, median 0.039, independent of epsilon).

Model mode (``--config``)
  Builds ``invjax.models.build(config.model)``; with ``--workdir`` loads the run's reported
  variables (best-validation copy or last, of its newest readable checkpoint; the output names
  ``checkpoint_step`` and ``selected_by``), otherwise initialises them from ``config.seed``.
  Images: ``--images=FILE.npy`` (float32 ``[N, H, W, C]`` in [0, 1]) or the first
  ``--n_samples`` test images of ``config.data``. Transforms act on the [0, 1] images, which are
  then normalised with the training split's mean/std exactly as in training. With ``--images``
  and no ``--workdir`` no dataset is read (none needs to be prepared): the freshly initialised
  model is built from the config and the images' shape, and the images are normalised with their
  own per-channel mean/std (a fresh model has no training statistics). For each transform
  it prints Delta of the logits and of the model's invariant features: the outputs of every II
  or pooling layer of :mod:`invjax.layers.ii` in the model (they sow ``invariant_features``),
  concatenated; ``null`` when the model has none. ``exact_elements`` gives, for every element
  the model's group chain makes exact (:func:`invjax.equivariance.exact_elements`), the largest
  relative change of the logits over the images (at most the first ``batch_size``), as the run
  certificate measures it; ``{}`` when there is none.
"""

from __future__ import annotations

import functools
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from invjax import compilation_cache, equivariance
from invjax import groups as G
from invjax import precision as P
from invjax.models.common import upsample

SCALES: tuple[float, ...] = tuple(round(0.5 + 0.05 * i, 2) for i in range(11))
TRANSFORMS: tuple[str, ...] = ("rot90", "flip", "rot45", "scale")
TABLE1_ROWS: tuple[str, ...] = (
    "Average Pooling",
    "Mixed Pooling",
    "Scale-II Monomials",
    "Scale-II WS",
    "Scale-II Monomials (order 3)",
    "Scale-II Monomials (pairs)",
    "Scale-II Monomials (pointwise)",
)
"""The paper's four rows, then three monomial variants (docs/monomials.md). ``Scale-II
Monomials`` is the layer as the monomial configs build it (Table 7: eq. 6 on each channel's map,
one invariant per channel, :data:`TABLE1_MONOMIALS`), its ratio ``A``; ``(order 3)`` the same with
every exponent 1 and epsilon 1e-2; ``(pairs)`` the earlier reading, one feature per pair of
factors across channels; ``(pointwise)`` those pairs with every factor at one position (exactly
scale-invariant), which needs two or more channels, so it has only the ``CNN`` column (on a
one-channel image every pointwise pair is the constant 1)."""
TABLE1_MONOMIALS: dict[str, dict] = {
    "Scale-II Monomials": dict(layout="channels"),
    "Scale-II Monomials (order 3)": dict(layout="channels", max_exponent=1, epsilon=1e-2),
    "Scale-II Monomials (pairs)": dict(layout="pairs"),
}
"""``ScaleMonomialInvariantIntegration`` settings of the monomial rows (``output='ratio'``)."""
TABLE1_COLUMNS: tuple[str, ...] = ("Input", "Input x2", "CNN")
TABLE1_COLUMN_FLAGS: dict[str, str] = {"input": "Input", "input_x2": "Input x2", "cnn": "CNN"}
"""``--columns`` tokens -> column names (``Input x2``: the x2 upsampled 56 x 56 input)."""
PAPER_TABLE1: dict[str, dict[str, float]] = {
    "Average Pooling": {"Input": 0.222, "CNN": 0.090},
    "Mixed Pooling": {"Input": 0.017, "CNN": 0.039},
    "Scale-II Monomials": {"Input": 1.24e-4, "CNN": 2.64e-7},
    "Scale-II WS": {"Input": 2.97e-9, "CNN": 5.94e-3},
}
TABLE1_SEED = 0
TABLE1_SAMPLES = 100


# --------------------------------------------------------------------------- transforms


def transform_family(name: str) -> list[tuple[str, Callable]]:
    """``[(label, images -> images)]`` for a transform name of :data:`TRANSFORMS`."""
    if name == "rot90":
        return [(f"rot{90 * r}", lambda x, r=r: G.rotate(x, r * math.pi / 2)) for r in (1, 2, 3)]
    if name == "flip":
        return [("flip", G.flip)]
    if name == "rot45":
        return [
            (f"rot{a}", lambda x, a=a: G.rotate(x, math.radians(a), "bilinear"))
            for a in (45, 135, 225, 315)
        ]
    if name == "scale":
        return [(f"scale{s:.2f}", lambda x, s=s: G.scale(x, s, "bicubic")) for s in SCALES]
    raise ValueError(f"unknown transform {name!r}: choose from {list(TRANSFORMS)}")


def parse_transforms(spec: str | Sequence[str]) -> list[str]:
    """``"rot90,flip"`` -> ``["rot90", "flip"]``, each checked against :data:`TRANSFORMS`."""
    names = [n.strip() for n in spec.split(",")] if isinstance(spec, str) else list(spec)
    names = [n for n in names if n]
    if not names:
        raise ValueError(f"--transforms={spec!r} is empty: choose from {list(TRANSFORMS)}")
    for n in names:
        transform_family(n)  # raises on unknown names
    return names


# --------------------------------------------------------------------------- Delta


def _flat(tree) -> dict[str, np.ndarray]:
    if isinstance(tree, dict):
        return {k: np.asarray(v, np.float64).reshape(len(v), -1) for k, v in tree.items()}
    return {"": np.asarray(tree, np.float64).reshape(len(tree), -1)}


def _batched(fn, images, batch_size: int) -> dict[str, np.ndarray]:
    parts = [_flat(fn(images[i : i + batch_size])) for i in range(0, len(images), batch_size)]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def invariance_error(
    fn: Callable,
    images,
    transforms: str | Sequence,
    *,
    batch_size: int = 128,
    per_sample: bool = False,
):
    """Delta (module docstring) of ``fn`` on ``images`` under ``transforms``.

    Args:
      fn: ``images [n, H, W, C] -> features [n, ...]`` (or a dict of such arrays, e.g. features
        and logits); called on batches of at most ``batch_size`` images.
      images: ``[N, H, W, C]``.
      transforms: a name of :data:`TRANSFORMS`, or a sequence of callables ``images -> images``
        (or of ``(label, callable)`` pairs).
      per_sample: return the ``[N]`` per-sample Deltas instead of their mean.
    Returns:
      A float (mean over samples), or a dict of them when ``fn`` returns a dict.
    """
    images = jnp.asarray(images)
    if images.ndim != 4:
        raise ValueError(f"images have shape {images.shape}: expected [N, H, W, C]")
    if isinstance(transforms, str):
        transforms = transform_family(transforms)
    fns = [t[1] if isinstance(t, tuple) else t for t in transforms]
    if not fns:
        raise ValueError("transforms is empty: give at least one transform")
    f0 = _batched(fn, images, batch_size)
    norms = {k: (v**2).sum(-1) for k, v in f0.items()}
    for k, n in norms.items():
        if np.any(n == 0):
            raise ValueError(
                f"psi(x) is zero for samples {np.flatnonzero(n == 0)[:10].tolist()}"
                f"{' of ' + k if k else ''}: Delta divides by ||psi(x)||^2"
            )
    total = {k: np.zeros(len(images)) for k in f0}
    for t in fns:
        f1 = _batched(lambda x, t=t: fn(t(x)), images, batch_size)
        for k in f0:
            total[k] += ((f0[k] - f1[k]) ** 2).sum(-1) / norms[k]
    out = {
        k: v / len(fns) if per_sample else float(np.mean(v / len(fns))) for k, v in total.items()
    }
    return out[""] if list(out) == [""] else out


# --------------------------------------------------------------------------- Table 1


def table1_backbone(widths: Sequence[int] = (32, 63, 95)):
    """``(model, features)``: the II-DISCO WS network of :mod:`invjax.models.mnist` with conv
    widths ``widths`` and ``features(variables, x) -> [B, 14, 14, widths[2]]``, the map that the
    model's own ``__call__`` hands to its II layer (captured there; the rest of the network is
    dead code that ``jax.jit`` drops)."""
    from invjax.models.mnist import ScaledMNISTNet

    model = ScaledMNISTNet(family="scale", basis="disco", head="ii", widths=tuple(widths))

    def features(variables, x):
        seen = []

        def capture(next_fun, args, kwargs, context):
            if context.method_name == "__call__" and context.module.name == "ii":
                seen.append(args[0])
            return next_fun(*args, **kwargs)

        with nn.intercept_methods(capture):
            model.apply(variables, x, train=False)
        return seen[0]

    return model, features


def table1_layers(n_channels: int) -> dict[str, nn.Module]:
    """The rows of Table 1 (:data:`TABLE1_ROWS`) as :mod:`invjax.layers.ii` modules."""
    from invjax.layers import ii as L

    layers = {
        "Average Pooling": L.AveragePooling(),
        "Mixed Pooling": L.MixedPooling(),
        "Scale-II Monomials": L.ScaleMonomialInvariantIntegration(
            **TABLE1_MONOMIALS["Scale-II Monomials"]
        ),
        "Scale-II WS": L.ScaleInvariantIntegration(n_channels),
    }
    for row in TABLE1_ROWS[4:6]:
        layers[row] = L.ScaleMonomialInvariantIntegration(**TABLE1_MONOMIALS[row])
    if n_channels >= 2:
        layers["Scale-II Monomials (pointwise)"] = L.ScaleMonomialInvariantIntegration(
            placement="pointwise"
        )
    return layers


def table1_images(n_samples: int = TABLE1_SAMPLES, seed: int = TABLE1_SEED) -> np.ndarray:
    """``n_samples`` scaled digits ``[n, 28, 28, 1]`` (the offline stand-in for Scaled-MNIST)."""
    from invjax.data.digits import scaled_digits

    images, _, _ = scaled_digits(check_n_samples(n_samples), seed)
    return images


def check_n_samples(n_samples) -> int:
    """``n_samples`` if it is an integer >= 1, else one ValueError (a slice ``[:-3]`` would
    silently measure all but 3 images, ``[:0]`` none)."""
    if isinstance(n_samples, bool) or not isinstance(n_samples, int | np.integer) or n_samples < 1:
        raise ValueError(f"--n_samples={n_samples!r} is invalid: it must be an integer >= 1")
    return int(n_samples)


def read_images(path: str) -> np.ndarray:
    """The array of the ``.npy`` file ``path`` (``--images``), never unpickled; one ValueError
    naming the file and the format for a missing file or one that is not a NumPy array."""
    import os

    if not os.path.isfile(path):
        raise ValueError(
            f"--images={path}: no such file (give a .npy file: np.save(path, images), images "
            "float32 [N, H, W, C] in [0, 1])"
        )
    with open(path, "rb") as f:
        header = f.read(6) == b"\x93NUMPY"
    why = "it has no .npy header (a text or other file)"
    if header:
        try:
            return np.load(path, allow_pickle=False)
        except ValueError:  # numpy's own message suggests unpickling: never done here
            why = "it holds Python objects, which invjax does not unpickle"
        except (OSError, EOFError):
            why = "it is cut short or unreadable"
    raise ValueError(
        f"--images={path} is not a NumPy .npy array file ({why}): save the images with "
        "np.save(path, images), images float32 [N, H, W, C] in [0, 1]"
    )


def _parse_columns(columns: Sequence[str]) -> list[str]:
    known = {**TABLE1_COLUMN_FLAGS, **{name.lower(): name for name in TABLE1_COLUMNS}}
    names = {known.get(c.strip().lower()) for c in columns if c.strip()}
    if None in names or not names:
        raise ValueError(
            f"columns={list(columns)!r} is invalid: choose some of {list(TABLE1_COLUMN_FLAGS)}"
        )
    return [c for c in TABLE1_COLUMNS if c in names]


def table1_terms(
    n_samples: int = TABLE1_SAMPLES,
    seed: int = TABLE1_SEED,
    columns: Sequence[str] = TABLE1_COLUMN_FLAGS,
    widths: Sequence[int] = (32, 63, 95),
    batch_size: int = 4,
    images=None,
) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Table 1 before aggregation: ``{row: {column: (num [N], den [N])}}`` (module docstring).

    ``num = 1/S sum_s ||psi(x) - psi(L_s x)||^2`` and ``den = ||psi(x)||^2`` per sample (float64),
    so the per-sample Delta is ``num / den`` and the pooled reading ``sum num / sum den``.
    ``columns`` are tokens of :data:`TABLE1_COLUMN_FLAGS` (``input``, ``input_x2``, ``cnn``).
    ``batch_size`` samples go through the backbone together with their 11 scaled copies; XLA's
    CPU convolutions with the 15 x 15 kernels need about 1 GB per image in a call, hence 4.
    """
    columns = _parse_columns(columns)
    x = jnp.asarray(table1_images(n_samples, seed) if images is None else images)
    key = jax.random.PRNGKey(seed)
    scaled = jax.jit(jax.vmap(lambda z, s: G.scale(z, s, "bicubic"), in_axes=(None, 0)))
    result: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {row: {} for row in TABLE1_ROWS}
    for column in columns:
        if column == "Input":
            feats_of = jax.jit(lambda z: z)
        elif column == "Input x2":
            feats_of = jax.jit(lambda z: upsample(z, 2, "nearest"))  # the network's first layer
        else:
            backbone, features = table1_backbone(widths)
            bvars = backbone.init(jax.random.fold_in(key, 1), x[:1])
            feats_of = jax.jit(functools.partial(features, bvars))
        # the layer inputs of every sample under every scale: [S + 1, N, h, w, c], s = identity first
        stack = []
        for i in range(0, len(x), batch_size):
            xb = x[i : i + batch_size]
            xs = scaled(xb, jnp.asarray(SCALES, jnp.float32))  # [S, b, 28, 28, 1]
            both = jnp.concatenate([xb[None], xs]).reshape((-1,) + x.shape[1:])
            stack.append(np.asarray(feats_of(both)).reshape((len(SCALES) + 1, len(xb), -1)))
        z = np.concatenate(stack, axis=1)  # [S + 1, N, h * w * c]
        h_w_c = jax.eval_shape(feats_of, x[:1]).shape[1:]
        z = z.reshape(z.shape[:2] + tuple(h_w_c))
        for row, layer in table1_layers(h_w_c[-1]).items():
            lvars = layer.init(jax.random.fold_in(key, 2), jnp.asarray(z[0, :2]))
            apply = jax.jit(lambda u, layer=layer, lvars=lvars: layer.apply(lvars, u))
            f = np.stack([np.asarray(apply(jnp.asarray(z[j]))) for j in range(len(z))])
            f0, f1 = f[0].astype(np.float64), f[1:].astype(np.float64)
            num = ((f1 - f0) ** 2).sum(-1).mean(0)  # [N]: 1/S sum_s ||psi(x) - psi(L_s x)||^2
            result[row][column] = (num, (f0**2).sum(-1))
    return result


def table1_per_sample(*args, **kwargs) -> dict[str, dict[str, np.ndarray]]:
    """``{row: {column: [N] per-sample Delta}}``; arguments as :func:`table1_terms`."""
    terms = table1_terms(*args, **kwargs)
    return {row: {c: n / d for c, (n, d) in cols.items()} for row, cols in terms.items()}


STATISTICS: tuple[str, ...] = ("mean", "median", "pooled")


def aggregate(terms, statistic: str = "mean") -> dict[str, dict[str, float]]:
    """Reduce :func:`table1_terms` to ``{row: {column: Delta}}`` by one of :data:`STATISTICS`."""
    if statistic not in STATISTICS:
        raise ValueError(f"statistic={statistic!r} is unknown: choose one of {list(STATISTICS)}")

    def reduce(num, den):
        if statistic == "pooled":
            return float(num.sum() / den.sum())
        return float((np.mean if statistic == "mean" else np.median)(num / den))

    return {row: {c: reduce(*nd) for c, nd in cols.items()} for row, cols in terms.items()}


def table1(*args, statistic: str = "mean", **kwargs) -> dict[str, dict[str, float]]:
    """Table 1: ``{row: {column: Delta}}`` aggregated by ``statistic`` (:data:`STATISTICS`).

    Arguments as :func:`table1_terms`.
    """
    if statistic not in STATISTICS:
        raise ValueError(f"statistic={statistic!r} is unknown: choose one of {list(STATISTICS)}")
    return aggregate(table1_terms(*args, **kwargs), statistic)


def format_table1(result: dict[str, dict[str, float]]) -> str:
    cols = [c for c in TABLE1_COLUMNS if any(c in result[r] for r in result)]
    head = f"{'Layer':<31}" + "".join(
        f"{c + ' (ours)':>16}"
        + (f"{c + ' (paper)':>15}" if c in PAPER_TABLE1[TABLE1_ROWS[0]] else "")
        for c in cols
    )
    lines = [head, "-" * len(head)]
    for row in TABLE1_ROWS:
        paper = PAPER_TABLE1.get(row, {})
        cells = "".join(
            f"{result.get(row, {}).get(c, float('nan')):>16.3g}"
            + (f"{paper.get(c, float('nan')):>15.3g}" if c in PAPER_TABLE1[TABLE1_ROWS[0]] else "")
            for c in cols
        )
        lines.append(f"{row:<31}{cells}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- model mode


def _model_features(model, variables, mean, std):
    """``images in [0, 1] -> {'logits', 'features'?}`` with training's normalisation."""
    from invjax.layers.ii import sown_features

    mean = jnp.asarray(mean, jnp.float32)
    std = jnp.asarray(std, jnp.float32)

    # The variables are an argument, not constants baked into the program: closed over, XLA
    # constant-folds every basis expansion of a big network (minutes of compilation).
    @jax.jit
    def apply(variables, images):
        x = (images - mean) / std
        logits, state = model.apply(variables, x, train=False, mutable=["intermediates"])
        feats = sown_features(state.get("intermediates", {}))
        out = {"logits": logits}
        if feats:
            out["features"] = jnp.concatenate(
                [feats[k].reshape(len(x), -1) for k in sorted(feats)], axis=-1
            )
        return out

    return lambda images: apply(variables, images)


def check_images(images, image_shape: tuple[int, ...], name: str) -> np.ndarray:
    """``images`` as float32 if they are what model mode takes, else one ValueError: float32 or
    float64 ``[N, H, W, C]`` (``N >= 1``, ``(H, W, C)`` the dataset's), finite, in [0, 1]."""
    images = np.asarray(images)
    want = f"[N, {', '.join(map(str, image_shape))}] float32 in [0, 1]"
    if images.dtype == np.uint8:
        raise ValueError(
            f"images are uint8 (values {images.min() if images.size else '-'}.."
            f"{images.max() if images.size else '-'}): model mode takes {want}; divide by 255 "
            "first (np.save(path, images.astype(np.float32) / 255))"
        )
    if images.dtype not in (np.float32, np.float64):
        raise ValueError(f"images have dtype {images.dtype}: {name} models take {want}")
    if images.ndim != 4 or tuple(images.shape[1:]) != image_shape:
        raise ValueError(f"images have shape {images.shape}: {name} models take {want}")
    if len(images) == 0:
        raise ValueError(f"images hold no image (shape {images.shape}): give at least one")
    bad = ~np.isfinite(images)
    if bad.any():
        first = int(np.argwhere(bad.reshape(len(images), -1).any(axis=1))[0, 0])
        raise ValueError(
            f"images hold {int(bad.sum())} NaN/Inf values (the first in image {first}): "
            "every pixel must be a finite value in [0, 1]"
        )
    lo, hi = float(images.min()), float(images.max())
    if lo < 0.0 or hi > 1.0:
        raise ValueError(
            f"images have values in [{lo!r}, {hi!r}]: model mode takes {want} (transforms "
            "act on [0, 1] images, normalised afterwards as in training)"
        )
    return images.astype(np.float32)


def model_invariance(
    config,
    workdir: str | None = None,
    images=None,
    transforms: Sequence[str] = TRANSFORMS,
    n_samples: int = TABLE1_SAMPLES,
    batch_size: int = 128,
    precision: str = P.EXACT,
) -> dict:
    """Contract 2: ``{transform: {'logits': Delta, 'features': Delta | None}}`` plus metadata.

    Computed under invjax precision ``precision`` (default: the exact one, float32 products on
    every backend; see :mod:`invjax.precision`), which the result records with the device.
    """
    P.check(precision)
    transforms = parse_transforms(transforms)
    n_samples = check_n_samples(n_samples)
    m = _measured(config, workdir, images, n_samples)
    variables, measured = _variables(m, workdir, config.seed)
    fn = _model_features(P.configure(m.model, precision), variables, m.mean, m.std)
    out = {}
    with P.jax_default(precision):
        for t in transforms:
            delta = invariance_error(fn, m.images, t, batch_size=batch_size)
            out[t] = {"logits": delta["logits"], "features": delta.get("features")}
    # The elements the model's own group chain makes exact, and the logits' largest relative
    # change under each (the run certificate's measure; invjax.equivariance).
    normalised = (m.images[:batch_size] - m.mean) / m.std
    exact = equivariance.check_equivariance(
        m.model, variables, normalised, precision=precision, train=False
    )
    return {
        "invariance_error": out,
        "exact_elements": exact,
        **P.describe(precision),
        "n_images": len(m.images),
        "model": str(m.model_cfg.get("name")),
        **measured,
        "normalisation": "training split" if m.from_dataset else "the images' own",
    }


class _Measured(NamedTuple):
    """What model mode measures: the model (built from ``model_cfg``) on images ``image_shape``,
    the images (float32 in [0, 1]) and the normalisation ``(x - mean) / std`` it applies."""

    model: nn.Module
    model_cfg: object
    image_shape: tuple[int, ...]
    images: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    from_dataset: bool  # mean/std of the training split (else the images' own)


def _measured(config, workdir: str | None, images, n_samples: int) -> _Measured:
    """The model of ``config`` and the images model mode measures it on (module docstring):
    the dataset is read unless a fresh model is measured on the user's own ``images``."""
    from invjax import models
    from invjax.data import datasets

    opts = datasets.check_config(config.data)
    name, image_shape = opts["name"], tuple(opts["image_shape"])
    if images is not None:
        images = check_images(images, image_shape, name)
    if workdir:  # the top folder of K models holds none: say which folder does
        from invjax import workdir as workdir_lib

        workdir_lib.refuse_seeds_folder(workdir)
    # A fresh model on the user's own images needs no dataset: only its shape and class count.
    ds = datasets.load(config.data) if images is None or workdir else None
    num_classes = ds.num_classes if ds is not None else opts["num_classes"]
    model_cfg = (
        config.model.copy_and_resolve_references()
        if hasattr(config.model, "unlocked")
        else config.model
    )
    if model_cfg.get("num_classes") is None:  # as the trainer: None means the dataset's
        with model_cfg.unlocked():
            model_cfg.num_classes = num_classes
    model = models.build(model_cfg)
    if images is None:
        test = ds.test.images[:n_samples]
        images = test.astype(np.float32) / (255.0 if test.dtype == np.uint8 else 1.0)
    images = np.asarray(images, np.float32)
    if ds is not None:
        mean, std = ds.mean, ds.std
    else:
        mean = images.mean(axis=(0, 1, 2))
        std = np.maximum(images.std(axis=(0, 1, 2)), 1e-6)
    return _Measured(model, model_cfg, image_shape, images, mean, std, ds is not None)


def _variables(m: _Measured, workdir: str | None, seed: int) -> tuple[dict, dict]:
    """``(variables, how they were obtained)``: the reported model of the run in ``workdir``
    (newest verified checkpoint, :func:`invjax.run.reported`, checked against the model), or
    the model initialised from ``seed``."""
    from invjax.initialise import init_variables

    if workdir:
        from invjax import run as run_lib

        chosen = run_lib.reported(workdir)
        run_lib.check_variables(m.model, m.image_shape, chosen.variables, workdir, m.model_cfg)
        measured = {"variables": "checkpoint", "checkpoint_step": chosen.step, **chosen.info}
        return chosen.variables, measured
    # jitted: initialised op by op, an E(2) WRN compiles some 200 small programs
    init = jax.jit(lambda key: init_variables(m.model, m.image_shape, key))
    return init(jax.random.PRNGKey(seed)), {"variables": "initialised"}


# --------------------------------------------------------------------------- command line


def _flags():
    """The command's flags (module docstring), on their own FlagValues."""
    from absl import flags
    from ml_collections import config_flags

    fl = flags.FlagValues()
    config_flags.DEFINE_config_file(
        "config",
        None,
        "Experiment config file (configs/NAME.py): its model is measured (model mode).",
        flag_values=fl,
    )
    flags.DEFINE_bool(
        "table1", False, "Print the paper's Table 1 (instead of --config).", flag_values=fl
    )
    flags.DEFINE_bool("json", False, "Print one JSON object instead of a table.", flag_values=fl)
    flags.DEFINE_string(
        "workdir",
        None,
        "Run directory of invjax.main to load the trained variables from (default: a freshly "
        "initialised model).",
        flag_values=fl,
    )
    flags.DEFINE_string(
        "images",
        None,
        "float32 [N, H, W, C] .npy in [0, 1] (default: the first --n_samples test images of "
        "config.data; with --images and no --workdir no dataset is read).",
        flag_values=fl,
    )
    flags.DEFINE_string(
        "transforms",
        ",".join(TRANSFORMS),
        f"Comma list of transform families, some of {list(TRANSFORMS)}.",
        flag_values=fl,
    )
    flags.DEFINE_integer(
        "n_samples", TABLE1_SAMPLES, "Samples (Table 1 / test images).", flag_values=fl
    )
    flags.DEFINE_integer(
        "seed", TABLE1_SEED, "Table 1 seed (data and random layers).", flag_values=fl
    )
    flags.DEFINE_string(
        "columns", "input,input_x2,cnn", "Table 1 columns: input, input_x2, cnn.", flag_values=fl
    )
    flags.DEFINE_string(
        "precision",
        P.EXACT,
        f"Arithmetic of the measurement, one of {list(P.PRECISIONS)} (invjax.precision); the "
        f"default {P.EXACT!r} is exact on every backend.",
        flag_values=fl,
    )
    flags.DEFINE_string(
        "compilation_cache",
        None,
        "JAX persistent compilation cache directory ('off' disables; invjax.compilation_cache).",
        flag_values=fl,
    )
    return fl


def _print_table1(fl) -> None:
    """``--table1``: Table 1 in every reading of :data:`STATISTICS`, as tables or one JSON."""
    start = time.perf_counter()
    with P.jax_default(fl.precision):  # Table 1's layers take JAX's default
        terms = table1_terms(fl.n_samples, fl.seed, fl.columns.split(","))
    readings = {st: aggregate(terms, st) for st in STATISTICS}
    wall = time.perf_counter() - start
    if not fl.json:
        for st in STATISTICS:
            print(f"Delta, {st} over samples:")
            print(format_table1(readings[st]))
        print(f"({wall:.0f} s)")
        return
    print(
        json.dumps(
            {
                "table1": readings["mean"],
                "table1_median": readings["median"],
                "table1_pooled": readings["pooled"],
                "paper": PAPER_TABLE1,
                "n_samples": fl.n_samples,
                "scales": list(SCALES),
                "seed": fl.seed,
                "wall_s": round(wall, 1),
                **P.describe(fl.precision),
            }
        )
    )


def _print_model(result: dict) -> None:
    """Model mode's result as lines: Delta per transform, the exact elements, what was measured."""
    for t, d in result["invariance_error"].items():
        feats = "n/a" if d["features"] is None else f"{d['features']:.3g}"
        print(f"{t:<8} features {feats:>10}   logits {d['logits']:.3g}")
    exact = result["exact_elements"]
    print(
        "exact elements (max relative change of the logits): "
        + (", ".join(f"{k} {v:.2g}" for k, v in exact.items()) or "none")
    )
    what = (
        f"checkpoint step {result['checkpoint_step']} ({result['selected_by']}), "
        if "checkpoint_step" in result
        else "initialised variables, "
    )
    print(f"({what}precision {result['precision']!r} on {result['device_kind']})")


def main(argv=None) -> int:
    from absl import flags

    fl = _flags()
    argv = list(sys.argv if argv is None else argv)
    if any(a in ("-h", "--help", "-help", "--helpshort") for a in argv[1:]):
        print(__doc__.rstrip() + "\n\nflags:\n" + fl.get_help(include_special_flags=False))
        return 0
    try:
        fl(argv)
        if fl.table1 == (fl["config"].value is not None):
            raise ValueError("give either --table1 or --config=configs/NAME.py")
        P.check(fl.precision, "--precision")
        compilation_cache.enable(fl.compilation_cache)
        if fl.table1:
            _print_table1(fl)
            return 0
        images = read_images(fl.images) if fl.images else None
        result = model_invariance(
            fl["config"].value,
            fl.workdir,
            images,
            parse_transforms(fl.transforms),
            fl.n_samples,
            precision=fl.precision,
        )
    except (ValueError, flags.Error, FileNotFoundError, OSError) as e:
        print(f"invjax.invariance: error: {e}", file=sys.stderr)
        return 2
    if fl.json:
        print(json.dumps(result))
    else:
        _print_model(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
