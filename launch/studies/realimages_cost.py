"""The real-image study's cost model: what each run of the plan trains, its FLOPs and its hours.

    python -m launch.studies realimages flops --time-steps 3 --out docs/results/realimages/flops.json
    python -m launch.studies realimages power --flops docs/results/realimages/flops.json

The ``flops`` command measures every network the plan trains (:func:`flops_keys`): parameters,
XLA's GFLOP per image of a training step and of an evaluation and, with ``--time-steps``, this
machine's training images/s. A run is priced part by part (:func:`run_parts`: a two-phase arm's
head for phase 2's epochs, each private stream for all of them) and each part at its own
network's rate (:func:`run_cpu_seconds`); :func:`budget_rows` adds the runs each claim needs
that no earlier claim trained. The design itself (:data:`~launch.studies.realimages.ARMS`,
:data:`~launch.studies.realimages.CLAIMS`, the recipes) is :mod:`launch.studies.realimages`'s.
"""

from __future__ import annotations

import sys

from launch.studies.realimages import (
    ARMS,
    CLAIMS,
    DATASETS,
    ENSEMBLES,
    N_VAL,
    N_VAL_DEFAULT,
    REALISATIONS,
    RECIPES,
    STREAMS,
    arms_of,
    epochs_for,
    recipe,
)

# ``flops`` table: the ensembling controls' second and third streams, and the size control's
# three narrow streams (a key ending in STAR: that config with triple_star's width divisor, which
# the flops command measures as a network of its own: on the CPU such a stream's time does not
# fall with its FLOPs).
STAR = "_star"
PHASE1_EXTRA = {
    **{arm: (ARMS[s].config,) * 2 for arm, s in ENSEMBLES.items()},
    "triple_star": tuple(ARMS[s].config + STAR for s in STREAMS),
}


def flops_keys() -> list[str]:
    """Every network the budget prices: each arm's config and each private phase-1 stream."""
    keys = {a.config for a in ARMS.values()} | {k for ks in PHASE1_EXTRA.values() for k in ks}
    return sorted(keys)


def run_parts(arm: str, dataset: str, n_train: int) -> list[tuple[str, int]]:
    """The programs one run of ``arm`` trains, as ``(flops key, epochs)``: its own network for
    the family's epochs (at least its fewest steps) or, for a two-phase arm, its head for
    phase 2's share of them (:func:`launch.studies.plan.head_epochs`) and its private streams
    (:data:`PHASE1_EXTRA`) for all of them; triple's own streams are the single-stream arms' runs (same data and seed), trained
    once and not counted here."""
    a = ARMS[arm]
    epochs, batch, _, min_steps = RECIPES[a.family]
    epochs = epochs_for(n_train, epochs, batch, min_steps)
    if a.family != "M" or arm in STREAMS:
        return [(a.config, epochs)]
    from launch.studies.plan import head_epochs

    return [(a.config, head_epochs(epochs))] + [(k, epochs) for k in PHASE1_EXTRA.get(arm, ())]


def part_gflop(key: str, epochs: int, family: str, dataset: str, n_train: int, flops) -> float:
    """GFLOP of one program: ``epochs`` of training on ``n_train`` images, validation every
    :func:`~launch.studies.plan.eval_interval` epochs and one pass over the test set, at
    ``flops[key]``'s measured ``train`` and ``eval`` GFLOP per image (``flops`` command)."""
    from launch.studies.plan import eval_interval

    f = flops[key]
    n_val = N_VAL.get(dataset, N_VAL_DEFAULT)
    evals = epochs // eval_interval(epochs, recipe(family)) + 1
    return epochs * n_train * f["train"] + (evals * n_val + DATASETS[dataset].n_test) * f["eval"]


def run_gflop(arm: str, dataset: str, n_train: int, flops: dict) -> float:
    """GFLOP of one run: the sum over :func:`run_parts` of :func:`part_gflop`."""
    fam = ARMS[arm].family
    return sum(
        part_gflop(k, e, fam, dataset, n_train, flops) for k, e in run_parts(arm, dataset, n_train)
    )


def run_cpu_seconds(arm: str, dataset: str, n_train: int, flops: dict, default: float) -> float:
    """CPU seconds of one run: each part of :func:`run_parts` at its own network's rate
    (:func:`cpu_rate`), so that a head's fast step does not price the streams it trains."""
    fam = ARMS[arm].family
    return sum(
        part_gflop(k, e, fam, dataset, n_train, flops) / cpu_rate(flops, k, default)
        for k, e in run_parts(arm, dataset, n_train)
    )


def cpu_rate(flops: dict, key: str, default: float) -> float:
    """GFLOP/s of ``key``'s training on this machine: measured if the table has it."""
    f = flops[key]
    return f["train"] * f["images_per_s"] if f.get("images_per_s") else default


