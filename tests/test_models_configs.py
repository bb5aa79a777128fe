"""Every architecture of invjax/configs/models.py builds; a representative set initialises abstractly.

``build`` runs every module's validation (groups, widths, heads); ``jax.eval_shape`` of ``init``
traces the whole network (bases, shapes, parameter trees) without computing, at tiny width.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
import sys

import chex
import jax
import jax.numpy as jnp
import pytest

from invjax import groups as G
from invjax.configs import models as model_configs
from invjax.models import build
from invjax.models.common import count_params
from invjax.models.peers import PEER_COUNTS, PEER_COUNTS_NARROW
from invjax.summary import input_shape_for, main

NAMES = sorted(model_configs.MODELS)

# Traced in full: every single-stream network, every head on STL-10, the dual / triple networks of
# the other datasets, Table 4's ablations and the end-to-end variant.
TRACED = [
    n
    for n in NAMES
    if not n.endswith(("dualstar", "triplestar"))
    and (
        "dual" not in n
        and "triple" not in n
        or n.startswith("stl10")
        and "star" not in n
        or n.endswith(("dual_map_e2", "triple_star_map_e2"))
        or "end_to_end" in n
    )
]


def tiny(config):
    c = config.copy_and_resolve_references()
    if c.name == "wrn":
        c.depth, c.widen_factor, c.stem_width = 10, 1, 4
    elif c.name == "mnist":
        c.widths, c.hidden = (4, 4, 4), 8
    elif c.name == "multistream":
        for s in list(c.streams):
            c.streams[s] = tiny(c.streams[s])
    return c


def test_registry_covers_the_paper():
    for ds in ("svhn", "cifar10", "stl10"):
        for v in ("std", "e2_ii", "e2_pool", "scale_ii", "scale_pool"):
            assert f"{ds}_{v}" in NAMES
        for h in ("concat", "map_e2", "map_scale", "map_all"):
            assert f"{ds}_dual_{h}" in NAMES and f"{ds}_dual_star_{h}" in NAMES
        for h in ("concat", "map_e2", "map_scale", "map_std", "map_all"):
            assert f"{ds}_triple_{h}" in NAMES and f"{ds}_triple_star_{h}" in NAMES
    for v in ("cnn", "ses", "disco", "ii_disco_ws", "ii_disco_monomials"):
        assert f"mnist_{v}" in NAMES
    with pytest.raises(ValueError, match="unknown"):
        model_configs.get("svhn_e3_ii")


CLASSES = {"wrn": "WideResNet", "mnist": "ScaledMNISTNet", "multistream": "MultiStreamNetwork"}


def _norm(value):
    """A config value or a module field in one form: group names, tuples, rounded floats."""
    if isinstance(value, G.Group):
        return value.name
    if isinstance(value, str) and value[:1] in "CD" and value[1:].isdigit():
        return G.parse_group(value).name
    if isinstance(value, list | tuple):
        return tuple(_norm(v) for v in value)
    if isinstance(value, float):
        return round(value, 9)
    return value


def assert_mirrors(module, cfg):
    """Every key of the model section that names a field of the module reached it unchanged
    (streams: recursively); ``name`` picks the registered class; the rest are builder options."""
    fields = {f.name for f in dataclasses.fields(module)} - {"name", "parent"}
    assert type(module).__name__ == CLASSES[cfg.name]
    matched = 0
    for key, value in cfg.items():
        if key == "streams":
            for stream, scfg in value.items():
                assert_mirrors(getattr(module, stream), scfg)
            matched += 1
        elif key in fields:
            assert _norm(getattr(module, key)) == _norm(value), (key, getattr(module, key), value)
            matched += 1
    assert matched >= 3, f"{cfg.name}: only {matched} config keys are module fields"


@pytest.mark.parametrize("name", NAMES)
def test_every_config_builds(name):
    cfg = model_configs.get(name)
    module = build(cfg)
    assert_mirrors(module, cfg)
    if name in TRACED:
        h, w, c = input_shape_for(name)
        h, w = min(h, 32), min(w, 32)  # STL-10's stride-2 stem works on 32 x 32 as well
        x = jax.ShapeDtypeStruct((2, h, w, c), jnp.float32)
        small = build(tiny(cfg))
        out, variables = jax.eval_shape(
            lambda z: small.init_with_output(jax.random.PRNGKey(0), z), x
        )
        chex.assert_shape(out, (2, 10))
        assert count_params(variables["params"]) > 0
        if cfg.name == "multistream":
            assert set(cfg.streams) <= set(variables["params"])


def test_parameter_table_command(capsys):
    assert main(["svhn_std"]) == 0
    out = capsys.readouterr().out
    assert "block3_2/conv2" in out and "svhn_std: params=2748890" in out


def test_unknown_name_in_the_command(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["svhn_e3"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "'svhn_e3' is neither a model name nor a config name" in err
    assert "svhn_e2_ii" in err and "python -m invjax.summary --list" in err  # what is valid


def test_config_names_are_accepted(capsys):
    """The README's ``python -m invjax.summary cifar10_triple`` (a config, not a model name)."""
    assert main(["cifar10_triple"]) == 0
    out = capsys.readouterr().out
    assert "cifar10_triple: params=" in out and "e2 " in out and "std " in out


