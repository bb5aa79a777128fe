"""The real-image study's own subcommands, ``power`` and ``flops``
(``python -m launch.studies realimages power|flops``): the plan's claims with what each test can
detect, the second family's realisations and budget from the record, and the FLOP table.

It reads the design from :mod:`launch.studies.realimages` (the first family) and
:mod:`launch.studies.realimages_second` (the second) and the cost model from
:mod:`launch.studies.realimages_cost`; none of them imports this module.
"""

from __future__ import annotations

import json
import math
import os

from launch.studies import power, realimages, realimages_cost, realimages_second

COMMANDS = ("power", "flops")
RECORD = "docs/results/realimages/runs.jsonl"


def add_commands(sub) -> None:
    """The study command's ``power`` and ``flops`` subcommands."""
    p = sub.add_parser("power", help="print the claims, their power and the budget")
    p.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    p.add_argument(
        "--realisations",
        type=int,
        default=realimages.REALISATIONS,
        help="pairs per claim (default %(default)s)",
    )
    p.add_argument("--flops", help="a JSON of GFLOP per image (the flops command): add the budget")
    p.add_argument("--cpu-gflops", type=float, default=20.0, help="CPU rate for the budget")
    p.add_argument("--gpu-tflops", type=float, default=10.0, help="GPU rate for the budget")
    p.add_argument(
        "--second",
        action="store_true",
        help="the second family's claims, power and budget, from the record's sds and times",
    )
    p.add_argument("--record", default=RECORD, help="the record --second reads")
    f = sub.add_parser("flops", help="measure GFLOP per image of every arm's network")
    f.add_argument("--out", required=True, help="JSON file to write")
    f.add_argument("--time-steps", type=int, default=0, help="also time this many train steps")
    f.add_argument("--batch", type=int, default=32, help="batch of the timed steps")


def command(args) -> int:
    """Run ``power`` or ``flops``; ValueError (before any work) names a bad value."""
    if args.command == "flops":
        return flops_command(args)
    if args.second:
        return second_command(args)
    return power_command(args)


def flops_command(args) -> int:
    """Measure every network's FLOPs (and rate) into ``args.out``."""
    if args.time_steps < 0 or args.batch < 1:
        raise ValueError(
            f"--time-steps={args.time_steps} / --batch={args.batch} is invalid: need >= 0 / >= 1"
        )
    where = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(where):
        raise ValueError(f"--out={args.out} is invalid: no directory {where}")
    cost = realimages_cost
    try:
        result = cost.measure_flops(cost.flops_keys(), args.time_steps, args.batch)
    except ValueError as e:  # while measuring: a failure, not a refusal
        raise RuntimeError(str(e)) from e
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=1, sort_keys=True)
        fh.write("\n")
    return 0


def read_flops(path: str) -> dict:
    """The ``flops`` command's JSON at ``path``; ValueError if unreadable or incomplete."""
    try:
        with open(path) as fh:
            flops = json.load(fh)
    except (OSError, ValueError) as e:
        raise ValueError(
            f"--flops={path} is invalid: cannot read a JSON of GFLOP per image ({e})"
        ) from None
    missing = sorted(set(realimages_cost.flops_keys()) - set(flops))
    if missing:
        raise ValueError(
            f"--flops={path} is invalid: it lacks the networks {missing} (the flops command "
            "measures them all)"
        )
    return flops


def power_command(args) -> int:
    """The first family's claims and power (and with ``--flops`` its budget)."""
    if args.realisations < 2:
        raise ValueError(f"--realisations={args.realisations} is invalid: a paired test needs >= 2")
    for name in ("cpu_gflops", "gpu_tflops"):
        v = getattr(args, name)
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"--{name.replace('_', '-')}={v} is invalid: expected a rate > 0")
    budget = None
    if args.flops:
        flops = read_flops(args.flops)
        budget = realimages_cost.budget_rows(flops, args.cpu_gflops, args.gpu_tflops)
    rows = realimages.power_rows(args.realisations)
    if args.json:
        doc = {"alpha": realimages.ALPHA, "realisations": args.realisations, "claims": rows}
        if budget is not None:
            doc["budget"] = budget
        print(json.dumps(doc))
        return 0
    print(power_markdown(rows, args.realisations))
    if budget is not None:
        print()
        print(realimages_cost.budget_markdown(budget, args.cpu_gflops, args.gpu_tflops))
    return 0


def power_markdown(rows: list[dict], realisations: int) -> str:
    """The first family's power table (:func:`launch.studies.realimages.power_rows`)."""
    m, alpha, target = len(realimages.CLAIMS), realimages.ALPHA, realimages.POWER
    out = [
        f"{m} claims, {realisations} realisations each, two-sided paired t-tests, Holm at "
        f"alpha = {alpha} (first level {alpha / m:.5f}). Minimum detectable effect (MDE) at power "
        f"{target}, in percentage points of test error:",
        "",
        "| claim | dataset | N_t | comparison | sd floor | sd assumed | MDE, Holm first | "
        "MDE, Holm last |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['claim']} | {r['dataset']} | {r['n_train']} | {r['comparison']} "
            f"| {r['sd_floor']:.2f} | {r['sd_assumed']:.2f} | {r['mde_first']:.2f} "
            f"| {r['mde_last']:.2f} |"
        )
    out += ["", "MDE / sd_d for other numbers of realisations (Holm first level, last level):", ""]
    for r in (6, 10, 16, 20):
        lo = power.minimum_detectable_effect(1.0, r, alpha / m, target)
        hi = power.minimum_detectable_effect(1.0, r, alpha, target)
        out.append(f"- R = {r}: {lo:.2f} sd_d, {hi:.2f} sd_d")
    return "\n".join(out)


def second_command(args) -> int:
    """The second family's plan: its claims' power from the record's observed sds, and its
    budget from the record's measured wall times."""
    from launch.studies import record

    if not os.path.isfile(args.record):
        raise ValueError(f"--record={args.record} is invalid: no such file")
    rows = record.read(args.record)
    power_rows = realimages_second.power_rows(rows)
    budget = realimages_second.budget_rows(rows)
    if args.json:
        print(
            json.dumps({"alpha": realimages_second.ALPHA, "claims": power_rows, "budget": budget})
        )
        return 0
    print(realimages_second.power_markdown(power_rows))
    print()
    print(realimages_second.budget_markdown(budget))
    return 0
