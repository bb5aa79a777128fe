"""K models in one program (``--config.seeds``) against K separate runs, whole processes.

    python benchmarks/many_models.py                                # digits_std, seeds 0,1,2
    python benchmarks/many_models.py --config=configs/digits_scale.py --n-train=100
    python benchmarks/many_models.py --platform=gpu --strategies=loop,vmap   # on a GPU

Side by side in one invocation, each arm a fresh ``python -m invjax.main`` in its own workdir
with the persistent compilation cache off (every arm compiles what it needs, as a first run):

- ``separate``: K processes one after another, ``--config.seed=k`` each (what a study does);
- ``one/<strategy>``: one process, ``--config.seeds=k_1,...,k_K`` and ``seeds_strategy``.

``--per-step``: instead, in this process, the train step alone for the K models of the config:
'loop' (the one compiled step called once per model) against 'vmap' (one step over the stacked
models), each compiled first (time printed), then ``--steps`` timed steps of all K models after
two warm-up steps, on one fixed batch per model.

Prints each process's wall time as it ends (a run stopped by a time limit still reports), then
each arm's (process start to exit), the ratio ``separate / one`` (> 1: the one program is
faster), and each seed's test error per arm (the 'loop' arm equals the separate
runs up to float32 rounding; 'vmap' too, with a different summation order). ``--json`` writes
the figures. The machine this runs on may be shared: quote ratios, measured side by side.
"""

from __future__ import annotations

import argparse
import json
import os
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
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return wall


def _error(workdir: str) -> float:
    with open(os.path.join(workdir, "results.json")) as f:
        return float(json.load(f)["test_error"])


def per_step(args, seeds) -> dict:
    """ms per step of all K models, 'loop' against 'vmap' (module docstring)."""
    sys.path.insert(0, REPO)
    os.environ["JAX_PLATFORMS"] = PLATFORMS[args.platform]
    import jax
    import jax.numpy as jnp
    import numpy as np

    from invjax import compilation_cache, configs, parallel
    from invjax.training import lockstep, many
    from invjax.training.state import initial_state, state_factory
    from invjax.training.steps import with_stats

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
    exps = [p.stages[0].experiment for p in mplan.plans]
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

    for name, fn, state in (
        ("loop", run_loop, list(states)),
        (
            "vmap",
            run_vmap,
            jax.device_put(jax.tree.map(lambda *a: jnp.stack(a), *states), stacked_sharding),
        ),
    ):
        t = time.perf_counter()
        state = fn(state)
        jax.block_until_ready(state)
        compile_s = time.perf_counter() - t
        state = fn(state)
        jax.block_until_ready(state)
        t = time.perf_counter()
        for _ in range(args.steps):
            state = fn(state)
        jax.block_until_ready(state)
        ms = 1000 * (time.perf_counter() - t) / args.steps
        out[name] = {"compile_and_first_s": compile_s, "ms_per_step_all_models": ms}
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
    arms: dict[str, dict] = {}

    t = 0.0
    errors = {}
    for k in seeds:
        wd = os.path.join(root, "separate", f"seed_{k}")
        wall = _run(args, wd, [f"--config.seed={k}"])
        t += wall
        errors[k] = _error(wd)
        # each process as it ends, so that a run stopped by a time limit still says something
        print(f"separate seed {k}: {wall:.1f} s", flush=True)
    arms["separate"] = {"wall_s": t, "test_errors": errors}
    for strategy in strategies:
        wd = os.path.join(root, f"one_{strategy}")
        extra = [
            f"--config.seeds={','.join(map(str, seeds))}",
            f"--config.seeds_strategy={strategy}",
        ]
        wall = _run(args, wd, extra)
        errs = {k: _error(os.path.join(wd, f"seed_{k}")) for k in seeds}
        arms[f"one/{strategy}"] = {"wall_s": wall, "test_errors": errs}
        print(f"one/{strategy}: {wall:.1f} s", flush=True)

    base = arms["separate"]["wall_s"]
    print(
        f"{args.config}, N_t={args.n_train}, {args.epochs} epochs, K={len(seeds)} (seeds "
        f"{args.seeds}), platform {args.platform}, compilation cache off"
    )
    print(f"{'arm':<12} {'wall s':>8} {'separate/arm':>13}  test errors %")
    for name, arm in arms.items():
        ratio = base / arm["wall_s"]
        arm["speedup"] = ratio
        errs = " ".join(f"{arm['test_errors'][k]:.2f}" for k in seeds)
        print(f"{name:<12} {arm['wall_s']:8.1f} {ratio:13.2f}  {errs}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "arms": arms}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
