"""The E(2) layers' convolution in each lowering, side by side (CPU or any backend).

    python3 benchmarks/e2_lowerings.py [--batch 4] [--shapes 32x256,16x512,8x1024,32x640]
        [--kernel 5] [--stride 1] [--lowerings direct,winograd] [--repeats 3]

For each ``SIDExCHANNELS`` (or ``SIDExINxOUT``) shape: the ``'SAME'`` convolution of a ``[batch,
side, side, in]`` map with a ``[k, k, in, out]`` kernel (an E(2) group convolution after its
kernel expansion: ``channels = fields |G|``) at ``--stride`` (2: the symmetric rule, the box
folded into a ``k+1`` kernel on even maps), forward and the gradients with respect to input
and kernel of ``sum(y^2)``, by :func:`invjax.ops.conv.conv2d` in each lowering named; all
shapes and lowerings alternate in each round; medians, and each lowering's time against the
first one's. What :func:`invjax.ops.lowering.choose_e2_lowering`'s thresholds rest on.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # this checkout's invjax


def _cpu() -> str:
    """The processor's family and model (Linux), printed beside the figures."""
    try:
        info = pathlib.Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or "unknown processor"
    get = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in info[:30])}
    return f"{get.get('model name', '?')}, family {get.get('cpu family')} model {get.get('model')}"


def alternating_medians(steps: dict, repeats: int) -> dict:
    """``{name: median seconds}`` of ``steps`` (``name -> (compiled function, args)``, already
    compiled), timed in ``repeats`` rounds that run every step once each, so that a change of
    the machine's load falls on all of them alike."""
    import jax

    times = {n: [] for n in steps}
    for _ in range(repeats):
        for n, (step, a) in steps.items():
            t = time.perf_counter()
            jax.block_until_ready(step(*a))
            times[n].append(time.perf_counter() - t)
    return {n: statistics.median(v) for n, v in times.items()}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--shapes", default="32x256,16x512,8x1024,32x640")
    ap.add_argument("--kernel", type=int, default=5)
    ap.add_argument("--stride", type=int, default=1, choices=(1, 2))
    ap.add_argument("--lowerings", default="direct,winograd")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    import jax
    import jax.numpy as jnp

    from invjax.ops.conv import conv2d
    from invjax.ops.lowering import E2_LOWERINGS

    lowerings = args.lowerings.split(",")
    try:
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    except ValueError:
        shapes = []
    if not shapes or any(len(s) not in (2, 3) or min(s) < 1 for s in shapes):
        print(f"invjax: error: e2_lowerings: --shapes={args.shapes!r}: SIDExCHANNELS[xOUT],...")
        raise SystemExit(2)
    if any(m in ("auto",) or m not in E2_LOWERINGS for m in lowerings) or args.repeats < 1:
        print(f"invjax: error: e2_lowerings: --lowerings from {E2_LOWERINGS[1:]}, --repeats >= 1")
        raise SystemExit(2)
    steps = {}
    shapes = [(s[0], s[1], s[-1]) for s in shapes]
    for side, c, o in shapes:
        x = jax.random.normal(jax.random.PRNGKey(0), (args.batch, side, side, c))
        k = jax.random.normal(jax.random.PRNGKey(1), (args.kernel, args.kernel, c, o)) / c
        for m in lowerings:

            def loss(k, x, m=m):
                return jnp.sum(conv2d(x, k, stride=args.stride, method=m) ** 2)

            steps[(side, c, o, m)] = (jax.jit(jax.grad(loss, (0, 1))), (k, x))
            jax.block_until_ready(steps[(side, c, o, m)][0](k, x))  # compile
    med = alternating_medians(steps, args.repeats)
    print(
        f"{_cpu()}; {jax.default_backend()}, load average "
        f"{' '.join(f'{v:.1f}' for v in os.getloadavg())}; batch {args.batch}, k {args.kernel}, "
        f"stride {args.stride}, "
        f"forward + input and kernel gradients, medians of {args.repeats}"
    )
    for side, c, o in shapes:
        first = med[(side, c, o, lowerings[0])]
        row = ", ".join(
            f"{m} {med[(side, c, o, m)] * 1e3:.0f} ms ({med[(side, c, o, m)] / first:.2f})"
            for m in lowerings
        )
        print(f"  {side}x{side}, {c} -> {o}: {row}")
    return {f"{s}x{c}x{o} {m}": v for (s, c, o, m), v in med.items()}


if __name__ == "__main__":
    main()