def budget_rows(flops: dict, cpu_gflops: float, gpu_tflops: float) -> list[dict]:
    """Per claim: the runs it adds (arms already trained for an earlier claim at the same
    dataset and N_t are not counted again), their GFLOP, and hours at the given rates. Where
    ``flops[key]`` holds a measured ``images_per_s`` (training on this machine), the CPU rate
    of that network is its measured GFLOP/s instead of ``cpu_gflops``."""
    seen, rows = set(), []
    for c in CLAIMS:
        new = [a for a in arms_of(c) if (a, c.dataset, c.n_train) not in seen]
        seen |= {(a, c.dataset, c.n_train) for a in new}
        g = REALISATIONS * sum(run_gflop(a, c.dataset, c.n_train, flops) for a in new)
        cpu_s = REALISATIONS * sum(
            run_cpu_seconds(a, c.dataset, c.n_train, flops, cpu_gflops) for a in new
        )
        rows.append(
            {
                "claim": c.id,
                "runs": REALISATIONS * len(new),
                "arms": new,
                "gflop": g,
                "cpu_hours": cpu_s / 3600,
                "gpu_hours": g / (gpu_tflops * 1e3) / 3600,
            }
        )
    return rows


def budget_markdown(rows: list[dict], cpu_gflops: float, gpu_tflops: float) -> str:
    out = [
        f"Budget on the CPU at each network's measured training rate (else {cpu_gflops:g} "
        f"GFLOP/s) and on a GPU at an assumed {gpu_tflops:g} TFLOP/s (arms shared between claims "
        "counted once):",
        "",
        "| claim | new runs | arms | PFLOP | CPU hours | GPU hours |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['claim']} | {r['runs']} | {', '.join(r['arms']) or '-'} "
            f"| {r['gflop'] / 1e6:.2f} | {r['cpu_hours']:.1f} | {r['gpu_hours']:.2f} |"
        )
    total = sum(r["gflop"] for r in rows)
    out.append(
        f"| all | {sum(r['runs'] for r in rows)} | | {total / 1e6:.2f} "
        f"| {sum(r['cpu_hours'] for r in rows):.1f} | {total / (gpu_tflops * 1e3) / 3600:.2f} |"
    )
    return "\n".join(out)


def measure_flops(configs: list[str], time_steps: int = 0, batch: int = 32) -> dict:
    """Parameters and XLA's count of GFLOP per image of one training step (forward, backward)
    and of one evaluation forward, for each config (a name ending in :data:`STAR`: that
    config's network as ``triple_star`` narrows it; compiled for a batch of 8); with
    ``time_steps`` also this machine's images/s of the training step at ``batch`` (the median of
    that many steps after one warm-up step)."""
    import importlib.util
    import statistics
    import time

    import jax
    import jax.numpy as jnp

    from invjax import models

    def load(name):
        spec = importlib.util.spec_from_file_location(name, f"configs/{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.get_config()

    out = {}
    for name in configs:
        if name.endswith(STAR):  # a stream as triple_star narrows it
            model = load(name.removesuffix(STAR)).model
            star = load(ARMS["triple_star"].config).model.streams.values()
            model.width_divisor = next(s.width_divisor for s in star if s.family == model.family)
        else:
            model = load(name).model
        net = models.build(model)
        x = jnp.zeros((8, 28, 28, 1), jnp.float32)
        rngs = {"params": jax.random.PRNGKey(0), "dropout": jax.random.PRNGKey(1)}
        variables = net.init(rngs, x, train=False)

        def loss(params, x, net=net, variables=variables):
            logits, _ = net.apply(
                {**variables, "params": params},
                x,
                train=True,
                rngs={"dropout": jax.random.PRNGKey(2)},
                mutable=["batch_stats"],
            )
            return logits.sum()

        def forward(params, x, net=net, variables=variables):
            return net.apply({**variables, "params": params}, x, train=False)

        def gflop(fn, variables=variables, x=x):
            cost = jax.jit(fn).lower(variables["params"], x).compile().cost_analysis()
            cost = cost[0] if isinstance(cost, list) else cost
            return float(cost["flops"]) / 8 / 1e9

        out[name] = {
            "params": int(sum(a.size for a in jax.tree.leaves(variables["params"]))),
            "train": gflop(jax.value_and_grad(loss)),
            "eval": gflop(forward),
        }
        if time_steps:
            step = jax.jit(jax.value_and_grad(loss))
            xb = jnp.zeros((batch, 28, 28, 1), jnp.float32)
            jax.block_until_ready(step(variables["params"], xb))
            times = []
            for _ in range(time_steps):
                t0 = time.perf_counter()
                jax.block_until_ready(step(variables["params"], xb))
                times.append(time.perf_counter() - t0)
            out[name]["images_per_s"] = batch / statistics.median(times)
        print(f"{name}: {out[name]}", file=sys.stderr, flush=True)
    return out
