"""Every experiment config file: it loads, its docstring starts with the command that runs it, its
model builds and initialises (abstractly, at a tiny width), its values pass the trainer's and the
data layer's checks, and it encodes the paper's recipe. Multi-stream configs are valid two-phase
experiments whose phase-1 runs are exactly the single-stream configs."""

from __future__ import annotations

import ast
import importlib
import json
import math
import os
import pathlib
import subprocess
import sys

import chex
import jax
import jax.numpy as jnp
import pytest

import invjax
from invjax import configs as invjax_configs
from invjax import data, models
from invjax.configs import table3
from invjax.training import plan
from invjax.training.experiment import flat_config
from invjax.training.optimizer import boundaries_in_epochs, validate_train_config

CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "configs"
FILES = sorted(p for p in CONFIGS.glob("*.py") if p.stem != "__init__")
NAMES = [p.stem for p in FILES]


def get(name):
    return importlib.import_module(f"configs.{name}").get_config()


def tiny(model):
    """The same architecture at a tiny width (depth 10 WRNs, 4-channel stems)."""
    m = model.copy_and_resolve_references()
    with m.unlocked():
        if m.name == "wrn":
            m.depth, m.widen_factor, m.stem_width = 10, 1, 4
        elif m.name == "mnist":
            m.widths, m.hidden = (4, 4, 4), 8
        elif m.name == "cnn":
            m.width = 4
        elif m.name == "multistream":
            for s in list(m.streams):
                m.streams[s] = tiny(m.streams[s])
        if m.get("num_classes") is None:
            m.num_classes = 10
    return m


def test_every_experiment_of_the_paper_has_a_config():
    for ds in ("svhn", "cifar10", "stl10"):  # Table 3
        for row in ("std", "e2", "e2_ii", "scale", "scale_ii", "dual", "dual_star"):
            assert f"{ds}_{row}" in NAMES
        assert f"{ds}_triple" in NAMES and f"{ds}_triple_star" in NAMES
    for v in ("cnn", "ses", "disco", "ii_disco_monomials", "ii_disco_ws"):  # Table 2
        assert f"mnist_{v}" in NAMES
    for v in ("e2pool", "scalepool", "e2pool_scalepool"):  # Table 4
        assert f"stl10_triple_{v}" in NAMES
    assert "stl10_dual_star_end_to_end" in NAMES  # appendix A.2
    assert "stl10_triple_std" in NAMES  # Section 5: three standard streams
    assert "stl10_std_rot90_scale_aug" in NAMES  # Section 5: augmentation instead of invariance
    for v in ("std", "e2", "scale", "dual", "triple"):  # offline
        assert f"digits_{v}" in NAMES


def test_configs_load_alike_by_path_and_by_import():
    """Each config imports its helpers (no file-path loading inside a row); loaded by path, as
    ``--config=`` loads it, it gives the same config as imported from the repository's package."""
    for path in FILES:
        assert "runpy" not in path.read_text(), path.name
    for name in ("digits_triple", "cifar10_triple", "stl10_triple_e2pool", "mnist_ses"):
        by_path = invjax_configs.load(str(CONFIGS / f"{name}.py"))
        assert by_path.to_dict() == get(name).to_dict(), name


