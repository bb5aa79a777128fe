"""Whole-network train-step throughput and time to first step, per family, precision and device.

    python benchmarks/throughput.py --dataset cifar10 [--families std,e2,e2_ii,scale_ii,dual,triple]
        [--precision default,highest] [--scale-lowering auto] [--batch N] [--width-divisor K]
        [--steps 20] [--warmup 2] [--json FILE]

    # on a 2-core CPU: small widths, batch 32
    python benchmarks/throughput.py --dataset digits --width-divisor 4 --batch 32 --steps 5

For each family of a dataset the script builds the network of ``configs/<dataset>_<family>.py``
through the real code (``invjax.models.build(config.model)``, ``invjax.training``'s optimiser,
state and train step, jitted by :mod:`invjax.parallel` on a data-parallel mesh of every device present)
and measures, in a fresh Python process per row (so that every row starts cold, as a user's run
does, and a failure such as running out of memory costs only its row):

- ``first step [s]``: from the start of the model build to the end of the first train step,
  blocked (tracing, XLA compilation of the state initialisation and of the step, the step);
  JAX's persistent compilation cache is switched off in these processes, so this is a first
  start. Process start and backend initialisation are not counted. ``cpu [s]``: the CPU time
  of the process in that interval (all threads), which a machine shared with other jobs
  inflates less than the wall time (the JSON also has ``step_cpu_ms`` and the machine's
  1-minute load average).
- ``images/s``: ``batch * steps / time`` of ``--steps`` train steps after ``--warmup`` more,
  blocked at the end; the same uint8 batch every step (no input pipeline: this is the model's
  speed). Augmentation, normalisation, BatchNorm updates and the optimiser are in the step.

Batch sizes are the configs' (the paper's), unless ``--batch``. ``dual`` and ``triple`` are the
configs' own train step: phase 2, the streams frozen (inference mode) and the head trained; the
streams' phase-1 steps are the single-stream rows. ``--width-divisor K`` divides every channel
count (``ceil(C / K)``, on top of the multi-stream networks' own divisors) to fit a CPU.
``--precision`` builds each row's network in that arithmetic (:func:`invjax.precision.configure`;
``bf16`` is invjax's mixed precision). ``--scale-lowering`` (comma list of ``auto``,
``grouped``, ``per_scale``, ``per_scale_compact``) runs the families that have scale layers
once per lowering of their scale convolutions (the networks' ``scale_lowering`` field); the
others once.

Prints one table row per run as it finishes and, with ``--json FILE``, writes all rows with the
device and software versions (rewritten after each row, so a stopped run keeps what it measured).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import platform
import runpy
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # measure the invjax next to this script, not another install
    sys.path.insert(0, str(REPO))

DATASETS = ("svhn", "cifar10", "stl10", "digits", "fashion")
FAMILIES = ("std", "e2", "e2_ii", "scale", "scale_ii", "dual", "triple")
DEFAULT_FAMILIES = ("std", "e2", "e2_ii", "scale_ii", "dual", "triple")
# The digits configs name their streams by family only: their E(2) and scale streams use II.
DIGITS_CONFIGS = {
    "std": "digits_std",
    "e2_ii": "digits_e2",
    "scale_ii": "digits_scale",
    "dual": "digits_dual",
    "triple": "digits_triple",
}
# The real-image study's streams (docs/results/realimages): the same naming, on Fashion-MNIST.
FASHION_CONFIGS = {
    "std": "fashion_std",
    "e2_ii": "fashion_e2",
    "scale_ii": "fashion_scale",
    "triple": "fashion_triple",
}
PRECISIONS = ("default", "highest", "bf16", "exact_fast")  # invjax.precision.PRECISIONS (tested)
LOWERINGS = ("auto", "grouped", "per_scale", "per_scale_compact")
RESULT = "THROUGHPUT_RESULT "
PROBE = (
    "import json, jax; d = jax.devices(); print(json.dumps({'device_kind': d[0].device_kind, "
    "'devices': len(d), 'backend': jax.default_backend(), 'jax': jax.__version__}))"
)


def config_name(dataset: str, family: str) -> str | None:
    """``configs/<name>.py`` of a (dataset, family), or None where the dataset has none."""
    if dataset == "digits":
        return DIGITS_CONFIGS.get(family)
    if dataset == "fashion":
        return FASHION_CONFIGS.get(family)
    return f"{dataset}_{family}"


def families_of(dataset: str) -> tuple[str, ...]:
    return tuple(f for f in FAMILIES if config_name(dataset, f) is not None)


def set_scale_lowering(model, lowering: str) -> None:
    """Set ``scale_lowering`` of every WRN of a model section (or its streams), in place."""
    if model.get("name") == "multistream":
        for s in model.streams.values():
            set_scale_lowering(s, lowering)
    elif model.get("name") == "wrn":
        model.scale_lowering = lowering


def has_scale_layers(model) -> bool:
    """Whether a model section (or one of its streams) uses scale convolutions."""
    if model.get("name") == "multistream":
        return any(has_scale_layers(s) for s in model.streams.values())
    return model.get("name") == "wrn" and model.get("family") == "scale"


def divide_widths(model, k: float) -> None:
    """Multiply every WRN's ``width_divisor`` by ``k`` (in place)."""
    if model.get("name") == "multistream":
        for s in model.streams.values():
            divide_widths(s, k)
    elif model.get("name") == "wrn":
        model.width_divisor = float(model.width_divisor) * k
    else:
        raise ValueError(f"--width-divisor: model {model.get('name')!r} has no width divisor")


