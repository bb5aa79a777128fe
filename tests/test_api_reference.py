"""The API reference builds from the docstrings with the documented command (docs/README.md)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys

import pdoc.doc
import pytest

import invjax

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(REPO, "docs", "api", "build.py")


@pytest.mark.slow
def test_the_api_reference_builds_a_page_per_module_with_the_layers_arguments(tmp_path):
    out = tmp_path / "api"
    done = subprocess.run(
        [sys.executable, BUILD, "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    modules = [m.name for m in pkgutil.walk_packages(invjax.__path__, "invjax.")]
    modules = [m for m in modules if not m.endswith(".__main__")]  # their --help is their doc
    missing = [m for m in modules if not (out / (m.replace(".", "/") + ".html")).is_file()]
    assert not missing, missing
    contract = (out / "invjax" / "contract.html").read_text()
    for ability in ("Exact", "Typed", "Exportable", "Precise", "EpochHooks"):
        assert f'id="{ability}"' in contract, ability
    e2 = (out / "invjax" / "layers" / "e2.html").read_text()
    for member in ("E2Conv.features", "E2Conv.group", "E2Conv.kernel_size", "E2Conv.precision"):
        assert f'id="{member}"' in e2, member


#: The public Linen layers, by module; each has an NNX twin of the same name in invjax.nnx.
PUBLIC_LAYERS = {
    "invjax.layers.e2": ("E2LiftConv", "E2Conv", "GroupPool", "Restrict", "E2BatchNorm"),
    "invjax.layers.scale": ("ScaleLiftConv", "ScaleConv", "ScaleMaxProjection", "ScaleBatchNorm"),
    "invjax.layers.ii": (
        "E2InvariantIntegration",
        "RotationInvariantIntegration",
        "TranslationInvariantIntegration",
        "ScaleInvariantIntegration",
        "ScaleMonomialInvariantIntegration",
        "MixedPooling",
        "AveragePooling",
    ),
    "invjax.layers.heads": ("StreamCombination",),
}


def _pdoc_module(name: str) -> pdoc.doc.Module:
    pdoc.render.configure(docformat="restructuredtext")  # as docs/api/build.py renders
    return pdoc.doc.Module(importlib.import_module(name))


def test_every_field_of_a_public_linen_layer_has_a_docstring_in_the_reference():
    undocumented, counted = [], 0
    for module_name, names in PUBLIC_LAYERS.items():
        module = _pdoc_module(module_name)
        for name in names:
            cls = getattr(module.obj, name)
            for field in dataclasses.fields(cls):
                if field.name in ("parent", "name"):  # Flax's own
                    continue
                counted += 1
                member = module.get(f"{name}.{field.name}")
                if member is None or not member.docstring.strip():
                    undocumented.append(f"{module_name}.{name}.{field.name}")
    assert counted >= 90, counted  # the fields were found (96 as written)
    assert not undocumented, undocumented


def _args_section(text: str) -> str:
    """The text of the ``Args:`` section(s) of a docstring (up to ``Returns:`` or the end)."""
    parts = re.split(r"^\s*Args:\s*$", text, flags=re.M)[1:]
    return "\n".join(re.split(r"^\s*Returns?:\s*$", p, flags=re.M)[0] for p in parts)


def test_every_nnx_twin_documents_each_constructor_argument_in_an_args_section():
    import invjax.nnx

    missing, counted = [], 0
    modules = {}
    for names in PUBLIC_LAYERS.values():
        for name in names:
            cls = getattr(invjax.nnx, name)
            variadic = inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD
            params = inspect.signature(cls.__init__).parameters.values()
            params = [p.name for p in params if p.name != "self" and p.kind not in variadic]
            if not params:  # e.g. AveragePooling: nnx.Module's constructor, no arguments
                continue
            module = modules.setdefault(cls.__module__, _pdoc_module(cls.__module__))
            doc = module.get(name).docstring
            init = module.get(f"{name}.__init__")
            if init is not None:
                doc += "\n" + init.docstring
            args = _args_section(doc)
            for param in params:
                counted += 1
                if not re.search(rf"(?<![\w]){re.escape(param)}(?![\w])", args):
                    missing.append(f"{cls.__module__}.{name}({param})")
    assert counted >= 110, counted  # the constructor arguments were found (123)
    assert not missing, missing
