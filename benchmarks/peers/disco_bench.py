"""invjax against DISCO's own code (PyTorch), measured side by side in one run.

    benchmarks/peers/run.sh --disco DIR [flags]       # makes the peer venv once, then this
    python3 benchmarks/peers/disco_bench.py --disco DIR --peer-python VENV/bin/python [--json F]
    python3 benchmarks/peers/disco_bench.py --no-peer --batch 2 ...   # the invjax side only

``DIR`` is a checkout of github.com/ISosnovik/disco (its ``models`` package and the
``precalculated_basis/`` it ships; measured at f832fa06). Cases (``--parts``), all forward +
backward at ``--batch`` (32) in float32, each framework's default arithmetic:

* ``layers``: the three scale convolutions of the Scaled-MNIST DISCO network, kernel 15, effective
  size 7, 4 scales, DISCO's ``disco_b`` basis on its side and invjax's shipped DISCO basis:
  ``lift`` (``SESConv_Z2_H`` 1 -> 32 on 56 x 56; gradient of ``sum(y^2)`` with respect to the
  parameters), ``conv2`` (``SESConv_H_H`` 32 -> 63 on 28 x 28) and ``conv3`` (63 -> 95 on
  14 x 14), both with respect to the parameters and the input. invjax runs each lowering of
  ``--lowerings`` (``auto``: :func:`invjax.ops.lowering.choose_lowering`'s pick, printed).
* ``net``: the whole network of ``configs/mnist_disco.py`` (invjax) against DISCO's
  ``mnist_disco(...)`` with its ``exp_mnist.sh`` settings, train mode (dropout, batch
  statistics), cross-entropy of fixed random labels on random 28 x 28 digits, gradient with
  respect to the parameters. Both parameter counts are printed (494,549 each).

Timing: per case, each side's first call (invjax: compilation) is reported apart; then
``--repeats`` rounds of single steps, invjax's lowerings and DISCO's alternating, so the load of a
shared machine hits every side alike; medians, and DISCO / invjax ratios (> 1: invjax faster).
The peer runs in its own venv (``--peer-python``, with torch; the project's environment never
gets torch) as a subprocess answering JSON lines (``disco_side.py``). Threads: JAX's default
(every core) and ``torch.set_num_threads(os.cpu_count())``. The load average before and after
is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))  # measure the invjax of this checkout
sys.path.insert(0, str(HERE))  # peer_process, beside this script

import peer_process  # noqa: E402

PARTS = ("layers", "net")
LAYER_CASES = ("lift", "conv2", "conv3")
# name: (kind, in channels, out channels, map size), as DISCO's network applies them
LAYERS = {"lift": ("lift", 1, 32, 56), "conv2": ("conv", 32, 63, 28), "conv3": ("conv", 63, 95, 14)}
LOWERING_CHOICES = ("auto", "per_scale", "per_scale_compact", "fft", "im2col", "grouped")


def fail(msg: str) -> None:
    print(f"invjax: error: disco_bench: {msg}", file=sys.stderr)
    raise SystemExit(2)


def _comma(value: str, valid, flag: str) -> tuple[str, ...]:
    items = tuple(v for v in value.split(",") if v)
    bad = [v for v in items if v not in valid]
    if bad or not items:
        fail(f"{flag}={value!r} is invalid: choose a comma list of {valid}")
    return items


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--disco", default=None, help="checkout of github.com/ISosnovik/disco")
    ap.add_argument("--peer-python", default=str(REPO / ".venv-peers" / "bin" / "python"))
    ap.add_argument("--no-peer", action="store_true", help="measure the invjax side only")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma list of {PARTS}")
    ap.add_argument("--cases", default=",".join(LAYER_CASES), help=f"layers: of {LAYER_CASES}")
    ap.add_argument("--lowerings", default="auto", help=f"layers: comma list of {LOWERING_CHOICES}")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5, help="alternating rounds per case")
    ap.add_argument("--config", default=str(REPO / "configs" / "mnist_disco.py"))
    ap.add_argument("--json", default=None, help="also write every figure to this file")
    args = ap.parse_args(argv)
    args.parts = _comma(args.parts, PARTS, "--parts")
    args.cases = _comma(args.cases, LAYER_CASES, "--cases")
    args.lowerings = _comma(args.lowerings, LOWERING_CHOICES, "--lowerings")
    for name in ("batch", "repeats"):
        if getattr(args, name) < 1:
            fail(f"--{name}={getattr(args, name)} is invalid: it must be >= 1")
    if "net" in args.parts and not os.path.isfile(args.config):
        fail(f"--config={args.config}: no such config file")
    if not args.no_peer:
        if not args.disco or not os.path.isdir(os.path.join(args.disco, "precalculated_basis")):
            fail(
                f"--disco={args.disco}: not a checkout of DISCO's code (no precalculated_basis/ "
                "in it); fetch github.com/ISosnovik/disco, or pass --no-peer"
            )
        if not os.access(args.peer_python, os.X_OK):
            fail(
                f"--peer-python={args.peer_python}: no such interpreter; create the peer's venv "
                "with benchmarks/peers/run.sh --disco DIR (or pass --no-peer)"
            )
    return args


class PeerProcess(peer_process.PeerProcess):
    """disco_side.py in the peer's venv, one JSON request and answer per line."""

    def __init__(self, python: str, disco: str, log_path: str):
        cmd = [python, str(HERE / "disco_side.py"), "--disco", disco]
        cmd += ["--threads", str(os.cpu_count() or 1)]
        super().__init__("DISCO", cmd, log_path)


