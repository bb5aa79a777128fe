"""Parameter counts and layer tables of the networks (no data, no training; shapes only).

python -m invjax.models svhn_e2_ii cifar10_triple   # model names (configs/models.py) or config
                                                    # names (configs/NAME.py: its config.model)
python -m invjax.models --config=configs/NAME.py    # config.model of an experiment file
python -m invjax.models --all                       # one line per model, beside the peers' counts

Each model is initialised abstractly (``jax.eval_shape``), so even WRN28-10 takes seconds. The
input shape follows the dataset (SVHN / CIFAR-10 32x32x3, STL-10 96x96x3, Scaled-MNIST
28x28x1) unless ``--input_shape=H,W,C`` is given. ``--all`` prints, where the peers have the same
network, the peer's own count (:mod:`invjax.models.peers`: measured by building it in PyTorch).
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


def configs_dir() -> pathlib.Path:
    return models_file().parent


def config_names() -> list[str]:
    """Experiment configs ``configs/NAME.py`` (those with a ``get_config`` and a model)."""
    skip = {"models", "base", "common", "__init__"}
    return sorted(p.stem for p in configs_dir().glob("*.py") if p.stem not in skip)


def load_config(path: str):
    """``(model config, dataset name)`` of an experiment file ``path[:ARG]``."""
    path, _, arg = path.partition(":")
    if not pathlib.Path(path).exists():
        raise ValueError(f"config file {path!r} not found")
    get_config = runpy.run_path(path)["get_config"]
    cfg = get_config(arg) if arg else get_config()
    model_cfg = cfg.model if "model" in cfg else cfg
    if "num_classes" in model_cfg and model_cfg.num_classes is None:
        # None means "the dataset's" to the trainer; every dataset here has 10 classes.
        model_cfg = model_cfg.copy_and_resolve_references()
        model_cfg.num_classes = 10
    data = cfg.get("data", {}).get("name", "") if "data" in cfg else ""
    return model_cfg, str(data)


def resolve(name: str, registry: dict):
    """A model name, a config name or a config path -> ``(model config, input-shape hint)``."""
    if name in registry:
        return registry[name](), name
    if name.endswith(".py") or "/" in name:
        model_cfg, data = load_config(name)
        return model_cfg, data or pathlib.Path(name).stem
    path = configs_dir() / f"{name}.py"
    if name in config_names() and path.exists():
        model_cfg, data = load_config(str(path))
        return model_cfg, data or name
    raise ValueError(
        f"{name!r} is neither a model name nor a config name: model names are "
        f"{sorted(registry)}; config names (configs/NAME.py) are {config_names()}"
    )


def _peer(name: str, count: int) -> str:
    from invjax.models.peers import PEER_COUNTS

    if name not in PEER_COUNTS:
        return ""
    ref = PEER_COUNTS[name][0]
    return f"peer {ref:>12,} ({100 * (count - ref) / ref:+.2f}%)"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m invjax.models",
        description=__doc__.split("\n")[0],
        epilog=(
            "NAMES are model names of configs/models.py (e.g. svhn_e2_ii, cifar10_triple_map_e2, "
            "mnist_disco) or experiment config names of configs/ (e.g. cifar10_triple, "
            "digits_e2), or paths to config files. Examples: python -m invjax.models "
            "cifar10_triple; python -m invjax.models --all; python -m invjax.models "
            "--config=configs/stl10_e2.py --input_shape=96,96,3"
        ),
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="model or config names (see below)")
    p.add_argument("--config", help="an experiment config file (uses its config.model)")
    p.add_argument(
        "--all", action="store_true", help="count every model of configs/models.py (one line each)"
    )
    p.add_argument("--input_shape", help="H,W,C (default: from the dataset)")
    args = p.parse_args(argv)
    try:
        return _run(p, args)
    except ValueError as e:  # bad names, shapes or configs: one message, exit status 2
        p.error(str(e))


def _run(p, args) -> int:
    shape = _parse_shape(args.input_shape) if args.input_shape else None
    if args.config:
        model_cfg, data = load_config(args.config)
        s = shape or input_shape_for(data)
        total, parts = summarise(model_cfg, s, title=f"{args.config} (input {s})")
        print(f"params={total} {parts}".rstrip())
        return 0
    registry = load_models()["MODELS"]
    names = sorted(registry) if args.all else args.names
    if not names:
        p.error(
            f"give model or config names, or --all; model names: {', '.join(sorted(registry))}; "
            f"config names: {', '.join(config_names())}"
        )
    resolved = {n: resolve(n, registry) for n in names}  # every name checked before any compute
    counts = {}
    for n, (model_cfg, hint) in resolved.items():
        s = shape or input_shape_for(hint)
        if args.all:
            counts[n], parts = summarise(model_cfg, s, table=False)
            line = f"{n:<32} {counts[n]:>12,}  {_peer(n, counts[n])}  {parts}"
            print(line.rstrip(), flush=True)
        else:
            counts[n], parts = summarise(model_cfg, s, title=f"{n} (input {s})")
            print(f"{n}: params={counts[n]} {parts} {_peer(n, counts[n])}".rstrip() + "\n")
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
