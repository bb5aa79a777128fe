"""The paper's Table 3 rows (SVHN, CIFAR-10, STL-10) built from one table of their differences.

Each ``configs/<dataset>_<row>.py`` is ``get_config = lambda: table3.config("<dataset>_<row>")``
with its docstring; what the rows share and how they differ lives only here:

* :data:`RECIPES`: each dataset's recipe (appendix C): its data, SGD's Nesterov switch, the
  epochs and the learning-rate schedule (boundaries as fractions of the run, decay factor), and
  the combination head's batch size, learning rate and weight decay with the divisor of its
  epochs (phase 2 of the two-phase training, :func:`invjax.configs.common.two_phase`);
* :data:`SINGLE`: each single-stream network's batch size, learning rate and weight decay
  (Tables 9-15 and the baselines' recipes; a row without an entry trains with its dataset's
  ``std`` values) and, where it has its own, its schedule;
* :data:`ROWS`: every row: its dataset, its network and, for the multi-stream networks, which
  single-stream row trains each stream in phase 1, the constant-parameter variant ("*"),
  pooling heads in place of II, the phases and the augmentation.

A change to a recipe is one edit here; ``tests/test_configs.py`` checks every row against the
values the paper's configs have always had.
"""

from __future__ import annotations

import dataclasses

import ml_collections

from invjax.configs import base, common, models

#: Per dataset: data name, Nesterov, epochs, schedule (fractions of the run, decay factor), and
#: the combination head's (batch size, learning rate, weight decay, epoch divisor).
RECIPES: dict[str, dict] = {
    # Zagoruyko & Komodakis' SVHN recipe: 160 epochs, x0.1 after 80 and 120; no augmentation
    "svhn": dict(
        data="svhn_cropped",
        nesterov=False,
        num_epochs=160,
        fractions=(0.5, 0.75),
        decay=0.1,
        head=(128, 0.01, 0.0001, 4),
    ),
    # the WRN recipe: 200 epochs, x0.2 after 60, 120 and 160; crop and flip
    "cifar10": dict(
        data="cifar10",
        nesterov=False,
        num_epochs=200,
        fractions=(0.3, 0.6, 0.8),
        decay=0.2,
        head=(128, 0.01, 0.001, 4),
    ),
    # the peers' STL-10 recipe: Nesterov, 1000 epochs, x0.2 after 300, 400, 600 and 800;
    # crop, flip and cutout
    "stl10": dict(
        data="stl10",
        nesterov=True,
        num_epochs=1000,
        fractions=(0.3, 0.4, 0.6, 0.8),
        decay=0.2,
        head=(128, 0.01, 0.0001, 10),
    ),
}

#: (dataset, single-stream network) -> (batch size, learning rate, weight decay[, schedule
#: fractions]); a network without an entry trains with its dataset's ``std`` values.
SINGLE: dict[tuple[str, str], tuple] = {
    ("svhn", "std"): (128, 0.01, 0.0005),  # the WRN paper's SVHN recipe
    ("svhn", "e2_ii"): (128, 0.005, 0.005),
    ("svhn", "scale_ii"): (128, 0.2, 0.0001),
    ("cifar10", "std"): (128, 0.1, 0.0005),
    # e2cnn's cifar_single.sh: x0.2 every 60 epochs of 200, i.e. after 60, 120 and 180
    ("cifar10", "e2"): (128, 0.1, 0.0005, (0.3, 0.6, 0.9)),
    ("cifar10", "e2_ii"): (96, 0.005, 0.005),
    ("cifar10", "scale_ii"): (128, 0.1, 0.0005),
    ("stl10", "std"): (128, 0.1, 0.0005),
    ("stl10", "e2"): (128, 0.1, 0.0005),
    ("stl10", "e2_ii"): (96, 0.002, 0.01),
    ("stl10", "scale"): (64, 0.05, 0.001),
    ("stl10", "scale_ii"): (96, 0.02, 0.001),
}

#: The single-stream networks: family and head of :func:`invjax.configs.models.wrn`.
NETWORKS = {
    "std": ("std", "pool"),
    "e2": ("e2", "pool"),
    "e2_ii": ("e2", "ii"),
    "scale": ("scale", "pool"),
    "scale_ii": ("scale", "ii"),
}


@dataclasses.dataclass(frozen=True)
class Row:
    """One experiment of Table 3 (or its variants).

    ``network``: a single-stream network of :data:`NETWORKS`, or ``dual`` / ``triple`` /
    ``triple_std`` (multi-stream). ``streams``: for a multi-stream network, the single-stream
    row that trains each stream slot in phase 1 (a ``*_ii`` row: that stream's II head; a pooling
    row: its pooling head). ``star``: constant parameters (widths / sqrt(streams)).
    ``phases``: ``two_phase`` or ``end_to_end`` (then trained with the recipe of the
    ``end_to_end_recipe`` single-stream row).
    """

    dataset: str
    network: str
    streams: tuple[tuple[str, str], ...] = ()
    star: bool = False
    phases: str = "two_phase"
    end_to_end_recipe: str = "scale_ii"
    augment: str = "default"


