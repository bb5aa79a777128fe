"""Scaling: training images/s over 1, 2, 4, 8 devices, and multi-stream vs product-group cost.

    python benchmarks/scaling.py [--part devices|groups|both] [--config configs/digits_cnn.py]
        [--per-device-batch 32] [--steps 10] [--fields 8] [--size 32] [--repeats 5] [--json FILE]

Part 1 (devices): one jitted data-parallel train step (:mod:`invjax.parallel`, the step of
:mod:`invjax.training.steps`) of ``--config``'s model on meshes of the first 1, 2, 4 and 8 devices, with a
fixed batch per device (weak scaling: the global batch grows with the mesh). Without GPUs the
script re-runs itself with ``XLA_FLAGS=--xla_force_host_platform_device_count=8``: the forced
CPU devices share this machine's cores, so their "speed-up" measures the overhead of sharding,
not extra compute. Efficiency = images/s on n devices / (n x images/s on 1 device).

Part 2 (groups): the paper's central efficiency claim in numbers. One regular -> regular layer of
``C`` fields (equal widths) in three forms, forward + backward, on ``[B, H, W, ...]`` inputs:

* E(2) stream: a G-convolution, ``C |G|`` channels (invjax's ``E2Conv`` weights ``[C, C, |G|, B]``);
* scale stream: a scale convolution over ``S`` scales ``2^(i/3)`` mixing ``D = 2`` neighbouring
  scales (SESN Hermite basis, ``ScaleConv`` weights ``[C, C, D, F]``);
* product group: rotations x scales in ONE regular representation, ``C |G| S`` channels, weights
  ``[C, C, |G|, D, F]`` expanded as ``K_s[p, (d, ci, h), (co, g)] = sum_f w[ci, co, g^-1 h, d, f]
  Phi[g, s, f, p]`` with ``Phi[g, s, f] = L_g psi_{s, f}`` (the scale basis transformed by ``g``).

The multi-stream cost is the E(2) layer plus the scale layer. Both scale forms run as ``S``
plain convolutions (one per output scale), so neither pays for XLA's slow grouped-convolution
gradient on CPU. Reported: parameters, median time per step (measured alternately), and XLA's
planned temporary memory of the compiled step (``memory_analysis``). ``--check`` also verifies
that the product layer is equivariant to 90-degree rotations (C4).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import runpy
import statistics
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
DEVICE_COUNTS = (1, 2, 4, 8)


# ----------------------------------------------------------------------------- devices


def bench_devices(config_path: str, per_device: int, steps: int) -> dict:
    import jax
    import ml_collections

    from invjax import data, models, parallel
    from invjax.training.optimizer import make_optimizer
    from invjax.training.state import create_state
    from invjax.training.steps import batch_indices, make_train_step

    config = runpy.run_path(config_path)["get_config"]()
    ds = data.load(config.data)
    with config.unlocked():
        config.model.num_classes = ds.num_classes
    model = models.build(config.model)
    tc = ml_collections.ConfigDict(config.train.to_dict())
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    devices = gpus or jax.devices()
    rows = []
    for n in DEVICE_COUNTS:
        if n > len(devices):
            break
        mesh = parallel.make_mesh(devices[:n])
        batch = per_device * n
        tx = make_optimizer(tc, 10)
        step = parallel.jit_train_step(
            make_train_step(model, tx, ds.augment, ds.mean, ds.std), mesh
        )
        state = parallel.replicate(create_state(model, tx, ds.image_shape, 0, False), mesh)
        idx = batch_indices(len(ds.train), batch, 0, 0, 0)
        x = parallel.gather_batch(ds.train.images, idx, mesh)
        y = parallel.gather_batch(ds.train.labels, idx, mesh)
        t = time.perf_counter()
        state, m = step(state, x, y)
        jax.block_until_ready(m)
        compile_s = time.perf_counter() - t
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            state, m = step(state, x, y)
            jax.block_until_ready(m)
            times.append(time.perf_counter() - t)
        rows.append(
            {
                "devices": n,
                "global_batch": batch,
                "step_s": statistics.median(times),
                "images_per_s": batch / statistics.median(times),
                "first_step_s": compile_s,
            }
        )
    for r in rows:
        r["efficiency"] = r["images_per_s"] / (r["devices"] * rows[0]["images_per_s"])
    return {
        "config": os.path.relpath(config_path, REPO),
        "model": config.model.name,
        "per_device_batch": per_device,
        "platform": devices[0].platform,
        "device_kind": devices[0].device_kind,
        "cpu_cores": os.cpu_count(),
        "rows": rows,
    }


def devices_in_subprocess(args) -> dict:
    """Run part 1 in a fresh process with 8 forced CPU devices (fixed when JAX starts)."""
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "force_host_platform" not in f]
    flags.append(f"--xla_force_host_platform_device_count={max(DEVICE_COUNTS)}")
    env = dict(os.environ, XLA_FLAGS=" ".join(flags), JAX_PLATFORMS="cpu")
    cmd = [sys.executable, __file__, "--part", "devices", "--inner", "--config", args.config]
    cmd += ["--per-device-batch", str(args.per_device_batch), "--steps", str(args.steps)]
    out = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"devices benchmark failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- groups


def product_basis(group, scale_basis):
    """``Phi[g, s, f, k, k] = L_g psi_{s, f}``: the scale basis transformed by every element."""
    import jax.numpy as jnp
    import numpy as np

    from invjax import groups

    psi = jnp.asarray(scale_basis, jnp.float32)  # [S, F, k, k]
    out = [groups.transform(psi, group, g, "bilinear", axes=(-2, -1)) for g in range(group.order)]
    return np.asarray(jnp.stack(out))


def expand_product(weight, phi, group):
    """``w [Ci, Co, G, D, F]``, ``Phi [G, S, F, k, k]`` -> ``[S, k, k, D * Ci * G, Co * G]``."""
    import jax.numpy as jnp
    import numpy as np

    ci, co, g, d, _ = weight.shape
    s, k = phi.shape[1], phi.shape[-1]
    perm = np.asarray(group.mul_table[group.inverse])  # perm[g, h] = g^-1 h
    w = weight[:, :, perm]  # [Ci, Co, G(out g), G(in h), D, F]
    kern = jnp.einsum("iogpdf,gsfxy->sxydipog", w, jnp.asarray(phi, weight.dtype))
    return kern.reshape(s, k, k, d * ci * g, co * g)


def per_scale_conv(x, kernels, scale_size):
    """``x [B, H, W, S, C]`` with ``kernels [S, k, k, D * C, Co]`` -> ``[B, H, W, S, Co]``:
    output scale ``s`` convolves input scales ``s .. s + D - 1`` (zeros past the largest)."""
    import jax.numpy as jnp

    from invjax.ops.conv import conv2d
    from invjax.ops.scale import stack_scale_neighbours

    b, h, w, s, c = x.shape
    stacked = stack_scale_neighbours(x, scale_size).reshape(b, h, w, s, scale_size * c)
    return jnp.stack([conv2d(stacked[:, :, :, i], kernels[i]) for i in range(s)], axis=3)


def layer_cases(group_name, n_scales, fields, size, batch, k=5, eff=3, scale_size=2):
    """The three layers as ``(fn, params, x)`` with ``fn(params, x) -> y``."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from invjax.bases import e2 as e2_bases
    from invjax.bases import scale as scale_bases
    from invjax.groups import parse_group, scale_set
    from invjax.ops import e2 as e2_ops

    group = parse_group(group_name)
    G = group.order
    phi_e2 = e2_bases.transformed_basis(group, k)  # [G, B, k, k]
    psi = scale_bases.hermite_basis(k, eff, scale_set(n_scales))  # [S, F, k, k], ratio 2^(1/3)
    if not np.isfinite(psi).all():
        raise ValueError(f"the scale basis for {n_scales} scales and k={k} is not finite")
    phi_prod = product_basis(group, psi)
    nb, nf = phi_e2.shape[1], psi.shape[1]
    keys = jax.random.split(jax.random.PRNGKey(0), 6)
    c = fields

    def e2_layer(w, x):
        return e2_ops.group_conv(x, w, phi_e2, group)

    def scale_layer(w, x):
        kern = jnp.einsum("iodf,sfxy->sxydio", w, jnp.asarray(psi, w.dtype))
        kern = kern.reshape(n_scales, k, k, scale_size * c, c)
        return per_scale_conv(x, kern, scale_size)

    def product_layer(w, x):
        kern = expand_product(w, phi_prod, group)
        return per_scale_conv(x, kern, scale_size)

    small = lambda key, shape: jax.random.normal(key, shape, jnp.float32) * 0.05
    return {
        "e2": (e2_layer, small(keys[0], (c, c, G, nb)), small(keys[1], (batch, size, size, c * G))),
        "scale": (
            scale_layer,
            small(keys[2], (c, c, scale_size, nf)),
            small(keys[3], (batch, size, size, n_scales, c)),
        ),
        "product": (
            product_layer,
            small(keys[4], (c, c, G, scale_size, nf)),
            small(keys[5], (batch, size, size, n_scales, c * G)),
        ),
    }, group