NoPeer = peer_process.NoPeer


def timed(fn, *args) -> float:
    import jax

    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - t


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def count(tree) -> int:
    import jax

    return int(sum(x.size for x in jax.tree_util.tree_leaves(tree)))


def mnist_model(config_path: str):
    """The network of the model section of ``config_path`` (configs/mnist_disco.py)."""
    import importlib.util

    from invjax import models

    spec = importlib.util.spec_from_file_location("_disco_bench_config", config_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return models.build(module.get_config().model)


def layer_step(case: str, lowering: str, batch: int, config_path: str):
    """``(step, args, params, chosen)`` of one scale convolution of the network."""
    import jax
    import jax.numpy as jnp

    from invjax.layers import scale as sl

    kind, cin, cout, size = LAYERS[case]
    net = mnist_model(config_path)
    common = dict(
        kernel_size=net.kernel_size,
        effective_size=net.effective_size,
        scales=tuple(net.scales),
        basis=net.basis,
        use_bias=net.use_bias,
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
    chosen = sl.lowering_choice(layer, x.shape)

    def loss(p, x):
        return jnp.sum(layer.apply({"params": p}, x) ** 2)

    argnums = (0,) if kind == "lift" else (0, 1)
    # The input is an argument, not a closed-over constant, as torch's is (XLA would fold it).
    return jax.jit(jax.grad(loss, argnums=argnums)), (params, x), params, chosen


def net_step(batch: int, config_path: str):
    """``(step, args, params, text)``: the whole network's train-mode gradient."""
    import jax
    import optax

    from invjax.layers import scale as sl

    model = mnist_model(config_path)
    x = jax.random.normal(jax.random.PRNGKey(0), (batch, 28, 28, 1))
    labels = jax.random.randint(jax.random.PRNGKey(1), (batch,), 0, 10)
    v = model.init(jax.random.PRNGKey(2), x[:1], train=False)
    params, stats = v["params"], v["batch_stats"]

    def loss(p, stats, x, rng):
        logits, _ = model.apply(
            {"params": p, "batch_stats": stats},
            x,
            train=True,
            rngs={"dropout": rng},
            mutable=["batch_stats"],
        )
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    text = sl.describe_lowerings(model, x.shape)
    step = jax.jit(jax.grad(loss))
    return step, (params, stats, x, jax.random.PRNGKey(3)), params, text


def _peer_seconds(ans, errors):
    if ans["ok"]:
        return ans["seconds"]
    if ans.get("error"):
        errors.append(ans["error"])
    return None


def measure(peer, case: str, inv_steps: dict, repeats: int, batch: int) -> dict:
    """First calls, then ``repeats`` rounds alternating every invjax step and DISCO's."""
    errors = []
    built = peer("build", case=case, batch=batch)
    if not built["ok"] and built.get("error"):
        errors.append(built["error"])
    first = {name: timed(step, *a) for name, (step, a) in inv_steps.items()}
    peer_first = _peer_seconds(peer("fwd_bwd"), errors) if built["ok"] else None
    times = {name: [] for name in inv_steps}
    peer_times = []
    for _ in range(repeats):
        for name, (step, a) in inv_steps.items():
            times[name].append(timed(step, *a))
        if peer_first is not None:
            peer_times.append(_peer_seconds(peer("fwd_bwd"), errors))
    return {
        "invjax": {n: {"first_s": first[n], "median_s": _median(times[n])} for n in inv_steps},
        "disco": {
            "params": built.get("params"),
            "build_s": built.get("build_s"),
            "first_s": peer_first,
            "median_s": _median(peer_times),
        },
        "errors": sorted(set(errors)),
    }


def _ms(s):
    return f"{s * 1e3:9.1f}" if s is not None else "        -"


def _ratio(peer_s, inv_s):
    return f"{peer_s / inv_s:6.2f}" if peer_s and inv_s else "     -"


def loadavg() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "unknown"


def main(argv=None) -> dict:
    args = parse_args(argv)
    import jax

    peer = NoPeer()
    if not args.no_peer:
        log = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"disco_side.{os.getpid()}.log")
        peer = PeerProcess(args.peer_python, args.disco, log)
    load_before = loadavg()
    results = {"load_before": load_before, "cores": os.cpu_count(), "batch": args.batch}
    try:
        info = peer("info")
        results["peer"] = info if info["ok"] else None
        print(
            f"invjax {jax.__version__} ({jax.default_backend()}) against DISCO "
            f"({info.get('torch', 'not run')}, {info.get('threads', '-')} threads); "
            f"{os.cpu_count()} cores, load average {load_before}; batch {args.batch}, "
            f"forward+backward, medians of {args.repeats} alternating rounds"
        )
        if "layers" in args.parts:
            results["layers"] = {}
            for case in args.cases:
                steps, facts = {}, {}
                for lowering in args.lowerings:
                    step, a, params, chosen = layer_step(case, lowering, args.batch, args.config)
                    steps[lowering] = (step, a)
                    facts[lowering] = {"params": count(params), "chosen": chosen}
                r = measure(peer, case, steps, args.repeats, args.batch)
                for lowering in args.lowerings:
                    r["invjax"][lowering].update(facts[lowering])
                results["layers"][case] = r
                for lowering in args.lowerings:
                    inv = r["invjax"][lowering]
                    print(
                        f"  {case:6s} {LAYERS[case][1]:>3d} -> {LAYERS[case][2]:<3d} "
                        f"{LAYERS[case][3]:>2d}x{LAYERS[case][3]:<2d} | DISCO "
                        f"{_ms(r['disco']['median_s'])} ms | invjax {_ms(inv['median_s'])} ms "
                        f"({lowering}: {inv['chosen']}) | DISCO/invjax "
                        f"{_ratio(r['disco']['median_s'], inv['median_s'])} | first call: "
                        f"invjax {_ms(inv['first_s'])} ms, DISCO {_ms(r['disco']['first_s'])} ms"
                    )
                for e in r["errors"]:
                    print(f"  DISCO error ({case}): {e}")
        if "net" in args.parts:
            step, a, params, text = net_step(args.batch, args.config)
            r = measure(peer, "net", {"auto": (step, a)}, args.repeats, args.batch)
            r["invjax"]["auto"].update(params=count(params), lowerings=text)
            results["net"] = r
            inv = r["invjax"]["auto"]
            print(
                f"  network ({os.path.relpath(args.config, REPO)}): parameters invjax "
                f"{inv['params']:,}, DISCO {r['disco']['params'] or 0:,}\n"
                f"    {text}\n"
                f"  network | DISCO {_ms(r['disco']['median_s'])} ms | invjax "
                f"{_ms(inv['median_s'])} ms | DISCO/invjax "
                f"{_ratio(r['disco']['median_s'], inv['median_s'])} | first call: invjax "
                f"{_ms(inv['first_s'])} ms, DISCO {_ms(r['disco']['first_s'])} ms"
            )
            for e in r["errors"]:
                print(f"  DISCO error (net): {e}")
    finally:
        peer.close()
    results["load_after"] = loadavg()
    print(f"load average after: {results['load_after']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"argv": sys.argv[1:] if argv is None else argv, "results": results}, f)
    return results


if __name__ == "__main__":
    main()
