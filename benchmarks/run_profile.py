"""Where a study run's time goes: timers around every part of one real run, in this process.

    python benchmarks/run_profile.py                       # study's Scale-II WS stream, N_t 100
    python benchmarks/run_profile.py --family scale_iiws_disco --n-train 20 --steps 40
    python benchmarks/run_profile.py --seeds 0,1,2         # K models in one program

Builds the run exactly as ``launch/study.py`` does (its family overrides, ``schedule(N_t,
steps, batch)``, ``data.realisation = seed``, width divisor), with ``--steps`` optimiser steps
(the study uses 200; fewer keep the same per-epoch structure), and trains it through
``invjax.training.plan`` (or :mod:`invjax.training.many` with ``--seeds``) with the persistent
compilation cache off. Prints the wall time of each part: preparation (data, model check,
optimiser), state initialisation + first step (compilation), the train steps (time spent
waiting for them: dispatch and the consume that fetches each step's metrics), the epoch ends
(train record, validation), checkpoint saves, the final evaluation and the certificate, and
the rest (Python around them); and training images per second of the steps alone and of the
whole run. ``--eval-every`` / ``--checkpoint-every-epochs`` / ``--checkpoint-every-steps`` change those settings, for a
before/after comparison of the same run.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import os
import runpy
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

TIMED = {
    # _Loop method -> part of the run
    "consume": "train steps (waiting for each step's metrics)",
    "epoch_end": "epoch ends (records, validation)",
    "save": "checkpoint saves",
    "finish": "final evaluation, certificate, results",
}


def _study_config(args, seed: int | None, seeds):
    study = runpy.run_path(os.path.join(REPO, "launch", "study.py"), run_name="study_profile")
    from invjax import configs

    stem, extra = study["FAMILIES"][args.family]
    config = configs.load(os.path.join(REPO, "configs", f"{stem}.py"))
    overrides = {"data.name": args.dataset, "data.n_train": args.n_train, **extra}
    train = study["schedule"](args.n_train, args.steps, args.batch_size)
    if stem in study["WRN_STEMS"]:
        overrides["model.width_divisor"] = args.width_divisor
    if stem == study["MONO_STEM"]:
        overrides["model.prune_epochs"] = study["prune_epochs"](train["num_epochs"])
    overrides.update({f"train.{k}": v for k, v in train.items()})
    if args.eval_every is not None:
        overrides["train.eval_every_epochs"] = args.eval_every
    if args.checkpoint_every_epochs is not None:
        overrides["train.checkpoint_every_epochs"] = args.checkpoint_every_epochs
    if args.checkpoint_every_steps is not None:
        overrides["train.checkpoint_every_steps"] = args.checkpoint_every_steps
    for key, value in overrides.items():
        node = config
        *path, last = key.split(".")
        for p in path:
            node = node[p]
        node[last] = value
    if seeds:
        config.seeds = tuple(seeds)
        config.realisation_from_seed = True
        if args.strategy:
            config.seeds_strategy = args.strategy
    else:
        config.seed = seed
        config.data.realisation = seed
    return config, train


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", default="scale_iiws_disco")
    ap.add_argument("--dataset", default="scaled_digits")
    ap.add_argument("--n-train", type=int, default=100)
    ap.add_argument("--steps", type=int, default=40, help="the study uses 200")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--width-divisor", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", default=None, help="comma list: K models in one program")
    ap.add_argument("--strategy", default=None, help="loop or vmap (with --seeds)")
    ap.add_argument("--eval-every", type=int, default=None, help="train.eval_every_epochs")
    ap.add_argument("--checkpoint-every-steps", type=int, default=None)
    ap.add_argument("--checkpoint-every-epochs", type=int, default=None)
    args = ap.parse_args(argv)

    from invjax import compilation_cache

    compilation_cache.enable("off")
    from invjax.training import loop, many
    from invjax.training import plan as plan_lib

    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else None
    config, train = _study_config(args, args.seed, seeds)
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

    originals = {name: getattr(loop._Loop, name) for name in (*TIMED, "__init__", "certificate")}
    for name in TIMED:
        setattr(loop._Loop, name, timed(name, originals[name]))
    loop._Loop.__init__ = timed("__init__", originals["__init__"])
    loop._Loop.certificate = timed("certificate", originals["certificate"])
    workdir = tempfile.mkdtemp(prefix="invjax-profile-")
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(open(os.devnull, "w")):
        if seeds:
            mplan = many.check(config, workdir)
            t_prep = time.perf_counter() - t0
            summary = many.execute(mplan)
            results = list(summary["results"].values())
        else:
            p = plan_lib.check(config, workdir)
            t_prep = time.perf_counter() - t0
            results = [plan_lib.execute(p)]
    total = time.perf_counter() - t0
    first = sum(r["first_step_s"] or 0.0 for r in results)
    k = len(results)
    steps = sum(r["steps"] for r in results)
    images = steps * args.batch_size
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
        f"{-(-(args.n_train or 1079) // args.batch_size)} steps (batch {args.batch_size}), "
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
