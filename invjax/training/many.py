"""Many models of one config in one command: ``--config.seeds=0,1,2`` (docs/many_models.md).

``config.seeds = (k_1, ..., k_K)`` with ``K >= 2`` trains K independent models, model ``k`` in
``DIR/seed_<k>/`` exactly as ``python -m invjax.main ... --config.seed=k --workdir=DIR/seed_<k>``
would: its config is :func:`model_config` (the seed set, which through ``invjax/configs/base.py``'s
shared reference also draws ``data.seed``'s training subset; ``data.realisation = k`` too where
``config.realisation_from_seed``), so its ``config.json``, checkpoints, ``metrics.jsonl`` and
``results.json`` are those of that single run, and either command resumes the other's work.
Two-phase configs train each phase for all K models together (phase-1 streams in
``DIR/seed_<k>/streams/<stream>``, then the heads). One compiled step serves all K models
(:mod:`invjax.training.lockstep`, strategy ``config.seeds_strategy``: 'auto', 'loop', 'vmap').

``DIR/seeds.json`` summarises the command: each seed's ``test_error``, their mean and sample
std, the strategy and the wall time. ``invjax.main`` prints one ``seed=<k> test_error=X.XX%``
line per model and, last, ``test_error=X.XX%``: the **mean** over the models.

A single seed (``seeds=(k,)``) is the single run with ``seed=k`` in ``DIR`` itself, and
without ``seeds`` nothing changes (``realisation_from_seed`` aside, which sets
``data.realisation = seed`` for that run too).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import os
import time
from collections.abc import Callable

import jax

from invjax import checkpoint
from invjax import workdir as workdir_lib
from invjax.training import lockstep, memory
from invjax.training import plan as plan_lib
from invjax.training.experiment import with_sources
from invjax.training.optimizer import is_int

KEYS = ("seeds", "realisation_from_seed", "seeds_strategy")
SEED_DIR = workdir_lib.SEED_DIR
SUMMARY_FILE = workdir_lib.SEEDS_SUMMARY
STRATEGIES = ("auto", *lockstep.STRATEGIES)


def seeds_of(config) -> tuple[int, ...] | None:
    """``config.seeds`` checked (None when unset): ValueError naming the value otherwise."""
    seeds = config.get("seeds")
    if seeds is None:
        return None
    valid = "give distinct integers in [0, 2**31), e.g. --config.seeds=0,1,2"
    if isinstance(seeds, str | bytes) or not isinstance(seeds, tuple | list):
        raise ValueError(f"seeds={seeds!r} is invalid: {valid}")
    if not seeds:
        raise ValueError(f"seeds={tuple(seeds)!r} is empty: {valid}")
    for s in seeds:
        if not is_int(s) or not 0 <= s < 2**31:
            raise ValueError(f"seeds={tuple(seeds)!r} is invalid ({s!r}): {valid}")
    repeated = sorted({int(s) for s in seeds if list(seeds).count(s) > 1})
    if repeated:
        raise ValueError(f"seeds={tuple(seeds)!r} repeats {repeated}: {valid}")
    return tuple(int(s) for s in seeds)


def _check_keys(config) -> None:
    tie = config.get("realisation_from_seed")
    if tie is not None and not isinstance(tie, bool):
        raise ValueError(f"realisation_from_seed={tie!r} is invalid: True, False or None")
    if tie and "realisation" not in config.data:
        raise ValueError(
            f"realisation_from_seed=True but data {config.data.get('name')!r} has no "
            "data.realisation to set"
        )
    strategy = config.get("seeds_strategy")
    if strategy is not None and strategy not in STRATEGIES:
        raise ValueError(
            f"seeds_strategy={strategy!r} is invalid: choose one of {list(STRATEGIES)} (or None "
            "= 'auto')"
        )


def model_config(config, seed: int):
    """The single run's config of model ``seed``: ``seed`` set (a copy keeps
    invjax/configs/base.py's reference ``data.seed = seed``), ``data.realisation = seed`` where
    ``realisation_from_seed``, and this module's keys back to None."""
    c = copy.deepcopy(config)
    with c.unlocked():
        c.seed = seed
        if c.get("realisation_from_seed"):
            c.data.realisation = seed
        for key in KEYS:
            if key in c:
                c[key] = None
    return c


