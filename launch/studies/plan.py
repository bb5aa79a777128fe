"""The design of a study: its families, claims, training-length rules, and the runs they make.

A :class:`Study` names the datasets, the families (:class:`Family`: a config and how its
hyperparameters are chosen), the claims (``(claim, better, worse, datasets)``), the training
sizes N_t and realisations, and the rules (:class:`Rule`). From it and the record
(:mod:`launch.studies.record`) this module derives

* the tuning runs (:func:`plan_tune`): six candidates per family (learning rate x
  ``lr_factors``, weight decay in ``weight_decays``; the RBF-SVM: ``svm_grid``) on an 80:20
  split of the training split, the winner by the last epoch's held-out error (:func:`choose`);
* the main runs (:func:`plan_main`): every family at every N_t and realisation with the chosen
  hyperparameters and the length of :func:`schedule`;
* the finished main runs of a rule, grouped for the claims (:func:`main_errors`).

A study may instead fix its design per dataset and family (the real-image study,
:data:`launch.studies.realimages.STUDY`): each dataset its own N_t list and split size, each
family its own recipe (:attr:`Family.rule`) and config argument, families trained with their
published hyperparameters (``tune='none'``), and claims registered at one (dataset, N_t) each.

Run paths: ``tune/DATASET/FAMILY/<candidate>`` and ``main/DATASET/FAMILY/<label>/seed_<k>``,
``<label>`` from :func:`run_label` (``n<N_t>``, ``nall`` for the whole split, with the rule's
:meth:`Rule.tag` where it trains the point otherwise than the study's first rule).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence

from invjax.layers.ii import scaled_prune_epochs
from launch import sweep


@dataclasses.dataclass(frozen=True)
class Rule:
    """The training-length rule and the shared settings of every network run."""

    min_steps: int = 600
    min_epochs: int = 60
    batch_size: int = 64
    width_divisor: float = 2.0
    # x0.1 after these fractions of the epochs (``()``: once, after two thirds)
    decay_at: tuple[float, ...] = ()
    # validation every this many epochs (0: ten times a run, ``max(1, E // 10)``)
    eval_every: int = 0
    # where set, a network whose BatchNorm momentum would leave its running statistics holding
    # more than this share of their initial values after the run's steps trains with the largest
    # momentum that does not (invjax.training.experiment.bn_momentum_fitting): evaluation must
    # read the data's statistics, whatever the number of steps N_t gives
    bn_residual_limit: float | None = None
    # where set, a run validates at most about this many times: a long run (few images, many
    # epochs) widens ``eval_every`` to ``ceil(E / max_validations)`` (:func:`eval_interval`).
    # Validation reads the model without changing its training, so only the curve's resolution
    # differs; the last epoch is always validated
    max_validations: int = 0

    def tag(self, first: Rule) -> str:
        """The length fields that differ from ``first``, e.g. ``'e300'`` (``''``: none)."""
        short = {"min_steps": "s", "min_epochs": "e", "batch_size": "b", "width_divisor": "w"}
        return "".join(
            f"{short[f]}{getattr(self, f):g}"
            for f in short
            if getattr(self, f) != getattr(first, f)
        )


@dataclasses.dataclass(frozen=True)
class Family:
    """One row of a study.

    ``stem``: config (None: the RBF-SVM). ``tune``: ``'own'`` (the grid on its learning rate and
    weight decay), ``'head'`` (the grid on phase 2's, streams from :attr:`streams`' choices) or
    ``'inherit'`` (:attr:`hp_from`'s choice, no tuning of its own). ``streams``: slot -> the
    family whose choice trains that stream. ``steps_factor``: the training length x this.
    ``datasets``: where it runs. ``tune='none'``: the config's own hyperparameters (a
    published recipe, not tuned). ``rule``: the family's own fixed recipe (then the study's
    rule, and the command line's rule options, do not apply to it). ``variants``: dataset ->
    the config's argument on that dataset (``configs/STEM.py:ARG``). ``points``: the
    ``(dataset, N_t)`` of its main runs (None: every N_t the study plans on each of its
    datasets). ``seeds``: the realisations of its main runs (None: the study's). A family may
    tune on its own grid (``lr_values`` x ``weight_decays``; empty: the study's) at its own
    ``tune_n_train`` images (None: the study's), and ``extend_edges`` times extend the grid's
    learning rates past an edge where the choice lies (:func:`candidates`).
    """

    stem: str | None
    datasets: tuple[str, ...]
    overrides: dict = dataclasses.field(default_factory=dict)
    tune: str = "own"
    streams: tuple[tuple[str, str], ...] = ()
    hp_from: str | None = None
    steps_factor: float = 1.0
    rule: Rule | None = None
    variants: dict = dataclasses.field(default_factory=dict)
    points: tuple[tuple[str, int], ...] | None = None
    seeds: tuple[int, ...] | None = None
    lr_values: tuple[float, ...] = ()
    weight_decays: tuple[float, ...] = ()
    tune_n_train: int | None = None
    extend_edges: int = 0

    def config(self, dataset: str) -> str | None:
        """The config of its runs on ``dataset``: ``stem`` or ``stem:ARG``."""
        arg = self.variants.get(dataset)
        return f"{self.stem}:{arg}" if arg and self.stem else self.stem


@dataclasses.dataclass(frozen=True)
class Study:
    """A study's design (the digits study: :data:`launch.studies.digits.STUDY`).

    ``n_all``: the training split's size (N_t = 0 means all of it); ``n_tune``: the training
    images of the tuning split (``1 - val_fraction`` of ``n_all``). ``first_rule``: the rule
    the study started with (its runs' directories are named by N_t alone); ``main_rule``: the
    main runs' rule; the tuning runs keep ``first_rule``'s ``tune_rule_fields``. ``wrn_stems``
    take ``model.width_divisor``; ``mono_stem`` prunes at :func:`prune_epochs`.

    A study whose datasets differ in size (the real-image study) gives per dataset its training
    split's size (``dataset_n_all``) and its N_t (``dataset_sizes``, explicit numbers, the
    whole split among them), ``data.*`` overrides (``dataset_overrides``), tunes at
    ``tune_n_train`` images of the 80:20 split (0: all of it) over absolute learning rates
    ``lr_values`` (else ``lr_factors`` x the config's), and states its claims before its runs
    (``registered``: objects with ``id``, ``dataset``, ``n_train``, ``better`` and ``worse``,
    each judged at its one (dataset, N_t); ``worse='best_stream'``: the family of
    ``best_stream`` with the lowest mean validation error there). ``exploratory``: comparisons
    of the same form added after results were read: reported with their statistics, outside
    the registered family's correction and without a verdict. ``tune_validates_once``: the
    tuning runs (streams and heads) validate once, after their last epoch, the only one the
    choice reads; validating less often leaves training bit-identical
    (tests/test_experiment.py::test_the_validation_interval_does_not_change_training).
    """

    name: str
    datasets: tuple[str, ...]
    families: dict[str, Family]
    claims: tuple[tuple[str, str, str, tuple[str, ...]], ...]
    sizes: tuple[int, ...]
    seeds: tuple[int, ...]
    n_all: int
    val_fraction: float
    lr_factors: tuple[float, ...]
    weight_decays: tuple[float, ...]
    svm_grid: tuple[tuple[float, float], ...]
    first_rule: Rule
    main_rule: Rule
    tune_rule_fields: tuple[str, ...] = ("min_steps", "min_epochs")
    tune_realisation: int = 0
    precision: str = "highest"
    wrn_stems: tuple[str, ...] = ()
    mono_stem: str | None = None
    anchors: tuple[str, ...] = ()
    dataset_n_all: dict = dataclasses.field(default_factory=dict)
    dataset_sizes: dict = dataclasses.field(default_factory=dict)
    dataset_overrides: dict = dataclasses.field(default_factory=dict)
    tune_n_train: int = 0
    lr_values: tuple[float, ...] = ()
    registered: tuple = ()
    exploratory: tuple = ()
    best_stream: tuple[str, ...] = ()
    # dataset -> family -> published (mean, std) %: only the datasets the paper's figures describe
    paper: dict = dataclasses.field(default_factory=dict)
    tune_validates_once: bool = False
    # families of claims registered later, each judged apart (its own realisations and Holm):
    # objects with ``name``, ``claims`` (as ``registered``'s) and ``seeds(claim_id)``
    later_registered: tuple = ()

    def seeds_of(self, family: str) -> tuple[int, ...]:
        """The realisations of ``family``'s main runs."""
        return self.families[family].seeds or self.seeds

    @property
    def all_seeds(self) -> tuple[int, ...]:
        """Every realisation some family's main runs use, in order."""
        return tuple(sorted({s for f in self.families for s in self.seeds_of(f)}))

    @property
    def n_tune(self) -> int:
        if self.tune_n_train:
            return self.tune_n_train
        return self.n_all - round(self.n_all * self.val_fraction)

    def n_all_of(self, dataset: str | None) -> int:
        """The training split's size on ``dataset``."""
        return self.dataset_n_all.get(dataset, self.n_all)

    def sizes_of(self, dataset: str, sizes: Sequence[int]) -> list[int]:
        """The ``data.n_train`` values (0 = the whole split) of ``sizes`` planned on
        ``dataset``: all of them, or with ``dataset_sizes`` those in its list (0 and the split's
        size both mean the whole split)."""
        if dataset not in self.dataset_sizes:
            return list(sizes)
        n_all, mine = self.n_all_of(dataset), self.dataset_sizes[dataset]
        out = [0 if n in (0, n_all) else n for n in sizes if n == 0 or n in mine]
        return list(dict.fromkeys(out))


# ----------------------------------------------------------------------------- training length


def boundaries(epochs: int, rule: Rule) -> tuple[int, ...]:
    """The epochs after which the learning rate falls x0.1: ``round(f E)`` for each fraction
    ``f`` of ``rule.decay_at`` (kept inside ``[1, E - 1]`` and increasing), or one decay after
    ``round(2E/3)`` where the rule names none."""
    if not rule.decay_at:
        return (min(max(1, round(2 * epochs / 3)), epochs - 1),)
    return tuple(dict.fromkeys(min(max(1, round(f * epochs)), epochs - 1) for f in rule.decay_at))


def eval_interval(epochs: int, rule: Rule) -> int:
    """Epochs between two validations of a run of ``epochs``: ``rule.eval_every`` (0: ten a
    run, ``max(1, E // 10)``), at least ``ceil(E / rule.max_validations)`` where that is set,
    and at most ``epochs``."""
    every = rule.eval_every or max(1, epochs // 10)
    if rule.max_validations:
        every = max(every, math.ceil(epochs / rule.max_validations))
    return min(every, epochs)


def schedule(n_train: int, rule: Rule, n_all: int, factor: float = 1.0) -> dict:
    """``train.*`` overrides of one run with ``n_train`` images (0 = all ``n_all``).

    ``E = ceil(factor * max(min_epochs, ceil(min_steps / ceil(N / B))))`` epochs (an epoch has
    ``ceil(N / B)`` batches of ``min(B, N)``), x0.1 decays after :func:`boundaries`, the
    held-out / validation split evaluated every :func:`eval_interval` epochs and a checkpoint
    saved every ``max(1, E // 10)`` epochs (the evaluation is watched only), the last epoch
    reported.
    """
    n = n_train or n_all
    per_epoch = math.ceil(n / rule.batch_size)
    epochs = math.ceil(factor * max(rule.min_epochs, math.ceil(rule.min_steps / per_epoch)))
    return {
        # a training set smaller than a batch is one batch (invjax refuses a larger batch)
        "batch_size": min(rule.batch_size, n),
        "num_epochs": epochs,
        "lr_boundaries": boundaries(epochs, rule),
        "eval_every_epochs": eval_interval(epochs, rule),
        # a save every 10% of the run (and at its end, and on SIGTERM): at N_t = 20 a save per
        # epoch is a save per step (docs/many_models.md's profile: 45% of the steps' time)
        "checkpoint_every_epochs": max(1, epochs // 10),
        "select_best": False,
    }


def head_epochs(stream_epochs: int) -> int:
    """Phase 2's epochs: the streams' / 4 (the paper), at least 2."""
    return max(2, math.ceil(stream_epochs / 4))


def head_schedule(n_train: int, rule: Rule, n_all: int) -> dict:
    """Phase 2 of the two-phase networks: :func:`head_epochs` of the streams' epochs."""
    s = schedule(n_train, rule, n_all)
    epochs = head_epochs(s["num_epochs"])
    return s | {
        "num_epochs": epochs,
        "lr_boundaries": boundaries(epochs, rule),
        "eval_every_epochs": eval_interval(epochs, rule),
        "checkpoint_every_epochs": max(1, epochs // 10),
    }


PAPER_EPOCHS, PAPER_PRUNE_EPOCHS = 60, (5, 10)


def prune_epochs(num_epochs: int) -> tuple[int, int]:
    """The monomial pruning rule: after the same fractions of training as the paper's 5 and 10 of
    60 epochs, ``round(E * 5 / 60)`` and ``round(E * 10 / 60)`` (at least 1, and the second
    at least one epoch after the first): fixed epochs 5 and 10 would rank the pairs by a
    network that has learnt nothing yet where an epoch is one or two steps. The network's own
    rule (:func:`invjax.layers.ii.scaled_prune_epochs`) at ``scale = E / 60``."""
    return scaled_prune_epochs(PAPER_PRUNE_EPOCHS, num_epochs / PAPER_EPOCHS)


def tune_rule(study: Study, rule: Rule) -> Rule:
    """The rule of the tuning runs under main rule ``rule``: its batch and widths, the first
    rule's length (``study.tune_rule_fields``)."""
    first = study.first_rule
    return dataclasses.replace(rule, **{f: getattr(first, f) for f in study.tune_rule_fields})


def run_label(study: Study, n_train: int, rule: Rule | None = None) -> str:
    """A main run's directory name at ``n_train``: ``n<N_t>`` (``nall``) where ``rule`` trains
    the point as the first rule does (same schedule and widths), else with the rule's
    :meth:`Rule.tag`, e.g. ``n300_e300``. The runs of two rules then never share a directory,
    and a rule's runs that are identical to the first rule's are the same runs."""
    first = study.first_rule
    rule = rule or first
    base = f"n{n_train}" if n_train else "nall"
    same = schedule(n_train, rule, study.n_all) == schedule(n_train, first, study.n_all)
    if same and rule.width_divisor == first.width_divisor:
        return base
    return f"{base}_{rule.tag(first)}"


def family_label(study: Study, family: str, n_train: int, rule: Rule) -> str:
    """:func:`run_label` of ``family``'s runs: the SVM has no epochs, so every rule fits it as
    the first rule did and its runs keep their directories; a family with its own fixed
    recipe (:attr:`Family.rule`) trains every point one way: ``n<N_t>`` (``nall``)."""
    fam = study.families[family]
    if fam.rule is not None:
        return f"n{n_train}" if n_train else "nall"
    return run_label(study, n_train, rule if fam.stem is not None else study.first_rule)


def parse_label(study: Study, label: str, dataset: str | None = None) -> int | None:
    """N_t of a :func:`run_label` (the split's size on ``dataset`` for ``nall``,
    ``nall_e300``), None for others."""
    size = label.partition("_")[0]
    if size == "nall":
        return study.n_all_of(dataset)
    if size[:1] == "n" and size[1:].isdigit():
        return int(size[1:])
    return None


# ----------------------------------------------------------------------------- overrides


def _fmt_num(x: float) -> str:
    return f"{x:.3g}"


def n_tune_of(study: Study, family: str) -> int:
    """The training images of ``family``'s tuning runs (its own or the study's)."""
    own = study.families[family].tune_n_train
    return study.n_tune if own is None else own


def _grid(study: Study, family: str) -> tuple[list[float], list[float]]:
    """The base grid's learning rates and weight decays of a family that tunes."""
    fam = study.families[family]
    wds = list(fam.weight_decays or study.weight_decays)
    if fam.lr_values or study.lr_values:
        return [float(_fmt_num(v)) for v in fam.lr_values or study.lr_values], wds
    base = sweep.load_config(fam.stem, fam.overrides).train.learning_rate
    return [float(_fmt_num(base * f)) for f in study.lr_factors], wds


def _label(lr: float, wd: float) -> str:
    return f"lr{_fmt_num(lr)}_wd{wd:.0e}"


def _extended(lrs: list[float], wds: list[float], results: dict, times: int) -> list[float]:
    """``lrs`` extended past an edge where the choice lies, up to ``times`` steps: the next
    learning rate is ten times the one before the edge (1e-3, 3e-3, 1e-2, 3e-2 -> 0.1 -> 0.3;
    downwards a tenth of the one after it, -> 3e-4), each step only once every candidate so
    far has a row in ``results`` (label -> row), the choice by :func:`_best`."""
    lrs = sorted(lrs)
    for _ in range(times):
        cands = [(_label(lr, wd), lr) for lr in lrs for wd in wds]
        if len(lrs) < 2 or any(label not in results for label, _ in cands):
            break
        chosen = cands[_best([results[label] for label, _ in cands])][1]
        if chosen == lrs[-1]:
            lrs.append(float(_fmt_num(lrs[-2] * 10)))
        elif chosen == lrs[0]:
            lrs.insert(0, float(_fmt_num(lrs[1] / 10)))
        else:
            break
    return lrs


def _best(rows: Sequence[dict]) -> int:
    """The index of the winning tuning row: lowest held-out error of the last epoch; ties:
    lower held-out loss (the SVM has none), then the earlier one."""

    def key(i: int):
        loss = rows[i].get("val_loss")
        return (rows[i]["val_error"], loss if isinstance(loss, int | float) else 0.0, i)

    return min(range(len(rows)), key=key)


def candidates(study: Study, family: str, results: dict | None = None) -> list[tuple[str, dict]]:
    """The tuning candidates ``[(label, HPs)]`` of a family that tunes: its grid
    (:attr:`Family.lr_values` x :attr:`Family.weight_decays`), else the study's
    (``study.lr_values``, else ``study.lr_factors`` x the config's learning rate, each with
    every weight decay of ``study.weight_decays``). With :attr:`Family.extend_edges` and the
    finished candidates' rows (``results``: label -> row), a grid whose choice lies on its
    largest or smallest learning rate gains the next one past that edge (:func:`_extended`)."""
    fam = study.families[family]
    if fam.stem is None:
        return [(f"C{c:g}_g{g:g}", {"svm_C": c, "svm_gamma": g}) for c, g in study.svm_grid]
    lrs, wds = _grid(study, family)
    if fam.extend_edges:
        lrs = _extended(lrs, wds, results or {}, fam.extend_edges)
    return [(_label(lr, wd), {"learning_rate": lr, "weight_decay": wd}) for lr in lrs for wd in wds]


def data_overrides(study: Study, dataset: str, n_train: int, seed: int, tune: bool) -> dict:
    """The ``data.*`` and ``seed`` overrides of a run: realisation = seed for the main runs;
    the tuning runs on ``tune_realisation``'s 80:20 split of the training split (``n_train``
    of its 80 %); the dataset's own ``study.dataset_overrides`` in between."""
    d = {"data.name": dataset, "data.n_train": n_train, "seed": seed}
    d["data.realisation"] = study.tune_realisation if tune else seed
    d |= study.dataset_overrides.get(dataset, {})
    if tune:
        d |= {"data.val_source": "train", "data.val_fraction": study.val_fraction}
    return d


def _model_overrides(study: Study, family: str) -> dict:
    """The ``model.*`` overrides a family's network takes (also as a stream of another)."""
    return {k: v for k, v in study.families[family].overrides.items() if k.startswith("model.")}


def network_overrides(
    study: Study,
    family: str,
    dataset: str,
    n_train: int,
    seed: int,
    hps: dict,
    rule: Rule,
    tune: bool,
) -> dict:
    """All ``--config.*`` overrides of one network run.

    ``hps``: family -> ``{'learning_rate', 'weight_decay'}`` chosen (for the multi-stream
    families also their streams' families); the tuning stage passes the candidate under
    ``family`` itself. A tuning run trains for :func:`tune_rule`'s length whatever ``rule``;
    a family with its own recipe (:attr:`Family.rule`) for that recipe's, and a family that
    is not tuned (``tune='none'``) with its config's hyperparameters.
    """
    fam = study.families[family]
    n_eff = n_tune_of(study, family) if tune else n_train
    n_all = study.n_all_of(dataset)

    def rule_of(f: Family) -> Rule:
        r = f.rule or rule
        return tune_rule(study, r) if tune else r

    def validated(train: dict) -> dict:
        if tune and study.tune_validates_once:
            return train | {"eval_every_epochs": train["num_epochs"]}
        return train

    ov = data_overrides(study, dataset, n_train, seed, tune) | dict(fam.overrides)
    own = {} if fam.tune == "none" else hps[fam.hp_from or family]
    if fam.streams:
        config = sweep.load_config(fam.stem, {})
        for slot, slot_family in fam.streams:
            for k, v in _model_overrides(study, slot_family).items():
                ov[f"model.streams.{slot}.{k.removeprefix('model.')}"] = v
            star = float(config.model.streams[slot].get("width_divisor", 1.0) or 1.0)
            slot_rule = rule_of(study.families[slot_family])
            ov[f"model.streams.{slot}.width_divisor"] = star * slot_rule.width_divisor
            train = validated(schedule(n_eff, slot_rule, n_all) | hps[slot_family])
            ov.update({f"phase1.{slot}.train.{k}": v for k, v in train.items()})
        train = validated(head_schedule(n_eff, rule_of(fam), n_all) | own)
    else:
        rule = rule_of(fam)
        train = validated(schedule(n_eff, rule, n_all, fam.steps_factor) | own)
        if fam.stem in study.wrn_stems:
            ov["model.width_divisor"] = rule.width_divisor
        if fam.stem == study.mono_stem:
            ov["model.prune_epochs"] = prune_epochs(train["num_epochs"])
        if rule.bn_residual_limit is not None:
            ov |= bn_momentum_override(fam, train, n_eff or n_all, rule.bn_residual_limit)
    ov.update({f"train.{k}": v for k, v in train.items()})
    ov["precision"] = study.precision
    return ov


def bn_momentum_override(fam: Family, train: dict, n: int, limit: float) -> dict:
    """``{'model.bn_momentum': m}`` where the config's momentum (with the family's overrides)
    leaves more than ``limit`` of the running statistics' start after the run's steps
    (``num_epochs x ceil(n / batch)``), ``m`` the largest that does not; else ``{}``."""
    from invjax.training.experiment import bn_momentum_fitting

    model = sweep.load_config(fam.stem, fam.overrides).model
    momentum = model.get("bn_momentum")
    steps = train["num_epochs"] * math.ceil(n / train["batch_size"])
    if momentum is None or float(momentum) ** steps <= limit:
        return {}
    return {"model.bn_momentum": bn_momentum_fitting(steps, limit)}


def make_run(study: Study, family: str, workdir: str, ov: dict, point: tuple) -> sweep.Run:
    fam = study.families[family]
    dataset = ov.get("data.name")
    return sweep.Run(family, fam.config(dataset), ov, point, workdir, bool(fam.streams))


# ----------------------------------------------------------------------------- choices


def tuning_results(study: Study, rows: dict, dataset: str, family: str) -> dict[str, dict]:
    """label -> row of the family's finished tuning runs (``rows``: run path -> row), its
    candidates' rows only (an extended grid's included once planned)."""
    prefix = f"tune/{dataset}/{family}/"
    mine = {k[len(prefix) :]: r for k, r in rows.items() if k.startswith(prefix)}
    return {label: mine[label] for label, _ in candidates(study, family, mine) if label in mine}


def choose(study: Study, results: dict[str, dict], family: str) -> dict | None:
    """The winning candidate once all of the family's candidates finished (an extended grid's
    too), else None: lowest held-out error of the last epoch; ties: lower held-out loss (the
    SVM has none), then the earlier candidate in :func:`candidates`."""
    cands = candidates(study, family, results)
    if any(label not in results for label, _ in cands):
        return None
    i = _best([results[label] for label, _ in cands])
    label, hp = cands[i]
    return {"label": label, "hps": hp, "val_error": results[label]["val_error"]}


def chosen_hps(study: Study, rows: dict, dataset: str) -> dict:
    """family -> :func:`choose` for every tuning family of ``dataset`` that finished."""
    out = {}
    for family, fam in study.families.items():
        if fam.tune in ("inherit", "none") or dataset not in fam.datasets:
            continue
        c = choose(study, tuning_results(study, rows, dataset, family), family)
        if c is not None:
            out[family] = c
    return out


def main_errors(
    study: Study, rows: Sequence[dict], rule: Rule, sizes: Sequence[int] | None = None
) -> dict:
    """(dataset, family, N_t) -> {seed: row} of the finished main runs that ``rule`` trains
    (label :func:`family_label` ``(N_t, rule)``; other rules' runs are left out), at the N_t in
    ``sizes`` (None: every N_t), with a finite test error; sorted by path."""
    out: dict[tuple, dict] = {}
    for r in sorted(rows, key=lambda r: r["run"].split("/")):
        if r["stage"] != "main" or r["family"] not in study.families:
            continue
        n = parse_label(study, r["label"], r["dataset"])
        if n is None or r["label"] != family_label(
            study, r["family"], 0 if n == study.n_all_of(r["dataset"]) else n, rule
        ):
            continue
        if sizes is not None and n not in sizes:
            continue
        if math.isfinite(r.get("test_error") if r.get("test_error") is not None else math.nan):
            out.setdefault((r["dataset"], r["family"], n), {})[r["seed"]] = r
    return out


# ----------------------------------------------------------------------------- planning


def _tune_n(study: Study, family: str) -> int:
    """``data.n_train`` of ``family``'s tuning runs (0: all of the 80 %)."""
    own = study.families[family].tune_n_train
    return study.tune_n_train if own is None else own


def plan_tune(
    study: Study,
    runs_dir: str,
    dataset: str,
    families: Sequence[str],
    rule: Rule,
    chosen: dict,
    rows: dict | None = None,
):
    """The tuning runs of one dataset: ``(network runs, SVM fits, families waiting)``.

    Single-stream families with ``tune='own'`` first (cheap ones first, the order of
    ``families``); the heads of ``tune='head'`` families only once their streams' families
    have a choice in ``chosen`` (else they wait: listed in the third item), on those chosen
    runs (shared phase 1). ``rows`` (run path -> row): the record, which extends a grid whose
    choice lies on its edge (:attr:`Family.extend_edges`).
    """
    from invjax.training import plan

    runs, svm, waiting = [], [], []
    for family in families:
        fam = study.families[family]
        if dataset not in fam.datasets or fam.tune in ("inherit", "none"):
            continue
        if fam.tune == "head" and not all(f in chosen for _, f in fam.streams):
            waiting.append(family)
            continue
        base = os.path.join(runs_dir, "tune", dataset, family)
        point = []
        if fam.tune == "head":  # the chosen stream runs, so that phase 1 reuses them
            for _, f in fam.streams:
                label = chosen[f]["label"]
                ov = network_overrides(
                    study, f, dataset, _tune_n(study, f), 0, {f: chosen[f]["hps"]}, rule, True
                )
                wd = os.path.join(runs_dir, "tune", dataset, f, label)
                run = make_run(study, f, wd, ov, (dataset,))
                if all(r.workdir != run.workdir for r in point):
                    point.append(run)
        done = tuning_results(study, rows or {}, dataset, family)
        for label, hp in candidates(study, family, done):
            workdir = os.path.join(base, label)
            n_tune = _tune_n(study, family)
            if fam.stem is None:
                data = data_overrides(study, dataset, n_tune, 0, True)
                svm.append(data | hp | {"workdir": workdir})
                continue
            hps = {family: hp} | {f: chosen[f]["hps"] for _, f in fam.streams}
            ov = network_overrides(study, family, dataset, n_tune, 0, hps, rule, True)
            point.append(make_run(study, family, workdir, ov, (dataset, family)))
        if fam.tune == "head":
            sweep.share_streams(point, plan)
            point = [r for r in point if r.multi]  # the stream runs are the families' own
        runs += point
    return runs, svm, waiting


def plan_main(
    study: Study,
    runs_dir: str,
    dataset: str,
    families: Sequence[str],
    sizes: Sequence[int],
    seeds: Sequence[int],
    rule: Rule,
    chosen: dict,
):
    """The main runs of one dataset: ``(network runs, SVM fits, families without HPs)``.

    Ordered by N_t, then seed; within one point the single-stream runs first so that the
    multi-stream runs reuse them as phase 1 (:func:`launch.sweep.share_streams`): a two-phase
    family brings its stream families along, whether ``families`` names them or not. A family
    (or a stream of it) whose tuning is not finished is left out and named.
    """
    from invjax.training import plan

    def need(f: str) -> set[str]:
        fam = study.families[f]
        own = set() if fam.tune == "none" else {fam.hp_from or f}
        return own | {s for _, s in fam.streams}

    fams = [f for f in families if dataset in study.families[f].datasets]
    # A two-phase family's streams are planned with it (the finished ones are skipped), so that
    # phase 1 reuses their families' runs of the point instead of training private copies in
    # DIR/streams (which, on another device than the family's run, would differ from it).
    # (triple_std names wrn_std in all three slots: each family is planned once.)
    for family in list(fams):
        fams += [s for _, s in study.families[family].streams]
    fams = list(dict.fromkeys(fams))
    missing = [f for f in fams if not need(f) <= set(chosen)]
    fams = [f for f in fams if f not in missing]
    hps = {f: c["hps"] for f, c in chosen.items()}
    runs, svm = [], []
    for n in study.sizes_of(dataset, sizes):
        for seed in seeds:
            point = []
            for family in fams:
                only = study.families[family].points
                if only is not None and (dataset, n) not in only:
                    continue
                if seed not in study.seeds_of(family):
                    continue
                label = family_label(study, family, n, rule)
                workdir = os.path.join(runs_dir, "main", dataset, family, label, f"seed_{seed}")
                if study.families[family].stem is None:
                    data = data_overrides(study, dataset, n, seed, False)
                    svm.append(data | hps["svm"] | {"workdir": workdir})
                    continue
                ov = network_overrides(study, family, dataset, n, seed, hps, rule, False)
                point.append(make_run(study, family, workdir, ov, (dataset, n, seed)))
            point = [r for r in point if not r.multi] + [r for r in point if r.multi]
            sweep.share_streams(point, plan)
            runs += point
    return runs, svm, missing


def seeds_in_one(study: Study, runs: Sequence) -> list:
    """Group single-stream runs of one (dataset, family, N_t) over seeds into one K-model run
    (``--config.seeds``, workdir ``.../n<N_t>``); multi-stream runs stay as they are.

    Model k of the group uses realisation k (``--config.realisation_from_seed=True``), as the
    single runs do; refused (ValueError) if the config keys are missing or a run does not. A
    group stands where its first run stood, so that a point's seed groups come before the
    multi-stream runs that reuse them as phase 1."""
    from invjax.configs import base

    if "seeds" not in base.get_config():
        raise ValueError(
            "--seeds_in_one needs invjax.main's --config.seeds, which invjax/configs/base.py "
            "does not have: run without it"
        )
    groups: dict[tuple, list] = {}
    order: list = []  # a multi-stream run, or the key of a group where its first run stood
    for r in runs:
        if r.multi:
            order.append(r)
            continue
        key = (r.experiment, os.path.dirname(r.workdir))
        if key not in groups:
            order.append(key)
        groups.setdefault(key, []).append(r)
    out = []
    for item in order:
        if not isinstance(item, tuple):
            out.append(item)
            continue
        family, workdir = item
        rs = groups[item]
        ov = {k: v for k, v in rs[0].overrides.items() if k not in ("seed", "data.realisation")}
        if any(r.overrides.get("data.realisation") != r.overrides["seed"] for r in rs):
            raise ValueError(f"--seeds_in_one: {family}'s runs do not use realisation = seed")
        ov["seeds"] = tuple(r.overrides["seed"] for r in rs)
        ov["realisation_from_seed"] = True
        out.append(make_run(study, family, workdir, ov, rs[0].point[:2]))
    return out
