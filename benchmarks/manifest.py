"""Cost of the checkpoint integrity manifests (SHA-256 of every file of a step) per save/restore.

    python benchmarks/manifest.py [--config configs/digits_cnn.py] [--repeats 5] [--data digits]

Prepares the config's run (``--data`` replaces ``data.name``; ``digits`` needs no download),
builds its initial train state, then ``--repeats`` times, alternately: saves a checkpoint step
with orbax (:class:`invjax.checkpoint.Writer`, manifest off) and writes its manifest
(:func:`invjax.checkpoint.write_manifest`); restores it (:func:`invjax.checkpoint.restore_step`,
which checks the manifest first) and checks the manifest alone
(:func:`invjax.checkpoint.verify_manifest`). Prints medians and the ratios manifest / orbax save
and manifest check / whole restore.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import jax
import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/digits_cnn.py")
    parser.add_argument("--data", default="digits")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    from invjax import checkpoint, parallel
    from invjax.configs import load as load_config
    from invjax.training.experiment import prepare
    from invjax.training.state import state_factory

    config = load_config(args.config)
    config.data.name = args.data
    workdir = tempfile.mkdtemp(prefix="invjax-manifest-bench-")
    exp = prepare(config, workdir)
    make, trees = state_factory(
        exp.model,
        exp.tx,
        exp.dataset.image_shape,
        config.seed,
        bool(config.train.select_best),
        exp.sources,
    )
    state = jax.jit(make, out_shardings=parallel.replicated(exp.mesh))(trees)
    target = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state
    )
    writer = checkpoint.Writer(workdir, keep=args.repeats + 1, primary=False)
    meta = {"epoch_sums": [0.0, 0.0, 0], "best_val_error": None, "best_epoch": None}
    save, manifest, restore, verify = [], [], [], []
    for step in range(1, args.repeats + 1):
        t0 = time.perf_counter()
        writer.save(step, state, meta)
        t1 = time.perf_counter()
        checkpoint.write_manifest(workdir, step, range(1, step + 1))
        t2 = time.perf_counter()
        checkpoint.restore_step(workdir, step, target)
        t3 = time.perf_counter()
        assert checkpoint.verify_manifest(workdir, step) is None
        t4 = time.perf_counter()
        save.append(t1 - t0)
        manifest.append(t2 - t1)
        restore.append(t3 - t2)
        verify.append(t4 - t3)
    writer.close()
    step_dir = os.path.join(checkpoint.checkpoint_dir(workdir), "1")
    size = sum(
        os.path.getsize(os.path.join(r, f)) for r, _, files in os.walk(step_dir) for f in files
    )
    n_files = sum(len(files) for _, _, files in os.walk(step_dir))
    med = lambda xs: statistics.median(xs) * 1e3  # noqa: E731
    print(
        f"{args.config} (data {args.data}): state {exp.state_bytes / 2**20:.2f} MiB, one step "
        f"{size / 2**20:.2f} MiB in {n_files} files; median of {args.repeats}, {jax.devices()[0]}"
    )
    print(f"{'':28}{'orbax':>10}{'manifest':>10}{'ratio':>8}")
    print(f"{'save (ms)':28}{med(save):10.1f}{med(manifest):10.1f}{med(manifest) / med(save):8.3f}")
    print(
        f"{'restore incl. check (ms)':28}{med(restore):10.1f}{med(verify):10.1f}"
        f"{med(verify) / med(restore):8.3f}"
    )
    print(f"(sha256 throughput {size / 2**20 / np.median(manifest):.0f} MiB/s on saves)")


if __name__ == "__main__":
    main()