def test_help_names_both_kinds(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "invjax/configs/models.py" in out and "cifar10_triple" in out and "--all" in out


@pytest.mark.parametrize("name,k", sorted(PEER_COUNTS_NARROW))
def test_parameter_parity_at_narrow_widths(name, k):
    """e2cnn's CIFAR-10 E(2) WRN28 (D8, D4, D4) at widen factors 1, 2: equal counts."""
    cfg = model_configs.get(name)
    cfg.widen_factor = k
    x = jax.ShapeDtypeStruct((1,) + input_shape_for(name), jnp.float32)
    variables = jax.eval_shape(lambda z: build(cfg).init(jax.random.PRNGKey(0), z), x)
    assert count_params(variables["params"]) == PEER_COUNTS_NARROW[(name, k)][0]


@pytest.mark.parametrize("name", sorted(PEER_COUNTS))
def test_parameter_parity_with_the_peers(name):
    """The rows without II are the peers' networks: counts measured in PyTorch (peers.py)."""
    cfg = model_configs.get(name)
    x = jax.ShapeDtypeStruct((1,) + input_shape_for(name), jnp.float32)
    variables = jax.eval_shape(lambda z: build(cfg).init(jax.random.PRNGKey(0), z), x)
    ours, (theirs, _) = count_params(variables["params"]), PEER_COUNTS[name]
    assert abs(ours - theirs) <= 0.01 * theirs, (ours, theirs)


def test_summary_takes_a_config_path(capsys, tmp_path, monkeypatch):
    """A config file's path, relative or absolute, as ``invjax.main --config=`` takes it."""
    repo = pathlib.Path(__file__).resolve().parents[1]
    monkeypatch.chdir(repo)
    assert main(["configs/digits_e2.py"]) == 0
    relative = capsys.readouterr().out
    monkeypatch.chdir(tmp_path)
    assert main([str(repo / "configs" / "digits_e2.py")]) == 0
    absolute = capsys.readouterr().out
    count = relative.strip().splitlines()[-1]
    assert count.startswith(f"configs/digits_e2.py: params={get_count('digits_e2')}")
    assert absolute.strip().splitlines()[-1].split(": ", 1)[1] == count.split(": ", 1)[1]


def test_summary_knows_config_names_outside_the_repository(capsys, tmp_path, monkeypatch):
    """Run from another directory, a config name is found in the checkout invjax comes from."""
    monkeypatch.chdir(tmp_path)
    assert main(["digits_e2"]) == 0
    assert f"digits_e2: params={get_count('digits_e2')}" in capsys.readouterr().out
    assert main(["--list"]) == 0
    assert "  cifar10_triple\n" in capsys.readouterr().out


def get_count(config_name: str) -> int:
    """The parameter count of a config's network, computed here without the command."""
    from invjax.configs import load
    from invjax.summary import summarise

    repo = pathlib.Path(__file__).resolve().parents[1]
    cfg = load(str(repo / "configs" / f"{config_name}.py"))
    return summarise(cfg.model, input_shape_for(cfg.data.name), table=False)[0]


@pytest.mark.slow
def test_import_invjax_configs_is_enough_for_its_submodules(tmp_path):
    """A fresh interpreter: ``import invjax.configs`` then ``invjax.configs.models.get(...)``."""
    repo = pathlib.Path(__file__).resolve().parents[1]
    script = (
        "import invjax.configs\n"
        "from invjax.models import build\n"
        "m = build(invjax.configs.models.get('svhn_e2_ii'))\n"
        "c = invjax.configs.table3.config('svhn_std')\n"
        "print(type(m).__name__, c.data.name, invjax.configs.base.get_config().train.optimizer)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(repo)}
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["WideResNet", "svhn_cropped", "sgd"]
