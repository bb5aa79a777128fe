"""Parameter counts and layer tables of the networks (no data, no training; shapes only).

python -m invjax.models svhn_e2_ii [cifar10_dual_map_e2 ...]   # names of configs/models.py
python -m invjax.models --config=configs/NAME.py                # config.model of an experiment
python -m invjax.models --all                                   # one line per model + summary

Each model is initialised abstractly (``jax.eval_shape``), so even WRN28-10 takes seconds. The
input shape follows the dataset (SVHN / CIFAR-10 32x32x3, STL-10 96x96x3, Scaled-MNIST
28x28x1) unless ``--input_shape=H,W,C`` is given.
"""

from __future__ import annotations

import argparse
import pathlib
import runpy
import sys

from invjax.models import build
from invjax.models.common import abstract_variables, count_params, format_table, layer_rows

INPUT_SHAPES = {
    "svhn": (32, 32, 3),
    "svhn_cropped": (32, 32, 3),
    "cifar10": (32, 32, 3),
    "stl10": (96, 96, 3),
    "mnist": (28, 28, 1),
    "scaled_mnist": (28, 28, 1),
    "scaled_digits": (28, 28, 1),
}


def models_file() -> pathlib.Path:
    """``configs/models.py`` of the repository (next to the package), else of the working dir."""
    here = pathlib.Path(__file__).resolve().parents[2] / "configs" / "models.py"
    return here if here.exists() else pathlib.Path("configs/models.py")


def load_models() -> dict:
    path = models_file()
    if not path.exists():
        raise ValueError(f"configs/models.py not found (looked at {path})")
    return runpy.run_path(str(path))


def input_shape_for(name: str) -> tuple[int, int, int]:
    for prefix, shape in sorted(INPUT_SHAPES.items(), key=lambda kv: -len(kv[0])):
        if name.startswith(prefix):
            return shape
    return (32, 32, 3)


def summarise(model_config, shape, table: bool = True, title: str = "") -> tuple[int, str]:
    """Print the layer table (if ``table``); return the total parameter count and, for
    multi-stream networks, a line with the count of each part (streams, head, classifier)."""
    module = build(model_config)
    if table:
        print(format_table(layer_rows(module, (1,) + tuple(shape)), title))
    variables = abstract_variables(module, (1,) + tuple(shape))
    total = count_params(variables.get("params", {}))
    parts = ""
    if model_config.get("name") == "multistream":
        counts = {k: count_params(v) for k, v in variables["params"].items()}
        parts = "(" + ", ".join(f"{k} {v:,}" for k, v in counts.items()) + ")"
    return total, parts


def _parse_shape(text):
    try:
        shape = tuple(int(v) for v in text.split(","))
    except ValueError:
        shape = ()
    if len(shape) != 3 or min(shape) < 1:
        raise ValueError(f"--input_shape={text!r} is invalid: expected H,W,C, e.g. 32,32,3")
    return shape


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m invjax.models", description=__doc__.split("\n")[0])
    p.add_argument("names", nargs="*", help="model names of configs/models.py")
    p.add_argument("--config", help="an experiment config file (uses its config.model)")
    p.add_argument("--all", action="store_true", help="count every model of configs/models.py")
    p.add_argument("--input_shape", help="H,W,C (default: from the dataset)")
    args = p.parse_args(argv)
    shape = _parse_shape(args.input_shape) if args.input_shape else None
    if args.config:
        path, _, arg = args.config.partition(":")
        get_config = runpy.run_path(path)["get_config"]
        cfg = get_config(arg) if arg else get_config()
        model_cfg = cfg.model if "model" in cfg else cfg
        if "num_classes" in model_cfg and model_cfg.num_classes is None:
            # None means "the dataset's" to the trainer; every dataset here has 10 classes.
            model_cfg = model_cfg.copy_and_resolve_references()
            model_cfg.num_classes = 10
        data = cfg.get("data", {}).get("name", "") if "data" in cfg else ""
        s = shape or input_shape_for(str(data))
        total, parts = summarise(model_cfg, s, title=f"{path} (input {s})")
        print(f"params={total} {parts}".rstrip())
        return 0
    models = load_models()
    registry = models["MODELS"]
    names = sorted(registry) if args.all else args.names
    if not names:
        p.error(f"give model names or --all; names: {', '.join(sorted(registry))}")
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise ValueError(f"unknown model names {unknown}: valid names are {sorted(registry)}")
    counts = {}
    for n in names:
        s = shape or input_shape_for(n)
        if args.all:
            counts[n], parts = summarise(registry[n](), s, table=False)
            print(f"{n:<32} {counts[n]:>12,}  {parts}", flush=True)
        else:
            counts[n], parts = summarise(registry[n](), s, title=f"{n} (input {s})")
            print(f"{n}: params={counts[n]} {parts}\n")
    if args.all:
        print("\nsingle streams (the paper keeps them at a constant count):")
        for ds in ("svhn", "cifar10", "stl10"):
            row = {k: counts.get(f"{ds}_{k}") for k in ("std", "e2_ii", "scale_ii")}
            if None in row.values():
                continue
            ref = row["std"]
            print(
                f"  {ds:<8} "
                + "  ".join(f"{k} {v:,} ({100 * (v - ref) / ref:+.1f}%)" for k, v in row.items())
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
