"""Inference throughput of the export against the training-form network and a plain CNN.

    python benchmarks/export.py [--batch 64] [--repeats 5] [--size 32] [--width-divisor 4]
                                [--only e2,triple,mnist]

Cases (``--only``, a comma list; default ``e2,triple``):

* ``e2``: the E(2)-II WRN16-4 (D8 in every stage, II over D8), SVHN's backbone,
* ``triple``: the triple network (E(2)-II + Scale-II + std streams, Map-E(2) head),
* ``mnist``: the Scaled-MNIST networks II-DISCO WS (``configs/mnist_ii_disco_ws.py``) and DISCO
  (``configs/mnist_disco.py``) at their full width, on 28 x 28 grey crops (``--size`` and
  ``--width-divisor`` do not apply); the std CNN is ``configs/mnist_cnn.py``'s. Their scale
  convolutions run the lowerings of :mod:`invjax.ops.lowering` (on CPU: the lift by
  ``im2col``, the others by ``fft``), in the trained form and the export alike (printed),

the WRN cases with every channel count divided by ``--width-divisor`` (default 4, so that the
whole run takes about two minutes on 2 CPU cores; ``--width-divisor 1`` is the paper's width,
for an accelerator). For each case, images/s (``--batch`` photo crops of ``--size`` pixels, jitted,
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
from invjax.layers.scale import describe_lowerings
from invjax.models.multistream import MultiStreamNetwork
from invjax.models.wrn import WideResNet

CASES = ("e2", "triple", "mnist")
SHOWN_OPS = ("convolution", "dot_general", "fft", "dynamic_gather", "multiply", "add", "maximum")


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


def photos(batch: int, size: int, channels: int = 3) -> jnp.ndarray:
    """``batch`` crops of scikit-image's astronaut photo, ``[batch, size, size, channels]`` in
    [0, 1] (1 channel: its mean over RGB)."""
    import skimage.data

    img = skimage.data.astronaut().astype(np.float32) / 255.0
    if channels == 1:
        img = img.mean(axis=-1, keepdims=True)
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


def mnist_model(config_module: str):
    """The network of ``configs/<config_module>.py``."""
    import importlib

    from invjax import models

    return models.build(importlib.import_module(f"configs.{config_module}").get_config().model)


def cases(only, divisor):
    """``(name, model, std CNN, image shape)`` of each case named in ``only``."""
    out = []
    if "e2" in only:
        out.append(("E(2)-II WRN16-4 (D8)", wrn("e2", divisor), wrn("std", divisor, head="pool")))
    if "triple" in only:
        net = MultiStreamNetwork(
            e2=wrn("e2", divisor),
            scale=wrn("scale", divisor),
            std=wrn("std", divisor, head="pool"),
            head="map_e2",
        )
        out.append(("triple WRN16-4, Map-E(2)", net, wrn("std", divisor, head="pool")))
    out = [case + (None,) for case in out]
    if "mnist" in only:
        cnn = mnist_model("mnist_cnn")
        out.append(("Scaled-MNIST II-DISCO WS", mnist_model("mnist_ii_disco_ws"), cnn, (28, 28, 1)))
        out.append(("Scaled-MNIST DISCO", mnist_model("mnist_disco"), cnn, (28, 28, 1)))
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
    ap.add_argument("--only", default="e2,triple", help=f"comma list of {CASES}")
    ap.add_argument(
        "--precision",
        default=P.EXACT,
        choices=P.PRECISIONS,
        help="arithmetic of both forms (invjax.precision); the exported-vs-model check is exact "
        f"only under {P.EXACT!r} on GPUs",
    )
    args = ap.parse_args(argv)
    args.only = tuple(c.strip() for c in args.only.split(",") if c.strip())
    if not args.only or any(c not in CASES for c in args.only):
        ap.exit(2, f"error: --only={','.join(args.only)!r} is invalid: a comma list of {CASES}\n")
    with P.jax_default(args.precision):  # for products outside invjax's layers
        run(args)


def run(args):
    print(
        f"precision {args.precision!r}; "
        f"device: {jax.devices()[0].device_kind} x{jax.device_count()}; batch {args.batch}, "
        f"{args.size}x{args.size} (mnist: 28x28 grey), width divisor {args.width_divisor:g}, "
        "median of "
        f"{args.repeats}"
    )
    header = (
        f"{'network':<28} {'train form':>11} {'exported':>10} {'std CNN':>10} "
        f"{'exp/train':>9} {'exp/std':>8}"
    )
    rows = [
        measure(name, model, std, shape, args)
        for name, model, std, shape in cases(args.only, args.width_divisor)
    ]
    print("images/s")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(r)


def measure(name, model, std, shape, args) -> str:
    """One row: the trained form's jitted eval forward, the export and the std CNN's export,
    timed alternately on the same images (``shape``: ``(H, W, C)``; None: ``--size`` RGB)."""
    t0 = time.perf_counter()
    size, channels = (args.size, 3) if shape is None else (shape[0], shape[2])
    x = photos(args.batch, size, channels)
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
    lowerings = describe_lowerings(m, x.shape, train=False)
    sec = timed({"train": train_form, "exported": ex, "std": ex_std}, x, args.repeats)
    ips = {k: args.batch / s for k, s in sec.items()}
    print(
        f"  {name}: export vs train form rel. error {err:.1e}, exported StableHLO ops "
        f"{ {k: n for k, n in ex.op_counts().items() if k in SHOWN_OPS} }, "
        f"{time.perf_counter() - t0:.0f} s" + (f"\n    {lowerings}" if lowerings else ""),
        flush=True,
    )
    return (
        f"{name:<28} {ips['train']:>11.1f} {ips['exported']:>10.1f} {ips['std']:>10.1f} "
        f"{ips['exported'] / ips['train']:>9.2f} {ips['exported'] / ips['std']:>8.3f}"
    )


if __name__ == "__main__":
    main()