def model_record(record: dict, config, seed: int) -> dict:
    """The ``results.json`` record of ``invjax.main`` (config file, overrides) as the single
    run with ``seed`` would write it: ``seed`` (and ``data.realisation`` where tied) among the
    overrides, this module's keys not (so :mod:`invjax.report` groups it with single runs)."""
    if not record:
        return {}
    overrides = {k: v for k, v in record.get("overrides", {}).items() if k not in KEYS}
    overrides["seed"] = seed
    if config.get("realisation_from_seed"):
        overrides["data.realisation"] = seed
    return {**record, "overrides": dict(sorted(overrides.items()))}


def split(config):
    """``(seeds, config)``: seeds ``(k_1, ..., k_K)`` (K >= 2) for a many-model command, else
    ``(None, the single run's config)`` (``config`` itself when none of :data:`KEYS` is set).
    ValueError for a bad value, before anything is loaded."""
    seeds = seeds_of(config)
    _check_keys(config)
    plan_lib.check_seeds(config)
    if seeds is not None and len(seeds) >= 2:
        return seeds, config
    if seeds is None and all(config.get(k) is None for k in KEYS):
        return None, config
    return None, model_config(config, seeds[0] if seeds else config.seed)


@dataclasses.dataclass
class ManyPlan:
    """K checked plans (one per seed, each :func:`invjax.training.plan.check`'s) of one config."""

    config: object
    workdir: str
    seeds: tuple[int, ...]
    plans: list[plan_lib.Plan]
    strategy: str  # resolved: 'loop' or 'vmap'

    @property
    def phases(self) -> str:
        return self.plans[0].phases


def seed_workdir(workdir: str, seed: int) -> str:
    return os.path.join(workdir, SEED_DIR.format(seed))


def check(config, workdir: str) -> ManyPlan:
    """Every model's every stage checked and prepared before any compute (ValueError naming
    the first bad value); writes nothing."""
    seeds, config = split(config)
    if seeds is None:
        raise ValueError("config.seeds must name at least two seeds here")
    if checkpoint.read_config(workdir) is not None or checkpoint.list_steps(workdir):
        raise ValueError(
            f"--workdir={workdir} holds a single run's checkpoints: a run of several seeds "
            "writes DIR/seed_<k>/; choose a new --workdir"
        )
    strategy = lockstep.resolve(config.get("seeds_strategy"))
    first = plan_lib.check(model_config(config, seeds[0]), seed_workdir(workdir, seeds[0]))
    for stage in first.stages:  # K models like the first fit, before the others are prepared
        if stage.experiment is not None:
            memory.check(stage.experiment, len(seeds), vmapped=strategy == "vmap")
    plans = [first] + [
        plan_lib.check(model_config(config, k), seed_workdir(workdir, k)) for k in seeds[1:]
    ]
    return ManyPlan(config, workdir, seeds, plans, strategy)


def checkpoint_bytes(mplan: ManyPlan) -> int:
    """Room the K models' checkpoints need at once (each model keeps its own)."""
    return sum(plan_lib.checkpoint_bytes(p) for p in mplan.plans)


def workdirs(mplan: ManyPlan) -> list[str]:
    return [mplan.workdir] + [w for p in mplan.plans for w in plan_lib.workdirs(p)]


def describe(mplan: ManyPlan, describe_plan: Callable) -> str:
    """What ``--dry_run`` prints: the command, then each model's plan (``describe_plan``)."""
    lines = [
        f"dry run: {len(mplan.seeds)} models (seeds {', '.join(map(str, mplan.seeds))}) of one "
        f"config in one program, strategy {mplan.strategy!r} on {jax.default_backend()}; "
        "nothing computed"
    ]
    for k, p in zip(mplan.seeds, mplan.plans):
        lines += [f"seed {k} in {p.workdir}:", describe_plan(p)]
    return "\n".join(lines)


