"""Inference throughput of the export against the training-form network and a plain CNN.

    python benchmarks/export.py [--batch 64] [--repeats 5] [--size 32] [--width-divisor 4]
                                [--only e2|triple]

Cases (SVHN backbones, ``invjax/configs/models.py``):

* ``e2``: the E(2)-II WRN16-4 (D8 in every stage, II over D8),
* ``triple``: the triple network (E(2)-II + Scale-II + std streams, Map-E(2) head),

every channel count divided by ``--width-divisor`` (default 4, so that the whole run takes
about two minutes on 2 CPU cores; ``--width-divisor 1`` is the paper's width, for an
accelerator). For each case, images/s (``--batch`` photo crops of ``--size`` pixels, jitted,
median of ``--repeats``; the networks are timed alternately within each repeat so that machine
load hits all alike) of

* ``train form``: ``model.apply(variables, x, train=False)``: the network as trained (filters
  expanded from their coefficients at every call, BatchNorm, restriction gathers, II and head
  layers as separate ops),
* ``exported``: :func:`invjax.export.export` of the same network and variables (the serialised
  StableHLO program: every layer in its inference form, kernels expanded once, BatchNorms as
  per-channel affine maps, II layers as weight maps),
* ``std CNN``: the standard WRN of the same depth, widen factor and width divisor (plain 3x3
  convolutions, the paper's baseline), exported too, so that both sides are in inference form.

and the ratios exported / train form and exported / std CNN. The second ratio is the intrinsic
cost of the equivariant network: e2cnn's width rule keeps the parameter count but multiplies the
channels by ``sqrt(|G|)`` (4 for D8) and D8 takes 5x5 kernels; the triple runs three streams.
Variables are random (the speed does not depend on the values).
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from invjax import precision as P
from invjax.export import export
from invjax.models.multistream import MultiStreamNetwork
from invjax.models.wrn import WideResNet

SHOWN_OPS = ("convolution", "dot_general", "multiply", "add", "maximum", "reduce_window")


def random_variables(model, x, seed=0):
    """``model.init``'s shapes filled with fan-in scaled normals (BatchNorm: identity)."""
    shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)
    rng = np.random.default_rng(seed)

    def fill(path, leaf):
        name = str(getattr(path[-1], "key", path[-1]))
        shape = leaf.shape
        if name in ("var", "scale") or name.startswith("weight_"):
            return np.ones(shape)
        if len(shape) == 1:
            return np.zeros(shape)
        out_axis = 1 if name == "weight" else len(shape) - 1
        return rng.normal(0.0, np.sqrt(2.0 / (np.prod(shape) // shape[out_axis])), shape)

    return jax.tree_util.tree_map_with_path(
        lambda p, leaf: jnp.asarray(fill(p, leaf), jnp.float32), shapes
    )


def photos(batch: int, size: int) -> jnp.ndarray:
    """``batch`` crops of scikit-image's astronaut photo, ``[batch, size, size, 3]`` in [0, 1]."""
    import skimage.data

    img = skimage.data.astronaut().astype(np.float32) / 255.0
    rng = np.random.default_rng(0)
    out = []
    for _ in range(batch):
        r, c = rng.integers(0, img.shape[0] - size, 2)
        out.append(img[r : r + size, c : c + size])
    return jnp.asarray(np.stack(out))


def wrn(family: str, divisor: float, **kw) -> WideResNet:
    """SVHN's WRN16-4 of ``family`` (``invjax/configs/models.py``), widths divided by ``divisor``."""
    if family == "e2":
        kw = {"groups": ("D8", "D8", "D8"), "ii_group": "D8", **kw}
    return WideResNet(family=family, depth=16, widen_factor=4, width_divisor=divisor, **kw)


def cases(only, divisor):
    out = []
    if only in (None, "e2"):
        out.append(("E(2)-II WRN16-4 (D8)", wrn("e2", divisor), wrn("std", divisor, head="pool")))
    if only in (None, "triple"):
        net = MultiStreamNetwork(
            e2=wrn("e2", divisor),
            scale=wrn("scale", divisor),
            std=wrn("std", divisor, head="pool"),
            head="map_e2",
        )
        out.append(("triple WRN16-4, Map-E(2)", net, wrn("std", divisor, head="pool")))
    return out


def timed(fns: dict, x, repeats: int) -> dict:
    """Median seconds per call of each function on ``x``; the functions alternate."""
    for f in fns.values():
        jax.block_until_ready(f(x))  # compile
        jax.block_until_ready(f(x))
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, f in fns.items():
            t = time.perf_counter()
            jax.block_until_ready(f(x))
            times[name].append(time.perf_counter() - t)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--width-divisor", type=float, default=4.0)
    ap.add_argument("--only", choices=("e2", "triple"), default=None)
    ap.add_argument(
        "--precision",
        default=P.EXACT,
        choices=P.PRECISIONS,
        help="arithmetic of both forms (invjax.precision); the exported-vs-model check is exact "
        f"only under {P.EXACT!r} on GPUs",
    )
    args = ap.parse_args(argv)
    with P.jax_default(args.precision):  # for products outside invjax's layers
        run(args)


def run(args):
    x = photos(args.batch, args.size)
    print(
        f"precision {args.precision!r}; "
        f"device: {jax.devices()[0].device_kind} x{jax.device_count()}; batch {args.batch}, "
        f"{args.size}x{args.size}, width divisor {args.width_divisor:g}, median of "
        f"{args.repeats}"
    )
    header = (
        f"{'network':<28} {'train form':>11} {'exported':>10} {'std CNN':>10} "
        f"{'exp/train':>9} {'exp/std':>8}"
    )
    rows = []
    for name, model, std in cases(args.only, args.width_divisor):
        t0 = time.perf_counter()
        v = random_variables(model, x)
        vs = random_variables(std, x, seed=1)
        ex = export(model, v, x.shape[1:], precision=args.precision)
        ex_std = export(std, vs, x.shape[1:], precision=args.precision)
        # The variables are an argument (as in an eval loop), not constants XLA could fold.
        m = P.configure(model, args.precision)
        apply = jax.jit(lambda vv, z, m=m: m.apply(vv, z, train=False))
        train_form = lambda z, v=v, apply=apply: apply(v, z)  # noqa: E731
        # Same numbers (float32 rounding), so the timings compare the same function.
        err = float(jnp.linalg.norm(ex(x) - train_form(x)) / jnp.linalg.norm(train_form(x)))
        sec = timed({"train": train_form, "exported": ex, "std": ex_std}, x, args.repeats)
        ips = {k: args.batch / s for k, s in sec.items()}
        rows.append(
            f"{name:<28} {ips['train']:>11.1f} {ips['exported']:>10.1f} {ips['std']:>10.1f} "
            f"{ips['exported'] / ips['train']:>9.2f} {ips['exported'] / ips['std']:>8.3f}"
        )
        print(
            f"  {name}: export vs train form rel. error {err:.1e}, exported StableHLO ops "
            f"{ {k: n for k, n in ex.op_counts().items() if k in SHOWN_OPS} }, "
            f"{time.perf_counter() - t0:.0f} s",
            flush=True,
        )
    print("images/s")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
