"""``load(config.data) -> Dataset``: in-memory train/validation/test arrays of one dataset.

Datasets (``config.data.name``): a source, optionally a variant of it (the :data:`SPECS` table;
docs/datasets.md has the commands and splits).

=======================  ================================================  ===============
name                     source, splits                                    default augment
=======================  ================================================  ===============
scaled_digits            scikit-learn digits in MNIST's format, shrunk by  scale
                         s ~ U(0.3, 1); fixed stratified 1079/359/359
rotscaled_digits         scaled_digits, each also rotated by               scale
                         theta ~ U(0, 360) degrees; the same splits
digits                   the same without the shrink                       none
mnist                    MNIST: TFDS ``mnist`` or IDX files at             none
                         ``data.path``; train/test; 80:20 validation
fashion_mnist            Fashion-MNIST, likewise (TFDS ``fashion_mnist``   none
                         or IDX files, e.g. Debian's package)
mnist_scale              Scaled-MNIST (SESN): MNIST's 70k pooled,          scale
                         10k/2k/50k, six realisations
scaled_fashion_mnist     the same construction on Fashion-MNIST's 70k      scale
scaled_mnist_10k         the same on MNIST's first 10,000 training         scale
                         images (the npm digits): 5,000/1,000/4,000
rotscaled_mnist,         the three above, each image also rotated by       scale
rotscaled_fashion_mnist, theta ~ U(0, 360) degrees
rotscaled_mnist_10k
cifar10                  TFDS ``cifar10`` train/test; 80:20 validation     crop_flip
svhn_cropped             TFDS ``svhn_cropped`` core train/test; 80:20      none
stl10                    TFDS ``stl10`` labelled train/test; 80:20         crop_flip_cutout
image_folder             your images, ``data.path=DIR``: DIR/train/<class>/none
                         *.png, DIR/test/...; DIR/val/... or 80:20 (see
                         :mod:`invjax.data.image_folder`)
=======================  ================================================  ===============

Sources (:mod:`invjax.data.sources`): the MNIST-format ones read the four IDX files from
``data.path`` when it is set, else the prepared TFDS copy in ``data.data_dir``. A source with
only the training pair of IDX files (the npm digits) has no test split: a stratified
``TRAIN_ONLY_TEST_FRACTION`` (40 %) of it, drawn once with a fixed seed, becomes the test split.
The variants pool the source's images and split them themselves
(:mod:`invjax.data.scaled_mnist`), so they need no test pair.

Validation. Where the dataset defines a validation split (Scaled-MNIST, the digits) it is used;
elsewhere a stratified ``val_fraction`` (0.2: the paper's 80:20) of the training split becomes
the validation split, drawn with a fixed seed so it is the same for every model and subset.
``val_source='train'`` ignores a predefined validation split and always holds out the stratified
``val_fraction`` of the training split (the HP search of the studies of ``launch/studies``: an 80:20
split of the digits' 1079 training images, the 359 validation digits unused).
``val_fraction=0`` means no validation split (an empty ``val``): the whole labelled training
data are available for training, e.g. the paper's full-data rows (CIFAR-10 N_t = 50k) and
Scaled-MNIST's N_t = 12k (its train and validation splits pooled).

Limited training sets. ``n_train = N_t > 0`` keeps a subset of N_t images of the training pool,
drawn by ``seed``: identical for every model given ``(seed, n_train)`` (and the realisation for
Scaled-MNIST / digits). ``data.subset``: ``'balanced'`` (``N_t / 10`` per class,
:func:`invjax.data.subsets.balanced_subset`) or ``'stratified'`` (the class priors of the
training split, :func:`~invjax.data.subsets.stratified_subset`); ``'default'`` picks per dataset
(:data:`DEFAULT_SUBSET`): stratified for SVHN, whose N_t = 50,000 (one of the paper's sizes)
has no equal-count subset, balanced elsewhere (the paper: "sampled with constant class
balance"; CIFAR-10 and STL-10 are balanced, so both kinds coincide there).

Normalisation: per-channel ``mean`` and ``std`` of the (limited) training split in [0, 1]
units; :func:`to_float` applies them.
"""