def step_fn(fn):
    import jax
    import jax.numpy as jnp

    return jax.jit(jax.value_and_grad(lambda w, x: jnp.sum(fn(w, x) ** 2), argnums=(0, 1)))


def temp_bytes(step, w, x) -> int:
    analysis = step.lower(w, x).compile().memory_analysis()
    return int(getattr(analysis, "temp_size_in_bytes", 0)) if analysis is not None else -1


def check_product_equivariance(fields=2, size=17) -> float:
    """Relative error of ``layer(L_r x) = L_r layer(x)`` for the 90-degree rotation ``r`` (C4)."""
    import jax.numpy as jnp
    import numpy as np

    from invjax import groups

    cases, group = layer_cases("C4", 3, fields, size, 1)
    fn, w, x = cases["product"]

    def act(t):  # [B, H, W, S, C*G] -> L_r on every scale slice: rotate, permute group channels
        b, h, wd, s, cg = t.shape
        u = jnp.moveaxis(t, 3, 1).reshape(b * s, h, wd, cg)
        u = groups.transform_regular(u, group, 1)
        return jnp.moveaxis(u.reshape(b, s, h, wd, cg), 1, 3)

    a, b = np.asarray(fn(w, act(x))), np.asarray(act(fn(w, x)))
    return float(np.abs(a - b).max() / np.abs(b).max())


