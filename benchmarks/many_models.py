"""K models in one program (``--config.seeds``) against K separate runs, whole processes.

    python benchmarks/many_models.py                                # digits_std, seeds 0,1,2
    python benchmarks/many_models.py --config=configs/digits_scale.py --n-train=100
    python benchmarks/many_models.py --platform=gpu --strategies=loop,vmap   # on a GPU
    python benchmarks/many_models.py --config=configs/digits_cnn.py --seeds=0,1,2,3 --repeat=3

Side by side in one invocation, each arm a fresh ``python -m invjax.main`` in its own workdir
with the persistent compilation cache off (every arm compiles what it needs, as a first run):

- ``separate``: K processes one after another, ``--config.seed=k`` each (what a study does);
- ``one/<strategy>``: one process, ``--config.seeds=k_1,...,k_K`` and ``seeds_strategy``.

``--per-step``: instead, in this process, the train step alone for the K models of the config:
'loop' (the one compiled step called once per model) against 'vmap' (one step over the stacked
models), each compiled first (time printed), then ``--steps`` timed steps of all K models after
two warm-up steps, on one fixed batch per model.

Prints each process's wall time as it ends (a run stopped by a time limit still reports), then
each arm's wall and CPU seconds (process start to exit; CPU = user + system, what the arm
computed, where a shared machine's wall time is mostly waiting for a core), the ratios
``one / separate`` of both (< 1: the one program is faster), and each seed's test error per
arm. ``--repeat=N`` runs the arms N times in turn (every other repetition in reverse order) and
prints medians: each ratio is taken within a repetition, whose arms ran next to each other, so
a drift in a shared machine's speed does not move it much. The 'loop' arm's errors equal the
separate runs' (the same compiled step); 'vmap''s up to float32 rounding (another summation
order). ``--json`` writes the figures. The machine this runs on may be shared: quote ratios,
measured side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLATFORMS = {"cpu": "cpu", "gpu": "cuda"}


def _run(args, workdir: str, extra: list[str]) -> float:
    cmd = [
        sys.executable,
        "-m",
        "invjax.main",
        f"--config={args.config}",
        f"--workdir={workdir}",
        "--compilation_cache=off",
        f"--config.data.n_train={args.n_train}",
        f"--config.train.num_epochs={args.epochs}",
        "--config.train.lr_boundaries=()",
        *args.override,
        *extra,
    ]
    env = dict(os.environ, JAX_PLATFORMS=PLATFORMS[args.platform])
    t, c = time.perf_counter(), _children_cpu()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
    wall, cpu = time.perf_counter() - t, _children_cpu() - c
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return wall, cpu


def _children_cpu() -> float:
    """User + system seconds of this process's finished children (the operating system's own
    accounting): on a machine shared with other jobs a process's wall time is mostly its wait
    for a core, its CPU time is its work."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _error(workdir: str) -> float:
    with open(os.path.join(workdir, "results.json")) as f:
        return float(json.load(f)["test_error"])


def _experiments(args, seeds) -> list:
    """The prepared experiments of the K models of ``args.config`` (``--per-step``)."""
    from invjax import compilation_cache, configs
    from invjax.training import many

    compilation_cache.enable("off")
    config = configs.load(os.path.join(REPO, args.config))
    config.data.n_train = args.n_train
    config.train.num_epochs = args.epochs
    config.train.lr_boundaries = ()
    for item in args.override:
        key, value = item.removeprefix("--config.").split("=", 1)
        *path, last = key.split(".")
        node = config
        for part in path:
            node = node[part]
        node[last] = type(node[last])(value) if node[last] is not None else value
    config.seeds = tuple(seeds)
    mplan = many.check(config, tempfile.mkdtemp(prefix="invjax-per-step-"))
    return [p.stages[0].experiment for p in mplan.plans]