from __future__ import annotations

import dataclasses
import os

import jax.numpy as jnp
import numpy as np

from invjax.data import augment as augment_lib
from invjax.data import digits as digits_lib
from invjax.data import fingerprint, scaled_mnist, sources, subsets


@dataclasses.dataclass(frozen=True)
class Spec:
    """What a ``data.name`` is: a source, optionally a variant of it, and its default augmentation.

    ``source``: ``'digits'`` (scikit-learn's digits, :mod:`invjax.data.digits`, which builds its
    own variants and fixed splits), a key of :data:`invjax.data.sources.TFDS_DATASETS` (TFDS, or
    IDX files at ``data.path`` for :data:`~invjax.data.sources.MNIST_FORMAT`) or
    ``'image_folder'``. ``variant``: ``None`` or one of :data:`invjax.data.scaled_mnist.VARIANTS`,
    with its pool and split ``protocol`` (:data:`invjax.data.scaled_mnist.PROTOCOLS`).
    """

    source: str
    augment: str = "none"
    variant: str | None = None
    protocol: str | None = None

    @property
    def shape_classes(self) -> tuple[tuple[int, int, int], int]:
        if self.source == "digits":
            return (28, 28, 1), 10
        _, shape, num_classes = sources.TFDS_DATASETS[self.source]
        return shape, num_classes


#: Every named dataset except ``image_folder`` (whose shape and classes come from the folder).
SPECS: dict[str, Spec] = {
    "scaled_digits": Spec("digits", "scale", "scaled"),
    "rotscaled_digits": Spec("digits", "scale", "rotscaled"),
    "digits": Spec("digits"),
    "mnist_scale": Spec("mnist", "scale", "scaled", "sesn"),
    "rotscaled_mnist": Spec("mnist", "scale", "rotscaled", "sesn"),
    "scaled_mnist_10k": Spec("mnist", "scale", "scaled", "first10k"),
    "rotscaled_mnist_10k": Spec("mnist", "scale", "rotscaled", "first10k"),
    "mnist": Spec("mnist"),
    "scaled_fashion_mnist": Spec("fashion_mnist", "scale", "scaled", "sesn"),
    "rotscaled_fashion_mnist": Spec("fashion_mnist", "scale", "rotscaled", "sesn"),
    "fashion_mnist": Spec("fashion_mnist"),
    "cifar10": Spec("cifar10", "crop_flip"),
    "svhn_cropped": Spec("svhn_cropped"),
    "stl10": Spec("stl10", "crop_flip_cutout"),
}
# name -> (image shape, number of classes, default augmentation); the one table of dataset names
# and image shapes (invjax.models' command and the configs read it).
DATASETS: dict[str, tuple[tuple[int, int, int], int, str]] = {
    name: (*spec.shape_classes, spec.augment) for name, spec in SPECS.items()
}
#: Label k's name per source (TFDS's names; image folders: their class folders).
_DIGITS = tuple(str(k) for k in range(10))
SOURCE_CLASS_NAMES: dict[str, tuple[str, ...]] = {
    "digits": _DIGITS,
    "mnist": _DIGITS,
    "svhn_cropped": _DIGITS,
    "fashion_mnist": (
        "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
        "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
    ),
    "cifar10": (
        "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
    ),
    "stl10": (
        "airplane", "bird", "car", "cat", "deer", "dog", "horse", "monkey", "ship", "truck",
    ),
}  # fmt: skip
CLASS_NAMES: dict[str, tuple[str, ...]] = {
    name: SOURCE_CLASS_NAMES[spec.source] for name, spec in SPECS.items()
}
#: The user's own images (:mod:`invjax.data.image_folder`, imported when used: it is also a
#: command, ``python -m invjax.data.image_folder``).
IMAGE_FOLDER = "image_folder"
#: Every ``data.name``: the table above and the user's own image folders.
NAMES = (*DATASETS, IMAGE_FOLDER)
#: A source without a test split (an IDX directory with only the training pair, e.g. the npm
#: digits) gives this stratified share of its training images, drawn once, as the test split.
TRAIN_ONLY_TEST_FRACTION = 0.4
TEST_SPLIT_SEED = 1
VAL_SPLIT_SEED = 0  # the 80:20 validation split is the same for every run
# 'predefined': the dataset's own validation split where it has one, else val_fraction of the
# training split; 'train': always val_fraction of the training split (a predefined one unused).
VAL_SOURCES = ("predefined", "train")
DEFAULT_SUBSET = {"svhn_cropped": "stratified"}  # every other dataset: "balanced"


