"""A run's certificate: the measured invariance of its own final model, per precision and device.

Which transformations a network is *exactly* invariant to follows from its architecture: an E(2)
WRN (invariant head ``ii`` or group pooling + global average ``pool``) to the 90-degree rotations
and flips contained in its last group (and in its II group); nothing else in invjax (scale
streams are invariant only approximately, standard streams not at all, so a multi-stream
network's logits have no exact element). :func:`certify` measures, on real images of the run's
own test split,

    error(g) = max_n ||f(L_g x_n) - f(x_n)||_2 / ||f(x_n)||_2

for the logits ``f`` and every exact element ``g``, under each requested precision
(:mod:`invjax.precision`), and says whether every error is below :data:`BOUND`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from invjax import groups as G
from invjax import precision as P
from invjax.models import wrn

#: The float32-rounding bound the guarantee is held to (relative change of the logits).
BOUND = 1e-5
#: Test images the certificate uses.
N_IMAGES = 16


def element_label(group: G.Group, g: int) -> str:
    """``'rot90'``, ``'flip'``, ``'flip_rot90'``, ... for element ``g`` of ``group``."""
    f, _ = group.element(g)
    deg = round(math.degrees(group.angle(g))) % 360
    if f:
        return "flip" if deg == 0 else f"flip_rot{deg}"
    return f"rot{deg}"


def exact_elements(model_cfg) -> list[tuple[str, G.Group, int]]:
    """``[(label, group, g)]``: the non-identity elements the architecture makes exact."""
    if model_cfg.get("name") != "wrn" or model_cfg.get("family") != "e2":
        return []
    if not model_cfg.get("groups"):
        return []
    net = wrn.from_config(model_cfg)  # its groups: Group objects, parsed once there
    last = group = net.groups[-1]
    if net.head == "ii" and net.ii_group:
        group = net.ii_group
        if not G.is_subgroup(group, last):
            return []
    return [
        (element_label(group, g), group, g) for g in range(1, group.order) if group.is_grid_exact(g)
    ]


def _max_rel(a, b) -> float:
    a = np.asarray(a, np.float64).reshape(len(a), -1)
    b = np.asarray(b, np.float64).reshape(len(b), -1)
    return float(np.max(np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)))


def certify(model, variables, model_cfg, images, mean, std, precisions=(P.EXACT,)) -> dict:
    """The certificate of ``model`` with ``variables`` on ``images`` (``[N, H, W, C]`` in [0, 1]).

    Returns ``{'exact_elements': [...], 'bound': BOUND, 'n_images': N, 'device_kind': ...,
    'by_precision': {name: {'max_relative_error': {label: e}, 'holds': bool}}}``; with no exact
    element, ``by_precision`` is empty and ``note`` says why.
    """
    elements = exact_elements(model_cfg)
    info = P.describe(P.EXACT)
    out = {
        "exact_elements": [e[0] for e in elements],
        "bound": BOUND,
        "n_images": int(len(images)),
        "backend": info["backend"],
        "device_kind": info["device_kind"],
        "by_precision": {},
    }
    if not elements:
        out["note"] = (
            "this architecture guarantees no exact invariance of its logits (only E(2) networks "
            "with an invariant head are exact, to the 90-degree rotations and flips of their "
            "last group)"
        )
        return out
    x = jnp.asarray(images, jnp.float32)
    mean = jnp.asarray(mean, jnp.float32)
    std = jnp.asarray(std, jnp.float32)
    # One batch holds the images and all their transformed copies: one compilation per precision.
    batch = jnp.concatenate([x] + [G.transform(x, grp, g) for _, grp, g in elements])
    for name in dict.fromkeys(precisions):
        # The network configured for the arithmetic (its products take it explicitly); a model
        # without a precision field follows the closest JAX default.
        m = P.configure(model, name, strict=False)
        with P.jax_default(name):
            logits = jax.jit(lambda v, b, m=m: m.apply(v, (b - mean) / std, train=False))(
                variables, batch
            )
        logits = np.asarray(logits).reshape(len(elements) + 1, len(x), -1)
        errors = {lab: _max_rel(logits[i + 1], logits[0]) for i, (lab, _, _) in enumerate(elements)}
        out["by_precision"][name] = {
            "max_relative_error": errors,
            "holds": bool(max(errors.values()) < BOUND),
            "exact_by_design": P.is_exact(name),
        }
    return out
