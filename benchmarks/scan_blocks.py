"""Does ``nn.scan`` over each stage's identical residual blocks shorten the first train step?

    PYTHONPATH=. python benchmarks/scan_blocks.py --config=configs/svhn_e2_ii.py \\
        --width-divisor=4 --batch=16
    PYTHONPATH=. python benchmarks/scan_blocks.py --config=configs/cifar10_e2_ii.py \\
        --width-divisor=8 --batch=8

A measurement, not a library feature: the network of the config is built twice, as it is and
with the blocks ``2 .. n`` of each stage (``2 .. n-1`` in the last stage of an E(2) network,
whose last block maps to invariant fields) folded into one ``nn.scan`` per stage (the same
blocks, their parameters stacked on a leading axis). For each, the train step is lowered,
compiled and run once (time to the first step), then timed (median of ``--reps``, the two
forms interleaved). A WRN of depth ``6n + 4`` has ``n`` blocks per stage: WRN16 (``n = 2``)
has one identical block per stage (none in an E(2) network's last), so a scan has nothing to
fold there; WRN28 (``n = 4``) has 3, 3 and 2.
"""

from __future__ import annotations

import argparse
import json
import runpy
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from invjax import models
from invjax.data import datasets
from invjax.models.wrn import WideResNet, WRNBlock
from invjax.training.optimizer import make_optimizer
from invjax.training.state import init_variables, initial_state, state_factory
from invjax.training.steps import make_train_step


class _Body(nn.Module):
    """One identical block as a scan body: ``(x, None) -> (block(x), None)``."""

    spec: object
    features: int
    group: object
    dropout: float
    train: bool

    @nn.compact
    def __call__(self, x, _):
        block = WRNBlock(self.spec, self.features, self.group, self.features, 1, self.dropout)
        return block(x, self.train), None


class ScannedWideResNet(WideResNet):
    """:class:`WideResNet` with each stage's identical blocks in one ``nn.scan``."""

    @nn.compact
    def __call__(self, x, train: bool = False, features_only: bool = False):
        from invjax.layers import e2 as e2l

        self._check_input(x)
        spec, w, n = self.spec, self.widths, self.blocks_per_stage
        groups = tuple(self.groups) if self.family == "e2" else (None, None, None)
        x = spec.conv(w["stem"], 1, groups[0], "stem", lift=True)(x)
        for s in range(3):
            if s and self.family == "e2" and groups[s] != groups[s - 1]:
                x = e2l.Restrict(groups[s - 1], groups[s], name=f"restrict{s}")(x)
            trivial_last = s == 2 and self.family == "e2"
            first = WRNBlock(
                spec,
                w["out"] if trivial_last and n == 1 else w["stages"][s],
                groups[s],
                inner_features=w["stages"][s],
                stride=self.first_stride if s == 0 else 2,
                dropout=self.dropout,
                trivial_out=trivial_last and n == 1,
                in_group=groups[s - 1] if s else None,
                name=f"block{s + 1}_1",
            )
            x = first(x, train)
            same = n - 1 - (1 if trivial_last and n > 1 else 0)
            if same > 0:
                scan = nn.scan(
                    _Body,
                    variable_axes={"params": 0, "batch_stats": 0},
                    split_rngs={"params": True, "dropout": True},
                    length=same,
                )
                body = scan(
                    spec, w["stages"][s], groups[s], self.dropout, train, name=f"scan{s + 1}"
                )
                x, _ = body(x, None)
            if trivial_last and n > 1:
                x = WRNBlock(
                    spec,
                    w["out"],
                    groups[s],
                    inner_features=w["stages"][s],
                    dropout=self.dropout,
                    trivial_out=True,
                    name=f"block{s + 1}_{n}",
                )(x, train)
        feats = self._head(x, train)
        if features_only:
            return feats
        return nn.Dense(self.num_classes, name="classifier")(feats)


def _first_and_step(model, config, shape, batch, reps_hook):
    x = jnp.asarray(np.random.default_rng(0).uniform(size=(batch, *shape)), jnp.float32)
    labels = jnp.arange(batch) % 10
    abstract = jax.eval_shape(lambda k: init_variables(model, shape, k), jax.random.key(0))
    tx = make_optimizer(config.train, 100, abstract["params"])
    make, args = state_factory(model, tx, shape, 0, False)
    state = initial_state(make, args, None)
    t0 = time.perf_counter()
    step = jax.jit(make_train_step(model, tx, "none", 0.5, 0.25)).lower(state, x, labels).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(step(state, x, labels))
    first_s = time.perf_counter() - t0
    n_params = sum(int(np.prod(p.shape)) for p in jax.tree.leaves(state.params))
    return {"compile_s": compile_s, "first_step_s": first_s, "params": n_params}, (
        lambda: jax.block_until_ready(step(state, x, labels))
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--width-divisor", type=float, default=1.0)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    config = runpy.run_path(args.config)["get_config"]()
    with config.model.unlocked():
        config.model.width_divisor = float(args.width_divisor)
        config.model.num_classes = config.model.get("num_classes") or 10
    plain = models.build(config.model)
    fields = {
        f: getattr(plain, f) for f in plain.__dataclass_fields__ if f not in ("parent", "name")
    }
    scanned = ScannedWideResNet(**fields)
    shape = tuple(datasets.DATASETS[config.data.name][0])
    rows, runs = {}, {}
    for name, model in (("plain", plain), ("scan", scanned)):
        rows[name], runs[name] = _first_and_step(model, config, shape, args.batch, None)
        print(f"# {name}: {rows[name]}", flush=True)
    times = {k: [] for k in runs}
    for _ in range(args.reps):
        for k, run in runs.items():
            t = time.perf_counter()
            run()
            times[k].append(time.perf_counter() - t)
    for k in rows:
        rows[k]["step_ms"] = 1e3 * float(np.median(times[k]))
        print(
            f"{args.config} widths / {args.width_divisor:g}, batch {args.batch}: {k:5s} {rows[k]}"
        )
    assert rows["plain"]["params"] == rows["scan"]["params"]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": jax.devices()[0].device_kind, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