def _time_steps(fn, state, steps: int) -> dict:
    """Compilation + first step, then ``steps`` timed steps after a warm-up step."""
    import jax

    t = time.perf_counter()
    state = fn(state)
    jax.block_until_ready(state)
    compile_s = time.perf_counter() - t
    state = fn(state)
    jax.block_until_ready(state)
    t = time.perf_counter()
    for _ in range(steps):
        state = fn(state)
    jax.block_until_ready(state)
    ms = 1000 * (time.perf_counter() - t) / steps
    return {"compile_and_first_s": compile_s, "ms_per_step_all_models": ms}


def per_step(args, seeds) -> dict:
    """ms per step of all K models, 'loop' against 'vmap' (module docstring)."""
    sys.path.insert(0, REPO)
    os.environ["JAX_PLATFORMS"] = PLATFORMS[args.platform]
    import jax
    import jax.numpy as jnp
    import numpy as np

    from invjax import parallel
    from invjax.training import lockstep
    from invjax.training.state import initial_state, state_factory
    from invjax.training.steps import with_stats

    exps = _experiments(args, seeds)
    shared = lockstep.SharedSteps(exps[0])
    states, batches = [], []
    for k, exp in zip(seeds, exps):
        make, trees = state_factory(
            exp.model, exp.tx, exp.dataset.image_shape, k, bool(exp.config.train.select_best)
        )
        states.append(initial_state(make, trees, parallel.replicated(exp.mesh)))
        b = exp.config.train.batch_size
        batches.append((exp.dataset.train.images[:b], exp.dataset.train.labels[:b]))
    out = {}

    steps = [
        with_stats(shared.train, shared.eval, e.dataset.mean, e.dataset.std, e.mesh)[0]
        for e in exps
    ]
    xs = [
        (parallel.shard_batch(x, e.mesh), parallel.shard_batch(y, e.mesh))
        for (x, y), e in zip(batches, exps)
    ]

    def run_loop(states):
        for k in range(len(states)):
            states[k], _ = steps[k](states[k], *xs[k])
        return states

    vstep, mesh = shared.vmapped(len(seeds))
    stacked_sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("model"))
    batch_sharding = jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec("model", parallel.DATA_AXIS)
    )
    vx = jax.device_put(np.stack([x for x, _ in batches]), batch_sharding)
    vy = jax.device_put(np.stack([y for _, y in batches]), batch_sharding)
    mean = jax.device_put(np.stack([e.dataset.mean for e in exps]), stacked_sharding)
    std = jax.device_put(np.stack([e.dataset.std for e in exps]), stacked_sharding)

    def run_vmap(stacked):
        stacked, _ = vstep(stacked, vx, vy, mean, std)
        return stacked

    stacked = jax.device_put(jax.tree.map(lambda *a: jnp.stack(a), *states), stacked_sharding)
    for name, fn, state in (("loop", run_loop, list(states)), ("vmap", run_vmap, stacked)):
        out[name] = _time_steps(fn, state, args.steps)
    print(
        f"{args.config}, K={len(seeds)}, batch {exps[0].config.train.batch_size} per model, "
        f"{jax.default_backend()} ({jax.device_count()} device(s)), {args.steps} timed steps"
    )
    for name, r in out.items():
        print(
            f"{name:<5} compile + first step {r['compile_and_first_s']:6.1f} s   "
            f"{r['ms_per_step_all_models']:8.1f} ms per step of all K models"
        )
    print(
        f"vmap / loop time per step: {out['vmap']['ms_per_step_all_models'] / out['loop']['ms_per_step_all_models']:.2f}"
    )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="configs/digits_std.py")
    ap.add_argument("--seeds", default="0,1,2", help="comma list: K models")
    ap.add_argument("--n-train", type=int, default=100, help="N_t of every run")
    ap.add_argument("--epochs", type=int, default=2, help="train.num_epochs of every run")
    ap.add_argument("--strategies", default="loop", help="comma list of loop, vmap")
    ap.add_argument("--platform", choices=sorted(PLATFORMS), default="cpu")
    ap.add_argument("--override", action="append", default=[], help="--config.KEY=VALUE")
    ap.add_argument("--json", default=None, help="write the figures here")
    ap.add_argument("--per-step", action="store_true", help="time the train step alone")
    ap.add_argument("--steps", type=int, default=5, help="timed steps (--per-step)")
    ap.add_argument(
        "--repeat", type=int, default=1, help="repetitions of the arms, in turn (medians)"
    )
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.per_step:
        out = per_step(args, seeds)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"args": vars(args), "per_step": out}, f, indent=2)
        return 0
    strategies = [s for s in args.strategies.split(",") if s]
    root = tempfile.mkdtemp(prefix="invjax-many-")
    names = ["separate", *(f"one/{s}" for s in strategies)]
    times: dict[str, dict[str, list[float]]] = {n: {"wall": [], "cpu": []} for n in names}
    errors: dict[str, dict] = {}
    for rep in range(args.repeat):
        # the arms in turn, the order reversed every other repetition, so that a drift in the
        # machine's speed falls on both sides of every ratio
        for name in names if rep % 2 == 0 else names[::-1]:
            wall, cpu, errors[name] = _arm(args, seeds, name, os.path.join(root, f"r{rep}"))
            times[name]["wall"].append(wall)
            times[name]["cpu"].append(cpu)
            print(f"repetition {rep + 1}: {name}: {wall:.1f} s wall, {cpu:.1f} s CPU", flush=True)
    _report(args, seeds, times, errors)
    return 0


