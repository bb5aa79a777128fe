"""Model sections (``config.model``) of every architecture in the paper's appendix.

python -m invjax.summary svhn_e2_ii          # parameter count and layer table of one model
python -m invjax.summary --all                # the counts of every model below

Each function returns a ``ConfigDict`` for ``invjax.models.build``; the experiment configs
``from invjax.configs import models`` and set ``config.model = models.<function>(...)``.
:data:`MODELS` names every variant (``python -m invjax.summary NAME`` takes these names).

Single streams (appendix Tables 9-15; dropout from the tables of HPs, the baselines' from their
papers / official code: WRN 0.4 SVHN and 0.3 otherwise, e2cnn 0.3, DISCO 0.3)

=============  ===========  =======================  =================  ======================
dataset        backbone     E(2) groups per stage    first stride       scale stream
=============  ===========  =======================  =================  ======================
svhn           WRN16-4      D8, D8, D8 (II over D8)  1                  3 scales, k 5, eff 3
cifar10        WRN28-10     D8, D4, D4 (II over D4)  1                  3 scales
stl10          WRN16-8      D8, D4, D1 (II over D1)  2                  3 scales, stem 32
                                                                        (Table 15), re-lift at
                                                                        stages 2, 3 (DISCO)
=============  ===========  =======================  =================  ======================

Names: ``{dataset}_{std|e2_ii|e2_pool|scale_ii|scale_pool}``; the streams of the constant-parameter
networks (widths divided by ``sqrt(2)`` / ``sqrt(3)``, rounded up) add ``_dualstar`` /
``_triplestar``. Multi-stream: ``{dataset}_{dual|triple}[_star]_{head}`` with heads ``concat``,
``map_e2`` (the paper's), ``map_scale``, ``map_std`` (triple only), ``map_all``; Table 4's ablation
``stl10_triple_e2pool``, ``stl10_triple_scalepool``, ``stl10_triple_e2pool_scalepool``; appendix
B.2's ``stl10_dual_star_end_to_end``. Scaled-MNIST (Table 2 / 7): ``mnist_cnn``, ``mnist_ses``,
``mnist_disco``, ``mnist_ii_disco_ws``, ``mnist_ii_disco_monomials``.
"""

from __future__ import annotations

import math

import ml_collections

from invjax.bases.e2 import E2CNN_EXPERIMENTS
from invjax.groups import DEFAULT_SCALES, MNIST_SCALES
from invjax.layers.heads import MODES, STREAMS
from invjax.models.wrn import DEFAULT_DOWNSAMPLE
from invjax.models.wrn import HEADS as WRN_HEADS

# (depth, widen factor, E(2) groups, first stride)
BACKBONES = {
    "svhn": (16, 4, ("D8", "D8", "D8"), 1),
    "cifar10": (28, 10, ("D8", "D4", "D4"), 1),
    "stl10": (16, 8, ("D8", "D4", "D1"), 2),
}
DATASETS = tuple(BACKBONES)
# The invjax.data dataset whose images each architecture takes (the prefix of its model names).
DATA = {"svhn": "svhn_cropped", "cifar10": "cifar10", "stl10": "stl10", "mnist": "mnist_scale"}
# Dropout: the II variants from the paper's HP tables (BOHB), the baselines from their sources.
DROPOUT = {
    ("svhn", "std"): 0.4,
    ("svhn", "e2_ii"): 0.5,
    ("svhn", "scale_ii"): 0.4,
    ("cifar10", "std"): 0.3,
    ("cifar10", "e2_ii"): 0.1,
    ("cifar10", "scale_ii"): 0.2,
    ("stl10", "std"): 0.3,
    ("stl10", "e2_ii"): 0.1,
    ("stl10", "scale_ii"): 0.25,
}
BASELINE_DROPOUT = 0.3  # e2cnn's and DISCO's WRNs (the pooling rows)
# The constant-parameter ("*") networks: the streams of an n-stream network have their widths
# divided by sqrt(n) (rounded up), so that the network keeps a single stream's count.
STAR = {"dualstar": 2, "triplestar": 3}


def width_divisor(n_streams: int) -> float:
    """The width divisor of each stream of a constant-parameter network of ``n_streams``."""
    return math.sqrt(n_streams)


def dataset_of(name: str) -> str | None:
    """The invjax.data dataset of a model name of :data:`MODELS` (None if none matches)."""
    return DATA.get(name.split("_", 1)[0])


def _check_dataset(dataset: str) -> None:
    if dataset not in DATASETS:
        raise ValueError(f"dataset {dataset!r} has no WRN architecture: choose one of {DATASETS}")


