"""Invariance error, speed and memory per precision (invjax.precision), side by side in one run.

    python benchmarks/precision.py                       # E(2) layer stacks, every precision
    python benchmarks/precision.py --layers=false --config=configs/svhn_e2_ii.py \
        --width-divisor=4 --batch=16                     # a whole network: logits + train step
    python benchmarks/precision.py --layers=false --config=configs/cifar10_e2_ii.py \
        --batch=128 --measure=memory                     # peak memory of one train step only

For each precision of ``--precisions`` (default: :data:`invjax.precision.PRECISIONS`; on a CPU
add the emulations of a fast format, e.g. ``default@tf32,exact_fast@tf32``), the modules are
built in that arithmetic (their ``precision`` attribute, :func:`invjax.precision.configure`):

* layers: a stack ``E2LiftConv -> E2Conv -> E2Conv`` (D4 with 3x3 kernels, D8 with 5x5, stride
  1, 32x32 real photos) and its equivariance error ``max_g max_n ||f(g x) - g f(x)|| / ||f(x)||``
  over the exact elements (90-degree rotations, flips), its forward+backward time and the
  images/s that time allows;
* ``--config``: the network's logits, ``max_g max_n ||f(g x) - f(x)|| / ||f(x)||`` over the
  exact elements of D4 (eval mode, fresh initialisation, 8 photos), the time to compile and run
  its first train step, its train-step time (images/s) and the memory of one train step as
  XLA's buffer assignment states it (:func:`peak_bytes`: arguments + outputs + temporaries -
  aliased, from ``compiled.memory_analysis()``; ``--measure`` picks among ``error,step,memory``).

Times are medians of ``--reps`` runs after compilation, precisions interleaved so that a busy
machine affects them alike; ratios are to ``highest``. Prints a table, or JSON with ``--json``.
On a CPU the emulated modes time the emulation (extra rounding and passes in float32), not a
fast format: their errors are the point there, not their speed.
"""

from __future__ import annotations

import argparse
import json
import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from invjax import groups as G
from invjax import precision as P
from invjax.equivariance import relative_error

D4 = G.dihedral(4)
EXACT_ELEMENTS = {  # the non-identity elements of D4, by index (f * 4 + r)
    "rot90": 1,
    "rot180": 2,
    "rot270": 3,
    "flip": 4,
    "flip_rot90": 5,
    "flip_rot180": 6,
    "flip_rot270": 7,
}


def photos(n: int, size: int = 32) -> np.ndarray:
    """``n`` different ``size x size`` RGB crops of scikit-image photos, float32 in [0, 1]."""
    import skimage.data

    srcs = [skimage.data.astronaut(), skimage.data.chelsea(), skimage.data.coffee()]
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        img = srcs[i % len(srcs)]
        r, c = rng.integers(0, img.shape[0] - 2 * size), rng.integers(0, img.shape[1] - 2 * size)
        out.append(img[r : r + 2 * size : 2, c : c + 2 * size : 2])
    return np.stack(out).astype(np.float32) / 255.0


def _rel(a, b) -> float:
    """Largest per-sample relative L2 difference, in float64 (the library's one measure)."""
    return relative_error(a, b, per_sample=True)