def load_config(dataset: str, family: str):
    name = config_name(dataset, family)
    return name, runpy.run_path(str(REPO / "configs" / f"{name}.py"))["get_config"]()


# ----------------------------------------------------------------------------- one row


def measure(case: dict) -> dict:
    """Build, compile and time one (dataset, family, precision, lowering); runs in a child."""
    import jax
    import numpy as np

    from invjax import data as data_lib
    from invjax import models, parallel
    from invjax import precision as P
    from invjax.ops import scale as scale_ops
    from invjax.training.optimizer import make_optimizer, trainable_labels
    from invjax.training.state import init_variables, state_factory
    from invjax.training.steps import make_train_step

    name, config = load_config(case["dataset"], case["family"])
    tc = config.train
    opts = data_lib.check_config(config.data)  # shapes, classes, augmentation; no data loaded
    with config.unlocked():
        if config.model.get("num_classes") is None:
            config.model.num_classes = opts["num_classes"]
        if case["width_divisor"] != 1:
            divide_widths(config.model, case["width_divisor"])
        set_scale_lowering(config.model, case["scale_lowering"] or "auto")
    batch = case["batch"] or tc.batch_size
    mesh = parallel.make_mesh()
    parallel.check_batch_size(batch, mesh, "batch")
    shape = opts["image_shape"]
    rng = np.random.default_rng(0)
    images = parallel.shard_batch(rng.integers(0, 256, (batch, *shape), dtype=np.uint8), mesh)
    labels = parallel.shard_batch(
        rng.integers(0, opts["num_classes"], (batch,)).astype(np.int32), mesh
    )
    mean = np.full(shape[-1], 0.5, np.float32)  # normalisation constants do not change speed
    std = np.full(shape[-1], 0.25, np.float32)
    lowering = case["scale_lowering"]
    jax.block_until_ready(images)

    t0, c0 = time.perf_counter(), time.process_time()
    with P.jax_default(case["precision"]):  # for products outside invjax's layers
        model = P.configure(models.build(config.model), case["precision"])
        abstract = jax.eval_shape(lambda r: init_variables(model, shape, r), jax.random.PRNGKey(0))
        tx = make_optimizer(tc, 100, abstract["params"])
        make, trees = state_factory(model, tx, shape, config.seed, bool(tc.select_best))
        state = jax.jit(make, out_shardings=parallel.replicated(mesh))(trees)
        step = parallel.jit_train_step(make_train_step(model, tx, opts["augment"], mean, std), mesh)
        state, metrics = step(state, images, labels)
        jax.block_until_ready((state, metrics))
        first, first_cpu = time.perf_counter() - t0, time.process_time() - c0
        for _ in range(case["warmup"]):
            state, metrics = step(state, images, labels)
        jax.block_until_ready((state, metrics))
        wait_for_the_others(case.get("barrier"))
        t1, c1 = time.perf_counter(), time.process_time()
        steps, window = case["steps"], case.get("window_s")
        done = 0
        while done < steps or (window and time.perf_counter() - t1 < window):
            state, metrics = step(state, images, labels)
            done += 1
            if window:  # the window is wall time: each step is waited for
                jax.block_until_ready((state, metrics))
        jax.block_until_ready((state, metrics))
        elapsed, elapsed_cpu = time.perf_counter() - t1, time.process_time() - c1
        resolved = scale_ops.resolve_lowering(lowering) if lowering else None

    leaves = jax.tree.leaves(state.params)
    params = sum(int(np.prod(p.shape)) for p in leaves)
    trainable = params
    if tc.trainable is not None:
        labels_tree = jax.tree.leaves(trainable_labels(state.params, tuple(tc.trainable)))
        trainable = sum(
            int(np.prod(p.shape)) for p, lab in zip(leaves, labels_tree) if lab == "trainable"
        )
    return {
        **case,
        "config": name,
        "batch": batch,
        "scale_lowering": resolved,
        "params": params,
        "trainable": trainable,
        "first_step_s": round(first, 3),
        "first_step_cpu_s": round(first_cpu, 3),
        "steps": done,
        "step_ms": round(1e3 * elapsed / done, 3),
        "step_cpu_ms": round(1e3 * elapsed_cpu / done, 3),
        "images_per_s": round(batch * done / elapsed, 2),
        "final_loss": float(metrics["loss"]),
        "devices": mesh.devices.size,
        "device_kind": jax.devices()[0].device_kind,
        "backend": jax.default_backend(),
        "load_avg_1m": round(os.getloadavg()[0], 2),  # other jobs on a shared machine
    }


