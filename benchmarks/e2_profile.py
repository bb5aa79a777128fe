"""Where the time of one E(2) group convolution's forward+backward goes (CPU or any backend).

    python3 benchmarks/e2_profile.py [--fields 40] [--batch 2] [--size 32] [--repeats 3]
        [--fft] [--lowerings direct,winograd]

The layer of ``benchmarks/peers/e2cnn_bench.py``'s ``layer`` part: ``E2Conv(fields, 'D8', 5)``
on regular fields, gradient of ``sum(y^2)`` with respect to its parameters. Timed apart, in
alternating rounds (medians): the whole step; the filter expansion alone (coefficients x basis
-> the ``[5, 5, 16 Ci, 16 Co]`` kernel, and its transpose in the backward pass); the convolution
alone (``conv2d`` with that kernel as the parameter: forward and weight gradient); with
``--fft`` also the same convolution by FFT (:func:`invjax.ops.conv.conv2d_fft`); with
``--lowerings`` also the whole step with the layer's ``lowering`` set to each one named
(:data:`invjax.ops.lowering.E2_LOWERINGS`), in the same rounds. Printed: each
median, its share of the whole step, and the convolutions' GFLOP/s (``2 B H W k^2 Cin Cout``
per pass, 2 passes; the FFT counted in the direct form's operations).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # this checkout's invjax

from e2_lowerings import alternating_medians  # noqa: E402  (the same alternating rounds)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fields", type=int, default=40)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--fft", action="store_true", help="also time the convolution by FFT")
    ap.add_argument("--lowerings", default="", help="also the whole step in these lowerings")
    args = ap.parse_args(argv)
    from invjax.ops.lowering import E2_LOWERINGS

    lowerings = [name for name in args.lowerings.split(",") if name]
    for name in lowerings:
        if name not in E2_LOWERINGS:
            print(f"invjax: error: e2_profile: --lowerings: {name!r} is not one of {E2_LOWERINGS}")
            raise SystemExit(2)
    for name in ("fields", "batch", "size", "repeats"):
        if getattr(args, name) < 1:
            print(f"invjax: error: e2_profile: --{name}={getattr(args, name)} must be >= 1")
            raise SystemExit(2)

    import jax
    import jax.numpy as jnp

    from invjax.layers.e2 import E2Conv
    from invjax.ops.conv import conv2d, conv2d_fft

    c = 16 * args.fields
    x = jax.random.normal(jax.random.PRNGKey(0), (args.batch, args.size, args.size, c))
    layer = E2Conv(args.fields, "D8", 5)
    params = layer.init(jax.random.PRNGKey(1), x[:1])["params"]
    # the layer's expanded kernel, read from its inference form (the same einsum)
    kern = layer.apply({"params": params}, x[:1], method=layer.inference_arrays)["kernel"]

    def whole(p, x):
        return jnp.sum(layer.apply({"params": p}, x) ** 2)

    def expansion(p, probe):
        k = layer.apply({"params": p}, x[:1], method=layer.inference_arrays)["kernel"]
        return jnp.sum(k * probe)

    def convolution(k, x):
        return jnp.sum(conv2d(x, k) ** 2)

    probe = jax.random.normal(jax.random.PRNGKey(2), kern.shape)
    steps = {
        "whole step": (jax.jit(jax.grad(whole)), (params, x)),
        "filter expansion": (jax.jit(jax.grad(expansion)), (params, probe)),
        "convolution": (jax.jit(jax.grad(convolution)), (kern, x)),
    }
    if args.fft:
        fft_conv = jax.jit(jax.grad(lambda k, x: jnp.sum(conv2d_fft(x, k) ** 2)))
        steps["convolution, FFT"] = (fft_conv, (kern, x))
    for name in lowerings:
        lowered = layer.clone(lowering=name)

        def whole_lowered(p, x, lowered=lowered):
            return jnp.sum(lowered.apply({"params": p}, x) ** 2)

        steps[f"step, {name}"] = (jax.jit(jax.grad(whole_lowered)), (params, x))
    for step, a in steps.values():
        jax.block_until_ready(step(*a))  # compile
    med = alternating_medians(steps, args.repeats)
    flops = 2 * 2 * args.batch * args.size**2 * 25 * c * c
    print(
        f"E2Conv({args.fields}, 'D8', 5), {c} -> {c} channels, batch {args.batch}, "
        f"{args.size}x{args.size}, {jax.default_backend()}, load average "
        f"{' '.join(f'{v:.1f}' for v in os.getloadavg())}; medians of {args.repeats}"
    )
    for n, s in med.items():
        extra = f", {flops / s / 1e9:.0f} GFLOP/s" if n.startswith("convolution") else ""
        print(f"  {n:17s} {s * 1e3:9.1f} ms  {s / med['whole step']:5.2f} of the step{extra}")
    print(f"  ('whole step' is the layer's default lowering, 'auto': {_auto(layer, x.shape)})")
    return {"median_s": med, "conv_flops": flops}


def _auto(layer, x_shape) -> str:
    from invjax.layers.e2 import lowering_choice

    return lowering_choice(layer, x_shape)


if __name__ == "__main__":
    main()
