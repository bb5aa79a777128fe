"""Networks assembled from layers; :func:`build` turns ``config.model`` into a Linen module.

Contract (README, "Contracts", 3): ``module = build(config.model)``; ``module.init(rng, x, train=False)``
and ``module.apply(variables, x, train=False)`` map float32 NHWC images to logits.
"""

from __future__ import annotations

from collections.abc import Callable

REGISTRY: dict[str, Callable] = {}


def register(name: str):
    """Decorator: ``@register("wrn")`` on a function ``config -> nn.Module``."""

    def deco(fn):
        REGISTRY[name] = fn
        return fn

    return deco


def build(config):
    """Build the Linen module named by ``config.name`` from the rest of ``config``."""
    from invjax.models import mnist, multistream, simple, wrn  # noqa: F401  (import registers the builders)

    name = config.get("name") if hasattr(config, "get") else getattr(config, "name", None)
    if name not in REGISTRY:
        raise ValueError(
            f"unknown model name {name!r}: valid names are {sorted(REGISTRY)} (config.model.name)"
        )
    return REGISTRY[name](config)