def wait_for_the_others(barrier: dict | None, timeout_s: float = 1800.0) -> None:
    """With ``barrier = {'dir': D, 'count': n}`` (processes timed side by side,
    ``benchmarks/cpu_slots.py``): say this one is warm and wait until all ``n`` are, so that
    their timed steps overlap."""
    if not barrier:
        return
    folder = pathlib.Path(barrier["dir"])
    (folder / f"ready.{os.getpid()}").touch()
    t0 = time.perf_counter()
    while len(list(folder.glob("ready.*"))) < barrier["count"]:
        if time.perf_counter() - t0 > timeout_s:
            raise TimeoutError(f"the other processes of {folder} were not ready in {timeout_s} s")
        time.sleep(0.05)


def run_case(case: dict) -> dict:
    """:func:`measure` in a fresh Python process; a failure becomes the row's ``error``."""
    env = dict(os.environ)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    proc = subprocess.run(
        [sys.executable, str(pathlib.Path(__file__).resolve()), "--case", json.dumps(case)],
        capture_output=True,
        text=True,
        cwd=str(REPO),
        env=env,
    )
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT) :])
    tail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
    return {**case, "error": tail[:300]}


# ----------------------------------------------------------------------------- driver

HEADER = (
    f"{'dataset':8s} {'family':9s} {'precision':9s} {'scale conv':10s} {'batch':>5s} "
    f"{'params':>11s} {'first step [s]':>14s} {'cpu [s]':>8s} {'step [ms]':>10s} "
    f"{'images/s':>10s}"
)


def format_row(r: dict) -> str:
    head = (
        f"{r['dataset']:8s} {r['family']:9s} {r['precision']:9s} "
        f"{r.get('scale_lowering') or '-':10s}"
    )
    if "error" in r:
        return f"{head} failed: {r['error']}"
    return (
        f"{head} {r['batch']:5d} {r['params']:11,d} {r['first_step_s']:14.1f} "
        f"{r['first_step_cpu_s']:8.1f} {r['step_ms']:10.1f} {r['images_per_s']:10.1f}"
    )


