"""Pilot of a training-length rule on the tuning split only (issue 19's longer rule for N_t >= 300).

    python launch/protocol_rule_pilot.py --min-epochs 300 [--families wrn_std,e2_ii]
        [--datasets rotscaled_digits] [--sizes 300,0] [--runs-dir /work/runs/pilot_long]
        [--out docs/results/protocol/rule_pilot] [--dry-run]

Each family trains with its chosen tuning HPs (read from ``docs/results/protocol/runs``) on the
data of the tuning runs: realisation 0, seed 0, the 80:20 split of the 1079 training digits
(``data.val_source='train'``), ``--sizes`` images of its 863 (0 = all 863), for the length that
:func:`study_protocol.schedule` gives the 863 images under ``--min-epochs``. No validation or
test digit is read, so the rule can be fixed on it before the main runs it governs. Prints one
JSON line per run with :func:`study_stats.convergence`'s verdict on its training curve, and
copies ``results.json`` and ``curve.json`` under ``--out/E<min_epochs>/``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import runpy
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
P = runpy.run_path(str(REPO / "launch" / "study_protocol.py"), run_name="rule_pilot_protocol")


def pilot_overrides(family: str, dataset: str, n_train: int, hps: dict, rule) -> dict:
    """The tuning run's data and HPs of ``family`` with ``n_train`` of the 863 images, trained
    for ``rule``'s length at 863 (``network_overrides`` keeps tuning runs at the first rule's)."""
    ov = P["network_overrides"](family, dataset, n_train, 0, hps, rule, True)
    return ov | {f"train.{k}": v for k, v in P["schedule"](P["N_TUNE"], rule).items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python launch/protocol_rule_pilot.py")
    p.add_argument("--min-epochs", type=int, required=True)
    p.add_argument("--families", default="wrn_std,e2_ii")
    p.add_argument("--datasets", default="rotscaled_digits")
    p.add_argument("--sizes", default="300,0", help="images of the 863 (0 = all)")
    p.add_argument("--runs-dir", default="runs/rule_pilot")
    p.add_argument("--out", default="docs/results/protocol/rule_pilot")
    p.add_argument("--record", default=str(REPO / "docs" / "results" / "protocol" / "runs"))
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args(argv)
    try:
        families = P["_names"](args.families, tuple(P["FAMILIES"]), "--families")
        datasets = P["_names"](args.datasets, P["DATASETS"], "--datasets")
        sizes = P["_ints"](
            args.sizes, "--sizes", lambda n: 0 <= n < P["N_TUNE"], "give 0..862 (0 = all 863)"
        )
        if args.min_epochs < 1:
            raise ValueError(f"--min-epochs={args.min_epochs} is invalid: it must be >= 1")
    except ValueError as e:
        p.error(str(e))
    rule = P["Rule"](min_epochs=args.min_epochs)
    tag = f"E{args.min_epochs}"
    for dataset in datasets:
        chosen = P["chosen_hps"]((args.record,), dataset)
        hps = {f: c["hps"] for f, c in chosen.items()}
        for family in families:
            if family not in hps:
                p.error(f"{family} has no tuning choice on {dataset} in {args.record}")
            for n in sizes:
                rel = os.path.join(tag, dataset, family, f"n{n}")
                wd = os.path.join(os.path.abspath(args.runs_dir), rel)
                run = P["_run"](family, wd, pilot_overrides(family, dataset, n, hps, rule), ())
                if args.dry_run:
                    print(run.command("python"))
                    continue
                if not os.path.isfile(os.path.join(wd, "results.json")):
                    subprocess.run(run.command(sys.executable), shell=True, check=False, cwd=REPO)
                r = P["run_record"](wd)
                if r is None:
                    print(json.dumps({"run": rel, "finished": False}), flush=True)
                    continue
                conv = r["convergence"]
                line = {"run": rel, "epochs": len(r["curve"]["train"])}
                line |= {"train_loss": r.get("train_loss"), "train_error": r.get("train_error")}
                line |= {"drop": conv.get("drop"), "converged": conv.get("converged")}
                print(json.dumps(line), flush=True)
    if not args.dry_run:  # the finished runs' results and curves, as the study's record keeps them
        P["sync"](os.path.abspath(args.runs_dir), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