@dataclasses.dataclass(frozen=True, eq=False)
class Split:
    """``images`` uint8 (0..255) or float32 (0..1) ``[N, H, W, C]``; ``labels`` int32 ``[N]``."""

    images: np.ndarray
    labels: np.ndarray

    def __post_init__(self):
        if self.images.ndim != 4 or len(self.images) != len(self.labels):
            raise ValueError(
                f"a split needs images [N, H, W, C] and labels [N], got {self.images.shape} "
                f"and {self.labels.shape}"
            )

    def __len__(self) -> int:
        return len(self.labels)

    def take(self, idx) -> Split:
        return Split(self.images[idx], self.labels[idx])


@dataclasses.dataclass(frozen=True, eq=False)
class Dataset:
    """One dataset in memory. ``mean``/``std``: float32 ``[C]`` of the train split, [0, 1] units."""

    name: str
    train: Split
    val: Split
    test: Split
    num_classes: int
    image_shape: tuple[int, int, int]
    mean: np.ndarray
    std: np.ndarray
    augment: str
    class_names: tuple[str, ...] = ()
    # invjax.data.fingerprint.compute of the three splits; None: stand-in images of a dry run
    fingerprint: str | None = None


#: The one home of every ``config.data`` default (``invjax.configs.base`` and the checks below
#: read them here).
DEFAULTS: dict = {
    "name": "scaled_digits",
    "n_train": 0,  # N_t: training-set size (0 = the whole training split)
    "seed": 0,  # which N_t samples (the same for every model given seed and N_t)
    "realisation": 0,  # realisation of a scaled dataset (any int >= 0; the paper's Table 2: 0..5)
    "val_fraction": 0.2,  # validation share where the dataset defines none (the paper's 80:20)
    # 'predefined' (the dataset's validation split, if any) or 'train' (val_fraction of the
    # training split even where one is predefined: the digits study's 80:20 HP search)
    "val_source": "predefined",
    "data_dir": None,  # TFDS directory; None = $TFDS_DATA_DIR or ~/tensorflow_datasets
    "augment": "default",  # 'default' = the dataset's standard augmentation, or a name
    "subset": "default",  # 'balanced' | 'stratified'; 'default' = DEFAULT_SUBSET per dataset
    "path": None,  # data.name='image_folder': its DIR
    "image_size": None,  # image_folder: resize every image to (H, W); None = keep their size
}


def default_config():
    """``config.data`` with the :data:`DEFAULTS` (an ``ml_collections.ConfigDict``)."""
    import ml_collections

    cfg = dict(DEFAULTS)
    cfg["data_dir"] = ml_collections.config_dict.placeholder(str)
    cfg["path"] = ml_collections.config_dict.placeholder(str)
    cfg["image_size"] = ml_collections.config_dict.placeholder(tuple)
    return ml_collections.ConfigDict(cfg)


def _get(cfg, key, default):
    if hasattr(cfg, "get"):
        return cfg.get(key, default)
    return getattr(cfg, key, default)