def _comma_list(text: str, valid, flag: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in items if t not in valid]
    if not items or bad:
        raise ValueError(f"{flag}={text!r} is invalid: choose a comma list of {list(valid)}")
    return list(dict.fromkeys(items))


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="digits", help=f"one of {DATASETS}")
    ap.add_argument("--families", default=None, help="comma list (default: the dataset's six)")
    ap.add_argument("--precision", default="default", help=f"comma list of {PRECISIONS}")
    ap.add_argument("--scale-lowering", default="auto", help=f"comma list of {LOWERINGS}")
    ap.add_argument("--batch", type=int, default=None, help="override the configs' batch sizes")
    ap.add_argument("--width-divisor", type=float, default=1.0)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--json", default=None, help="write the rows as JSON to this file")
    ap.add_argument("--case", default=None, help=argparse.SUPPRESS)  # internal: one child row
    args = ap.parse_args(argv)
    if args.case:
        return args
    if args.dataset not in DATASETS:
        raise ValueError(f"--dataset={args.dataset!r} is unknown: choose one of {DATASETS}")
    have = families_of(args.dataset)
    if args.families is None:
        args.families = [f for f in DEFAULT_FAMILIES if f in have]
    else:
        args.families = _comma_list(args.families, FAMILIES, "--families")
        missing = [f for f in args.families if f not in have]
        if missing:
            raise ValueError(
                f"--families: {missing} have no config for --dataset={args.dataset}: "
                f"valid families there are {list(have)}"
            )
    args.precision = _comma_list(args.precision, PRECISIONS, "--precision")
    args.scale_lowering = _comma_list(args.scale_lowering, LOWERINGS, "--scale-lowering")
    for flag, value, low in (("--steps", args.steps, 1), ("--warmup", args.warmup, 0)):
        if value < low:
            raise ValueError(f"{flag}={value} is invalid: it must be an integer >= {low}")
    if args.batch is not None and args.batch < 1:
        raise ValueError(f"--batch={args.batch} is invalid: it must be an integer >= 1")
    if not (math.isfinite(args.width_divisor) and args.width_divisor >= 1):
        raise ValueError(f"--width-divisor={args.width_divisor} is invalid: it must be >= 1")
    if args.json:
        parent = pathlib.Path(args.json).resolve().parent
        if not parent.is_dir() or not os.access(parent, os.W_OK):
            raise ValueError(f"--json={args.json!r} is invalid: {parent} is not a writable folder")
    return args


def main(argv=None) -> int:
    try:
        args = parse(argv)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.case:  # child: one row, printed as one JSON line
        import jax

        jax.config.update("jax_enable_compilation_cache", False)  # a first start, every row
        print(RESULT + json.dumps(measure(json.loads(args.case))), flush=True)
        return 0

    # The devices, seen from a child: this process must not hold an accelerator of its own.
    probe = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=str(REPO), check=True
    )
    meta = {
        **json.loads(probe.stdout.strip().splitlines()[-1]),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "args": {k: v for k, v in vars(args).items() if k != "case"},
    }
    if args.batch is not None and args.batch % meta["devices"]:
        print(
            f"error: --batch={args.batch} cannot be split over the {meta['devices']} devices: "
            f"use a multiple of {meta['devices']}",
            file=sys.stderr,
        )
        return 2
    print(
        f"devices: {meta['devices']} x {meta['device_kind']} ({meta['backend']}), jax "
        f"{meta['jax']}; steps {args.steps} after {args.warmup} warm-up; width divisor "
        f"{args.width_divisor:g}; compilation cache off"
    )
    print(HEADER, flush=True)
    rows = []
    for family in args.families:
        _, config = load_config(args.dataset, family)
        lowerings = args.scale_lowering if has_scale_layers(config.model) else [None]
        for precision in args.precision:
            for lowering in lowerings:
                case = {
                    "dataset": args.dataset,
                    "family": family,
                    "precision": precision,
                    "scale_lowering": lowering,
                    "batch": args.batch,
                    "width_divisor": args.width_divisor,
                    "steps": args.steps,
                    "warmup": args.warmup,
                }
                row = run_case(case)
                rows.append(row)
                print(format_row(row), flush=True)
                if args.json:
                    pathlib.Path(args.json).write_text(json.dumps({**meta, "rows": rows}, indent=1))
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