def bench_groups(fields, size, batch, repeats) -> list[dict]:
    import jax

    rows = []
    for group_name in ("C4", "D4", "D8"):
        for n_scales in (2, 3, 4):
            cases, group = layer_cases(group_name, n_scales, fields, size, batch)
            steps = {name: step_fn(fn) for name, (fn, _, _) in cases.items()}
            for name, (_, w, x) in cases.items():
                jax.block_until_ready(steps[name](w, x))
            times = {name: [] for name in cases}
            for _ in range(repeats):  # alternately, so that machine load hits all alike
                for name, (_, w, x) in cases.items():
                    t = time.perf_counter()
                    jax.block_until_ready(steps[name](w, x))
                    times[name].append(time.perf_counter() - t)
            row = {"group": group_name, "order": group.order, "scales": n_scales}
            for name, (_, w, x) in cases.items():
                row[f"{name}_params"] = int(w.size)
                row[f"{name}_s"] = statistics.median(times[name])
                row[f"{name}_temp_mb"] = temp_bytes(steps[name], w, x) / 2**20
            multi = {
                key: row[f"e2_{key}"] + row[f"scale_{key}"] for key in ("params", "s", "temp_mb")
            }
            row.update({f"multi_{k}": v for k, v in multi.items()})
            for key in ("params", "s", "temp_mb"):
                row[f"ratio_{key}"] = row[f"product_{key}"] / max(multi[key], 1e-12)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


