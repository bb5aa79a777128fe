"""Time to first step, first start vs second start (JAX's persistent compilation cache).

    python benchmarks/startup.py                                  # the default job, digits_triple
    python benchmarks/startup.py --config=configs/digits_e2.py

Runs ``python -m invjax.main`` on the config three times, each in a new workdir: with the cache
off, then twice with one fresh cache directory (a cold start that fills it, and a second start
of the same config that reads it: what a resume, another seed or another N_t does). Each run
trains on ``--n-train`` samples (100: a few steps per epoch; the shapes, and so the compiled
programs, are those of the full run). Prints, per run, the time from the training loop's start
to its first finished step (``first_step_s`` of every stage's ``results.json``: the state's
initialisation and the train step's compilation), summed over the stages of a two-phase job,
and the whole process's wall time; and the ratios cold / warm. ``--baseline DIR`` makes every run
in a second checkout too (a ``git worktree`` of an older commit), alternating with this one, and
prints the ratios baseline / this (before / after a change, side by side in one run).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(config: str, workdir: str, cache: str, n_train: int, extra, repo: str = REPO) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "invjax.main",
        f"--config={config}",
        f"--workdir={workdir}",
        f"--compilation_cache={cache}",
        f"--config.data.n_train={n_train}",
        *extra,
    ]
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=repo, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    firsts = []
    for path in sorted(glob.glob(os.path.join(workdir, "**", "results.json"), recursive=True)):
        with open(path) as f:
            r = json.load(f)
        if r.get("first_step_s") is not None and "phase1" not in r:
            firsts.append(r["first_step_s"])
    head = json.load(open(os.path.join(workdir, "results.json")))
    if head.get("first_step_s") is not None and "phase1" in head:
        firsts.append(head["first_step_s"])
    return {"first_steps_s": firsts, "first_step_s": sum(firsts), "process_s": wall}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="configs/digits_triple.py")
    ap.add_argument("--n-train", type=int, default=100)
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    ap.add_argument(
        "--warm-seed",
        type=int,
        default=None,
        help="the warm run trains this seed instead (another seed, same shapes, reads the cache)",
    )
    ap.add_argument(
        "--baseline",
        default=None,
        metavar="DIR",
        help="another checkout (e.g. a git worktree of an older commit): each run is made there "
        "too, alternating, with its own cache, and the ratios baseline / this are printed",
    )
    ap.add_argument("extra", nargs="*", help="more --config.KEY=VALUE overrides")
    args = ap.parse_args(argv)
    if args.baseline and not os.path.isfile(os.path.join(args.baseline, "invjax", "main.py")):
        raise SystemExit(
            f"--baseline={args.baseline!r} is not an invjax checkout (no invjax/main.py)"
        )
    sides = {"this": REPO} | ({"baseline": os.path.abspath(args.baseline)} if args.baseline else {})
    with tempfile.TemporaryDirectory() as tmp:
        rows = {side: {} for side in sides}
        for label in ("cache off", "cold cache", "warm cache"):
            for side in sorted(sides):  # the baseline first
                cache = "off" if label == "cache off" else os.path.join(tmp, side, "cache")
                extra = list(args.extra)
                if label == "warm cache" and args.warm_seed is not None:
                    extra.append(f"--config.seed={args.warm_seed}")
                workdir = os.path.join(tmp, side, label)
                r = run(args.config, workdir, cache, args.n_train, extra, sides[side])
                rows[side][label] = r
                print(
                    f"{side + ' ' if args.baseline else ''}{label:<11} first step "
                    f"{r['first_step_s']:7.1f} s ({', '.join(f'{v:.1f}' for v in r['first_steps_s'])})"
                    f"   process {r['process_s']:7.1f} s",
                    flush=True,
                )
    summary = summarise(rows, args.config)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": args.config, "runs": rows, **summary}, f)
    return 0


def summarise(rows: dict, config: str) -> dict:
    """Print and return the ratios: cold / warm start of this checkout, baseline / this."""
    cold, warm = rows["this"]["cold cache"], rows["this"]["warm cache"]
    ratio = cold["first_step_s"] / warm["first_step_s"]
    print(
        f"second start: first step {ratio:.1f}x sooner, process "
        f"{cold['process_s'] / warm['process_s']:.1f}x shorter ({config})"
    )
    out = {"first_step_ratio": ratio}
    if "baseline" in rows:
        out["baseline_over_this"] = {}
        for label, r in rows["this"].items():
            b = rows["baseline"][label]
            first, proc = b["first_step_s"] / r["first_step_s"], b["process_s"] / r["process_s"]
            out["baseline_over_this"][label] = {"first_step": first, "process": proc}
            print(f"baseline / this, {label}: first step {first:.2f}, process {proc:.2f}")
    return out


if __name__ == "__main__":
    raise SystemExit(main())
