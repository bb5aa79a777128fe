"""Table 1's monomial cell under the settings of Scale-II with monomials (docs/monomials.md).

    python benchmarks/monomials_table1.py [--columns input,input_x2] [--n_samples 100] [--json F]

Delta as :mod:`invjax.invariance` defines it (the same 100 scaled digits, scales 0.5 .. 1.0,
bicubic), of one :class:`invjax.layers.ii.ScaleMonomialInvariantIntegration` per setting: layout
(``pairs``: one feature per pair; ``channels``: eq. 6 per channel, the mean over the pairs),
divisor (``random`` / ``power``), epsilon, largest exponent, output (ratio ``A`` / ``log A``), and
whether the input is first divided by its own mean (a normalisation of the input: eq. 6 with equal
orders does not change, only epsilon's place relative to the signal does). Prints mean, median and
pooled Delta per setting and column, and average pooling's for reference.
"""

from __future__ import annotations

import argparse
import itertools
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # this checkout's invjax

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from invjax import groups as G  # noqa: E402
from invjax import invariance as inv  # noqa: E402
from invjax.layers import ii as L  # noqa: E402
from invjax.models.common import upsample  # noqa: E402


def layer_inputs(images, column: str):
    """``[S + 1, N, h, w, 1]``: the layer inputs of every sample, identity first, then the scales."""
    x = jnp.asarray(images)
    scaled = jax.vmap(lambda z, s: G.scale(z, s, "bicubic"), in_axes=(None, 0))
    xs = jnp.concatenate([x[None], scaled(x, jnp.asarray(inv.SCALES, jnp.float32))])
    if column == "input_x2":
        xs = jax.vmap(lambda z: upsample(z, 2, "nearest"))(xs)
    return xs


def deltas(features):
    """``features [S + 1, N, F]`` -> ``(mean, median, pooled)`` Delta."""
    f = np.asarray(features, np.float64)
    num = ((f[1:] - f[0]) ** 2).sum(-1).mean(0)
    den = (f[0] ** 2).sum(-1)
    per = num / den
    return float(np.mean(per)), float(np.median(per)), float(num.sum() / den.sum())


def settings(quick: bool):
    """The grid: the old ``pairs`` layer (the README's earlier row), then ``channels`` with every
    divisor x epsilon x largest exponent x factors x output (``quick``: fewer)."""
    base = dict(layout="pairs", divisor="random", epsilon=1e-6, max_exponent=2, n_factors=3)
    for output in ("ratio", "log"):
        yield {**base, "output": output, "normalise": False}
    grid = dict(
        layout=("channels",),
        divisor=("random", "power"),
        epsilon=(1e-6, 1e-2) if quick else (1e-6, 1e-3, 1e-2),
        max_exponent=(2, 1),
        n_factors=(3,) if quick else (3, 2),
        output=("ratio", "log"),
        normalise=(False,) if quick else (False, True),
    )
    for values in itertools.product(*grid.values()):
        yield dict(zip(grid, values))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--columns", default="input,input_x2")
    ap.add_argument("--n_samples", type=int, default=inv.TABLE1_SAMPLES)
    ap.add_argument("--quick", action="store_true", help="a smaller grid")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    images = inv.table1_images(args.n_samples, inv.TABLE1_SEED)
    rows = []
    for column in args.columns.split(","):
        xs = layer_inputs(images, column)
        avg = jax.vmap(lambda z: z.mean(axis=(1, 2)))(xs)
        m, med, pooled = deltas(avg)
        print(f"{column:9s} average pooling: mean {m:.3g} median {med:.3g} pooled {pooled:.3g}")
        for s in settings(args.quick):
            layer = L.ScaleMonomialInvariantIntegration(
                layout=s["layout"],
                divisor=s["divisor"],
                epsilon=s["epsilon"],
                max_exponent=s["max_exponent"],
                n_factors=s["n_factors"],
                output=s["output"],
            )
            z = xs / xs.mean(axis=(2, 3, 4), keepdims=True) if s["normalise"] else xs
            v = layer.init(jax.random.PRNGKey(0), z[0, :2])
            f = jax.jit(jax.vmap(lambda u, v=v, layer=layer: layer.apply(v, u)))(z)
            m, med, pooled = deltas(f)
            rows.append({**s, "column": column, "mean": m, "median": med, "pooled": pooled})
            print(
                f"{column:9s} "
                + " ".join(f"{k}={v}" for k, v in s.items())
                + f": mean {m:.3g} median {med:.3g} pooled {pooled:.3g}",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