def check_config(cfg) -> dict:
    """Validate ``config.data`` before any loading; returns the resolved fields."""
    name = _get(cfg, "name", None)
    if name not in NAMES:
        raise ValueError(f"unknown dataset {name!r} (data.name): valid names are {list(NAMES)}")
    folder = None
    path = _get(cfg, "path", None)
    if name == IMAGE_FOLDER:  # the folder's own classes and image size
        from invjax.data import image_folder

        folder = image_folder.scan(path, _get(cfg, "image_size", None))
        shape, num_classes = folder.image_shape, len(folder.classes)
        default_aug, class_names = image_folder.DEFAULT_AUGMENT, folder.classes
    else:
        shape, num_classes, default_aug = DATASETS[name]
        class_names = CLASS_NAMES[name]
        _no_image_size(name, shape, _get(cfg, "image_size", None))
        path = sources.check_path(SPECS[name].source, path)  # IDX files present (not read)
    _check_data_dir(_get(cfg, "data_dir", None))
    aug = _get(cfg, "augment", DEFAULTS["augment"])
    aug = default_aug if aug in (None, "default") else aug
    if aug not in augment_lib.AUGMENTATIONS:
        raise ValueError(
            f"unknown augmentation {aug!r} (data.augment): valid names are "
            f"{['default', *augment_lib.AUGMENTATIONS]}"
        )
    val_fraction = _get(cfg, "val_fraction", DEFAULTS["val_fraction"])
    if not isinstance(val_fraction, int | float) or not 0.0 <= val_fraction < 1.0:
        raise ValueError(
            f"val_fraction={val_fraction!r} is invalid (data.val_fraction): it must be in [0, 1) "
            "(0.2 = the paper's 80:20 split, 0 = no validation split)"
        )
    val_source = _get(cfg, "val_source", DEFAULTS["val_source"])
    if val_source not in VAL_SOURCES:
        raise ValueError(
            f"val_source={val_source!r} is invalid (data.val_source): valid values are "
            f"{list(VAL_SOURCES)}"
        )
    if val_source == "train" and val_fraction == 0.0:
        raise ValueError(
            "data.val_source='train' holds out data.val_fraction of the training split, but "
            "val_fraction=0: give it in (0, 1), e.g. 0.2"
        )
    seed = _get(cfg, "seed", DEFAULTS["seed"])
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed={seed!r} is invalid (data.seed): it must be an integer >= 0")
    realisation = _get(cfg, "realisation", DEFAULTS["realisation"])
    realisation = scaled_mnist.check_realisation(realisation)
    subset = _get(cfg, "subset", DEFAULTS["subset"])
    subset = DEFAULT_SUBSET.get(name, "balanced") if subset in (None, "default") else subset
    if subset not in subsets.SUBSET_KINDS:
        raise ValueError(
            f"unknown subset kind {subset!r} (data.subset): valid kinds are "
            f"{['default', *subsets.SUBSET_KINDS]}"
        )
    n_train = _get(cfg, "n_train", DEFAULTS["n_train"])
    if subset == "balanced":
        n_train = subsets.check_n_train(n_train, num_classes)
    elif isinstance(n_train, bool) or not isinstance(n_train, int | np.integer) or n_train < 0:
        raise ValueError(
            f"n_train={n_train!r} is invalid (data.n_train): it must be an integer >= 0 "
            "(0 = the whole training set)"
        )
    return {
        "subset": subset,
        "name": name,
        "image_shape": shape,
        "num_classes": num_classes,
        "augment": aug,
        "val_fraction": float(val_fraction),
        "val_source": val_source,
        "seed": int(seed),
        "realisation": realisation,
        "n_train": int(n_train),
        "data_dir": _get(cfg, "data_dir", DEFAULTS["data_dir"]),
        "path": path,
        "class_names": tuple(class_names),
        "folder": folder,
    }


def _no_image_size(name: str, shape, image_size) -> None:
    """``data.image_size`` is read by image folders only: given for another dataset, it is
    refused rather than silently ignored."""
    if image_size is not None:
        raise ValueError(
            f"data.image_size={image_size!r} is read only by data.name='image_folder' (it "
            f"resizes a folder's images); dataset {name!r} has its own {shape[0]}x{shape[1]}"
            " images: leave data.image_size unset (None)"
        )


