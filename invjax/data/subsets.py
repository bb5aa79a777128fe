"""Deterministic splits, limited training sets (equal-count or stratified) and epoch orders.

Everything here is a pure function of its integer seeds (NumPy ``Generator`` streams), so a
subset or an epoch's order is identical for every model, every run and a resumed run.
"""

from __future__ import annotations

import numpy as np


def _rng(*keys) -> np.random.Generator:
    """A Generator seeded by a tuple of non-negative ints (a seed may itself be a tuple)."""
    flat = [int(k) for key in keys for k in np.atleast_1d(key)]
    return np.random.default_rng(flat)


def _check_labels(labels) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be a 1-D integer array, got {labels.dtype} {labels.shape}")
    return labels


def stratified_split(labels, sizes, seed: int | tuple[int, ...]) -> list[np.ndarray]:
    """Split indices into disjoint parts of exactly ``sizes`` with the class proportions kept.

    Each class contributes to each part in proportion to its share of ``labels`` (largest
    remainder rounding, so the parts have exactly the requested sizes); the members are drawn
    by ``seed``. ``sum(sizes)`` may be smaller than ``len(labels)``: the rest is left out (as
    Scaled-MNIST leaves 8k of MNIST's 70k unused). Returns sorted index arrays.
    """
    labels = _check_labels(labels)
    sizes = [int(s) for s in sizes]
    n = len(labels)
    if min(sizes, default=0) < 0 or sum(sizes) > n:
        raise ValueError(f"split sizes {sizes} are invalid for {n} samples: need 0 <= sum <= {n}")
    classes, counts = np.unique(labels, return_counts=True)
    rng = _rng(seed)
    # Per-class quota for every part; the last column collects the unused rest.
    parts = sizes + [n - sum(sizes)]
    quota = np.zeros((len(classes), len(parts)), np.int64)
    for p, size in enumerate(parts):
        exact = counts * size / n
        base = np.floor(exact).astype(np.int64)
        short = size - int(base.sum())
        # Largest remainder first; ties broken by class index (stable, seed-free).
        order = np.argsort(-(exact - base), kind="stable")
        base[order[:short]] += 1
        quota[:, p] = base
    # Rounding may over-book a class by a sample or two; move the excess to classes with room,
    # largest remainder first, keeping each part's size exact.
    # Each move lowers sum(|excess|) by 2, so this ends.
    while (excess := quota.sum(1) - counts).any():
        over, under = int(np.argmax(excess)), int(np.argmin(excess))
        p = int(np.argmax(quota[over]))
        quota[over, p] -= 1
        quota[under, p] += 1
    out: list[list[np.ndarray]] = [[] for _ in parts]
    for c_i, c in enumerate(classes):
        idx = rng.permutation(np.flatnonzero(labels == c))
        bounds = np.cumsum(quota[c_i])
        for p, chunk in enumerate(np.split(idx, bounds[:-1])):
            out[p].append(chunk)
    return [np.sort(np.concatenate(o)) for o in out[: len(sizes)]]


def validation_split(
    labels, val_fraction: float, seed: int = 0, class_names=None
) -> tuple[np.ndarray, np.ndarray]:
    """The paper's 80:20 train/validation split (``val_fraction=0.2``), stratified.

    Drawn with a fixed ``seed`` so the validation set is the same for every model, subset size
    and subset seed. Returns ``(train_idx, val_idx)``, sorted.

    A class that would keep no training image (with few images per class the largest-remainder
    rounding can give a class's only image to the validation split) is refused with one
    ValueError naming the class (``class_names[label]`` where given) and its counts: a model
    that never sees a class in training is not what was asked for.
    """
    labels = _check_labels(labels)
    n_val = int(round(len(labels) * float(val_fraction)))
    train_idx, val_idx = stratified_split(labels, [len(labels) - n_val, n_val], seed)
    num_classes = max(int(labels.max(initial=-1)) + 1, len(class_names or ()))
    kept = np.bincount(labels[train_idx], minlength=num_classes)
    total = np.bincount(labels, minlength=num_classes)
    lost = np.flatnonzero(kept == 0)
    if lost.size:
        c = int(lost[0])
        name = f"{class_names[c]!r} (label {c})" if class_names is not None else f"{c}"
        others = f" (and {lost.size - 1} more class(es) alike)" if lost.size > 1 else ""
        if total[c] == 0:
            raise ValueError(f"class {name}{others} has no image in the training split")
        raise ValueError(
            f"class {name}{others} has {int(total[c])} training image(s) and the validation "
            f"split (data.val_fraction={val_fraction}) takes all of them, leaving none to train "
            "on: give that class more images, a predefined validation split (an image "
            "folder's val/), or data.val_fraction=0"
        )
    return train_idx, val_idx