def wrn(dataset: str, family: str, head: str = "ii", width_divisor: float = 1.0):
    """A single-stream WRN of ``dataset`` (``family`` std | e2 | scale, ``head`` ii | pool)."""
    _check_dataset(dataset)
    depth, k, groups, first_stride = BACKBONES[dataset]
    c = ml_collections.ConfigDict()
    c.name = "wrn"
    c.family = family
    c.depth = depth
    c.widen_factor = k
    c.head = head
    c.first_stride = first_stride
    c.width_divisor = float(width_divisor)
    c.num_classes = 10
    key = "std" if family == "std" else f"{family}_{head}"
    c.dropout = DROPOUT.get((dataset, key), BASELINE_DROPOUT)
    c.stem_width = 16
    c.ii_kernel_size = 3
    # The peers' downsampling: strided convolutions in the WRN baselines, DISCO's stride 1 + 2x2
    # max pool, the grid-symmetric box rule for E(2).
    c.downsample = DEFAULT_DOWNSAMPLE[family]
    if family == "e2":
        c.groups = groups
        c.ii_group = groups[-1]  # D8 (SVHN), D4 (CIFAR-10), D1 = flips (STL-10)
        c.ii_interpolation = "bilinear"
        # e2cnn_experiments' basis (--F=1. --sigma=0.45); the pooling rows are e2cnn's networks
        # (last block to int(64k sqrt|G|) trivial fields), the II rows keep the baseline's 64k.
        c.e2_frequency_cutoff = E2CNN_EXPERIMENTS["frequency_cutoff"]
        c.e2_sigma = E2CNN_EXPERIMENTS["sigma"]
        c.e2_out_width = "e2cnn" if head == "pool" else "baseline"
    if family == "scale":
        c.scales = DEFAULT_SCALES  # DISCO's STL-10 WRN: [1, 1.41, 2], kernel 5, eff. 3
        c.scale_kernel_size = 5
        c.scale_effective_size = 3
        c.scale_basis = "disco"
        if dataset == "stl10":
            c.stem_width = 32  # Table 15 (DISCO's code has 16)
            c.relift = (False, True, True)  # DISCO's pools=[False, True, True]
    return c


def std(dataset: str, width_divisor: float = 1.0):
    """The standard WRN with global average pooling (the baseline and the triple's std stream)."""
    return wrn(dataset, "std", "pool", width_divisor)


def e2(dataset: str, head: str = "ii", width_divisor: float = 1.0):
    return wrn(dataset, "e2", head, width_divisor)


def scale(dataset: str, head: str = "ii", width_divisor: float = 1.0):
    return wrn(dataset, "scale", head, width_divisor)


def multistream(
    dataset: str,
    streams=("e2", "scale"),
    head: str = "map_e2",
    constant_params: bool = False,
    e2_head: str = "ii",
    scale_head: str = "ii",
    freeze_streams: bool = True,
):
    """Dual (``('e2', 'scale')``) or triple (``+ 'std'``) network of ``dataset``.

    ``constant_params``: every stream's widths divided by ``sqrt(len(streams))`` (the "*" rows).
    ``freeze_streams``: phase 2 of the paper (streams from phase-1 checkpoints, frozen).
    """
    _check_dataset(dataset)
    divisor = width_divisor(len(streams)) if constant_params else 1.0
    c = ml_collections.ConfigDict()
    c.name = "multistream"
    c.head = head
    c.num_classes = 10
    c.freeze_streams = freeze_streams
    c.streams = ml_collections.ConfigDict()
    for s in streams:
        if s == "e2":
            c.streams.e2 = e2(dataset, e2_head, divisor)
        elif s == "scale":
            c.streams.scale = scale(dataset, scale_head, divisor)
        elif s == "std":
            c.streams.std = std(dataset, divisor)
        else:
            raise ValueError(f"stream {s!r} is unknown: choose among {STREAMS}")
    return c


def triple_std(dataset: str, head: str = "map_e2", freeze_streams: bool = True):
    """Table 4's control: a triple network of three standard WRNs (pooling heads) in the three
    stream slots (``e2``, ``scale``, ``std`` are slot names; each holds a standard stream)."""
    c = multistream(dataset, STREAMS, head, freeze_streams=freeze_streams)
    for slot in ("e2", "scale"):
        c.streams[slot] = std(dataset)
    return c


def dual(dataset: str, head: str = "map_e2", constant_params: bool = False, **kw):
    return multistream(dataset, ("e2", "scale"), head, constant_params, **kw)


def triple(dataset: str, head: str = "map_e2", constant_params: bool = False, **kw):
    return multistream(dataset, STREAMS, head, constant_params, **kw)


# --------------------------------------------------------------------------- Scaled-MNIST


