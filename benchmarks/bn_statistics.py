"""A finished run's error with its BatchNorm running statistics against the training set's own.

    python benchmarks/bn_statistics.py RUN_DIR [RUN_DIR ...]   # a run's --workdir (or DIR/seed_k)

Evaluation reads the running statistics that training left
(``running = m * running + (1 - m) * batch``, started at mean 0, variance 1). This script
restores the run's variables, evaluates test and training images in evaluation mode, then
replaces every running mean and variance by the statistics of the whole training set (one
train-mode pass at momentum 0 with dropout off: what a run would hold after infinitely many
steps on those images, without augmentation) and evaluates again. A large difference means the
run was too short for its momentum (``invjax.training.experiment.bn_statistics_warning``);
docs/monomials.md, "The WS head's evaluation gap", used it. Also prints, per BatchNorm layer,
the largest gap between the two sets of statistics.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # this checkout's invjax
from invjax import checkpoint, models, run
from invjax.data import datasets


def _errors(model, variables, split, normalise, n: int) -> float:
    logits = model.apply(variables, jnp.asarray(normalise(split.images[:n])), train=False)
    return float((np.argmax(logits, -1) != split.labels[:n]).mean() * 100)


def report(workdir: str, n: int = 2000) -> dict:
    """``{'running': {'test', 'train'}, 'train_set': {...}, 'layers': {name: (mean gap, var
    gap)}}`` of one run directory (errors in %)."""
    config = run.stored_config(workdir)
    if config is None:
        raise SystemExit(f"{workdir}: no readable checkpoint (give a run's --workdir)")
    variables = checkpoint.load_params(workdir, allow_unverified=True)
    ds = datasets.load(config.data)
    model = models.build(config.model)

    def normalise(x):
        return (x.astype(np.float32) - ds.mean) / ds.std

    out = {
        "running": {
            s: _errors(model, variables, getattr(ds, s), normalise, n) for s in ("test", "train")
        }
    }
    overrides = {"dropout": 0.0} if hasattr(model, "dropout") else {}
    if not hasattr(model, "bn_momentum"):
        raise SystemExit(f"{workdir}: model {config.model.name!r} has no bn_momentum to set to 0")
    exact = model.clone(bn_momentum=0.0, **overrides)
    _, new = exact.apply(
        variables, jnp.asarray(normalise(ds.train.images)), train=True, mutable=["batch_stats"],
        rngs={"dropout": jax.random.PRNGKey(0)},
    )  # fmt: skip
    recalibrated = {**variables, "batch_stats": new["batch_stats"]}
    out["train_set"] = {
        s: _errors(model, recalibrated, getattr(ds, s), normalise, n) for s in ("test", "train")
    }
    old = dict(jax.tree_util.tree_flatten_with_path(variables["batch_stats"])[0])
    layers = {}
    for path, b in jax.tree_util.tree_flatten_with_path(new["batch_stats"])[0]:
        name, kind = jax.tree_util.keystr(path[:-1]), jax.tree_util.keystr(path[-1:])
        gap = float(np.abs(np.asarray(old[path]) - np.asarray(b)).max())
        layers.setdefault(name, {})[kind] = (gap, float(np.abs(np.asarray(b)).max()))
    out["layers"] = layers
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdirs", nargs="+")
    parser.add_argument("--n", type=int, default=2000, help="images per split evaluated")
    args = parser.parse_args()
    for wd in args.workdirs:
        r = report(wd, args.n)
        print(f"{wd}")
        print(
            f"  running statistics:   test {r['running']['test']:.2f}%  train {r['running']['train']:.2f}%"
        )
        print(
            f"  training set's stats: test {r['train_set']['test']:.2f}%  train {r['train_set']['train']:.2f}%"
        )
        for name, kinds in r["layers"].items():
            cells = ", ".join(
                f"{k} gap {g:.3g} (largest |value| {v:.3g})" for k, (g, v) in kinds.items()
            )
            print(f"  {name}: {cells}")


if __name__ == "__main__":
    main()
