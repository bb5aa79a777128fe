"""A pilot of a training-length rule on the tuning split only, before the main runs it governs.

Each family trains with its chosen tuning hyperparameters (from the record) on the data of the
tuning runs: realisation ``tune_realisation``, seed 0, the 80:20 split of the training split
(``data.val_source='train'``), ``sizes`` images of its ``n_tune`` (0 = all), for the length that
:func:`launch.studies.plan.schedule` gives the ``n_tune`` images under the rule. No validation or
test image is read. Each finished pilot run lands in the record as ``pilot/E<min_epochs>/DATASET/
FAMILY/n<N>`` with the convergence verdict on its training curve; one JSON line per run is
printed. The digits study fixed its main rule (300 epochs) on this pilot.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Sequence

from invjax.run import RESULTS_FILE
from launch.studies import plan, record
from launch.studies.plan import Rule, Study

REPO = pathlib.Path(__file__).resolve().parents[2]  # the commands' configs/ are relative


def pilot_overrides(study: Study, family: str, dataset: str, n_train: int, hps, rule: Rule):
    """The tuning run's data and HPs of ``family`` with ``n_train`` of the ``n_tune`` images,
    trained for ``rule``'s length at ``n_tune`` (:func:`plan.network_overrides` keeps tuning
    runs at the first rule's)."""
    ov = plan.network_overrides(study, family, dataset, n_train, 0, hps, rule, True)
    sched = plan.schedule(study.n_tune, rule, study.n_all)
    return ov | {f"train.{k}": v for k, v in sched.items()}


def pilot(
    study: Study,
    rule: Rule,
    families: Sequence[str],
    datasets: Sequence[str],
    sizes: Sequence[int],
    runs_dir: str,
    record_path: str,
    dry_run: bool = False,
) -> int:
    """Train (or, with ``dry_run``, print) the pilot runs; 2 when a family has no tuning choice
    in the record (before any training), else 0."""
    rows = {r["run"]: r for r in record.read(record_path)}
    tag = f"E{rule.min_epochs}"
    todo = []
    for dataset in datasets:
        chosen = plan.chosen_hps(study, rows, dataset)
        for family in families:
            if family not in chosen:
                print(
                    f"invjax: error: {family} has no tuning choice on {dataset} in "
                    f"{record_path}: tune it first",
                    file=sys.stderr,
                )
                return 2
            hps = {f: c["hps"] for f, c in chosen.items()}
            for n in sizes:
                path = f"pilot/{tag}/{dataset}/{family}/n{n}"
                ov = pilot_overrides(study, family, dataset, n, hps, rule)
                wd = os.path.join(runs_dir, path)
                todo.append((path, wd, plan.make_run(study, family, wd, ov, ())))
    for path, wd, run in todo:
        if dry_run:
            print(("# finished: " if path in rows else "") + run.command("python"))
            continue
        if path not in rows and not os.path.isfile(os.path.join(wd, RESULTS_FILE)):
            subprocess.run(run.command(sys.executable), shell=True, check=False, cwd=REPO)
        row = rows.get(path) or record.row(path, wd, runs_dir)
        if row is None:
            print(json.dumps({"run": path, "finished": False}), flush=True)
            continue
        if path not in rows:
            record.append(record_path, [row])
            rows[path] = row
        conv = row["convergence"]
        line = {"run": path, "epochs": row.get("epochs"), "train_loss": row["train_loss"]}
        line |= {"train_error": row["train_error"], "drop": conv.get("drop")}
        print(json.dumps(line | {"converged": conv.get("converged")}), flush=True)
    return 0