def balanced_subset(labels, n: int, num_classes: int, seed: int) -> np.ndarray:
    """Indices of a class-balanced limited training set: ``n / num_classes`` samples per class.

    Per class the samples are taken from the front of a permutation drawn by ``(seed, class)``,
    so for one seed a smaller subset is contained in a larger one and every model trained with
    the same ``(seed, n)`` sees the same images. ``n = 0`` means all samples. Returns sorted
    indices.
    """
    labels = _check_labels(labels)
    n = check_n_train(n, num_classes)
    if n == 0:
        return np.arange(len(labels))
    per_class = n // num_classes
    counts = np.bincount(labels, minlength=num_classes)
    if counts.min() < per_class:
        largest = int(counts.min()) * num_classes
        raise ValueError(
            f"n_train={n} needs {per_class} training images per class, but class "
            f"{int(counts.argmin())} has only {int(counts.min())}: the largest class-balanced "
            f"n_train here is {largest} (or 0 for the whole training set of {len(labels)})"
        )
    chosen = []
    for c in range(num_classes):
        idx = np.flatnonzero(labels == c)
        chosen.append(idx[_rng(seed, c).permutation(len(idx))[:per_class]])
    return np.sort(np.concatenate(chosen))


SUBSET_KINDS = ("balanced", "stratified")


def prior_quota(counts, n: int) -> np.ndarray:
    """Per-class sizes summing to ``n`` in proportion to ``counts`` (largest remainder rounding,
    ties to the lower class index; no class above its count)."""
    counts = np.asarray(counts, np.int64)
    exact = counts * n / counts.sum()
    quota = np.floor(exact).astype(np.int64)
    order = np.argsort(-(exact - quota), kind="stable")
    quota[order[: n - int(quota.sum())]] += 1
    return np.minimum(quota, counts)  # n <= sum(counts) makes this a no-op; kept as a guard


def stratified_subset(labels, n: int, num_classes: int, seed: int) -> np.ndarray:
    """Indices of a limited training set with the class priors of ``labels``: class ``c`` gets
    ``n * N_c / N`` samples (largest remainder rounding, so exactly ``n`` in all).

    The equal-count :func:`balanced_subset` cannot draw SVHN's ``N_t = 50,000`` (class "9" has
    4,659 training images); this one can, for every ``n`` up to the pool size, and small subsets
    keep the test set's priors (where train and test share them). Per class the samples are the
    front of the same permutation as :func:`balanced_subset` (drawn by ``(seed, class)``), so on
    a class-balanced pool and ``n`` a multiple of the classes both give the same subset.
    ``n = 0`` means all samples. Returns sorted indices.
    """
    labels = _check_labels(labels)
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise ValueError(f"n_train={n!r} is invalid: it must be an integer >= 0 (0 = all)")
    if n == 0:
        return np.arange(len(labels))
    if n > len(labels):
        raise ValueError(
            f"n_train={n} is larger than the training pool of {len(labels)} images: use at most "
            f"{len(labels)} (or 0 for all of them)"
        )
    counts = np.bincount(labels, minlength=num_classes)
    quota = prior_quota(counts, int(n))
    chosen = []
    for c in range(num_classes):
        idx = np.flatnonzero(labels == c)
        chosen.append(idx[_rng(seed, c).permutation(len(idx))[: quota[c]]])
    return np.sort(np.concatenate(chosen))


def limited_subset(kind: str, labels, n: int, num_classes: int, seed: int) -> np.ndarray:
    """``kind`` ``'balanced'`` (equal count per class) or ``'stratified'`` (training priors)."""
    if kind == "balanced":
        return balanced_subset(labels, n, num_classes, seed)
    if kind == "stratified":
        return stratified_subset(labels, n, num_classes, seed)
    raise ValueError(f"subset kind {kind!r} is unknown: choose one of {SUBSET_KINDS}")


def check_n_train(n, num_classes: int) -> int:
    """Validate a training-set size ``N_t`` (0 = all); it must split evenly over the classes."""
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise ValueError(
            f"n_train={n!r} is invalid: it must be an integer >= 0 (0 = the whole training set)"
        )
    n = int(n)
    if n % num_classes:
        lo = n // num_classes * num_classes
        hint = f"{lo} or {lo + num_classes}" if lo else f"{num_classes}"
        raise ValueError(
            f"n_train={n} cannot be split evenly over the {num_classes} classes: use a multiple "
            f"of {num_classes} (e.g. {hint}), or 0 for the whole training set"
        )
    return n


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The permutation of ``range(n)`` used in ``epoch``: a pure function of ``(seed, epoch)``.

    A run resumed at any epoch therefore sees exactly the batches of an uninterrupted run.
    """
    if n < 0 or seed < 0 or epoch < 0:
        raise ValueError(f"epoch_order needs n, seed, epoch >= 0, got {n}, {seed}, {epoch}")
    # A constant first key keeps these streams apart from the subset and split streams.
    return _rng(0x5EED, seed, epoch).permutation(int(n))