DUAL = (("e2", "e2_ii"), ("scale", "scale_ii"))
TRIPLE = (*DUAL, ("std", "std"))


def _rows() -> dict[str, Row]:
    rows = {}
    for ds in RECIPES:
        for net in NETWORKS:
            rows[f"{ds}_{net}"] = Row(ds, net)
        rows[f"{ds}_dual"] = Row(ds, "dual", DUAL)
        rows[f"{ds}_dual_star"] = Row(ds, "dual", DUAL, star=True)
        rows[f"{ds}_triple"] = Row(ds, "triple", TRIPLE)
        rows[f"{ds}_triple_star"] = Row(ds, "triple", TRIPLE, star=True)
    # STL-10's further experiments (Table 4, appendix B)
    rows["stl10_std_rot90_scale_aug"] = Row("stl10", "std", augment="crop_flip_cutout_rot90_scale")
    rows["stl10_dual_star_end_to_end"] = Row("stl10", "dual", DUAL, True, "end_to_end")
    rows["stl10_triple_e2pool"] = Row("stl10", "triple", (("e2", "e2"), *TRIPLE[1:]))
    rows["stl10_triple_scalepool"] = Row(
        "stl10", "triple", (TRIPLE[0], ("scale", "scale"), TRIPLE[2])
    )
    rows["stl10_triple_e2pool_scalepool"] = Row(
        "stl10", "triple", (("e2", "e2"), ("scale", "scale"), TRIPLE[2])
    )
    rows["stl10_triple_std"] = Row(
        "stl10", "triple_std", (("e2", "std"), ("scale", "std"), TRIPLE[2])
    )
    return rows


#: Every row by its config's name (``configs/<name>.py``).
ROWS: dict[str, Row] = _rows()


def _recipe(dataset: str, network: str) -> tuple:
    values = SINGLE.get((dataset, network), SINGLE[(dataset, "std")])
    return values if len(values) == 4 else (*values, RECIPES[dataset]["fractions"])


def single(dataset: str, network: str, augment: str = "default") -> ml_collections.ConfigDict:
    """The config of a single-stream row: the dataset's recipe, the network's model section and
    its batch size, learning rate, weight decay and schedule. Full data: the whole training
    split trains (``data.val_fraction=0``; the paper's 80:20 split was for the HP search)."""
    recipe = RECIPES[dataset]
    family, head = NETWORKS[network]
    batch_size, learning_rate, weight_decay, fractions = _recipe(dataset, network)
    config = base.get_config()
    config.data.name = recipe["data"]
    config.data.val_fraction = 0.0
    config.data.augment = augment
    config.model = models.std(dataset) if family == "std" else models.wrn(dataset, family, head)
    tc = config.train
    tc.optimizer = "sgd"
    tc.momentum = 0.9
    tc.nesterov = recipe["nesterov"]
    tc.batch_size = batch_size
    tc.learning_rate = learning_rate
    tc.weight_decay = weight_decay
    tc.num_epochs = recipe["num_epochs"]
    common.schedule_fractions(tc, fractions)
    tc.lr_decay_factor = recipe["decay"]
    tc.select_best = False
    return config


def _model(row: Row) -> ml_collections.ConfigDict:
    if row.network == "triple_std":
        return models.triple_std(row.dataset, "map_e2")
    heads = {f"{slot}_head": NETWORKS[net][1] for slot, net in row.streams if slot != "std"}
    make = models.dual if row.network == "dual" else models.triple
    return make(
        row.dataset,
        "map_e2",
        constant_params=row.star,
        freeze_streams=row.phases == "two_phase",
        **heads,
    )


def config(name: str) -> ml_collections.ConfigDict:
    """The config of the row ``name`` (a key of :data:`ROWS`); ValueError listing them."""
    if name not in ROWS:
        raise ValueError(f"no Table 3 row {name!r}: the rows are {sorted(ROWS)}")
    row = ROWS[name]
    if row.network in NETWORKS:
        return single(row.dataset, row.network, row.augment)
    c = single(row.dataset, "std", row.augment)
    if row.phases == "end_to_end":
        recipe = _recipe(row.dataset, row.end_to_end_recipe)
        c.model = _model(row)
        c.train.phases = "end_to_end"
        c.train.batch_size, c.train.learning_rate, c.train.weight_decay = recipe[:3]
        return c
    batch_size, learning_rate, weight_decay, divisor = RECIPES[row.dataset]["head"]
    c = common.two_phase(
        c,
        _model(row),
        {slot: single(row.dataset, net, row.augment) for slot, net in row.streams},
        batch_size=batch_size,
        learning_rate=learning_rate,
        weight_decay=weight_decay,
        epoch_divisor=divisor,
    )
    if row.network == "triple_std":  # three standard streams must not be the same run
        for offset, (slot, _) in enumerate(row.streams):
            c.phase1[slot].seed_offset = offset
    return c