def _arm(args, seeds, name: str, root: str) -> tuple[float, float, dict]:
    """One arm's wall and CPU seconds (its processes, start to exit) and each seed's test
    error."""
    if name == "separate":
        wall, cpu, errs = 0.0, 0.0, {}
        for k in seeds:
            wd = os.path.join(root, "separate", f"seed_{k}")
            w, c = _run(args, wd, [f"--config.seed={k}"])
            wall, cpu = wall + w, cpu + c
            errs[k] = _error(wd)
            # each process as it ends, so that a run stopped by a time limit still says something
            print(f"separate seed {k}: {w:.1f} s wall, {c:.1f} s CPU", flush=True)
        return wall, cpu, errs
    strategy = name.split("/", 1)[1]
    wd = os.path.join(root, f"one_{strategy}")
    extra = [
        f"--config.seeds={','.join(map(str, seeds))}",
        f"--config.seeds_strategy={strategy}",
    ]
    wall, cpu = _run(args, wd, extra)
    return wall, cpu, {k: _error(os.path.join(wd, f"seed_{k}")) for k in seeds}


def _report(args, seeds, times: dict, errors: dict) -> None:
    """Each arm's median wall and CPU seconds, and the medians of the ratios arm / separate
    taken repetition by repetition (the arms of one repetition ran next to each other)."""
    print(
        f"{args.config}, N_t={args.n_train}, {args.epochs} epochs, K={len(seeds)} (seeds "
        f"{args.seeds}), platform {args.platform}, compilation cache off, "
        f"{args.repeat} repetition(s), medians"
    )
    print(
        f"{'arm':<12} {'wall s':>8} {'arm/separate':>13} {'CPU s':>8} {'arm/separate':>13}  "
        "test errors %"
    )
    arms = {}
    for name, t in times.items():
        arm = {"test_errors": errors[name]}
        for kind in ("wall", "cpu"):
            base = times["separate"][kind]
            arm[f"{kind}_s"] = t[kind]
            arm[f"median_{kind}_s"] = statistics.median(t[kind])
            arm[f"{kind}_ratio"] = statistics.median(a / b for a, b in zip(t[kind], base))
        arms[name] = arm
        errs = " ".join(f"{errors[name][k]:.2f}" for k in seeds)
        print(
            f"{name:<12} {arm['median_wall_s']:8.1f} {arm['wall_ratio']:13.2f} "
            f"{arm['median_cpu_s']:8.1f} {arm['cpu_ratio']:13.2f}  {errs}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "arms": arms}, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