# ----------------------------------------------------------------------------- output


def print_devices(res: dict) -> None:
    print(
        f"\nData parallel, {res['config']} ({res['model']}), {res['per_device_batch']} images per "
        f"device, {res['platform']} ({res['device_kind']}, {res['cpu_cores']} CPU cores)"
    )
    print(f"{'devices':>8} {'batch':>6} {'step ms':>9} {'images/s':>10} {'efficiency':>11}")
    for r in res["rows"]:
        print(
            f"{r['devices']:>8} {r['global_batch']:>6} {1e3 * r['step_s']:>9.1f} "
            f"{r['images_per_s']:>10.0f} {r['efficiency']:>11.2f}"
        )


def print_groups(rows: list[dict], meta: dict) -> None:
    print(
        f"\nOne layer, {meta['fields']} fields, {meta['size']}x{meta['size']}, batch "
        f"{meta['batch']}, k 5, 2 neighbouring scales; product / (E(2) + scale)"
    )
    head = (
        f"{'group':>5} {'|G|':>4} {'S':>2} {'params multi':>12} {'product':>9} {'x':>6} "
        f"{'ms multi':>9} {'product':>9} {'x':>6} {'MB multi':>9} {'product':>9} {'x':>6}"
    )
    print(head)
    for r in rows:
        print(
            f"{r['group']:>5} {r['order']:>4} {r['scales']:>2} {r['multi_params']:>12,} "
            f"{r['product_params']:>9,} {r['ratio_params']:>6.2f} {1e3 * r['multi_s']:>9.1f} "
            f"{1e3 * r['product_s']:>9.1f} {r['ratio_s']:>6.2f} {r['multi_temp_mb']:>9.1f} "
            f"{r['product_temp_mb']:>9.1f} {r['ratio_temp_mb']:>6.2f}"
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/scaling.py", description=__doc__)
    parser.add_argument("--part", choices=("devices", "groups", "both"), default="both")
    parser.add_argument("--config", default=str(REPO / "configs" / "digits_cnn.py"))
    parser.add_argument("--per-device-batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--fields", type=int, default=8)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--check", action="store_true", help="product layer C4 equivariance")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("per_device_batch", "steps", "fields", "size", "batch", "repeats"):
        if getattr(args, name) < 1:
            print(
                f"scaling: error: --{name.replace('_', '-')}={getattr(args, name)} is invalid: "
                "it must be >= 1",
                file=sys.stderr,
            )
            return 2
    if not os.path.isfile(args.config):
        print(f"scaling: error: --config={args.config}: no such config file", file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO))
    if args.inner:
        print(json.dumps(bench_devices(args.config, args.per_device_batch, args.steps)))
        return 0
    out = {}
    if args.check:
        out["product_c4_equivariance_error"] = check_product_equivariance()
        print(
            f"product layer, C4 rotation by 90 degrees: relative error "
            f"{out['product_c4_equivariance_error']:.2e}"
        )
    if args.part in ("devices", "both"):
        import jax

        if any(d.platform == "gpu" for d in jax.devices()):
            out["devices"] = bench_devices(args.config, args.per_device_batch, args.steps)
        else:
            out["devices"] = devices_in_subprocess(args)
        print_devices(out["devices"])
    if args.part in ("groups", "both"):
        meta = {"fields": args.fields, "size": args.size, "batch": args.batch}
        out["groups"] = {
            **meta,
            "rows": bench_groups(args.fields, args.size, args.batch, args.repeats),
        }
        print_groups(out["groups"]["rows"], meta)
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
