"""Training runs side by side on one CPU: shared cores against a core set per run.

    python benchmarks/cpu_slots.py --dataset fashion --family scale_ii [--slots 2] [--rounds 2]
        [--window 60] [--batch 64]

A study on a small CPU trains several runs at once (``python -m launch.studies ... run
--parallel P``). Each run is one XLA process whose thread pool, by default, spans every core, so
``P`` processes contend for all of them. This script measures whether giving each process its
own cores instead (Linux CPU affinity, which XLA sizes its thread pool by) trains more images
per second in all.

Each round starts ``--slots`` copies of ``benchmarks/throughput.py``'s measurement of one
network's train step (the real model, optimiser and step; a fixed batch, no input pipeline; the
compilation cache off) twice: ``shared`` (every process on every core) and ``pinned`` (the cores
split evenly between the processes). The copies of one arrangement compile and warm up, wait for
each other, then step together for ``--window`` seconds. Printed per round and arrangement: each
process's images/s and their sum; last, the median over the rounds of pinned / shared (> 1:
pinning trains more). The arrangements alternate, so a drift of the machine's speed falls on
both.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "throughput.py"
RESULT = "THROUGHPUT_RESULT "
ARRANGEMENTS = ("shared", "pinned")


def core_sets(cores: list[int], slots: int) -> list[list[int]]:
    """``cores`` split into ``slots`` contiguous groups as even as possible (the first ones
    larger); ValueError if there are fewer cores than slots."""
    if slots < 1 or slots > len(cores):
        raise ValueError(
            f"--slots={slots} is invalid: it must be between 1 and the {len(cores)} cores this "
            "process may use"
        )
    q, r = divmod(len(cores), slots)
    out, start = [], 0
    for k in range(slots):
        n = q + (k < r)
        out.append(cores[start : start + n])
        start += n
    return out


def run_side_by_side(case: dict, cpu_sets: list[list[int]] | None, slots: int) -> list[dict]:
    """``slots`` measurement processes of ``case`` at once, process ``k`` on ``cpu_sets[k]``
    (None: every core); their rows, in slot order."""
    env = dict(os.environ)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    with tempfile.TemporaryDirectory() as barrier:
        mine = {**case, "barrier": {"dir": barrier, "count": slots}}
        procs = []
        for k in range(slots):
            cores = None if cpu_sets is None else set(cpu_sets[k])
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(SCRIPT), "--case", json.dumps(mine)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    cwd=str(REPO),
                    env=env,
                    preexec_fn=(lambda c=cores: os.sched_setaffinity(0, c)) if cores else None,
                )
            )
        rows = []
        for p in procs:
            out, err = p.communicate()
            found = [x for x in out.splitlines() if x.startswith(RESULT)]
            if not found:
                tail = (err.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
                raise RuntimeError(f"a measurement process failed: {tail[:300]}")
            rows.append(json.loads(found[-1][len(RESULT) :]))
    return rows


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="fashion", help="a dataset of benchmarks/throughput.py")
    ap.add_argument("--family", default="scale_ii", help="a family of benchmarks/throughput.py")
    ap.add_argument("--slots", type=int, default=2, help="processes side by side")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--window", type=float, default=60.0, help="seconds each arrangement steps")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, default=None, help="default: the config's")
    ap.add_argument("--precision", default="highest")
    args = ap.parse_args(argv)
    for flag, value, low in (("--rounds", args.rounds, 1), ("--warmup", args.warmup, 0)):
        if value < low:
            raise ValueError(f"{flag}={value} is invalid: it must be an integer >= {low}")
    if not args.window > 0:
        raise ValueError(f"--window={args.window} is invalid: it must be > 0 seconds")
    if args.batch is not None and args.batch < 1:
        raise ValueError(f"--batch={args.batch} is invalid: it must be an integer >= 1")
    import runpy

    throughput = runpy.run_path(str(SCRIPT), run_name="throughput")
    if args.dataset not in throughput["DATASETS"]:
        raise ValueError(
            f"--dataset={args.dataset!r} is unknown: choose one of {throughput['DATASETS']}"
        )
    have = throughput["families_of"](args.dataset)
    if args.family not in have:
        raise ValueError(
            f"--family={args.family!r} has no config for --dataset={args.dataset}: "
            f"choose one of {list(have)}"
        )
    if args.precision not in throughput["PRECISIONS"]:
        raise ValueError(
            f"--precision={args.precision!r} is invalid: choose one of {throughput['PRECISIONS']}"
        )
    args.cpu_sets = core_sets(sorted(os.sched_getaffinity(0)), args.slots)
    return args


def main(argv=None) -> int:
    try:
        args = parse(argv)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    case = {
        "dataset": args.dataset,
        "family": args.family,
        "precision": args.precision,
        "scale_lowering": None,
        "batch": args.batch,
        "width_divisor": 1.0,
        "steps": 1,
        "warmup": args.warmup,
        "window_s": args.window,
    }
    print(
        f"{args.slots} processes of {args.dataset} {args.family} side by side, {args.window:g} s "
        f"of steps each; pinned core sets {args.cpu_sets}; load average before "
        f"{os.getloadavg()[0]:.2f}",
        flush=True,
    )
    print(f"{'round':>5s} {'arrangement':11s} {'images/s per process':>28s} {'sum':>9s}")
    ratios = []
    for r in range(args.rounds):
        order = ARRANGEMENTS if r % 2 == 0 else ARRANGEMENTS[::-1]
        total = {}
        for arrangement in order:
            sets = args.cpu_sets if arrangement == "pinned" else None
            rows = run_side_by_side(case, sets, args.slots)
            each = [row["images_per_s"] for row in rows]
            total[arrangement] = sum(each)
            shown = " ".join(f"{x:.1f}" for x in each)
            print(f"{r:5d} {arrangement:11s} {shown:>28s} {total[arrangement]:9.1f}", flush=True)
        ratios.append(total["pinned"] / total["shared"])
    print(
        f"pinned / shared, images/s summed over the processes: median "
        f"{statistics.median(ratios):.3f} over {len(ratios)} round(s) "
        f"({', '.join(f'{x:.3f}' for x in ratios)})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
