"""Peak memory of a job, estimated before any compute, and the refusal of one that cannot fit.

:func:`estimate` adds up what a job holds at once, in bytes, from shapes only:

``data``
    every split of each model's dataset as loaded (uint8 or float32 images, int32 labels); the
    models of ``--config.seeds`` each hold their own (their subsets and realisations differ).
``models``
    ``3 x`` one checkpoint's arrays per model (the training state, its gradients and the
    optimiser's update of them).
``train.batch_size``
    one training step's activations: ``batch x`` (the input in float32 plus twice the largest
    intermediate result of the network for one image: a layer's input and output), times K
    where the K models are stepped as one vmapped program.
``train.eval_batch_size``
    one evaluation batch, counted alike, padded to ``eval_batch_size`` rows whatever the
    split's size.

The peak is ``data + models + max(training step, evaluation)``. Every part is counted low
(the backward pass keeps more than two intermediates, XLA's own buffers, the compiled programs
and Python come on top), so that :func:`check` refuses only what cannot fit: a job whose peak
exceeds the memory it runs in is refused (``ValueError``, before any compute), naming the knob
whose part is the largest and a value that would fit. Where the network runs on an
accelerator, its parts are compared with the device's memory and the data with the host's. The
largest intermediate comes from the network's abstract evaluation, which the checks trace
anyway (:func:`activation_bytes`).
"""

from __future__ import annotations

import jax
import numpy as np

STATE_COPIES = 3  # the state, its gradients, the optimiser's update


def activation_bytes(intermediates, batch: int) -> int:
    """The bytes per image of the largest of the intermediates (a pytree of ShapeDtypeStructs
    captured for a batch of ``batch`` images by ``capture_intermediates``)."""
    sizes = [
        int(np.prod(leaf.shape, dtype=np.int64)) * np.dtype(leaf.dtype).itemsize
        for leaf in jax.tree.leaves(intermediates)
        if hasattr(leaf, "shape")
    ]
    return max(sizes, default=0) // batch


def host_bytes() -> int | None:
    """This machine's physical memory, or None where the OS does not say."""
    from invjax.data.image_folder import memory_bytes

    return memory_bytes()


def device_bytes() -> tuple[int | None, str]:
    """``(bytes, what)``: an accelerator's memory (its ``bytes_limit``), else the host's."""
    device = jax.devices()[0]
    if device.platform != "cpu":
        stats = device.memory_stats() or {}
        if stats.get("bytes_limit"):
            return int(stats["bytes_limit"]), f"the memory of one {device.device_kind}"
    return host_bytes(), "this machine's memory"


def _data_bytes(ds) -> int:
    return sum(
        int(s.images.nbytes) + int(np.asarray(s.labels).nbytes) for s in (ds.train, ds.val, ds.test)
    )


def estimate(exp, k_models: int = 1, vmapped: bool = False) -> dict[str, int]:
    """The parts of the peak (module docstring) of ``k_models`` models like ``exp`` (an
    :class:`invjax.training.experiment.Experiment`), in bytes."""
    from invjax import parallel

    tc, ds = exp.config.train, exp.dataset
    per_image = 4 * int(np.prod(ds.image_shape)) + 2 * int(exp.activation_bytes)
    stacked = k_models if vmapped else 1
    eval_batch = parallel.per_device_batch(int(tc.eval_batch_size), exp.mesh)
    return {
        "data": k_models * _data_bytes(ds),
        "models": k_models * STATE_COPIES * int(exp.state_bytes),
        "train.batch_size": stacked * int(tc.batch_size) * per_image,
        "train.eval_batch_size": stacked * eval_batch * per_image,
    }


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"


def check(exp, k_models: int = 1, vmapped: bool = False) -> None:
    """Refuse (one ValueError naming the knob and a value that fits) a job of ``k_models``
    models like ``exp`` whose estimated peak exceeds the memory it would run in."""
    parts = estimate(exp, k_models, vmapped)
    device, what = device_bytes()
    on_host = jax.devices()[0].platform == "cpu"
    data = parts["data"]
    host = host_bytes()
    if not on_host and host is not None and data > host:
        _refuse(exp, parts, "data", data, host, "this machine's memory", k_models)
    peak = (
        (data if on_host else 0)
        + parts["models"]
        + max(parts["train.batch_size"], parts["train.eval_batch_size"])
    )
    if device is not None and peak > device:
        shown = {k: v for k, v in parts.items() if on_host or k != "data"}
        knob = max(shown, key=shown.get)
        _refuse(exp, parts, knob, peak, device, what, k_models)


def _refuse(exp, parts, knob, peak, limit, what, k_models) -> None:
    tc, ds = exp.config.train, exp.dataset
    listed = ", ".join(f"{k} {_gib(v)}" for k, v in parts.items())
    start = (
        f"the run needs about {_gib(peak)} at its peak ({listed}), more than {_gib(limit)}, {what}"
    )
    if knob in ("train.batch_size", "train.eval_batch_size"):
        value = int(tc[knob.split(".")[1]])
        per_image = parts[knob] / max(value, 1)
        rest = peak - parts[knob]
        fits = int((limit - rest) // per_image) if per_image else 0
        if fits >= 1:
            raise ValueError(f"{knob}={value} is too large: {start}: use {knob} <= {fits:,}")
    if k_models > 1:
        one = sum(v for k, v in parts.items() if k in ("data", "models")) / k_models
        fits = max(1, int((limit - (peak - parts["data"] - parts["models"])) // max(one, 1)))
        raise ValueError(
            f"config.seeds names {k_models} models: {start}: train at most {fits:,} models in one "
            "command (the others in further commands)"
        )
    h, w, c = ds.image_shape
    raise ValueError(
        f"dataset {ds.name!r} ({len(ds.train)} / {len(ds.val)} / {len(ds.test)} images of "
        f"{h}x{w}x{c}) with model {exp.config.model.name!r}: {start}: even one image per batch "
        "does not fit; use smaller images (data.image_size for an image folder), fewer images "
        "or a smaller model"
    )