def mnist(variant: str = "ii_disco_ws"):
    """Scaled-MNIST networks of Table 2: ``cnn``, ``ses``, ``disco``, ``ii_disco_ws``,
    ``ii_disco_monomials`` (Table 7 and its HPs, Table 6)."""
    c = ml_collections.ConfigDict()
    c.name = "mnist"
    c.num_classes = 10
    c.upsample = "nearest"  # DISCO / SESN: nn.Upsample(scale_factor=2)
    c.widths = (32, 63, 95)
    c.hidden = 256
    c.scales = MNIST_SCALES  # n_S = 4 (text); Table 7 says 3
    c.effective_size = 7
    c.kernel_size = 15
    c.bn_momentum = 0.9  # PyTorch's 0.1
    c.dropout = 0.7
    c.use_bias = True
    if variant == "cnn":
        c.family, c.head, c.kernel_size, c.spatial_pool = "std", "maxpool", 7, "max"
    elif variant == "ses":
        c.family, c.basis, c.head, c.spatial_pool = "scale", "hermite", "maxpool", "max"
    elif variant == "disco":
        c.family, c.basis, c.head, c.spatial_pool = "scale", "disco", "mixed", "avg"
    elif variant == "ii_disco_ws":
        c.family, c.basis, c.head, c.spatial_pool = "scale", "disco", "ii", "max"
        c.ii_kernel_size = 3
        c.dropout = 0.1  # Table 6
        c.bn_momentum = 0.99  # Table 6: BatchNorm decay 0.01
        c.ii_batchnorm = False  # Table 7 ticks no BatchNorm after Scale-II
    elif variant == "ii_disco_monomials":
        c.family, c.basis, c.head, c.spatial_pool = "scale", "disco", "ii_monomials", "max"
        c.ii_kernel_size = 3
        c.n_pairs = 25  # pruned to 12 and 5 after 5 and 10 epochs
        # Table 7 ("Scale-II 95 -> 95"): eq. 6 on each channel's map, one feature per channel
        # (docs/monomials.md: the reading and the alternatives measured)
        c.monomial_layout = "channels"
        c.monomial_divisor = "random"
        c.monomial_max_exponent = 2
        c.ii_epsilon = 1e-6
        c.ii_batchnorm = False
        c.dropout = 0.7  # Table 6
        c.bn_momentum = 0.9995  # Table 6: BatchNorm decay 5e-4
    elif variant == "ii_disco_monomials_pointwise":
        c = mnist("ii_disco_monomials")
        c.monomial_placement = "pointwise"  # factors at one position: exactly scale-invariant
        c.monomial_layout = "pairs"  # across channels (on one channel a pointwise pair is 1)
    else:
        raise ValueError(
            f"Scaled-MNIST variant {variant!r} is unknown: choose one of {MNIST_VARIANTS}"
        )
    return c


MNIST_VARIANTS = (
    "cnn",
    "ses",
    "disco",
    "ii_disco_ws",
    "ii_disco_monomials",
    "ii_disco_monomials_pointwise",
)


# --------------------------------------------------------------------------- the registry


def _registry() -> dict:
    reg = {}
    for ds in DATASETS:
        reg[f"{ds}_std"] = lambda ds=ds: std(ds)
        for fam in ("e2", "scale"):
            for h in WRN_HEADS:
                reg[f"{ds}_{fam}_{h}"] = lambda ds=ds, fam=fam, h=h: wrn(ds, fam, h)
        for star, n in STAR.items():
            div = width_divisor(n)
            reg[f"{ds}_std_{star}"] = lambda ds=ds, div=div: std(ds, div)
            for fam in ("e2", "scale"):
                reg[f"{ds}_{fam}_ii_{star}"] = lambda ds=ds, fam=fam, div=div: wrn(
                    ds, fam, "ii", div
                )
        for kind, fn in (("dual", dual), ("triple", triple)):
            for star in (False, True):
                for h in MODES:
                    if kind == "dual" and h == "map_std":
                        continue
                    name = f"{ds}_{kind}{'_star' if star else ''}_{h}"
                    reg[name] = lambda ds=ds, fn=fn, h=h, star=star: fn(ds, h, star)
    reg["stl10_triple_e2pool"] = lambda: triple("stl10", e2_head="pool")
    reg["stl10_triple_scalepool"] = lambda: triple("stl10", scale_head="pool")
    reg["stl10_triple_e2pool_scalepool"] = lambda: triple(
        "stl10", e2_head="pool", scale_head="pool"
    )
    reg["stl10_triple_std"] = lambda: triple_std("stl10")
    reg["stl10_dual_star_end_to_end"] = lambda: dual("stl10", "map_e2", True, freeze_streams=False)
    for v in MNIST_VARIANTS:
        reg[f"mnist_{v}"] = lambda v=v: mnist(v)
    return reg


MODELS = _registry()
"""``{name: () -> ConfigDict}`` for every architecture (see the module docstring)."""


def get(name: str):
    """The model config called ``name`` (ValueError listing the names if unknown)."""
    if name not in MODELS:
        raise ValueError(f"model {name!r} is unknown: valid names are {sorted(MODELS)}")
    return MODELS[name]()
