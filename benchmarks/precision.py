"""Invariance error and speed per precision (invjax.precision), side by side in one run.

    python benchmarks/precision.py                       # E(2) layer stacks, every precision
    python benchmarks/precision.py --config=configs/cifar10_e2_ii.py --width-divisor=1 \\
        --batch=128 --layers=false                       # a whole network: logits + train step

For each precision of :data:`invjax.precision.PRECISIONS`:

* layers: a stack ``E2LiftConv -> E2Conv -> E2Conv`` (D4 with 3x3 kernels, D8 with 5x5, stride
  1, 32x32 real photos) and its equivariance error ``max_g max_n ||f(g x) - g f(x)|| / ||f(x)||``
  over the exact elements (90-degree rotations, flips), and its forward+backward time;
* ``--config``: the network's logits, ``max_g max_n ||f(g x) - f(x)|| / ||f(x)||`` over the
  exact elements of D4 (eval mode, fresh initialisation), and its train-step time (images/s).

Times are medians of ``--reps`` runs after compilation, precisions interleaved so that a busy
machine affects them alike; ratios are to ``highest``. Prints a table, or JSON with ``--json``.
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


def layer_stack(group: str, k: int, fields: int):
    from flax import linen as nn

    from invjax.layers.e2 import E2Conv, E2LiftConv

    class Stack(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(E2LiftConv(fields, group, k)(x))
            x = nn.relu(E2Conv(fields, group, k)(x))
            return E2Conv(fields, group, k)(x)

    return Stack()


def _scope(name: str):
    """invjax's precision ``name``, or (diagnostics) a raw ``jax.default_matmul_precision`` value."""
    return P.scope(name) if name in P.PRECISIONS else jax.default_matmul_precision(name)


def _emit(row: dict) -> dict:
    print("row " + json.dumps(row), flush=True)  # as soon as measured: a killed run keeps it
    return row


def bench_layers(precisions, batch: int, reps: int) -> list[dict]:
    x = jnp.asarray(photos(batch))
    rows = []
    for group, k, fields in (("D4", 3, 32), ("D8", 5, 16)):
        g = G.parse_group(group)
        model = layer_stack(group, k, fields)
        variables = model.init(jax.random.PRNGKey(0), x[:1])
        fns = {}

        def loss(v, x, model=model):
            return jnp.sum(model.apply(v, x) ** 2)

        for p in precisions:
            with _scope(p):
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
                with _scope(p):
                    times[p].append(_median_time(partial(fns[p][0], variables, x), 1))
        for p in precisions:
            rows.append(
                _emit(
                    {
                        "what": f"{group} k{k} {fields} fields x3 layers, batch {batch}",
                        "precision": p,
                        "equivariance_error": fns[p][1],
                        "fwd_bwd_ms": 1e3 * float(np.median(times[p])),
                    }
                )
            )
    return rows


def bench_network(
    path: str, precisions, width_divisor: float, batch: int, reps: int, train_step: bool = True
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
    for p in precisions:
        with _scope(p):
            fwd = jax.jit(lambda v, x: model.apply(v, x, train=False))
            y = fwd(variables, images[:8])
            err = {
                n: _rel(fwd(variables, G.transform(images[:8], D4, e)), y)
                for n, e in EXACT_ELEMENTS.items()
            }
            t0 = time.perf_counter()
            step = jax.jit(make_train_step(model, tx, "none", 0.5, 0.25))
            if train_step:
                jax.block_until_ready(step(state, images, labels))
            steps[p] = (step, err, time.perf_counter() - t0)
            print(
                f"# {p}: logits error {max(err.values()):.2e}, first step {steps[p][2]:.1f} s",
                flush=True,
            )
    times = {p: [float("nan")] for p in precisions}
    for _ in range(reps if train_step else 0):
        for p in precisions:
            with _scope(p):
                times[p].append(_median_time(lambda p=p: steps[p][0](state, images, labels), 1))
    for p in precisions:
        rows.append(
            _emit(
                {
                    "what": f"{path} (widths / {width_divisor:g}), batch {batch}",
                    "precision": p,
                    "logits_invariance_error": steps[p][1],
                    "compile_and_first_step_s": steps[p][2],
                    "images_per_s": batch / float(np.nanmedian(times[p])) if train_step else None,
                }
            )
        )
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--precisions",
        default=",".join(P.PRECISIONS),
        help="comma list of invjax precisions; other names are passed to "
        "jax.default_matmul_precision as they are (diagnostics, e.g. TF32_TF32_F32_X3)",
    )
    ap.add_argument("--layers", default="true", choices=["true", "false"])
    ap.add_argument(
        "--config", default=None, help="a model config file, e.g. configs/cifar10_e2_ii.py"
    )
    ap.add_argument("--width-divisor", type=float, default=1.0)
    ap.add_argument(
        "--train-step",
        default="true",
        choices=["true", "false"],
        help="time the network's train step (false: logits invariance only)",
    )
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default=None, help="also write the rows to this file")
    args = ap.parse_args(argv)
    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    info = P.describe("default")
    print(f"# {info['device_kind']} ({info['backend']}), jax {jax.__version__}", flush=True)
    rows = []
    if args.layers == "true":
        rows += bench_layers(precisions, args.batch, args.reps)
    if args.config:
        rows += bench_network(
            args.config,
            precisions,
            args.width_divisor,
            args.batch,
            args.reps,
            args.train_step == "true",
        )
    base = {r["what"]: r for r in rows if r["precision"] == "highest"}
    for r in rows:
        err = r.get("equivariance_error", None)
        if err is None:
            err = max(r["logits_invariance_error"].values())
        if "fwd_bwd_ms" in r:
            speed = f"{r['fwd_bwd_ms']:9.2f} ms"
            ratio = base[r["what"]]["fwd_bwd_ms"] / r["fwd_bwd_ms"] if r["what"] in base else 0
        elif r["images_per_s"] is None:  # --train-step=false
            speed, ratio = "", float("nan")
        else:
            speed = (
                f"{r['images_per_s']:9.1f} img/s (first step {r['compile_and_first_step_s']:.1f} s)"
            )
            ratio = r["images_per_s"] / base[r["what"]]["images_per_s"] if r["what"] in base else 0
        print(
            f"{r['what']:<55} {r['precision']:<8} error {err:9.2e}  {speed}  x{ratio:.2f} vs highest"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": info, "jax": jax.__version__, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