def _say(message: str) -> None:
    if jax.process_index() == 0:
        print(message, flush=True)


def execute(mplan: ManyPlan, say: Callable[[str], None] = _say, record: dict | None = None):
    """Train every stage of the K models (reusing finished ones), write each model's results
    and ``DIR/seeds.json``; returns the summary (``results``: seed -> that model's results)."""
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if jax.process_index() == 0:
            stack.enter_context(workdir_lib.locked(workdirs(mplan)))
        say(
            f"{len(mplan.seeds)} models (seeds {', '.join(map(str, mplan.seeds))}) in one "
            f"program: strategy {mplan.strategy!r}, {jax.device_count()} device(s) "
            f"({jax.default_backend()}), in {mplan.workdir}/seed_<k>/"
        )
        results = _execute(mplan, say, dict(record or {}))
        return _summarise(mplan, results, time.perf_counter() - t0)


def _execute(mplan: ManyPlan, say, record: dict) -> list[dict]:
    n = len(mplan.plans[0].stages)
    for i in range(n):
        stages = [p.stages[i] for p in mplan.plans]
        label = f"[{i + 1}/{n}] {stages[0].label}" if n > 1 else stages[0].label
        todo = [s for s in stages if s.results is None]
        for k, s in zip(mplan.seeds, stages):
            if s.results is not None:
                say(f"{label}, seed {k}: finished before, reused (test_error={_error(s.results)})")
        if not todo:
            continue
        exps = []
        for s in todo:
            try:  # phase 2's sources, which phase 1 has just written
                exps.append(with_sources(s.experiment))
            except ValueError as e:
                raise plan_lib.StageError(f"{s.label} in {s.workdir} cannot start: {e}") from e
        say(f"{label}: {len(todo)} model(s) in {', '.join(s.workdir for s in todo)}")
        seeds = [k for k, s in zip(mplan.seeds, stages) if s.results is None]
        for k, s, r in zip(seeds, todo, lockstep.run(exps, mplan.strategy, say)):
            s.results, s.experiment = r, None
            mine = model_record(record, mplan.config, k)
            if mine and (mplan.phases != "two_phase" or s.name != "head"):
                if "config_file" not in r:  # as invjax.training.plan.execute writes them
                    r.update(mine, **({"stream": s.name} if s.name != "run" else {}))
                    plan_lib._write_results(s.workdir, r)
    out = []
    for k, p in zip(mplan.seeds, mplan.plans):
        if p.phases == "two_phase":
            out.append(plan_lib._combine(p, model_record(record, mplan.config, k)))
        else:
            out.append(p.stages[0].results)
    return out


def _error(results) -> str:
    e = results.get("test_error")
    return f"{e:.2f}%" if isinstance(e, int | float) and math.isfinite(e) else "n/a"


def _summarise(mplan: ManyPlan, results: list[dict], wall: float) -> dict:
    errors = [float(r["test_error"]) for r in results]
    mean = sum(errors) / len(errors)
    std = math.sqrt(sum((e - mean) ** 2 for e in errors) / (len(errors) - 1))
    summary = {
        "seeds": list(mplan.seeds),
        "test_error": mean,  # the mean over the models: the command's last output line
        "test_error_std": std,
        "test_errors": {str(k): e for k, e in zip(mplan.seeds, errors)},
        "workdirs": {str(k): p.workdir for k, p in zip(mplan.seeds, mplan.plans)},
        "strategy": mplan.strategy,
        "phases": mplan.phases,
        "backend": jax.default_backend(),
        "devices": jax.device_count(),
        "wall_time_s": wall,  # this command's (resumed or reused work not included)
    }
    if jax.process_index() == 0:
        workdir_lib.write_json_atomic(os.path.join(mplan.workdir, SUMMARY_FILE), summary)
    summary["results"] = dict(zip(mplan.seeds, results))
    return summary
