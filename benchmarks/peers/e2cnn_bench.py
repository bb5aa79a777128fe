"""invjax against e2cnn (PyTorch), measured side by side in one run.

    benchmarks/peers/run.sh                      # makes .venv-peers (e2cnn 0.2.3) once, then this
    python3 benchmarks/peers/e2cnn_bench.py --peer-python .venv-peers/bin/python [--json FILE]
    python3 benchmarks/peers/e2cnn_bench.py --no-peer --fields 2 --size 9 ...   # invjax side only

Four parts (``--parts layer,pieces,wrn,equivariance``; all but ``pieces`` by default):

* ``layer``: one D8 group convolution on 40 regular fields in and out, kernel 5, on ``--batch``
  random ``--size`` x ``--size`` maps: invjax ``E2Conv(40, 'D8', 5)`` against e2cnn ``R2Conv`` on
  regular fields of ``FlipRot2dOnR2(8)``. Construction = from nothing to initialised parameters
  (invjax: bases + ``init`` on one image; e2cnn: the constructor + He init); "first" is the first
  construction in the process, "rebuild" the median of ``--build-repeats`` more with every basis
  cache cleared on both sides. Forward+backward = the gradient of ``sum(y^2)`` with respect to
  the parameters: median of ``--repeats`` alternating single steps (invjax jitted; its first
  call, which compiles, and torch's first call are reported apart).
* ``pieces``: where the ``layer`` part's forward+backward goes, each piece alone on both sides:
  the kernel expansion (coefficients -> expanded kernel, and its gradient) and the convolution
  of the expanded kernel (forward and kernel gradient, with its GFLOP/s), beside the layer.
* ``wrn``: the E(2)-WRN16-4 of ``--wrn-config`` (``configs/svhn_e2.py``: whatever invjax's
  config says at run time, basis settings and widths included) against a re-creation of
  e2cnn_experiments' ``Wide_ResNet(16, 4, 0.3, N=8, r=-1, f=True)`` in e2cnn's API
  (``e2cnn_side.py``; F = 1, sigma = 0.45). Train mode (dropout, batch statistics), 3 x
  ``--size`` x ``--size`` random images. Parameter counts and basis sizes of both are printed.
  Construction: ``--wrn-build-repeats`` alternating cold builds (every compiled program and basis
  of both sides forgotten before each; medians): invjax's :func:`invjax.initialise.init`
  (one compiled program, the values of Flax's eager ``init`` bit for bit) against e2cnn's
  constructor, and with ``--wrn-eager`` also Flax's eager ``init`` (op by op, as before).
  ``--wrn-repeats 0`` skips the forward+backward.
* ``equivariance``: the 45-degree error of a lifting conv followed by the D8 group conv (same
  ``--fields``, kernel 5) of each framework, on one real photo (scikit-image's camera, 65 x 65,
  odd so that it has a centre pixel). The input is rotated by one routine
  (``invjax.groups.rotate``, bilinear) for both; each output is compared with its unrotated output
  rotated by that same routine and channel-permuted by its own framework's regular
  representation, inside the central disk of radius 24.5, relative L2 error; median over
  ``--seeds`` initialisations. The 90-degree error (exact for both) calibrates which group
  element each framework pairs with a counter-clockwise rotation. Both sides compute this part
  in exact float32 (invjax's precision ``'highest'``, PyTorch's TF32 off); the timed parts use
  each framework's default arithmetic (on a GPU, TF32 convolutions in both).

The peer runs in its own venv (``--peer-python``) as a subprocess that answers JSON lines
(``e2cnn_side.py``), so single repetitions of the two alternate and the machine's load hits both.
``--gpu``: e2cnn on CUDA, batch 64 unless ``--batch`` is given (JAX uses its default backend).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import os
import pathlib
import statistics
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
# Measure the invjax of this checkout, not whichever one is installed.
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))  # peer_process, beside this script

import peer_process  # noqa: E402

PARTS = ("layer", "pieces", "wrn", "equivariance")
DEFAULT_PARTS = ("layer", "wrn", "equivariance")
GROUP = "D8"
KERNEL = 5
PHOTO_SIZE, DISK_RADIUS = 65, 24.5


def fail(msg: str) -> None:
    print(f"e2cnn_bench: {msg}", file=sys.stderr)
    raise SystemExit(2)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer-python", default=str(REPO / ".venv-peers" / "bin" / "python"))
    ap.add_argument("--no-peer", action="store_true", help="measure the invjax side only")
    ap.add_argument("--parts", default=",".join(DEFAULT_PARTS), help=f"comma list of {PARTS}")
    ap.add_argument("--gpu", action="store_true", help="e2cnn on CUDA; default batch 64")
    ap.add_argument("--batch", type=int, default=None, help="default 16 (64 with --gpu)")
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--fields", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=5, help="forward+backward repetitions")
    ap.add_argument("--build-repeats", type=int, default=2, help="layer rebuilds, caches cleared")
    ap.add_argument(
        "--wrn-repeats", type=int, default=3, help="WRN forward+backward repetitions (0: none)"
    )
    ap.add_argument(
        "--wrn-build-repeats", type=int, default=1, help="WRN constructions, cold, alternating"
    )
    ap.add_argument(
        "--wrn-eager",
        action="store_true",
        help="also time the WRN's construction by Flax's eager init (op by op), as before",
    )
    ap.add_argument("--wrn-config", default=str(REPO / "configs" / "svhn_e2.py"))
    ap.add_argument(
        "--wrn-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override config.model.KEY of the invjax WRN (tests: widen_factor=1)",
    )
    ap.add_argument("--seeds", type=int, default=3, help="initialisations for the 45-degree error")
    ap.add_argument(
        "--basis",
        choices=("default", "experiments"),
        default="default",
        help="layer and equivariance parts: R2Conv's default basis, or e2cnn_experiments' "
        "(F=1, sigma=0.45) on both sides",
    )
    ap.add_argument("--json", default=None, help="also write every figure to this file")
    args = ap.parse_args(argv)
    parts = tuple(p for p in args.parts.split(",") if p)
    bad = [p for p in parts if p not in PARTS]
    if bad or not parts:
        fail(f"--parts={args.parts!r} is invalid: choose a comma list of {PARTS}")
    args.parts = parts
    if args.batch is None:
        args.batch = 64 if args.gpu else 16
    for name in ("batch", "fields", "repeats", "wrn_build_repeats", "seeds"):
        if getattr(args, name) < 1:
            fail(f"--{name.replace('_', '-')}={getattr(args, name)} is invalid: it must be >= 1")
    if args.wrn_repeats < 0:
        fail(f"--wrn-repeats={args.wrn_repeats} is invalid: it must be >= 0")
    if args.build_repeats < 0:
        fail(f"--build-repeats={args.build_repeats} is invalid: it must be >= 0")
    if args.size < KERNEL:
        fail(f"--size={args.size} is invalid: it must be >= the kernel size {KERNEL}")
    if "wrn" in parts and not os.path.isfile(args.wrn_config):
        fail(f"--wrn-config={args.wrn_config}: no such config file (configs/*.py)")
    for kv in args.wrn_set:
        if "=" not in kv:
            fail(f"--wrn-set={kv!r} is invalid: write KEY=VALUE (e.g. widen_factor=1)")
    if not args.no_peer and not os.access(args.peer_python, os.X_OK):
        fail(
            f"--peer-python={args.peer_python}: no such interpreter; create the peer's venv with "
            "benchmarks/peers/run.sh (or pass --no-peer for the invjax side only)"
        )
    return args


# ----------------------------------------------------------------------------------------------
# the peer subprocess


class PeerProcess(peer_process.PeerProcess):
    """e2cnn_side.py in the peer's venv, one JSON request and answer per line."""

    def __init__(self, python: str, log_path: str):
        threads = str(os.cpu_count() or 1)
        cmd = [python, str(HERE / "e2cnn_side.py"), "--threads", threads]
        super().__init__("e2cnn", cmd, log_path, cwd=str(REPO))


