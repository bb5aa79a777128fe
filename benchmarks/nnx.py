"""Native NNX modules against the ``flax.nnx.bridge`` wrapping of the Linen layers, side by side.

    PYTHONPATH=. python benchmarks/nnx.py [--batch 16] [--size 32] [--repeats 20]

One E(2) block (lift, batch norm in training mode, ReLU, group convolution, group pooling) on
real photo crops, three ways: the Linen layers under ``jax.jit`` of ``apply`` (the reference),
the native modules of :mod:`invjax.nnx` under ``nnx.jit``, and the same Linen layers wrapped by
``flax.nnx.bridge.ToNNX`` under ``nnx.jit``. Each is timed for one jitted forward + backward
(gradient of a squared-output loss with respect to the parameters, batch statistics updated),
the median of ``--repeats`` calls after a compilation, the three called in turn; and the parameter layout each exposes is
printed, with whether the contract (``isinstance(module, Exact)``) holds. Ratios are to Linen,
measured in this one run.
"""

from __future__ import annotations

import argparse
import statistics
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import skimage.data
from flax import nnx

from invjax.contract import Exact
from invjax.layers import e2 as L
from invjax.nnx import e2 as N


class LinenBlock(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = True):
        x = L.E2LiftConv(8, "D4", kernel_size=5)(x)
        x = nn.relu(L.E2BatchNorm("D4")(x, train))
        return L.GroupPool("D4")(L.E2Conv(8, "D4")(x))


class NativeBlock(nnx.Module):
    def __init__(self, rngs):
        self.lift = N.E2LiftConv(3, 8, "D4", kernel_size=5, rngs=rngs)
        self.bn = N.E2BatchNorm(64, "D4")
        self.conv = N.E2Conv(64, 8, "D4", rngs=rngs)
        self.pool = N.GroupPool("D4")

    def __call__(self, x):
        return self.pool(self.conv(nnx.relu(self.bn(self.lift(x)))))


class BridgeBlock(nnx.Module):
    def __init__(self, x, rngs):
        def wrap(layer, x):
            return nnx.bridge.ToNNX(layer, rngs=rngs).lazy_init(x)

        self.lift = wrap(L.E2LiftConv(8, "D4", kernel_size=5), x)
        h = self.lift(x)
        self.bn = wrap(L.E2BatchNorm("D4"), h)
        self.conv = wrap(L.E2Conv(8, "D4"), h)
        self.pool = L.GroupPool("D4")

    def __call__(self, x):
        h = self.bn(self.lift(x), train=True, mutable=["batch_stats"])
        return self.pool.apply({}, self.conv(nnx.relu(h)))


def photos(batch: int, size: int) -> np.ndarray:
    """``batch`` crops of scikit-image's astronaut photo, ``[B, size, size, 3]`` in [0, 1]."""
    img = skimage.data.astronaut().astype(np.float32) / 255.0
    return np.stack([img[16 * i : 16 * i + size, 8 * i : 8 * i + size] for i in range(batch)])


def alternated_ms(fns: dict, repeats: int) -> dict:
    """Median milliseconds of each function, called in turn (one call of each per round, so a
    shared machine's load falls on all of them alike), after one compiling call each."""
    for fn in fns.values():
        jax.block_until_ready(fn())
    times: dict = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t = time.perf_counter()
            jax.block_until_ready(fn())
            times[name].append(time.perf_counter() - t)
    return {name: 1e3 * statistics.median(ts) for name, ts in times.items()}


def linen_step(x):
    model = LinenBlock()
    v = model.init(jax.random.PRNGKey(0), x)

    @jax.jit
    def step(params, stats):
        def loss(p):
            y, upd = model.apply({"params": p, "batch_stats": stats}, x, mutable=["batch_stats"])
            return jnp.mean(y**2), upd

        return jax.grad(loss, has_aux=True)(params)

    return lambda: step(v["params"], v["batch_stats"])


def nnx_step(model, x):
    @nnx.jit
    def step(m):
        return nnx.grad(lambda m: jnp.mean(m(x) ** 2))(m)

    return lambda: step(model)


def layout(model) -> str:
    params = nnx.state(model, nnx.Param)
    return ", ".join("/".join(map(str, p)) for p, _ in nnx.to_flat_state(params))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    x = jnp.asarray(photos(args.batch, args.size))
    print(f"backend {jax.default_backend()}, batch {args.batch}, {args.size}x{args.size}x3")
    native = NativeBlock(nnx.Rngs(0))
    bridge = BridgeBlock(x, nnx.Rngs(0))
    fns = {"linen": linen_step(x), "native": nnx_step(native, x), "bridge": nnx_step(bridge, x)}
    ms = alternated_ms(fns, args.repeats)
    for name, t in ms.items():
        print(f"{name:6s} forward+backward {t:8.2f} ms  {t / ms['linen']:.2f}x")
    for name, m in (("native", native), ("bridge", bridge)):
        print(f"{name} params: {layout(m)}; lift is Exact: {isinstance(m.lift, Exact)}")


if __name__ == "__main__":
    main()