def _check_data_dir(data_dir) -> None:
    """``data.data_dir`` (TFDS's prepared datasets and the realisation caches): None, or an
    existing directory or one that can be created; one ValueError naming it otherwise."""
    if data_dir is None:
        return
    path = os.path.abspath(os.path.expanduser(str(data_dir)))
    what = "the folder of prepared TFDS datasets and of the realisation caches"
    if os.path.lexists(path) and not os.path.exists(path):
        raise ValueError(
            f"data.data_dir={data_dir!r} is a symbolic link that leads nowhere (dangling, or a "
            f"loop): it must be a directory, {what}"
        )
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(
            f"data.data_dir={data_dir!r} is a file, not a directory: it must be {what}"
        )
    base = path
    while not os.path.exists(base):
        base = os.path.dirname(base)
    if not os.path.isdir(base):
        raise ValueError(
            f"data.data_dir={data_dir!r} cannot be created: {base} is a file, not a directory"
        )


#: The most float64 memory :func:`_channel_stats` takes at once (a bound, whatever the images).
STATS_CHUNK_BYTES = 1 << 30


def _channel_stats(images: np.ndarray, chunk: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and std in [0, 1] units, float64 accumulation in chunks (no big copy):
    ``chunk`` images at a time, or fewer pixels where those would take more than
    :data:`STATS_CHUNK_BYTES` in float64 (large images: the sums then run over pieces)."""
    unit = 255.0 if images.dtype == np.uint8 else 1.0
    c = images.shape[-1]
    pixels = images.reshape(-1, c)  # a view of the stored images
    per_image = pixels.shape[0] // max(len(images), 1)
    rows = max(1, min(chunk * per_image, STATS_CHUNK_BYTES // (8 * c)))
    s1 = np.zeros(c)
    s2 = np.zeros(c)
    for start in range(0, len(pixels), rows):
        x = pixels[start : start + rows].astype(np.float64) / unit
        s1 += x.sum(0)
        s2 += (x * x).sum(0)
    count = max(images.size // c, 1)
    mean = s1 / count
    std = np.sqrt(np.maximum(s2 / count - mean * mean, 0.0))
    return mean.astype(np.float32), np.maximum(std, 1e-6).astype(np.float32)


def _source_splits(opts) -> tuple[dict[str, Split], bool]:
    """The splits the source (or its variant) defines: ``'train'``, and ``'val'``/``'test'``
    where it has them; before the validation split and the subset. With them, whether their
    images are the data's (False for a realisation a dry run did not generate)."""
    name, data_dir, r, path = opts["name"], opts["data_dir"], opts["realisation"], opts["path"]
    if name == IMAGE_FOLDER:
        from invjax.data import image_folder

        parts = {s: image_folder.read_split(opts["folder"], s) for s in image_folder.SPLITS}
        return {s: Split(*v) for s, v in parts.items() if v is not None}, True
    spec = SPECS[name]
    if spec.source == "digits":  # builds its variants itself (see invjax.data.digits)
        parts = digits_lib.realisation(spec.variant, r)
        return {s: Split(*v) for s, v in zip(scaled_mnist.SPLITS, parts)}, True
    if spec.variant is not None:
        d = scaled_mnist.realisation(
            name,
            spec.variant,
            spec.protocol,
            r,
            lambda: sources.read_all(spec.source, data_dir, path),
            data_dir,
            cache_first=path is None,  # TFDS: fixed and slow to read; IDX files: by content
        )
        splits = {s: Split(d[f"{s}_images"], d[f"{s}_labels"]) for s in scaled_mnist.SPLITS}
        return splits, not d.get("stand_in", False)
    return {s: Split(*v) for s, v in sources.read_all(spec.source, data_dir, path).items()}, True


def load(cfg) -> Dataset:
    """Load ``config.data`` (fields: see :func:`default_config` and the module docstring)."""
    opts = check_config(cfg)
    parts, exact = _source_splits(opts)
    train, val, test = parts["train"], parts.get("val"), parts.get("test")
    if test is None:  # a source with only training images: hold a stratified share out
        tr, te = subsets.validation_split(train.labels, TRAIN_ONLY_TEST_FRACTION, TEST_SPLIT_SEED)
        train, test = train.take(tr), train.take(te)
    if opts["val_fraction"] == 0.0:  # no validation: pool a predefined one into training
        if val is not None:
            train = Split(
                np.concatenate([train.images, val.images]),
                np.concatenate([train.labels, val.labels]),
            )
        val = Split(train.images[:0], train.labels[:0])
    elif val is None or opts["val_source"] == "train":  # 80:20 where none is defined / asked
        tr, va = subsets.validation_split(
            train.labels, opts["val_fraction"], VAL_SPLIT_SEED, opts["class_names"]
        )
        train, val = train.take(tr), train.take(va)
    if opts["n_train"]:
        pool = len(train)
        try:
            idx = subsets.limited_subset(
                opts["subset"], train.labels, opts["n_train"], opts["num_classes"], opts["seed"]
            )
        except ValueError as e:
            if opts["val_fraction"] > 0.0 and opts["n_train"] <= pool + len(val):
                raise ValueError(
                    f"{e}. The training pool has {pool} images after the validation split; "
                    "set data.val_fraction=0 to train on all labelled training images"
                ) from e
            raise
        train = train.take(idx)
    for split_name, split in (("train", train), ("val", val), ("test", test)):
        check_images(split.images, opts["image_shape"], what=f"{opts['name']} {split_name}")
    mean, std = _channel_stats(train.images)
    splits = {"train": train, "val": val, "test": test}
    return Dataset(
        name=opts["name"],
        train=Split(train.images, train.labels.astype(np.int32)),
        val=Split(val.images, val.labels.astype(np.int32)),
        test=Split(test.images, test.labels.astype(np.int32)),
        num_classes=opts["num_classes"],
        image_shape=opts["image_shape"],
        mean=mean,
        std=std,
        augment=opts["augment"],
        class_names=opts["class_names"],
        fingerprint=fingerprint.compute(splits) if exact else None,
    )


def to_float(images, mean, std):
    """uint8 (0..255) or float (0..1) images -> ``(x - mean) / std`` float32 (jit-able)."""
    x = jnp.asarray(images)
    x = x.astype(jnp.float32) / 255.0 if x.dtype == jnp.uint8 else x.astype(jnp.float32)
    return (x - jnp.asarray(mean, jnp.float32)) / jnp.asarray(std, jnp.float32)


def check_images(images, image_shape, what: str = "images") -> None:
    """Raise one clear ValueError unless ``images`` is ``[N, *image_shape]`` (H, W, C)."""
    shape = tuple(np.shape(images))
    h, w, c = (int(v) for v in image_shape)
    if len(shape) != 4:
        raise ValueError(
            f"{what} have shape {shape}, expected a 4-D batch [N, H, W, C] = [N, {h}, {w}, {c}]"
            + (f" (a single image? add a batch axis: {(1, *shape)})" if len(shape) == 3 else "")
        )
    if shape[3] != c:
        hint = ""
        if shape[1] == c and shape[3] == w:
            hint = " (channels-first NCHW? invjax uses NHWC: transpose to [N, H, W, C])"
        raise ValueError(
            f"{what} have {shape[3]} channels (shape {shape}), expected {c} "
            f"({'grey' if c == 1 else 'RGB' if c == 3 else f'{c}-channel'} images "
            f"[N, {h}, {w}, {c}]){hint}"
        )
    if shape[1:3] != (h, w):
        raise ValueError(
            f"{what} are {shape[1]}x{shape[2]} (shape {shape}), expected {h}x{w} "
            f"images [N, {h}, {w}, {c}]"
        )