NoPeer = peer_process.NoPeer


# ----------------------------------------------------------------------------------------------
# the invjax side


def clear_basis_caches():
    """Forget every cached steerable basis, so the next layer builds its basis from scratch."""
    from invjax.bases import e2 as e2_bases

    for obj in vars(e2_bases).values():
        if callable(getattr(obj, "cache_clear", None)):
            obj.cache_clear()


def basis_kwargs(module_cls, basis: str) -> dict:
    """invjax keyword arguments for e2cnn_experiments' basis; stop if this invjax has none."""
    if basis == "default":
        return {}
    names = {f.name for f in dataclasses.fields(module_cls)}
    if not {"frequency_cutoff", "sigma"} <= names:
        fail(
            "--basis=experiments is invalid here: this invjax's E2Conv has no frequency_cutoff / "
            "sigma settings; use --basis=default"
        )
    return {"frequency_cutoff": 1.0, "sigma": 0.45}


def weight_leaves(params, prefix=()):
    """``(path, array)`` of every parameter leaf named ``weight``."""
    for k, v in params.items():
        if hasattr(v, "items"):
            yield from weight_leaves(v, prefix + (k,))
        elif k == "weight":
            yield prefix, v


def count(tree) -> int:
    import jax

    return int(sum(x.size for x in jax.tree_util.tree_leaves(tree)))


