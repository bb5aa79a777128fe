"""Speed of the Invariant Integration closed forms against the references, side by side in one run.

    python benchmarks/ii.py [--batch 8] [--repeats 3] [--only e2|scale|mono]

For each case, the forward+backward time (``jax.value_and_grad`` of a squared-sum loss with
respect to the kernel and the input, jitted, median of ``--repeats``; the functions are timed
alternately so machine load hits all alike) of

* ``reference``: the equation as written (:func:`invjax.ops.ii.ws_integrate_reference`: one
  convolution per group element with the transformed kernel, then the average),
* ``weight map``: ``sum_y x(y) M(y)`` with the precomputed weight map,
* ``fast``: the window-sum form the layers use,

and the ratios reference / fast and weight map / fast. Sizes are the paper's: E(2)-II over D8
(45-degree kernels bilinear) on 640 channels of 8 x 8 (the WRN28-10 of CIFAR-10) and on 256
channels of 8 x 8 (WRN16-4, SVHN); Scale-II WS on 95 channels of 14 x 14 (Scaled-MNIST) and on
256 channels of 8 x 8 (Scale-II WRN16-4); Scale-II monomials (25 pairs) on 95 x 14 x 14. Output
channels equal input channels (the paper's II layers keep the width). The default batch is small
for CPUs; pass ``--batch 128`` on an accelerator.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from invjax import groups as G
from invjax.ops import ii


def fwd_bwd(fn):
    return jax.jit(jax.value_and_grad(lambda k, x: jnp.sum(fn(x, k) ** 2), argnums=(0, 1)))


def timed(fns: dict, args, repeats: int) -> dict:
    """Median seconds of each function on ``args``; the functions alternate within a repeat."""
    for f in fns.values():
        jax.block_until_ready(f(*args))  # compile
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, f in fns.items():
            t = time.perf_counter()
            jax.block_until_ready(f(*args))
            times[name].append(time.perf_counter() - t)
    return {name: statistics.median(ts) for name, ts in times.items()}


def cases(only: str | None):
    d8 = G.dihedral(8)
    out = []
    if only in (None, "e2"):
        for c in (640, 256):
            out.append(
                (
                    f"E(2)-II D8, {c} ch 8x8",
                    (8, 8, c),
                    (3, 3, c, c),
                    {
                        "reference": lambda x, k: ii.ws_integrate_reference(x, k, d8),
                        "weight map": lambda x, k: ii.ws_integrate_weight_map(x, k, d8),
                        "fast": lambda x, k: ii.ws_integrate(x, k, d8),
                    },
                )
            )
    if only in (None, "scale"):
        for h, c in ((14, 95), (8, 256)):
            out.append(
                (
                    f"Scale-II WS, {c} ch {h}x{h}",
                    (h, h, c),
                    (3, 3, c, c),
                    {
                        "reference": ii.scale_ws_reference,
                        "fast": ii.scale_ws_integrate,
                    },
                )
            )
    if only in (None, "mono"):
        pairs = ii.draw_monomial_pairs(25, 95)
        out.append(
            (
                "Scale-II monomials, 25 pairs, 95 ch 14x14",
                (14, 14, 95),
                (3, 3, 95, 1),  # unused by the monomials; keeps one signature
                {
                    "reference": lambda x, k: ii.scale_monomial_reference(x, pairs) + 0 * k.sum(),
                    "fast": lambda x, k: ii.scale_monomial_integrate(x, pairs) + 0 * k.sum(),
                },
            )
        )
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", choices=("e2", "scale", "mono"), default=None)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"device: {jax.devices()[0].device_kind}, batch {args.batch}, forward+backward, median")
    head = f"{'case':<42}{'reference':>11}{'weight map':>12}{'fast':>10}{'ref/fast':>10}{'wmap/fast':>11}"
    print(head)
    print("-" * len(head))
    for name, xshape, kshape, fns in cases(args.only):
        # post-ReLU-like activations (the II layers' input): |N(0, 1)|
        x = jnp.asarray(np.abs(rng.normal(size=(args.batch, *xshape))), jnp.float32)
        k = jnp.asarray(rng.normal(size=kshape) / np.sqrt(np.prod(kshape[:3])), jnp.float32)
        t = timed({n: fwd_bwd(f) for n, f in fns.items()}, (k, x), args.repeats)
        wm = t.get("weight map")
        wm_s = f"{wm * 1e3:>10.2f}ms" if wm else f"{'-':>12}"
        wm_r = f"{wm / t['fast']:>10.1f}x" if wm else f"{'-':>11}"
        print(
            f"{name:<42}{t['reference'] * 1e3:>9.2f}ms{wm_s}{t['fast'] * 1e3:>8.2f}ms"
            f"{t['reference'] / t['fast']:>9.1f}x{wm_r}",
            flush=True,
        )


if __name__ == "__main__":
    main()
