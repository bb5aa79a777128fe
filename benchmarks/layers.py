"""Speed of the equivariant layers against their cost floor, measured side by side in one run.

    python benchmarks/layers.py [--repeats 5] [--batch 16] [--size 32] [--layers e2,scale]

For each layer, forward+backward time (jitted, median of ``--repeats``) of the invjax layer
(basis expansion + convolution) divided by a plain ``lax.conv`` with the same expanded channel
counts and kernel size (the floor: an equivariant layer cannot do less than that convolution).
The scale layer is measured in both of its lowerings (``ScaleConv(lowering=...)``): one grouped
convolution (floor: that grouped ``lax.conv``) and ``S`` per-scale convolutions (floor: ``S``
plain ``lax.conv``), then their ratio and the lowering that ``'auto'`` picks on this backend, so
that the choice can be checked on every kind of device.
Also the construction time of the steerable bases of every layer of the E(2)-II-WRN28-10 of the
paper (appendix table for CIFAR-10), each layer's basis built from scratch (caches cleared).
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
from jax import lax

from invjax import groups as G
from invjax.bases import e2 as e2_bases
from invjax.layers.e2 import E2Conv


def compare_all(cases, repeats: int) -> list[float]:
    """Median times of ``(fn, args)`` cases, measured alternately so that machine load hits all
    alike (one untimed call each first: compilation)."""
    for fn, args in cases:
        jax.block_until_ready(fn(*args))
    times = [[] for _ in cases]
    for _ in range(repeats):
        for (fn, args), acc in zip(cases, times, strict=True):
            t = time.perf_counter()
            jax.block_until_ready(fn(*args))
            acc.append(time.perf_counter() - t)
    return [statistics.median(t) for t in times]


def compare(a, a_args, b, b_args, repeats: int) -> tuple[float, float]:
    """Median times of ``a`` and ``b``, measured alternately (see :func:`compare_all`)."""
    ta, tb = compare_all([(a, a_args), (b, b_args)], repeats)
    return ta, tb


def fwd_bwd(apply, params, x):
    def loss(p, x):
        return jnp.sum(apply(p, x) ** 2)

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))


def plain_conv_case(x, cin, cout, k, key):
    w = jax.random.normal(key, (k, k, cin, cout), jnp.float32) * 0.01

    def apply(w, x):
        p = (k - 1) // 2
        return lax.conv_general_dilated(
            x, w, (1, 1), ((p, p), (p, p)), dimension_numbers=("NHWC", "HWIO", "NHWC")
        )

    return fwd_bwd(apply, w, x), w


def bench_e2(batch, size, repeats):
    group, fields, k = "D8", 40, 5
    x = jax.random.normal(jax.random.PRNGKey(0), (batch, size, size, fields * 16))
    layer = E2Conv(fields, group, k)
    v = layer.init(jax.random.PRNGKey(1), x)
    f, w = plain_conv_case(x, fields * 16, fields * 16, k, jax.random.PRNGKey(2))
    ours, floor = compare(fwd_bwd(layer.apply, v, x), (v, x), f, (w, x), repeats)
    return ("E2Conv D8, 40 fields, k=5", ours, floor)


def bench_scale(batch, size, repeats):
    """Rows for ScaleConv in its three lowerings, each against its own floor, and their ratios
    (the compact per-scale one against the per-scale floor: it does less than that floor)."""
    try:
        from invjax.layers.scale import ScaleConv
        from invjax.ops.scale import resolve_lowering
    except ImportError:  # the scale layers are optional for this script
        return []
    scales, cin, cout, k, eff = (1.0, 2**0.5, 2.0), 160, 160, 5, 3
    S, p = len(scales), (k - 1) // 2
    x = jax.random.normal(jax.random.PRNGKey(0), (batch, size, size, S, cin))
    layers = {
        low: ScaleConv(cout, kernel_size=k, effective_size=eff, scales=scales, lowering=low)
        for low in ("grouped", "per_scale", "per_scale_compact")
    }
    v = layers["grouped"].init(jax.random.PRNGKey(1), x)  # same parameters for both lowerings
    # Floors: the same work as one grouped conv of S * Cin -> S * Cout channels, or as S
    # independent k x k convolutions of Cin -> Cout channels.
    xs = x.reshape(batch, size, size, S * cin)
    w = jax.random.normal(jax.random.PRNGKey(2), (k, k, cin, S * cout)) * 0.01
    ws = w.reshape(k, k, cin, S, cout)

    def conv(x, w, groups=1):
        return lax.conv_general_dilated(
            x,
            w,
            (1, 1),
            ((p, p), (p, p)),
            dimension_numbers=("NHWC", "HWIO", "NHWC"),
            feature_group_count=groups,
        )

    def per_scale(ws, x):
        return jnp.stack([conv(x[:, :, :, s], ws[:, :, :, s]) for s in range(S)], axis=3)

    t = compare_all(
        [
            (fwd_bwd(layers["grouped"].apply, v, x), (v, x)),
            (fwd_bwd(lambda w, x: conv(x, w, S), w, xs), (w, xs)),
            (fwd_bwd(layers["per_scale"].apply, v, x), (v, x)),
            (fwd_bwd(per_scale, ws, x), (ws, x)),
            (fwd_bwd(layers["per_scale_compact"].apply, v, x), (v, x)),
        ],
        repeats,
    )
    name = f"ScaleConv {S} scales, {cin}->{cout}, k={k} (eff {eff})"
    auto = resolve_lowering("auto")
    note = (
        f"ScaleConv per_scale / grouped: {t[2] / t[0]:.3f} "
        f"(plain convs: {t[3] / t[1]:.3f}); per_scale_compact / per_scale: {t[4] / t[2]:.3f}; "
        f"'auto' on {jax.default_backend()}: {auto}"
    )
    return [
        (f"{name}, grouped", t[0], t[1]),
        (f"{name}, per_scale", t[2], t[3]),
        (f"{name}, per_scale_compact", t[4], t[3]),
        note,
    ]


# (group, kernel size) of every convolution of the E(2)-II-WRN28-10 (CIFAR-10 appendix table):
# lifting, 8 convs + shortcut in block 1 (D8, 5x5), blocks 2 and 3 in D4 (3x3), last to trivial.
WRN28_10_E2_LAYERS = (
    [("D8", 5)] * (1 + 8 + 1) + [("D4", 3)] * (8 + 1) + [("D4", 3)] * (8 + 1) + [("D4", 1)] * 2
)


def bench_construction():
    t = time.perf_counter()
    for group, k in WRN28_10_E2_LAYERS:
        e2_bases.cache_clear()
        e2_bases.transformed_basis(G.parse_group(group), k)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--layers", default="e2,scale", help="comma list of e2, scale")
    args = ap.parse_args()
    chosen = [t.strip() for t in args.layers.split(",") if t.strip()]
    if not chosen or any(t not in ("e2", "scale") for t in chosen):
        ap.exit(
            2, f"error: --layers={args.layers!r} is invalid: choose a comma list of e2, scale\n"
        )
    print(f"device: {jax.devices()[0].device_kind}, batch {args.batch}, {args.size}x{args.size}")
    print(
        f"{'layer (forward+backward)':58s} {'invjax [ms]':>12s} {'floor [ms]':>11s} {'ratio':>7s}"
    )
    rows = [bench_e2(args.batch, args.size, args.repeats)] if "e2" in chosen else []
    rows += bench_scale(args.batch, args.size, args.repeats) if "scale" in chosen else []
    for row in rows:
        if isinstance(row, str):
            print(row)
            continue
        name, ours, floor = row
        print(f"{name:58s} {ours * 1e3:12.1f} {floor * 1e3:11.1f} {ours / floor:7.3f}")
    n = len(WRN28_10_E2_LAYERS)
    print(f"bases of all {n} E(2)-WRN28-10 layers built from scratch: {bench_construction():.3f} s")


if __name__ == "__main__":
    main()
