"""Time and memory of each lowering of the scale convolutions, measured side by side in one run.

    python benchmarks/lowerings.py [--cases lift,conv2,conv3] [--batch 32[,128,...]]
                                   [--lowerings auto,per_scale_compact,fft,im2col] [--repeats 5]

Cases: the three scale convolutions of the Scaled-MNIST DISCO network (``configs/mnist_disco.py``:
kernel 15, effective size 7, 4 scales, its basis), ``lift`` (1 -> 32 channels on 56 x 56; the
gradient of ``sum(y^2)`` with respect to the parameters), ``conv2`` (32 -> 63 on 28 x 28) and
``conv3`` (63 -> 95 on 14 x 14; both with respect to the parameters and the input), at each
``--batch``. For each case and batch, each lowering of ``--lowerings`` (``auto``: the policy's
pick, :mod:`invjax.ops.lowering`, printed) is compiled once, then timed in ``--repeats`` rounds
in which the lowerings alternate, so that the load of a shared machine hits all alike; medians,
and each lowering's time over ``auto``'s (``--repeats 0``: the memory sizes alone, compiled,
nothing run).

Memory: XLA's own account of each compiled step (``jax.jit(f).lower(...).compile()
.memory_analysis()``): ``temp``, the temporary buffers the step allocates (its buffer
assignment's size: im2col's patches, spectra, activations kept for the gradient), and ``args +
out``, its arguments and results (the same for every lowering of a case). Not measured by
sampling a process: these are the compiler's sizes, the same on every run.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pathlib
import platform
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # measure the invjax of this checkout; configs/ beside it

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from e2_lowerings import alternating_medians  # noqa: E402  (the same alternating rounds)

from invjax.layers import scale as sl  # noqa: E402
from invjax.ops.lowering import LOWERINGS  # noqa: E402

# name: (kind, in channels, out channels, map size), as the DISCO network applies them
CASES = {"lift": ("lift", 1, 32, 56), "conv2": ("conv", 32, 63, 28), "conv3": ("conv", 63, 95, 14)}


def _comma(value: str, valid, flag: str, kind=str) -> tuple:
    items = tuple(v.strip() for v in value.split(",") if v.strip())
    try:
        items = tuple(kind(v) for v in items)
    except ValueError:
        items = ()
    if not items or any((v not in valid) if valid else (v < 1) for v in items):
        what = f"a comma list of {valid}" if valid else "a comma list of integers >= 1"
        print(f"lowerings: error: {flag}={value!r} is invalid: {what}", file=sys.stderr)
        raise SystemExit(2)
    return items


def step(case: str, lowering: str, batch: int):
    """``(jitted gradient step, its arguments, the lowering the layer runs)``."""
    net = importlib.import_module("configs.mnist_disco").get_config().model
    kind, cin, cout, size = CASES[case]
    common = dict(
        kernel_size=net.kernel_size,
        effective_size=net.effective_size,
        scales=tuple(net.scales),
        basis=net.basis,
        lowering=lowering,
    )
    key = jax.random.PRNGKey(0)
    if kind == "lift":
        layer = sl.ScaleLiftConv(cout, **common)
        x = jax.random.normal(key, (batch, size, size, cin))
    else:
        layer = sl.ScaleConv(cout, 1, **common)
        x = jax.random.normal(key, (batch, size, size, len(net.scales), cin))
    params = layer.init(jax.random.PRNGKey(1), x[:1])["params"]

    def loss(p, x):
        return jnp.sum(layer.apply({"params": p}, x) ** 2)

    argnums = (0,) if kind == "lift" else (0, 1)
    fn = jax.jit(jax.grad(loss, argnums=argnums))
    return fn, (params, x), sl.lowering_choice(layer, x.shape)


def memory(fn, args) -> dict:
    """XLA's sizes of the compiled ``fn(*args)`` in bytes (module docstring)."""
    stats = fn.lower(*args).compile().memory_analysis()
    if stats is None:
        return {"temp": float("nan"), "io": float("nan")}
    io = stats.argument_size_in_bytes + stats.output_size_in_bytes - stats.alias_size_in_bytes
    return {"temp": stats.temp_size_in_bytes, "io": io}


def interleaved(steps: dict, repeats: int) -> dict:
    """Median seconds of each ``(fn, args)``; one untimed call each first (compilation)."""
    for fn, args in steps.values():
        jax.block_until_ready(fn(*args))
    return alternating_medians(steps, repeats)


def measure(case: str, batch: int, lowerings, repeats: int) -> list[str]:
    steps, chosen, mem = {}, {}, {}
    for lowering in lowerings:
        fn, args, chosen[lowering] = step(case, lowering, batch)
        steps[lowering] = (fn, args)
        mem[lowering] = memory(fn, args)
    nan = float("nan")
    sec = interleaved(steps, repeats) if repeats else {name: nan for name in steps}
    base = sec.get("auto") if repeats else None
    kind, cin, cout, size = CASES[case]
    rows = []
    for lowering in lowerings:
        name = lowering if lowering != "auto" else f"auto ({chosen[lowering]})"
        ratio = f"{sec[lowering] / base:8.2f}" if base else f"{'-':>8}"
        rows.append(
            f"{case + f' {cin}->{cout} on {size}x{size}':<24} {batch:>6} {name:<20} "
            f"{sec[lowering] * 1e3:>10.1f} {ratio} {mem[lowering]['temp'] / 2**20:>10.1f} "
            f"{mem[lowering]['io'] / 2**20:>10.1f}"
        )
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="lift,conv2,conv3", help=f"comma list of {tuple(CASES)}")
    ap.add_argument("--batch", default="32", help="comma list of batch sizes")
    ap.add_argument("--lowerings", default="auto,per_scale_compact,fft,im2col")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    cases = _comma(args.cases, tuple(CASES), "--cases")
    batches = _comma(args.batch, None, "--batch", int)
    lowerings = _comma(args.lowerings, LOWERINGS, "--lowerings")
    if args.repeats < 0:
        ap.exit(2, f"lowerings: error: --repeats={args.repeats} is invalid: it must be >= 0\n")
    print(
        f"device: {jax.devices()[0].device_kind} ({platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores), jax {jax.__version__}; forward + backward, median of "
        f"{args.repeats}; load average {os.getloadavg()[0]:.1f}"
    )
    header = (
        f"{'case':<24} {'batch':>6} {'lowering':<20} {'time [ms]':>10} {'/ auto':>8} "
        f"{'temp [MiB]':>10} {'args+out':>10}  (MiB)"
    )
    print(header + "\n" + "-" * len(header))
    for case in cases:
        for batch in batches:
            for row in measure(case, batch, lowerings, args.repeats):
                print(row, flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