def _median_time(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def layer_stack(group: str, k: int, fields: int, precision: str | None = None):
    from flax import linen as nn

    from invjax.layers.e2 import E2Conv, E2LiftConv

    class Stack(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(E2LiftConv(fields, group, k, precision=precision)(x))
            x = nn.relu(E2Conv(fields, group, k, precision=precision)(x))
            return E2Conv(fields, group, k, precision=precision)(x)

    return Stack()


def peak_bytes(compiled) -> int | None:
    """Memory one call of a compiled program allocates, as XLA's buffer assignment states it:
    arguments + outputs + the temporary arena - aliased (donated) bytes (None: not reported).

    Not ``peak_memory_in_bytes``: on CPU (jax 0.10) it counts arguments and outputs only."""
    m = compiled.memory_analysis()
    if m is None:
        return None
    return int(
        m.argument_size_in_bytes
        + m.output_size_in_bytes
        + m.temp_size_in_bytes
        - m.alias_size_in_bytes
    )


def _emit(row: dict) -> dict:
    print("row " + json.dumps(row), flush=True)  # as soon as measured: a killed run keeps it
    return row


def bench_layers(precisions, batch: int, reps: int) -> list[dict]:
    x = jnp.asarray(photos(batch))
    rows = []
    for group, k, fields in (("D4", 3, 32), ("D8", 5, 16)):
        g = G.parse_group(group)
        variables = layer_stack(group, k, fields).init(jax.random.PRNGKey(0), x[:1])
        fns = {}
        for p in precisions:
            model = layer_stack(group, k, fields, p)  # same parameters in every precision

            def loss(v, x, model=model):
                return jnp.sum(model.apply(v, x) ** 2)

            fwd = jax.jit(model.apply)
            grad = jax.jit(jax.grad(loss))
            y = fwd(variables, x)
            err = 0.0
            for e4 in EXACT_ELEMENTS.values():  # the D4 element as an element of g
                f, r = D4.element(e4)
                e = g.index(f, r * g.n_rotations // 4)
                ye = fwd(variables, G.transform(x, g, e))
                err = max(err, _rel(ye, G.transform_regular(y, g, e)))
            jax.block_until_ready(grad(variables, x))
            fns[p] = (grad, err)
        times = {p: [] for p in precisions}
        for _ in range(reps):  # interleaved
            for p in precisions:
                times[p].append(_median_time(partial(fns[p][0], variables, x), 1))
        for p in precisions:
            t = float(np.median(times[p]))
            rows.append(
                _emit(
                    {
                        "what": f"{group} k{k} {fields} fields x3 layers, batch {batch}",
                        "precision": p,
                        "equivariance_error": fns[p][1],
                        "fwd_bwd_ms": 1e3 * t,
                        "images_per_s": batch / t,
                    }
                )
            )
    return rows


def bench_network(
    path: str, precisions, width_divisor: float, batch: int, reps: int, measure=("error", "step")
) -> list:
    from invjax import models
    from invjax.configs import load as load_config
    from invjax.data import datasets
    from invjax.training.optimizer import make_optimizer
    from invjax.training.state import init_variables, initial_state, state_factory
    from invjax.training.steps import make_train_step

    config = load_config(path)
    model_cfg = config.model
    with model_cfg.unlocked():
        if "width_divisor" in model_cfg and width_divisor != 1:
            model_cfg.width_divisor = float(width_divisor)
        if model_cfg.get("num_classes") is None:
            model_cfg.num_classes = 10
    model = models.build(model_cfg)
    shape = tuple(datasets.DATASETS[config.data.name][0])
    x = photos(batch, shape[0])[..., : shape[2]]
    abstract = jax.eval_shape(lambda k: init_variables(model, shape, k), jax.random.key(0))
    tx = make_optimizer(config.train, 100, abstract["params"])
    make, args = state_factory(model, tx, shape, 0, False)
    state = initial_state(make, args, None)  # one compilation, not op-by-op
    variables = state.variables()
    labels = jnp.arange(batch) % model_cfg.num_classes
    rows, steps = [], {}
    images = jnp.asarray(x)
    probe = images[:8]
    for p in precisions:
        m = P.configure(model, p)
        err, first, peak, step = {}, None, None, None
        if "error" in measure:
            fwd = jax.jit(lambda v, x, m=m: m.apply(v, x, train=False))
            y = fwd(variables, probe)
            err = {
                n: _rel(fwd(variables, G.transform(probe, D4, e)), y)
                for n, e in EXACT_ELEMENTS.items()
            }
        if "step" in measure or "memory" in measure:
            t0 = time.perf_counter()
            step = (
                jax.jit(make_train_step(m, tx, "none", 0.5, 0.25))
                .lower(state, images, labels)
                .compile()
            )
            compile_s = time.perf_counter() - t0
            peak = peak_bytes(step)
            if "step" in measure:
                jax.block_until_ready(step(state, images, labels))
            first = time.perf_counter() - t0
            print(f"# {p}: compile {compile_s:.1f} s, first step {first:.1f} s", flush=True)
        steps[p] = (step, err, first, peak)
        if err:
            print(f"# {p}: logits error {max(err.values()):.2e}", flush=True)
    times = {p: [float("nan")] for p in precisions}
    for _ in range(reps if "step" in measure else 0):
        for p in precisions:
            times[p].append(_median_time(lambda p=p: steps[p][0](state, images, labels), 1))
    for p in precisions:
        step_s = float(np.nanmedian(times[p])) if "step" in measure else None
        rows.append(
            _emit(
                {
                    "what": f"{path} (widths / {width_divisor:g}), batch {batch}",
                    "precision": p,
                    "logits_invariance_error": steps[p][1] or None,
                    "compile_and_first_step_s": steps[p][2],
                    "step_ms": None if step_s is None else 1e3 * step_s,
                    "images_per_s": None if step_s is None else batch / step_s,
                    "peak_memory_mib": None if steps[p][3] is None else steps[p][3] / 2**20,
                }
            )
        )
    return rows


def _fmt(r: dict, base: dict) -> str:
    err = r.get("equivariance_error")
    if err is None and r.get("logits_invariance_error"):
        err = max(r["logits_invariance_error"].values())
    cells = [f"{r['what']:<50}", f"{r['precision']:<18}"]
    cells.append(f"error {err:9.2e}" if err is not None else " " * 15)
    b = base.get(r["what"])
    if r.get("fwd_bwd_ms") is not None:
        ratio = b["fwd_bwd_ms"] / r["fwd_bwd_ms"] if b else float("nan")
        cells.append(f"fwd+bwd {r['fwd_bwd_ms']:9.2f} ms  {r['images_per_s']:8.1f} img/s")
        cells.append(f"x{ratio:.2f} vs highest")
    if r.get("images_per_s") is not None and r.get("step_ms") is not None:
        ratio = r["images_per_s"] / b["images_per_s"] if b and b.get("images_per_s") else 0
        cells.append(
            f"step {r['step_ms']:9.1f} ms  {r['images_per_s']:8.1f} img/s  x{ratio:.2f} vs highest"
        )
    if r.get("compile_and_first_step_s") is not None:
        cells.append(f"first step {r['compile_and_first_step_s']:.1f} s")
    if r.get("peak_memory_mib") is not None:
        cells.append(f"peak {r['peak_memory_mib']:.0f} MiB")
    return "  ".join(cells)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--precisions",
        default=",".join(P.PRECISIONS),
        help=f"comma list of invjax precisions, among {list(P.ALL)}",
    )
    ap.add_argument("--layers", default="true", choices=["true", "false"])
    ap.add_argument(
        "--config", default=None, help="a model config file, e.g. configs/cifar10_e2_ii.py"
    )
    ap.add_argument(
        "--width-divisor",
        type=float,
        default=1.0,
        help="divide the network's widths (ceil(C / K)) to fit a CPU",
    )
    ap.add_argument(
        "--measure",
        default="error,step",
        help="for --config, a comma list of: error (logits invariance), step (first-step and "
        "step time), memory (peak of one train step; compiles without running unless step)",
    )
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default=None, help="also write the rows to this file")
    args = ap.parse_args(argv)
    precisions = [P.check(p.strip(), "--precisions") for p in args.precisions.split(",") if p]
    measure = tuple(m.strip() for m in args.measure.split(",") if m.strip())
    bad = set(measure) - {"error", "step", "memory"}
    if bad:
        raise SystemExit(
            f"--measure={args.measure!r}: {sorted(bad)} unknown; use error,step,memory"
        )
    info = P.describe("default")
    print(f"# {info['device_kind']} ({info['backend']}), jax {jax.__version__}", flush=True)
    rows = []
    if args.layers == "true":
        rows += bench_layers(precisions, args.batch, args.reps)
    if args.config:
        rows += bench_network(
            args.config, precisions, args.width_divisor, args.batch, args.reps, measure
        )
    base = {r["what"]: r for r in rows if r["precision"] == "highest"}
    for r in rows:
        print(_fmt(r, base))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": info, "jax": jax.__version__, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
