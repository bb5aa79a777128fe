"""A run's certificate: the measured invariance of its own final model, per precision and device.

Which transformations a network is *exactly* invariant to follows from its own group chain
(:func:`invjax.equivariance.exact_elements`): an E(2) WRN (invariant head ``ii`` or group pooling +
global average ``pool``) to the 90-degree rotations and flips contained in its last group and in
its II group; nothing else in invjax (scale streams are invariant only approximately, standard
streams not at all, so a multi-stream network's logits have no exact element). :func:`certify`
measures, on real images of the run's own test split,

    error(g) = max_n ||f(L_g x_n) - f(x_n)||_2 / ||f(x_n)||_2

for the logits ``f`` and every exact element ``g``
(:func:`invjax.equivariance.check_equivariance`), under each requested precision
(:mod:`invjax.precision`), and says whether every error is below :data:`BOUND`.
"""

from __future__ import annotations

import jax.numpy as jnp

from invjax import equivariance
from invjax import precision as P

#: The float32-rounding bound the guarantee is held to (relative change of the logits).
BOUND = 1e-5
#: Test images the certificate uses.
N_IMAGES = 16
#: The note of a certificate (and of an exported model's) when no group element is exact.
NO_EXACT_ELEMENTS = (
    "this architecture guarantees no exact invariance of its logits (only E(2) networks with an "
    "invariant head are exact, to the 90-degree rotations and flips of their last group)"
)


def certify(model, variables, images, mean, std, precisions=(P.EXACT,)) -> dict:
    """The certificate of ``model`` with ``variables`` on ``images`` (``[N, H, W, C]`` in [0, 1]).

    Returns ``{'exact_elements': [...], 'bound': BOUND, 'n_images': N, 'device_kind': ...,
    'by_precision': {name: {'max_relative_error': {label: e}, 'holds': bool}}}``; with no exact
    element, ``by_precision`` is empty and ``note`` says why.
    """
    elements = equivariance.exact_elements(model, images.shape)
    info = P.describe(P.EXACT)
    out = {
        "exact_elements": [e.label for e in elements],
        "bound": BOUND,
        "n_images": int(len(images)),
        "backend": info["backend"],
        "device_kind": info["device_kind"],
        "by_precision": {},
    }
    if not elements:
        out["note"] = NO_EXACT_ELEMENTS
        return out
    # Normalising each channel commutes with moving pixels: transforms act on the [0, 1] images
    # or on the normalised ones alike.
    x = (jnp.asarray(images, jnp.float32) - jnp.asarray(mean, jnp.float32)) / jnp.asarray(
        std, jnp.float32
    )
    for name in dict.fromkeys(precisions):
        errors = equivariance.check_equivariance(
            model, variables, x, elements, precision=name, train=False
        )
        out["by_precision"][name] = {
            "max_relative_error": errors,
            "holds": bool(max(errors.values()) < BOUND),
            "exact_by_design": P.is_exact(name),
        }
    return out
