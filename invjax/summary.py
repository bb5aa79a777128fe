"""Parameter counts and layer tables of the networks (no data, no training; shapes only).

python -m invjax.summary svhn_e2_ii cifar10_triple   # model names (invjax/configs/models.py) or
                                                     # config names (configs/NAME.py)
python -m invjax.summary configs/NAME.py             # config.model of an experiment file
python -m invjax.summary --config=configs/NAME.py    # the same
python -m invjax.summary --all                       # one line per model, beside the peers' counts

Each model is initialised abstractly (``jax.eval_shape``), so even WRN28-10 takes seconds. The
input shape follows the dataset (SVHN / CIFAR-10 32x32x3, STL-10 96x96x3, Scaled-MNIST
28x28x1) unless ``--input_shape=H,W,C`` is given. ``--all`` prints, where the peers have the same
network, the peer's own count (:mod:`invjax.models.peers`: measured by building it in PyTorch).
A config name is looked up in ``./configs``, then in the ``configs/`` of the checkout invjax is
installed from, so it works from any directory; a config path works anywhere.
"""

from __future__ import annotations

import argparse
import difflib
import pathlib
import sys

import invjax
from invjax import configs
from invjax.configs import models as model_configs
from invjax.data import DATASETS
from invjax.models import build
from invjax.models.common import abstract_variables, count_params, format_table, layer_rows


def input_shape_for(name: str) -> tuple[int, int, int]:
    """``(H, W, C)`` of a dataset (:data:`invjax.data.DATASETS`) or of a model name of
    :mod:`invjax.configs.models` (the dataset of its architecture); 32x32x3 otherwise."""
    data = name if name in DATASETS else model_configs.dataset_of(name)
    return tuple(DATASETS[data][0]) if data else (32, 32, 3)


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


#: Where config names are looked up first: the rows of the checkout in the working directory.
CONFIG_DIR = pathlib.Path("configs")


def config_dirs() -> list[pathlib.Path]:
    """Where a config name is looked up, in order: ``./configs`` and the ``configs/`` beside the
    invjax package (a checkout installed with ``pip install -e .``, run from anywhere)."""
    beside = pathlib.Path(invjax.__file__).resolve().parents[1] / "configs"
    dirs = dict.fromkeys(d.resolve() for d in (CONFIG_DIR, beside) if d.is_dir())
    return list(dirs)


def config_file(name: str) -> pathlib.Path | None:
    """``NAME.py`` of the first of :func:`config_dirs` that holds it, else None."""
    for d in config_dirs():
        if (d / f"{name}.py").is_file() and name != "__init__":
            return d / f"{name}.py"
    return None


def config_names() -> list[str]:
    """The experiment config names of :func:`config_dirs` (none where neither exists)."""
    return sorted({p.stem for d in config_dirs() for p in d.glob("*.py") if p.stem != "__init__"})


def _model_and_data(cfg):
    """``(model config, dataset name)`` of an experiment config (or of a model section)."""
    model_cfg = cfg.model if "model" in cfg else cfg
    if "num_classes" in model_cfg and model_cfg.num_classes is None:
        # None means "the dataset's" to the trainer; every dataset here has 10 classes.
        model_cfg = model_cfg.copy_and_resolve_references()
        model_cfg.num_classes = 10
    data = cfg.data.get("name", "") if "data" in cfg else ""
    return model_cfg, str(data)


def load_config(path: str):
    """``(model config, dataset name)`` of an experiment file ``path[:ARG]`` (loaded as
    ``python -m invjax.main --config=path[:ARG]`` loads it)."""
    file = path.partition(":")[0]
    if not pathlib.Path(file).is_file():
        raise ValueError(f"config file {file!r} not found")
    return _model_and_data(configs.load(path))


def resolve(name: str):
    """A model name, a config name or a config path -> ``(model config, input-shape hint)``."""
    if name in model_configs.MODELS:
        return model_configs.get(name), name
    if name.endswith(".py") or "/" in name:
        model_cfg, data = load_config(name)
        return model_cfg, data or pathlib.Path(name).stem
    path = config_file(name)
    if path is not None:
        model_cfg, data = _model_and_data(configs.load(str(path)))
        return model_cfg, data or name
    known = list(dict.fromkeys(sorted(model_configs.MODELS) + config_names()))
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    raise ValueError(
        f"{name!r} is neither a model name nor a config name"
        + (f" (did you mean {', '.join(close)}?)" if close else "")
        + f"; {len(model_configs.MODELS)} model names and {len(config_names())} config names "
        "are listed by: python -m invjax.summary --list"
    )


def _peer(name: str, count: int) -> str:
    from invjax.models.peers import PEER_COUNTS

    if name not in PEER_COUNTS:
        return ""
    ref = PEER_COUNTS[name][0]
    return f"peer {ref:>12,} ({100 * (count - ref) / ref:+.2f}%)"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m invjax.summary",
        description=__doc__.split("\n")[0],
        epilog=(
            "NAMES are model names of invjax/configs/models.py (e.g. svhn_e2_ii, cifar10_triple_map_e2, "
            "mnist_disco) or experiment config names of ./configs/ (e.g. cifar10_triple, "
            "digits_e2), or paths to config files. Examples: python -m invjax.summary "
            "cifar10_triple; python -m invjax.summary --all; python -m invjax.summary "
            "--config=configs/stl10_e2.py --input_shape=96,96,3"
        ),
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="model or config names (see below)")
    p.add_argument("--config", help="an experiment config file (uses its config.model)")
    p.add_argument(
        "--all",
        action="store_true",
        help="count every model of invjax/configs/models.py (one line each)",
    )
    p.add_argument("--input_shape", help="H,W,C (default: from the dataset)")
    p.add_argument(
        "--list", action="store_true", help="list the model and config names, one a line"
    )
    args = p.parse_args(argv)
    try:
        return _run(p, args)
    except ValueError as e:  # bad names, shapes or configs: one message, exit status 2
        p.error(str(e))


def _run(p, args) -> int:
    if args.list:
        print("model names (invjax/configs/models.py):")
        print("\n".join(f"  {n}" for n in sorted(model_configs.MODELS)))
        print("config names (configs/NAME.py):")
        print("\n".join(f"  {n}" for n in config_names()))
        return 0
    shape = _parse_shape(args.input_shape) if args.input_shape else None
    if args.config:
        model_cfg, data = load_config(args.config)
        s = shape or input_shape_for(data)
        total, parts = summarise(model_cfg, s, title=f"{args.config} (input {s})")
        print(f"params={total} {parts}".rstrip())
        return 0
    registry = model_configs.MODELS
    names = sorted(registry) if args.all else args.names
    if not names:
        p.error("give model or config names, or --all (--list lists the names)")
    resolved = {n: resolve(n) for n in names}  # every name checked before any compute
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
        for ds in model_configs.DATASETS:
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