def timed(fn, *args) -> float:
    import jax

    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - t


def load_config(path: str, sets: list[str]):
    spec = importlib.util.spec_from_file_location("_peers_bench_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config()
    with config.unlocked():
        for kv in sets:
            key, value = kv.split("=", 1)
            if key not in config.model:
                fail(f"--wrn-set={kv!r}: config.model has no key {key!r}")
            old = config.model[key]
            config.model[key] = type(old)(json.loads(value)) if old is not None else value
    return config


# ----------------------------------------------------------------------------------------------
# parts: each returns {"invjax": {...}, "e2cnn": {...}} (None where the peer did not answer)


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _seconds(ans, errors):
    if ans["ok"]:
        return ans["seconds"]
    if ans["error"]:
        errors.append(ans["error"])
    return None


def alternate_fwd_bwd(step, step_args, peer, peer_req, repeats, errors, op="fwd_bwd"):
    """First calls, then medians of alternating single forward+backward steps of both sides
    (the peer's request ``op``)."""
    inv_first = timed(step, *step_args)
    peer_first = _seconds(peer(op, **peer_req), errors)
    inv_t, peer_t = [], []
    for _ in range(repeats):
        inv_t.append(timed(step, *step_args))
        peer_t.append(_seconds(peer(op, **peer_req), errors) if peer_first else None)
    return (inv_first, _median(inv_t)), (peer_first, _median(peer_t))


def part_layer(args, peer):
    import jax
    import jax.numpy as jnp

    from invjax.layers.e2 import E2Conv

    kw = basis_kwargs(E2Conv, args.basis)
    c = args.fields * 16  # D8 regular fields: 16 channels each
    x = jax.random.normal(jax.random.PRNGKey(0), (args.batch, args.size, args.size, c))
    layer = E2Conv(args.fields, GROUP, KERNEL, **kw)
    req = {"fields": args.fields, "kernel": KERNEL, "basis": args.basis, "gpu": args.gpu}
    errors, inv_build, peer_build, facts = [], [], [], {}
    for r in range(1 + args.build_repeats):
        if r:
            clear_basis_caches()
        t = time.perf_counter()
        v = jax.block_until_ready(layer.init(jax.random.PRNGKey(r), x[:1]))
        inv_build.append(time.perf_counter() - t)
        ans = peer("build_layer", seed=r, clear_cache=r > 0, **req)
        peer_build.append(_seconds(ans, errors))
        facts = ans if ans["ok"] else facts
    params = v["params"]
    (w,) = [w for _, w in weight_leaves(params)]

    # The images are an argument, not a closed-over constant, as torch's are (XLA would
    # constant-fold a closed-over batch at compile time).
    def loss(p, x):
        return jnp.sum(layer.apply({"params": p}, x) ** 2)

    inv, pe = alternate_fwd_bwd(
        jax.jit(jax.grad(loss)),
        (params, x),
        peer,
        {"shape": [args.batch, c, args.size, args.size], "gpu": args.gpu},
        args.repeats,
        errors,
    )
    return {
        "invjax": {
            "params": count(params),
            "basis_per_field_pair": int(w.shape[-2] * w.shape[-1]),
            "build_first_s": inv_build[0],
            "build_rebuild_s": _median(inv_build[1:]),
            "fwd_bwd_first_s": inv[0],
            "fwd_bwd_s": inv[1],
        },
        "e2cnn": {
            "params": facts.get("params"),
            "basis_per_field_pair": facts.get("basis_per_field_pair"),
            "build_first_s": peer_build[0],
            "build_rebuild_s": _median(peer_build[1:]),
            "fwd_bwd_first_s": pe[0],
            "fwd_bwd_s": pe[1],
        },
        "errors": sorted(set(errors)),
    }


def part_pieces(args, peer):
    """Where the D8 layer's forward+backward goes: the layer of ``part_layer``, and apart from
    it its two pieces, each side measured the same way (alternating single steps, medians).

    ``expand``: the kernel expansion alone, forward and the gradient of ``sum(K^2)`` with respect
    to the coefficients (invjax: :func:`invjax.ops.e2.expand_regular`, jitted; e2cnn: R2Conv's
    ``basisexpansion``, which training mode runs on every step). ``conv``: the convolution of the
    expanded kernel alone, forward and the gradient of ``sum(y^2)`` with respect to the kernel
    (invjax: :func:`invjax.ops.conv.conv2d`, i.e. ``lax.conv_general_dilated`` on XLA:CPU;
    e2cnn: ``torch.nn.functional.conv2d``, oneDNN), with its arithmetic rate: ``2 B H W Ci Co
    k^2`` floating-point operations forward and as many for the kernel gradient; ``conv_fwd``:
    its forward alone.
    """
    import jax
    import jax.numpy as jnp

    from invjax.layers.e2 import E2Conv
    from invjax.ops import e2 as ops
    from invjax.ops.conv import conv2d

    kw = basis_kwargs(E2Conv, args.basis)
    c = args.fields * 16
    x = jax.random.normal(jax.random.PRNGKey(0), (args.batch, args.size, args.size, c))
    layer = E2Conv(args.fields, GROUP, KERNEL, **kw)
    params = layer.init(jax.random.PRNGKey(0), x[:1])["params"]
    errors = []
    ans = peer(
        "build_layer", seed=0, fields=args.fields, kernel=KERNEL, basis=args.basis, gpu=args.gpu
    )
    _seconds(ans, errors)
    g = layer.group
    phi = layer.basis(g)

    def expand(w):
        return ops.expand_regular(w, phi, g, layer.precision)

    kernel = jax.jit(expand)(params["weight"])
    # The pieces are the layer's: its output is the convolution of the expanded kernel.
    y_layer = layer.apply({"params": params}, x)
    y_pieces = conv2d(x, kernel, 1, precision=layer.precision)
    match = float(jnp.linalg.norm(y_pieces - y_layer) / jnp.linalg.norm(y_layer))

    def conv_loss(k, x):
        return jnp.sum(conv2d(x, k, 1, precision=layer.precision) ** 2)

    def layer_loss(p, x):
        return jnp.sum(layer.apply({"params": p}, x) ** 2)

    shape = [args.batch, c, args.size, args.size]
    steps = {
        "expand": (jax.jit(jax.grad(lambda w: jnp.sum(expand(w) ** 2))), (params["weight"],)),
        "conv_fwd": (jax.jit(lambda k, x: conv2d(x, k, 1, precision=layer.precision)), (kernel, x)),
        "conv": (jax.jit(jax.grad(conv_loss)), (kernel, x)),
        "layer": (jax.jit(jax.grad(layer_loss)), (params, x)),
    }
    out = {"invjax": {}, "e2cnn": {}}
    for name, (step, step_args) in steps.items():
        req = {"shape": shape, "gpu": args.gpu} | ({} if name == "layer" else {"piece": name})
        op = "fwd_bwd" if name == "layer" else "piece"
        inv, pe = alternate_fwd_bwd(step, step_args, peer, req, args.repeats, errors, op)
        out["invjax"][name + "_s"], out["e2cnn"][name + "_s"] = inv[1], pe[1]
    flops = 2 * 2 * args.batch * args.size**2 * c * c * KERNEL**2
    for side in ("invjax", "e2cnn"):
        s = out[side]["conv_s"]
        out[side]["conv_gflops"] = None if s is None else flops / s / 1e9
    out["invjax"]["pieces_vs_layer_rel_error"] = match
    out["errors"] = sorted(set(errors))
    return out


def clear_compiled():
    """Forget every compiled program of this process and every basis: a cold construction."""
    import jax

    from invjax import initialise

    clear_basis_caches()
    initialise._COMPILED.clear()
    jax.clear_caches()


def wrn_construction(args, model, x, peer, errors):
    """Alternating cold constructions of the WRN: invjax's (:func:`invjax.initialise.init`,
    one compiled program; with ``--wrn-eager`` also Flax's eager ``init``, op by op) and
    e2cnn's, every compiled program and basis forgotten before each. Returns ``(variables,
    {side: [seconds, ...]}, e2cnn facts)``."""
    import jax

    from invjax import initialise

    def build(fn):
        clear_compiled()
        t = time.perf_counter()
        v = jax.block_until_ready(fn(model, jax.random.PRNGKey(1), x[:1], train=False))
        return v, time.perf_counter() - t

    times = {"invjax": [], "invjax_eager": [], "e2cnn": []}
    facts = {}
    for r in range(args.wrn_build_repeats):
        v, seconds = build(initialise.init)
        times["invjax"].append(seconds)
        ans = peer("build_wrn", seed=r, clear_cache=True, gpu=args.gpu)
        times["e2cnn"].append(_seconds(ans, errors))
        facts = ans if ans["ok"] else facts
        if args.wrn_eager:
            times["invjax_eager"].append(build(lambda m, *a, **k: m.init(*a, **k))[1])
    return v, times, facts


def part_wrn(args, peer):
    import jax
    import jax.numpy as jnp

    from invjax import models

    config = load_config(args.wrn_config, args.wrn_set)
    cfg = config.model
    model = models.build(cfg)
    x = jax.random.normal(jax.random.PRNGKey(0), (args.batch, args.size, args.size, 3))
    errors = []
    v, build, facts = wrn_construction(args, model, x, peer, errors)
    params, stats = v["params"], v.get("batch_stats", {})
    per_pair = sorted(
        {
            ("shortcut" if "shortcut" in "/".join(path) else "conv", int(w.shape[-2] * w.shape[-1]))
            for path, w in weight_leaves(params)
            if w.ndim == 4  # regular -> regular: [C_in, C_out, |G|, basis]
        }
    )

    def loss(p, stats, x, key):
        y, _ = model.apply(
            {"params": p, "batch_stats": stats},
            x,
            train=True,
            rngs={"dropout": key},
            mutable=["batch_stats"],
        )
        return jnp.sum(y**2)

    inv, pe = (None, None), (None, None)
    if args.wrn_repeats:
        inv, pe = alternate_fwd_bwd(
            jax.jit(jax.grad(loss)),
            (params, stats, x, jax.random.PRNGKey(2)),
            peer,
            {"shape": [args.batch, 3, args.size, args.size], "gpu": args.gpu},
            args.wrn_repeats,
            errors,
        )
    return {
        "invjax": {
            "config": os.path.relpath(args.wrn_config, REPO),
            "overrides": args.wrn_set,
            "basis": {
                "frequency_cutoff": cfg.get("e2_frequency_cutoff"),
                "sigma": cfg.get("e2_sigma"),
            },
            "params": count(params),
            "basis_per_field_pair": [list(p) for p in per_pair],
            "build_first_s": build["invjax"][0],
            "build_s": _median(build["invjax"]),
            "build_runs_s": build["invjax"],
            "build_eager_s": _median(build["invjax_eager"]),
            "build_eager_runs_s": build["invjax_eager"],
            "fwd_bwd_first_s": inv[0],
            "fwd_bwd_s": inv[1],
        },
        "e2cnn": {
            "network": "Wide_ResNet(16, 4, 0.3, N=8, r=-1, f=True), F=1, sigma=0.45 (re-created)",
            "params": facts.get("params"),
            "basis_per_field_pair": facts.get("basis_per_field_pair"),
            "build_first_s": build["e2cnn"][0],
            "build_s": _median(build["e2cnn"]),
            "build_runs_s": build["e2cnn"],
            "fwd_bwd_first_s": pe[0],
            "fwd_bwd_s": pe[1],
        },
        "errors": sorted(set(errors)),
    }


def camera_photo(size: int = PHOTO_SIZE):
    """scikit-image's camera, a smooth odd-size grey crop ``[1, size, size, 1]`` in [0, 1]."""
    import numpy as np
    import skimage.data
    import skimage.transform

    img = skimage.data.camera()[40:300, 120:380].astype(np.float64) / 255.0
    img = skimage.transform.resize(img, (size, size), anti_aliasing=True)
    return img.astype(np.float32)[None, :, :, None]


def equivariance_errors(y, mats, labels, n_rot: int = 8):
    """45- and 90-degree errors of outputs ``y = [f(x), f(R90 x), f(R45 x)]`` (NHWC, regular).

    ``mats[e]`` is the regular representation of element ``labels[e] = (flip, rotation)``. The
    rotation paired with the counter-clockwise quarter turn of ``invjax.groups.rotate`` is the
    one of the two candidates (2 or n-2) that matches best at 90 degrees (where both frameworks
    are exact); the 45-degree element is its half (1 or n-1).
    """
    import jax
    import jax.numpy as jnp
    import numpy as np

    from invjax import groups as G

    px, py = G.plane_coordinates(y.shape[1], y.shape[2])
    disk = jnp.asarray((np.hypot(px, py) < DISK_RADIUS)[None, :, :, None], jnp.float32)
    fields = y.shape[-1] // mats.shape[-1]

    def act(z, angle, e):
        z = G.rotate(jnp.asarray(z), angle, "bilinear")
        z = z.reshape(z.shape[:-1] + (fields, mats.shape[-1]))
        # HIGHEST: a GPU's default TF32 would round every value to 11 bits (2e-4 here).
        m = jnp.asarray(mats[e], jnp.float32)
        z = jnp.einsum("...fg,hg->...fh", z, m, precision=jax.lax.Precision.HIGHEST)
        return z.reshape(z.shape[:-2] + (-1,))

    def rel(a, b):
        return float(jnp.linalg.norm((a - b) * disk) / jnp.linalg.norm(b * disk))

    index = {tuple(lab): e for e, lab in enumerate(labels)}
    errs90 = {r: rel(y[1:2], act(y[0:1], math.pi / 2, index[(0, r)])) for r in (2, n_rot - 2)}
    r90 = min(errs90, key=errs90.get)
    r45 = 1 if r90 == 2 else n_rot - 1
    return {
        "rot45": rel(y[2:3], act(y[0:1], math.pi / 4, index[(0, r45)])),
        "rot90": errs90[r90],
        "rot45_element": [0, r45],
    }


def part_equivariance(args, peer):
    import jax
    import jax.numpy as jnp
    import numpy as np

    from invjax import groups as G
    from invjax import precision as P
    from invjax.layers.e2 import E2Conv, E2LiftConv

    kw = basis_kwargs(E2Conv, args.basis)
    photo = jnp.asarray(camera_photo())
    batch = jnp.concatenate(
        [photo, G.rotate(photo, math.pi / 2, "bilinear"), G.rotate(photo, math.pi / 4, "bilinear")]
    )
    g = G.parse_group(GROUP)
    inv_mats = np.stack([np.eye(g.order)[g.regular_permutation(e)] for e in range(g.order)])
    inv_labels = [tuple(int(a) for a in g.element(e)) for e in range(g.order)]
    lift = E2LiftConv(args.fields, GROUP, KERNEL, **kw)
    conv = E2Conv(args.fields, GROUP, KERNEL, **kw)
    inv, pe, errors, facts = {"lift": [], "conv": []}, {"lift": [], "conv": []}, [], {}
    with tempfile.TemporaryDirectory() as tmp:
        images = os.path.join(tmp, "photos.npy")
        np.save(images, np.asarray(batch))
        for seed in range(args.seeds):
            # Exact float32 on any device (the peer turns TF32 off likewise): on a GPU the
            # default arithmetic would put ~1e-4 into the 90-degree row (README, "Precision and the guarantee").
            with P.jax_default(P.EXACT):
                vl = lift.init(jax.random.PRNGKey(2 * seed), batch[:1])
                y1 = lift.apply(vl, batch)
                vc = conv.init(jax.random.PRNGKey(2 * seed + 1), y1[:1])
                y2 = conv.apply(vc, y1)
            for name, y in (("lift", y1), ("conv", y2)):
                inv[name].append(equivariance_errors(np.asarray(y), inv_mats, inv_labels))
            prefix = os.path.join(tmp, f"e2cnn{seed}_")
            ans = peer(
                "equivariance",
                images=images,
                out_prefix=prefix,
                fields=args.fields,
                kernel=KERNEL,
                basis=args.basis,
                seed=seed,
                gpu=args.gpu,
            )
            if not ans["ok"]:
                errors += [ans["error"]] if ans["error"] else []
                continue
            facts = ans
            mats = np.load(prefix + "rep.npy")
            for name in ("lift", "conv"):
                y = np.load(prefix + name + ".npy")
                pe[name].append(equivariance_errors(y, mats, ans["elements"]))

    def summary(runs):
        if not runs:
            return None
        return {
            "rot45": _median([r["rot45"] for r in runs]),
            "rot45_all": [r["rot45"] for r in runs],
            "rot90_max": max(r["rot90"] for r in runs),
            "rot45_element": runs[0]["rot45_element"],
        }

    return {
        "photo": f"skimage camera, {PHOTO_SIZE}x{PHOTO_SIZE}, disk r < {DISK_RADIUS}",
        "invjax": {k: summary(v) for k, v in inv.items()},
        "e2cnn": {k: summary(v) for k, v in pe.items()}
        | {"basis_per_field_pair": facts.get("basis_per_field_pair")},
        "errors": sorted(set(errors)),
    }


# ----------------------------------------------------------------------------------------------
# report


def _ms(s):
    return "-" if s is None else f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def _ratio(a, b):
    return "-" if a is None or b is None else f"{a / b:.2f}"


def print_timings(title, r, rows):
    print(f"\n{title}")
    print(f"  {'':34s} {'invjax':>12s} {'e2cnn':>12s} {'e2cnn/invjax':>13s}")
    for label, key in rows:
        a, b = r["invjax"].get(key), r["e2cnn"].get(key)
        print(f"  {label:34s} {_ms(a):>12s} {_ms(b):>12s} {_ratio(b, a):>13s}")


def report(args, res):
    """Print the tables of the parts in ``res`` (each part as soon as it is measured)."""
    if "layer" in res:
        r = res["layer"]
        print_timings(
            f"D8 layer, {args.fields} regular fields in and out, kernel {KERNEL} "
            f"(basis: {args.basis}); params invjax {r['invjax']['params']:,} / e2cnn "
            f"{r['e2cnn']['params'] or '-'}; basis coefficients per field pair "
            f"{r['invjax']['basis_per_field_pair']} / {r['e2cnn']['basis_per_field_pair'] or '-'}",
            r,
            [
                ("construction, first in process", "build_first_s"),
                (f"construction, rebuild (x{args.build_repeats})", "build_rebuild_s"),
                ("forward+backward, first call", "fwd_bwd_first_s"),
                (f"forward+backward (median of {args.repeats})", "fwd_bwd_s"),
            ],
        )
    if "pieces" in res:
        r = res["pieces"]
        rate = lambda side: (
            "-" if r[side]["conv_gflops"] is None else f"{r[side]['conv_gflops']:.1f}"
        )
        print_timings(
            f"Where the D8 layer's time goes ({args.fields} fields, kernel {KERNEL}, basis "
            f"{args.basis}); convolution GFLOP/s invjax {rate('invjax')} / e2cnn {rate('e2cnn')}",
            r,
            [
                ("kernel expansion, fwd+bwd", "expand_s"),
                ("convolution, forward only", "conv_fwd_s"),
                ("convolution, fwd + kernel gradient", "conv_s"),
                (f"the layer, fwd+bwd (median of {args.repeats})", "layer_s"),
            ],
        )
    if "wrn" in res:
        r = res["wrn"]
        i, e = r["invjax"], r["e2cnn"]
        print_timings(
            f"E(2)-WRN16-4: invjax {i['config']} {' '.join(i['overrides'])} (basis "
            f"F={i['basis']['frequency_cutoff']}, sigma={i['basis']['sigma']}; None = R2Conv's "
            f"defaults), {i['params']:,} params, basis per field pair {i['basis_per_field_pair']}"
            f"\n  e2cnn {e['network']}, {e['params'] or '-'} params, basis per field pair "
            f"[kernel, n] {e['basis_per_field_pair'] or '-'}",
            r,
            [
                ("construction, first in process", "build_first_s"),
                (f"construction (median of {args.wrn_build_repeats})", "build_s"),
                ("forward+backward, first call", "fwd_bwd_first_s"),
                (f"forward+backward (median of {args.wrn_repeats})", "fwd_bwd_s"),
            ],
        )
        if i["build_eager_s"] is not None:
            print(
                f"  invjax construction by Flax's eager init (median of {args.wrn_build_repeats}):"
                f" {_ms(i['build_eager_s'])}, {_ratio(i['build_eager_s'], i['build_s'])}x the "
                f"compiled one's; e2cnn / eager {_ratio(e['build_s'], i['build_eager_s'])}"
            )
    if "equivariance" in res:
        r = res["equivariance"]
        print(
            f"\n45-degree equivariance error, D8, {args.fields} fields, kernel {KERNEL} ({r['photo']}; "
            f"median of {args.seeds} inits; 90-degree error as the exactness check)"
        )
        print(
            f"  {'':24s} {'invjax 45':>10s} {'e2cnn 45':>10s} {'invjax 90':>10s} {'e2cnn 90':>10s}"
        )
        for name, label in (("lift", "lifting conv"), ("conv", "lifting + group conv")):
            a, b = r["invjax"][name], r["e2cnn"].get(name)
            f = lambda d, k: "-" if d is None else f"{d[k]:.4f}" if k == "rot45" else f"{d[k]:.1e}"
            print(
                f"  {label:24s} {f(a, 'rot45'):>10s} {f(b, 'rot45'):>10s} "
                f"{f(a, 'rot90_max'):>10s} {f(b, 'rot90_max'):>10s}"
            )
    for part, r in res.items():
        for err in r.get("errors", []):
            print(f"e2cnn side failed in {part}: {err}")
    sys.stdout.flush()


def main(argv=None):
    args = parse_args(argv)
    import jax

    env = {"jax": jax.__version__, "jax_device": jax.devices()[0].device_kind, "argv": sys.argv}
    log = os.path.join(tempfile.gettempdir(), f"e2cnn_side.{os.getpid()}.log")
    peer = NoPeer() if args.no_peer else PeerProcess(args.peer_python, log)
    try:
        info = peer("info")
        if info["ok"]:
            env["peer"] = (
                f"e2cnn {info['e2cnn']}, torch {info['torch']}, numpy {info['numpy']}, "
                f"{info['threads']} threads{', CUDA' if args.gpu and info['cuda'] else ''}"
                + (f"; patched: {'; '.join(info['patched'])}" if info["patched"] else "")
            )
        print(
            f"device: {env['jax_device']} (jax {env['jax']}); e2cnn side: "
            f"{env.get('peer', 'not run')}; batch {args.batch}, {args.size}x{args.size}",
            flush=True,
        )
        res = {}
        for part in args.parts:
            res[part] = {
                "layer": part_layer,
                "pieces": part_pieces,
                "wrn": part_wrn,
                "equivariance": part_equivariance,
            }[part](args, peer)
            report(args, {part: res[part]})
    finally:
        peer.close()
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"env": env, "results": res}, indent=1))
    return res


if __name__ == "__main__":
    main()
