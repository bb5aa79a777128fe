"""The trainer's side of the module contract: it builds networks through the registry and calls
their epoch hooks by type, so a network written outside invjax owns its schedule as the
Scaled-MNIST network does; the training package imports no network module and no private name of
another module."""

from __future__ import annotations

import ast
import pathlib

import flax.linen as nn
import ml_collections
import pytest

from invjax import models
from invjax.configs import base
from invjax.contract import EpochHooks
from invjax.training import experiment, plan

TRAINING = pathlib.Path(__file__).resolve().parents[1] / "invjax" / "training"


class WarmupNet(EpochHooks, nn.Module):
    """A researcher's network with a schedule in epochs: a warm-up that ends after
    ``warmup_epochs`` (its hook does nothing here; the schedule is what the trainer moves)."""

    warmup_epochs: int = 10
    num_classes: int = 10

    @nn.compact
    def __call__(self, x, train: bool = False):
        return nn.Dense(self.num_classes)(x.reshape((x.shape[0], -1)))

    def acts_at_epoch_end(self, epochs_done: int) -> bool:
        return epochs_done == self.warmup_epochs

    def on_epoch_end(self, variables, epochs_done, images):
        return variables

    def scaled_schedule(self, scale: float) -> WarmupNet:
        return self.clone(warmup_epochs=max(1, round(self.warmup_epochs * scale)))

    def schedule_warning(self, num_epochs: int) -> str | None:
        if self.warmup_epochs <= num_epochs:
            return None
        return f"warm-up of {self.warmup_epochs} epochs in a run of {num_epochs}"


def _build(config) -> WarmupNet:
    return WarmupNet(warmup_epochs=config.get("warmup_epochs", 10))


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(models.REGISTRY, "warmup_net", _build)


def _config(scale: float):
    config = base.get_config()
    config.data.name = "digits"
    config.model = ml_collections.ConfigDict({"name": "warmup_net", "warmup_epochs": 10})
    config.train.num_epochs = 40
    config.train.epochs_scale = scale
    return config


def test_a_network_written_outside_invjax_owns_its_schedule(registered):
    resolved = plan.resolve(_config(0.3))
    assert resolved.train.num_epochs == 12
    assert resolved.model.warmup_epochs == 3  # the network's rule, recorded in the config
    assert models.build(resolved.model).warmup_epochs == 3  # so a resume trains the same
    assert plan.resolve(_config(1.0)).model.warmup_epochs == 10  # nothing to move
    text = experiment.schedule_warning(_config(1.0).model, 4)
    assert text == "warm-up of 10 epochs in a run of 4"
    assert experiment.schedule_warning(_config(1.0).model, 10) is None


def test_the_trainer_refuses_a_schedule_the_config_cannot_record(monkeypatch):
    """A network whose scaled field is not one of its config keys would resume with another
    schedule than it trained with: refused by name, not dropped."""
    monkeypatch.setitem(models.REGISTRY, "warmup_net", lambda config: WarmupNet())
    with pytest.raises(ValueError, match="'warmup_net'.*cannot be recorded in config.model"):
        plan.resolve(_config(0.5))


def _imports(path: pathlib.Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names += [f"{node.module}.{a.name}" for a in node.names]
    return names


def test_the_training_package_imports_no_network_module():
    """``from invjax import models`` (the registry) is the trainer's one way to a network."""
    found = {
        (p.name, name)
        for p in sorted(TRAINING.glob("*.py"))
        for name in _imports(p)
        if name.startswith("invjax.models.") and name != "invjax.models.build"
    }
    assert not found, found


def test_the_trainers_use_no_private_name_of_another_module():
    """No ``module._name`` across modules: the trainers of one and of K models drive one public
    :class:`invjax.training.loop.Trainer`."""
    found = []
    for p in (TRAINING / "loop.py", TRAINING / "lockstep.py"):
        tree = ast.parse(p.read_text())
        aliases = {
            a.asname or a.name.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for a in node.names
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                found += [
                    f"{p.name}: from {node.module} import {a.name}"
                    for a in node.names
                    if a.name.startswith("_") and node.module and node.module.startswith("invjax")
                ]
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                found.append(f"{p.name}: {node.value.id}.{node.attr}")
    assert not found, found
