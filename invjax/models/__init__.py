"""Networks assembled from layers; :func:`build` turns ``config.model`` into a Linen module.

Contract (README, "Contracts", 3): ``module = build(config.model)``; ``module.init(rng, x, train=False)``
and ``module.apply(variables, x, train=False)`` map float32 NHWC images to logits.

``config.model.name`` is a registered name (``@register("wrn")``: invjax's own networks) or an
import path ``"package.module:attribute"`` of a researcher's own network, so that every command
that reads a run later (resume, export, the invariance command, the report) rebuilds it from the
run's recorded config alone, with no registration to repeat: the attribute is a function
``config.model -> nn.Module`` or a Linen module class, built from the section's keys that are
its fields (``name`` aside). The module must be importable (installed, or on ``PYTHONPATH``).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable

import flax.linen as nn

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
    if isinstance(name, str) and ":" in name:
        return _build_imported(name, config)
    if name not in REGISTRY:
        raise ValueError(
            f"unknown model name {name!r}: valid names are {sorted(REGISTRY)} or an import path "
            "'package.module:attribute' (config.model.name)"
        )
    return REGISTRY[name](config)


def _build_imported(name: str, config) -> nn.Module:
    """The network of ``name = 'package.module:attribute'`` (module docstring)."""
    module_name, _, attr = name.partition(":")
    where = f"config.model.name={name!r}"
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(
            f"{where}: module {module_name!r} cannot be imported ({e}); install it or put its "
            "folder on PYTHONPATH"
        ) from None
    target = getattr(module, attr, None)
    if isinstance(target, type) and issubclass(target, nn.Module):
        fields = {f.name for f in dataclasses.fields(target) if f.init} - {"parent", "name"}
        items = config.items() if hasattr(config, "items") else ()
        return target(**{k: v for k, v in items if k in fields})
    if not callable(target):
        raise ValueError(
            f"{where}: {module_name} has no network {attr!r}: give a Linen module class or a "
            "function config.model -> nn.Module"
        )
    built = target(config)
    if not isinstance(built, nn.Module):
        raise ValueError(f"{where}: {attr}(config) returned {type(built).__name__}, not a module")
    return built
