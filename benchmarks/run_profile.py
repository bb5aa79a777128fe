"""Where a study run's time goes: timers around every part of one real run, in this process.

    python benchmarks/run_profile.py                       # digits study's Scale-II WS, N_t 100
    python benchmarks/run_profile.py --family scale_iiws_disco --n_train 20 --steps 40
    python benchmarks/run_profile.py --seeds 0,1,2         # K models in one program

Builds the run as the digits study does (``python -m launch.studies digits run``): the family of
:data:`launch.studies.digits.STUDY`, its config overrides and training length from
:func:`launch.studies.plan.network_overrides` under a :class:`~launch.studies.plan.Rule` of
``--steps`` (``min_steps``), ``--min_epochs``, ``--batch_size`` and ``--width_divisor`` (the
study's main rule: 600 steps, 300 epochs; fewer keep the same per-epoch structure), ``data.realisation
= seed``, ``precision='highest'``. The learning rate and weight decay are the config's own (the
study's tuned values change the arithmetic, not the work). The run trains through
``invjax.training.plan`` (or :mod:`invjax.training.many` with ``--seeds``) with the persistent
compilation cache off. Prints the wall time of each part: preparation (data, model check,
optimiser), state initialisation + first step (compilation), the train steps (time spent
waiting for them: dispatch and the consume that fetches each step's metrics), the epoch ends
(train record, validation), checkpoint saves, the final evaluation and the certificate, and
the rest (Python around them); and training images per second of the steps alone and of the
whole run. ``--eval_every`` / ``--checkpoint_every_epochs`` / ``--checkpoint_every_steps``
change those settings, for a before/after comparison of the same run.

Exit status: 0 done; 2 refused before any compute, 1 failed while running (one ``invjax: error:``
line each).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import os
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from launch import sweep  # noqa: E402  (the repository root on the path first)
from launch.studies import plan as study_plan  # noqa: E402
from launch.studies.digits import STUDY  # noqa: E402

TIMED = {
    # Trainer method -> part of the run
    "consume": "train steps (waiting for each step's metrics)",
    "epoch_end": "epoch ends (records, validation)",
    "save": "checkpoint saves",
    "finish": "final evaluation, certificate, results",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, the house's prefix, exit 2
        print(f"invjax: error: {message}", file=sys.stderr)
        sys.exit(2)


def _network_families() -> list[str]:
    return [f for f, fam in STUDY.families.items() if fam.stem is not None]


def _study_config(args, seeds):
    """The config of the run and its ``train.*`` schedule; ValueError names a bad value."""
    valid = _network_families()
    if args.family not in valid:
        raise ValueError(f"--family={args.family!r} is invalid: choose from {valid}")
    fam = STUDY.families[args.family]
    if args.dataset not in fam.datasets:
        raise ValueError(
            f"--dataset={args.dataset!r} is invalid for {args.family}: choose from "
            f"{list(fam.datasets)}"
        )
    if not 0 <= args.n_train <= STUDY.n_all:
        raise ValueError(f"--n_train={args.n_train} is invalid: 0 (all) to {STUDY.n_all}")
    for name in ("steps", "batch_size"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name}={getattr(args, name)} is invalid: at least 1")
    if args.eval_every is not None and args.eval_every < 1:
        raise ValueError(f"--eval_every={args.eval_every} is invalid: at least 1")
    if args.min_epochs < 2:  # one x0.1 decay needs an epoch on each side of it
        raise ValueError(f"--min_epochs={args.min_epochs} is invalid: at least 2")
    if not args.width_divisor > 0:
        raise ValueError(f"--width_divisor={args.width_divisor} is invalid: above 0")
    rule = study_plan.Rule(
        min_steps=args.steps,
        min_epochs=args.min_epochs,
        batch_size=args.batch_size,
        width_divisor=args.width_divisor,
        eval_every=args.eval_every or 0,
    )
    # every family the run takes hyperparameters from (its own, or its streams')
    needed = {fam.hp_from or args.family} | {f for _, f in fam.streams}
    hps = {}
    for f in needed:
        other = STUDY.families[f]
        recipe = sweep.load_config(other.config(args.dataset), other.overrides).train
        hps[f] = {"learning_rate": recipe.learning_rate, "weight_decay": recipe.weight_decay}
    seed = seeds[0] if seeds else args.seed
    overrides = study_plan.network_overrides(
        STUDY, args.family, args.dataset, args.n_train, seed, hps, rule, tune=False
    )
    if args.checkpoint_every_epochs is not None:
        overrides["train.checkpoint_every_epochs"] = args.checkpoint_every_epochs
    if args.checkpoint_every_steps is not None:
        overrides["train.checkpoint_every_steps"] = args.checkpoint_every_steps
    if seeds:  # as plan.seeds_in_one groups a point's seeds: model k on realisation k
        for key in ("seed", "data.realisation"):
            overrides.pop(key)
        overrides["seeds"] = tuple(seeds)
        overrides["realisation_from_seed"] = True
        if args.strategy:
            overrides["seeds_strategy"] = args.strategy
    config = sweep.load_config(fam.config(args.dataset), overrides)
    train = {k.removeprefix("train."): v for k, v in overrides.items() if k.startswith("train.")}
    return config, train


def _parse(argv):
    """The arguments, the seeds and the study's run: ``(args, seeds, config, train)``."""
    ap = _Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", default="scale_iiws_disco", help="a network of the digits study")
    ap.add_argument("--dataset", default="scaled_digits")
    ap.add_argument("--n_train", type=int, default=100, help="0: all 1079")
    ap.add_argument("--steps", type=int, default=40, help="the rule's min_steps (study: 600)")
    ap.add_argument("--min_epochs", type=int, default=2, help="the rule's (study: 300)")
    ap.add_argument("--batch_size", type=int, default=64)
    ap.add_argument("--width_divisor", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", default=None, help="comma list: K models in one program")
    ap.add_argument("--strategy", default=None, choices=("loop", "vmap"), help="with --seeds")
    ap.add_argument("--eval_every", type=int, default=None, help="train.eval_every_epochs")
    ap.add_argument("--checkpoint_every_steps", type=int, default=None)
    ap.add_argument("--checkpoint_every_epochs", type=int, default=None)
    args = ap.parse_args(argv)
    try:
        seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else None
    except ValueError:
        ap.error(f"--seeds={args.seeds!r} is invalid: a comma list of integers")
    if seeds is not None and len(seeds) < 2:
        ap.error(f"--seeds={args.seeds!r} is invalid: at least two seeds (else --seed)")
    if args.strategy and not seeds:
        ap.error("--strategy needs --seeds")
    try:
        config, train = _study_config(args, seeds)
    except ValueError as e:
        ap.error(str(e))
    return args, seeds, config, train


def _report(args, config, train, results, spent, calls, t_prep: float, total: float) -> None:
    """Each part's seconds and share of the run, the calls and the images per second."""
    first = sum(r["first_step_s"] or 0.0 for r in results)
    k = len(results)
    steps = sum(r["steps"] for r in results)
    images = steps * train["batch_size"]
    parts = [
        ("preparation (data, model check, optimiser)", t_prep),
        ("loop set-up (state init, checkpoint manager)", spent["__init__"]),
        ("first step: compilation + first update (all models)", None),
        *((label, spent[name]) for name, label in TIMED.items() if name != "finish"),
        ("final evaluation + results", spent["finish"] - spent["certificate"]),
        ("certificate", spent["certificate"]),
    ]
    accounted = t_prep + sum(spent[n] for n in (*TIMED, "__init__"))
    print(
        f"{args.family} on {args.dataset}, N_t={args.n_train}, {train['num_epochs']} epochs x "
        f"{-(-(args.n_train or STUDY.n_all) // train['batch_size'])} steps "
        f"(batch {train['batch_size']}), "
        f"eval every {config.train.eval_every_epochs} epochs, checkpoint every "
        f"{config.train.checkpoint_every_epochs} epoch(s)"
        f"; {k} model(s); total {total:.1f} s"
    )
    for label, s in parts:
        if s is None:
            print(f"  {label:<56} {first:7.1f} s (first_step_s, inside the parts below)")
        else:
            print(f"  {label:<56} {s:7.1f} s  {100 * s / total:5.1f}%")
    print(f"  {'rest (Python around the steps, dispatch)':<56} {total - accounted:7.1f} s")
    print(f"  calls: {dict(calls)}")
    print(
        f"  images/s: whole run {images / total:.1f}; steps alone "
        f"{images / max(spent['consume'] + total - accounted, 1e-9):.1f}"
    )


def main(argv=None) -> int:
    args, seeds, config, train = _parse(argv)
    from invjax import compilation_cache

    compilation_cache.enable("off")
    from invjax.training import loop, many
    from invjax.training import plan as plan_lib

    spent: dict[str, float] = collections.defaultdict(float)
    calls: dict[str, int] = collections.Counter()

    def timed(name, fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[name] += time.perf_counter() - t
                calls[name] += 1

        return wrapper

    originals = {name: getattr(loop.Trainer, name) for name in (*TIMED, "__init__", "certificate")}
    for name in TIMED:
        setattr(loop.Trainer, name, timed(name, originals[name]))
    loop.Trainer.__init__ = timed("__init__", originals["__init__"])
    loop.Trainer.certificate = timed("certificate", originals["certificate"])
    workdir = tempfile.mkdtemp(prefix="invjax-profile-")
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(open(os.devnull, "w")):
        try:  # bad input found while preparing: refused before any compute
            prepared = many.check(config, workdir) if seeds else plan_lib.check(config, workdir)
        except ValueError as e:
            print(f"invjax: error: {e}", file=sys.stderr)
            return 2
        t_prep = time.perf_counter() - t0
        try:
            if seeds:
                results = list(many.execute(prepared)["results"].values())
            else:
                results = [plan_lib.execute(prepared)]
        except Exception as e:  # noqa: BLE001  (one line for the user, whatever failed)
            print(f"invjax: error: the run failed: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
    total = time.perf_counter() - t0
    _report(args, config, train, results, spent, calls, t_prep, total)
    return 0


if __name__ == "__main__":
    sys.exit(main())