@pytest.mark.slow
def test_a_row_that_varies_another_loads_from_any_directory(tmp_path):
    """``configs/digits_e2.py`` imports ``configs.digits_std``: loaded by path from another
    working directory (its repository not on sys.path) it still loads, and sys.path is restored."""
    root = str(CONFIGS.parent)
    script = (
        "import sys\n"
        f"sys.path.insert(0, {root!r})\n"  # this checkout's invjax, then the root off the path
        "from invjax.configs import load\n"
        f"sys.path.remove({root!r})\n"
        "assert 'configs' not in sys.modules\n"
        "before = list(sys.path)\n"
        f"c = load({str(CONFIGS / 'digits_e2.py')!r})\n"
        "assert sys.path == before\n"
        "print(c.data.name, c.model.family)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["scaled_digits", "e2"]


def test_helpers_ship_in_the_package_and_no_configs_package_is_installed():
    """pyproject installs invjax only; invjax itself never imports the repository's rows."""
    import tomllib

    toml = tomllib.loads((CONFIGS.parent / "pyproject.toml").read_text())
    assert toml["tool"]["setuptools"]["packages"]["find"]["include"] == ["invjax*"]
    for path in pathlib.Path(invjax.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                assert not any(a.name.split(".")[0] == "configs" for a in node.names), path
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                assert (node.module or "").split(".")[0] != "configs", path


def test_names_and_constants_come_from_invjax():
    """The configs' stream, head, scale and downsampling values are invjax's own objects."""
    from invjax import groups
    from invjax.configs import common
    from invjax.configs import models as model_configs
    from invjax.layers import heads
    from invjax.models import multistream, wrn

    assert common.PHASE2_TRAINABLE is multistream.PHASE2_TRAINABLE
    assert model_configs.MODES is heads.MODES and model_configs.STREAMS is heads.STREAMS
    assert get("cifar10_scale_ii").model.scales == groups.DEFAULT_SCALES
    assert get("mnist_disco").model.scales == groups.MNIST_SCALES
    for name, family in (("svhn_std", "std"), ("svhn_e2_ii", "e2"), ("digits_scale", "scale")):
        assert get(name).model.downsample == wrn.DEFAULT_DOWNSAMPLE[family]
    triple = get("cifar10_triple_star")
    assert tuple(triple.model.streams) == heads.STREAMS
    assert triple.model.streams.e2.width_divisor == model_configs.width_divisor(3)


@pytest.mark.parametrize("name", NAMES)
def test_config_loads_names_its_command_and_builds(name):
    module = importlib.import_module(f"configs.{name}")
    first = module.__doc__.strip().splitlines()[0]
    assert first == f"python -m invjax.main --config=configs/{name}.py --workdir=runs/{name}"
    config = module.get_config()
    data.check_config(config.data)
    validate_train_config(config.train)
    phases = plan.phases_of(config)
    model = models.build(tiny(config.model))
    shape = data.DATASETS[config.data.name][0]
    x = jax.ShapeDtypeStruct((2, *shape), jnp.float32)
    logits, variables = jax.eval_shape(
        lambda z: model.init_with_output({"params": jax.random.PRNGKey(0)}, z, train=False), x
    )
    chex.assert_shape(logits, (2, 10))
    if phases == "two_phase":
        names = plan._check_two_phase(config)
        assert set(names) <= set(variables["params"])
        for s in names:
            validate_train_config(plan.stream_config(config, s).train)
    elif phases == "end_to_end":
        plan._check_end_to_end(config)


# ----------------------------------------------------------------------------- the paper's recipes

# dataset: (optimizer, nesterov, epochs, boundaries, factor, augmentation, head epoch divisor)
RECIPES = {
    "svhn": ("sgd", False, 160, (80, 120), 0.1, "none", 4),
    "cifar10": ("sgd", False, 200, (60, 120, 160), 0.2, "crop_flip", 4),
    "stl10": ("sgd", True, 1000, (300, 400, 600, 800), 0.2, "crop_flip_cutout", 10),
}
# (config, batch, learning rate, weight decay, dropout): the appendix's HP tables of the II
# streams, the baselines' own recipes for the others.
HPS = [
    ("svhn_e2_ii", 128, 5e-3, 5e-3, 0.5),
    ("svhn_scale_ii", 128, 0.2, 1e-4, 0.4),
    ("svhn_std", 128, 0.01, 5e-4, 0.4),
    ("cifar10_e2_ii", 96, 5e-3, 5e-3, 0.1),
    ("cifar10_scale_ii", 128, 0.1, 5e-4, 0.2),
    ("cifar10_std", 128, 0.1, 5e-4, 0.3),
    ("stl10_e2_ii", 96, 2e-3, 1e-2, 0.1),
    ("stl10_scale_ii", 96, 0.02, 1e-3, 0.25),
    ("stl10_std", 128, 0.1, 5e-4, 0.3),
    ("stl10_scale", 64, 0.05, 1e-3, 0.3),
]
HEAD_HPS = {"svhn": (128, 0.01, 1e-4), "cifar10": (128, 0.01, 1e-3), "stl10": (128, 0.01, 1e-4)}


@pytest.mark.parametrize("name,batch,lr,wd,dropout", HPS)
def test_single_stream_hyperparameters(name, batch, lr, wd, dropout):
    config = get(name)
    ds = name.split("_")[0]
    opt, nesterov, epochs, bounds, factor, aug, _ = RECIPES[ds]
    tc = config.train
    assert (tc.optimizer, tc.momentum, bool(tc.nesterov)) == (opt, 0.9, nesterov)
    assert (tc.num_epochs, boundaries_in_epochs(tc), tc.lr_decay_factor) == (epochs, bounds, factor)
    assert (tc.batch_size, tc.learning_rate, tc.weight_decay) == (batch, lr, wd)
    assert config.model.dropout == dropout
    assert data.check_config(config.data)["augment"] == aug
    # Full data trains on the whole training split (the 80:20 split was for the HP search).
    assert config.data.val_fraction == 0.0 and config.data.n_train == 0


@pytest.mark.parametrize("ds", sorted(RECIPES))
@pytest.mark.parametrize("kind", ["dual", "dual_star", "triple", "triple_star"])
def test_two_phase_configs_follow_the_paper(ds, kind):
    config = get(f"{ds}_{kind}")
    opt, nesterov, epochs, bounds, factor, aug, div = RECIPES[ds]
    tc = config.train
    assert tc.phases == "two_phase" and tuple(tc.trainable) == ("head", "classifier")
    assert config.model.freeze_streams and config.model.head == "map_e2"
    # Phase 2: the head HP table, the recipe's epochs and boundaries divided by 4 or 10.
    assert (tc.batch_size, tc.learning_rate, tc.weight_decay) == HEAD_HPS[ds]
    assert (tc.optimizer, bool(tc.nesterov), tc.lr_decay_factor) == (opt, nesterov, factor)
    assert tc.num_epochs * div == epochs
    assert tuple(b * div for b in boundaries_in_epochs(tc)) == bounds
    streams = ("e2", "scale", "std") if kind.startswith("triple") else ("e2", "scale")
    assert plan.stream_names(config) == streams
    files = {"e2": f"{ds}_e2_ii", "scale": f"{ds}_scale_ii", "std": f"{ds}_std"}
    for s in streams:
        own = get(files[s])
        phase1 = plan.stream_config(config, s)
        a, b = flat_config(phase1), flat_config(own)
        diff = {k for k in set(a) | set(b) if a.get(k) != b.get(k)}
        if kind.endswith("star"):  # the constant-parameter streams: widths / sqrt(n_streams)
            assert diff == {"model.width_divisor"}
            assert phase1.model.width_divisor == pytest.approx(math.sqrt(len(streams)))
        else:  # the same experiment as the single-stream config: reusable as phase 1
            assert diff == set()


def test_table4_and_end_to_end_variants():
    base = get("stl10_triple")
    for name, pool in (
        ("stl10_triple_e2pool", ("e2",)),
        ("stl10_triple_scalepool", ("scale",)),
        ("stl10_triple_e2pool_scalepool", ("e2", "scale")),
    ):
        config = get(name)
        for s in ("e2", "scale", "std"):
            want = "pool" if s in pool or s == "std" else "ii"
            assert config.model.streams[s].head == want
            own = get({"e2": "stl10_e2", "scale": "stl10_scale"}[s]) if s in pool else None
            if own is not None:  # the pooling stream trains with its baseline's recipe
                assert config.phase1[s].train.to_dict() == {
                    **own.train.to_dict(),
                    "epochs_scale": None,  # phase 1 follows the run's train.epochs_scale
                }
            else:
                assert config.phase1[s].train.to_dict() == base.phase1[s].train.to_dict()
        assert config.train.to_dict() == base.train.to_dict()
    e2e = get("stl10_dual_star_end_to_end")
    assert e2e.train.phases == "end_to_end" and not e2e.model.freeze_streams
    assert e2e.train.trainable is None and e2e.train.num_epochs == 1000
    assert plan.stream_names(e2e) == ("e2", "scale")
    for s in ("e2", "scale"):
        assert e2e.model.streams[s].width_divisor == pytest.approx(math.sqrt(2))


@pytest.mark.parametrize(
    "name,lr,wd",
    [
        ("mnist_cnn", 0.01, 0.0),
        ("mnist_ses", 0.01, 0.0),
        ("mnist_disco", 0.01, 0.0),
        ("mnist_ii_disco_ws", 5e-3, 5e-7),
        ("mnist_ii_disco_monomials", 1e-3, 5e-6),
    ],
)
def test_scaled_mnist_recipe(name, lr, wd):
    config = get(name)
    tc = config.train
    assert (
        config.data.name == "mnist_scale" and data.check_config(config.data)["augment"] == "scale"
    )
    assert (tc.optimizer, tc.batch_size, tc.num_epochs) == ("adam", 128, 60)
    assert (tuple(tc.lr_boundaries), tc.lr_decay_factor) == ((20, 40), 0.1)
    assert (tc.learning_rate, tc.weight_decay, tc.select_best) == (lr, wd, True)


def test_heads_ablation_is_an_override():
    """Appendix A.1's heads: ``--config.model.head=...`` on a multi-stream config; the concat
    head has no parameters, so phase 2 then trains the classifier alone."""
    config = get("stl10_triple")
    for head in ("concat", "map_e2", "map_scale", "map_std", "map_all"):
        c = config.copy_and_resolve_references()
        c.model.head = head
        models.build(tiny(c.model))  # a valid head for the triple stream
        trainable = plan.head_config(c, "/tmp/w").train.trainable
        assert trainable == (("classifier",) if head == "concat" else ("head", "classifier"))


def test_three_standard_streams_are_three_runs():
    """Table 4's control: standard WRNs in all three slots, phase-1 seeds 0, 1, 2 (not one run
    three times), each the ``stl10_std`` experiment otherwise."""
    config = get("stl10_triple_std")
    own = get("stl10_std")
    seeds = set()
    for slot in ("e2", "scale", "std"):
        assert config.model.streams[slot].family == "std"
        phase1 = plan.stream_config(config, slot)
        seeds.add(phase1.seed)
        a, b = flat_config(phase1), flat_config(own)
        assert {k for k in set(a) | set(b) if a.get(k) != b.get(k)} <= {"seed"}
    assert seeds == {config.seed, config.seed + 1, config.seed + 2}


def test_rot90_scale_augmentation_row():
    from invjax.data import augment

    config = get("stl10_std_rot90_scale_aug")
    assert data.check_config(config.data)["augment"] == "crop_flip_cutout_rot90_scale"
    assert config.train.to_dict() == get("stl10_std").train.to_dict()
    x = jnp.broadcast_to(jnp.arange(96.0)[None, :, None, None], (4, 96, 96, 3)) / 96.0
    y = augment.apply("crop_flip_cutout_rot90_scale", jax.random.PRNGKey(3), x)
    chex.assert_shape(y, x.shape)
    assert bool(jnp.isfinite(y).all()) and not bool(jnp.allclose(y, x))


def test_e2cnn_rows_use_e2cnn_schedule():
    """cifar10_e2 is e2cnn's network with e2cnn's recipe: x0.2 after 60, 120 and 180 epochs."""
    tc = get("cifar10_e2").train
    assert (tc.num_epochs, boundaries_in_epochs(tc), tc.lr_decay_factor) == (
        200,
        (60, 120, 180),
        0.2,
    )
    m = get("cifar10_e2").model
    assert (m.e2_frequency_cutoff, m.e2_sigma, m.e2_out_width) == (1.0, 0.45, "e2cnn")
    assert get("cifar10_e2_ii").model.e2_out_width == "baseline"


# ----------------------------------------------------------------------------- one home per row

SNAPSHOT = pathlib.Path(__file__).resolve().parent / "data" / "configs.json"


def test_every_config_keeps_its_values():
    """Every experiment config (all but the Scaled-MNIST rows, kept elsewhere), as it trains
    (:func:`invjax.training.plan.resolve`: schedule in epochs), equals the values it had when
    each row was a file of its own with its schedule in epochs (tests/data/configs.json)."""
    old = json.loads(SNAPSHOT.read_text())
    assert set(old) == {n for n in NAMES if not n.startswith("mnist_")}
    for name, values in old.items():
        new = json.loads(plan.resolve(get(name)).to_json_best_effort(sort_keys=True))
        if name == "digits_monomials":  # its model section is the Scaled-MNIST row's
            new, values = new["train"], values["train"]
        assert new == values, name


def test_table3_rows_have_one_home():
    """Each Table 3 file is its command, a docstring and ``table3.config(NAME)``: no value of a
    recipe is set in a file."""
    for name in table3.ROWS:
        tree = ast.parse((CONFIGS / f"{name}.py").read_text())
        (func,) = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
        assert func.name == "get_config" and len(func.body) == 1, name
        assert ast.unparse(func.body[0]) == f"return table3.config({name!r})", name
        assert not [n for n in tree.body if isinstance(n, ast.Assign)], name
    rows = {n for n in NAMES if n.split("_")[0] in table3.RECIPES}
    assert rows == set(table3.ROWS)
    with pytest.raises(ValueError, match=r"no Table 3 row 'svhn_quad': the rows are \["):
        table3.config("svhn_quad")


def test_a_recipe_change_is_one_edit(monkeypatch):
    """A dataset's recipe reaches every row of that dataset, phase 1 and phase 2 alike."""
    monkeypatch.setitem(table3.RECIPES, "svhn", {**table3.RECIPES["svhn"], "num_epochs": 80})
    assert get("svhn_e2_ii").train.num_epochs == 80
    triple = plan.resolve(get("svhn_triple"))
    assert {triple.phase1[s].train.num_epochs for s in ("e2", "scale", "std")} == {80}
    assert (triple.train.num_epochs, triple.train.lr_boundaries) == (20, (10, 15))


# ----------------------------------------------------------------------------- epochs and schedules


def _stages(config) -> dict:
    """``{stage: (epochs, boundaries in epochs)}`` of a config as it trains."""
    c = plan.resolve(config)
    out = {"run": (c.train.num_epochs, tuple(c.train.lr_boundaries))}
    for s in c.get("phase1") or {}:
        tc = plan.stream_config(c, s).train
        out[s] = (tc.num_epochs, tuple(tc.lr_boundaries))
    return out


def test_epochs_scale_scales_every_stage():
    """One override shrinks the default job: the three streams (12, 8, 12 epochs) and the head
    (3) follow ``train.epochs_scale``, each rounded and at least one epoch, with their schedules
    scaled alike (a boundary may fall inside an epoch: it is rounded to a step)."""
    config = get("digits_triple")
    assert _stages(config) == {
        "run": (3, (2,)),
        "e2": (12, (8,)),
        "scale": (8, (6,)),
        "std": (12, (8,)),
    }
    config.train.epochs_scale = 0.25
    got = _stages(config)
    assert got["e2"] == got["std"] == (3, (2,)) and got["scale"] == (2, (1.5,))
    assert got["run"][0] == 1 and got["run"][1][0] == pytest.approx(2 / 3)
    config.train.epochs_scale = 1e-6  # every stage keeps one epoch
    assert {e for e, _ in _stages(config).values()} == {1}
    # a stream that sets its own scale keeps it
    config.train.epochs_scale = 0.5
    config.phase1.scale.train.epochs_scale = 1.0
    got = _stages(config)
    assert (got["e2"][0], got["scale"], got["run"][0]) == (6, (8, (6,)), 2)


def test_fractions_follow_num_epochs_and_epochs_replace_them():
    config = get("digits_cnn")  # fractions 2/3 and 5/6
    config.train.num_epochs = 6
    assert _stages(config)["run"] == (6, (4, 5))
    config.train.lr_boundaries = (1,)  # epochs given: they are the schedule
    assert _stages(config)["run"] == (6, (1,))
    config.train.lr_boundaries = ()  # a constant rate
    assert _stages(config)["run"] == (6, ())
    config.train.epochs_scale = 0.5  # epochs keep their share of the run
    config.train.lr_boundaries = (2, 4)
    assert _stages(config)["run"] == (3, (1, 2))


def test_resolve_is_idempotent_and_keeps_the_seed_reference():
    config = get("digits_triple")
    config.train.epochs_scale = 0.5
    once = plan.resolve(config)
    assert plan.resolve(once) is once and "epochs_scale" not in once.train
    assert config.train.epochs_scale == 0.5  # the given config is left as it was
    once.seed = 7
    assert once.data.seed == 7  # invjax/configs/base.py's data.seed = seed


def test_epochs_scale_moves_the_monomial_pruning_with_the_run():
    """The monomial head prunes 25 -> 12 -> 5 pairs after the paper's epochs 5 and 10 of 60; a run
    scaled to 6 epochs prunes after 1 and 2 (the same shares), not never; a run that still ends
    before its last pruning says so at start-up."""
    from invjax.training import experiment

    config = get("mnist_ii_disco_monomials")
    assert tuple(config.model.prune_epochs) == (5, 10)  # the paper's, of 60 epochs
    config.train.num_epochs = 61  # nothing scaled, nothing moved
    assert tuple(plan.resolve(config).model.prune_epochs) == (5, 10)
    config.train.num_epochs = 60
    config.train.epochs_scale = 0.1
    resolved = plan.resolve(config)
    assert resolved.train.num_epochs == 6 and tuple(resolved.model.prune_epochs) == (1, 2)
    assert experiment.pruning_warning(resolved.model, 6) is None
    config.train.epochs_scale = 0.5
    assert tuple(plan.resolve(config).model.prune_epochs) == (2, 5)  # round(2.5) is 2
    assert plan.scaled_prune_epochs((5, 10), 1e-3) == (1, 2)  # two distinct epochs stay
    ws = get("mnist_ii_disco_ws")
    ws.train.epochs_scale = 0.1
    assert "prune_epochs" not in plan.resolve(ws).model  # no monomial head
    unscaled = get("mnist_ii_disco_monomials")
    text = experiment.pruning_warning(unscaled.model, 6)
    assert text == (
        "model prune_epochs=(5, 10) with 6 training epochs: the monomial head prunes to 5 pairs "
        "only after epoch 10, so this run keeps 12; train at least 10 epochs or set "
        "model.prune_epochs"
    )
    assert "so this run keeps 25" in experiment.pruning_warning(unscaled.model, 3)
    assert experiment.pruning_warning(unscaled.model, 10) is None
    assert experiment.pruning_warning(get("mnist_ii_disco_ws").model, 3) is None


@pytest.mark.parametrize(
    "key,value,match",
    [
        ("epochs_scale", 0.0, r"train.epochs_scale=0.0 is invalid: it must be a finite number > 0"),
        ("epochs_scale", -1.0, r"train.epochs_scale=-1.0 is invalid"),
        ("epochs_scale", math.inf, r"train.epochs_scale=inf is invalid"),
        ("lr_boundary_fractions", (0.5, 1.0), r"lr_boundary_fractions=\(0.5, 1.0\) is invalid: "),
        ("lr_boundary_fractions", (0.7, 0.2), r"must be increasing fractions of train.num_epochs"),
        ("lr_boundary_fractions", (0.0,), r"strictly between 0 and 1"),
        ("lr_boundary_fractions", None, r"train.lr_boundaries=None and train.lr_boundary_fr"),
        ("lr_boundaries", (12,), r"lr_boundaries=\(12,\) is invalid: it must be increasing ep"),
    ],
)
def test_schedule_and_scale_refused_with_one_message(key, value, match):
    config = get("digits_std")
    config.train[key] = value
    with pytest.raises(ValueError, match=match):
        plan.resolve(config)


def test_a_stream_schedule_error_names_the_stream():
    config = get("digits_dual")
    config.phase1.e2.train.lr_boundary_fractions = (2.0,)
    with pytest.raises(ValueError, match=r"^phase1.e2.train.lr_boundary_fractions=\(2.0,\)"):
        plan.resolve(config)
    config = get("digits_dual")
    config.phase1.scale.train.epochs_scale = -2.0
    with pytest.raises(ValueError, match=r"^phase1.scale.train.epochs_scale=-2.0 is invalid"):
        plan.resolve(config)


def test_prepare_refuses_an_unresolved_scale():
    """The trainer takes resolved configs; a scale it would not apply is refused, not ignored."""
    tc = get("digits_std").train
    tc.epochs_scale = 0.5
    with pytest.raises(ValueError, match=r"train.epochs_scale=0.5 is invalid: a scaled run is re"):
        validate_train_config(tc)


@pytest.mark.slow
def test_quick_trial_dry_run_shows_every_stage_scaled(tmp_path):
    """The README's quick trial: one override scales all four stages; --dry_run prints each
    stage's epochs, steps and schedule, and writes nothing."""
    work = tmp_path / "try"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "invjax.main",
            "--config=configs/digits_triple.py",
            f"--workdir={work}",
            "--config.train.epochs_scale=0.25",
            "--dry_run",
        ],
        cwd=CONFIGS.parent,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [ln.strip() for ln in proc.stdout.splitlines()]
    start = lines.index("schedule (each stage as it trains):")
    stages = lines[start + 1 : start + 5]
    assert stages[0].startswith("[1/4] phase 1: stream 'e2': 3 epochs x ")
    assert stages[1].startswith("[2/4] phase 1: stream 'scale': 2 epochs x ")
    assert stages[1].endswith("learning rate 0.01, x0.1 after epoch 1.5")
    assert stages[2].startswith("[3/4] phase 1: stream 'std': 3 epochs x ")
    assert stages[2].endswith("x0.1 after epoch 2")
    assert stages[3].startswith("[4/4] phase 2: combination head: 1 epoch x ")
    steps = [int(s.split(" steps = ")[1].split(" ")[0]) for s in stages]
    per_epoch = int(stages[0].split(" epochs x ")[1].split(" ")[0])
    assert steps == [3 * per_epoch, 2 * per_epoch, 3 * per_epoch, per_epoch]
    assert not work.exists()


@pytest.mark.parametrize("name", NAMES)
def test_schedule_and_scale_keys_stay_overridable(name):
    """``--config.train.lr_boundaries=(2,)`` and ``--config.phase1.<s>.train.epochs_scale=0.5``
    reach every config: config_flags overrides a key by its type, and a plain None has none."""
    config = get(name)
    sections = [config.train] + [config.phase1[s].train for s in config.get("phase1") or {}]
    for tc in sections:
        assert tc.get_type("lr_boundaries") is tuple, name
        assert tc.get_type("lr_boundary_fractions") is tuple, name
        assert tc.get_type("epochs_scale") is float, name
