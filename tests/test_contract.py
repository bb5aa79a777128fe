"""The module contract (:mod:`invjax.contract`) as a researcher meets it: every model here is
defined in this test module, outside the ``invjax`` package, and gets the equivariance check, the
certificate, export and every precision mode, by type."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from invjax import certificate, equivariance, export, fields
from invjax import groups as G
from invjax import precision as P
from invjax.contract import EpochHooks, Exact, Exportable, Precise, Typed
from invjax.fields import Field
from invjax.layers.e2 import E2BatchNorm, E2Conv, E2LiftConv, GroupPool, Restrict
from invjax.layers.ii import E2InvariantIntegration

KEY = jax.random.PRNGKey(0)
BOUND = 1e-5  # float32 rounding (README, "Precision and the guarantee")


class OwnNet(Exact, nn.Module):
    """A researcher's network from invjax layers: D4 features, restricted to C4, E(2)-II."""

    num_classes: int = 5

    @nn.compact
    def __call__(self, images, train: bool = False):
        x = Field.trivial(images)
        x = E2LiftConv(2, "D4", kernel_size=5)(x)
        x = E2BatchNorm("D4")(x, train).map(nn.relu)
        x = E2Conv(2, "D4", stride=2)(x)
        x = Restrict("D4", "C4")(x)
        x = E2Conv(4, "C4", trivial_out=True)(x)
        x = E2InvariantIntegration(6, "C4")(nn.relu(x.tensor))
        return nn.Dense(self.num_classes)(x)

    def exact_group(self, input_shape):
        return G.cyclic(4)


class Holder(nn.Module):
    """A wrapper that holds an invjax layer as a field (built outside it) and makes no claim."""

    conv: nn.Module

    @nn.compact
    def __call__(self, images, train: bool = False):
        y = GroupPool("D4")(self.conv(Field.trivial(images)))
        return nn.Dense(3)(y.tensor.mean(axis=(1, 2)))


def _precisions_seen(model, variables, x) -> dict[str, set]:
    """The ``precision`` of every :class:`Precise` module that runs in ``model.apply``, by class."""
    seen: dict[str, set] = {}

    def spy(next_fun, args, kwargs, context):
        if isinstance(context.module, Precise) and context.method_name == "__call__":
            seen.setdefault(type(context.module).__name__, set()).add(context.module.precision)
        return next_fun(*args, **kwargs)

    with nn.intercept_methods(spy):
        model.apply(variables, x)
    return seen


@pytest.fixture(scope="module")
def own(photo_batch):
    model = OwnNet()
    return model, model.init(KEY, jnp.asarray(photo_batch))


def test_a_model_outside_the_package_is_measured_by_its_declared_group(own, photo_batch):
    model, variables = own
    labels = [e.label for e in equivariance.exact_elements(model, photo_batch.shape)]
    assert labels == ["rot90", "rot180", "rot270"]
    errors = equivariance.check_equivariance(model, variables, jnp.asarray(photo_batch))
    assert set(errors) == set(labels) and max(errors.values()) < BOUND, errors
    # The measurement is real: a 45-degree rotation is interpolated, far from float32 rounding.
    off = equivariance.check_equivariance(
        model, variables, jnp.asarray(photo_batch), [(G.cyclic(8), 1)]
    )
    assert off["rot45"] > 1e-3, off


def test_the_certificate_of_a_model_outside_the_package(own, photo_batch):
    model, variables = own
    cert = certificate.certify(model, variables, photo_batch, 0.5, 0.25, ("highest", "default"))
    assert cert["exact_elements"] == ["rot90", "rot180", "rot270"]
    for name in ("highest", "default"):
        got = cert["by_precision"][name]
        assert got["holds"] and max(got["max_relative_error"].values()) < BOUND, got


def test_a_model_outside_the_package_exports_and_answers_as_trained(own, photo_batch, tmp_path):
    model, variables = own
    exported = export.export(model, variables, photo_batch.shape[1:])
    want = model.apply(variables, jnp.asarray(photo_batch))
    got = exported(jnp.asarray(photo_batch))
    assert equivariance.relative_error(got, want, per_sample=True) < BOUND
    exported.save(str(tmp_path / "own.npz"))
    again = export.load(str(tmp_path / "own.npz"))(jnp.asarray(photo_batch))
    np.testing.assert_array_equal(np.asarray(again), np.asarray(got))


@pytest.mark.parametrize("mode", P.PRECISIONS)
def test_configure_sets_every_invjax_layer_inside_a_wrapper_strictly(own, photo_batch, mode):
    model, variables = own
    configured = P.configure(model, mode)  # strict: a wrapper is never refused
    assert isinstance(configured, OwnNet) and configured is not model
    x = jnp.asarray(photo_batch)
    seen = _precisions_seen(configured, variables, x)
    expected = {"E2LiftConv", "E2Conv", "E2InvariantIntegration"}
    assert expected <= set(seen) and all(seen[k] == {mode} for k in expected), seen
    assert _precisions_seen(model, variables, x)["E2Conv"] == {None}  # the original unchanged
    y = configured.apply(variables, x)
    base = model.apply(variables, x)
    if mode == "bf16":  # the mode reaches the products: bfloat16 operands move the logits
        assert equivariance.relative_error(y, base) > 1e-4
    elif jax.default_backend() == "cpu":  # float32 products on CPU in every other mode
        assert equivariance.relative_error(y, base) < BOUND


def test_configure_reaches_a_layer_held_as_a_field(photo_batch):
    x = jnp.asarray(photo_batch)
    model = Holder(conv=E2LiftConv(2, "D4"))
    variables = model.init(KEY, x)
    seen = _precisions_seen(P.configure(model, "highest"), variables, x)
    assert seen["E2LiftConv"] == {"highest"}, seen
    assert equivariance.exact_elements(model, x.shape) == []  # no claim made, none assumed


class Doubling(Exact, Typed, nn.Module):
    """A researcher's own layer that declares the contract: regular C4 fields, doubled."""

    def exact_group(self, input_shape):
        return G.cyclic(4)

    def out_type(self, in_type):
        if in_type != fields.FieldType.regular_type("C4"):
            raise fields.mismatch("Doubling", "regular C4 fields", in_type)
        return in_type

    def in_type(self):
        return fields.FieldType.regular_type("C4")

    def __call__(self, x):
        x, out = fields.accept(x, self.out_type, "Doubling")
        return fields.emit(2.0 * x, out)


def test_an_own_typed_layer_joins_the_field_type_chain(photo_batch):
    chain = [E2LiftConv(2, "D4"), Restrict("D4", "C4"), Doubling()]
    assert fields.check_sequence(chain) == fields.FieldType.regular_type("C4")
    with pytest.raises(ValueError, match="Doubling expects regular C4 fields, got regular D4"):
        fields.check_sequence([E2LiftConv(2, "D4"), Doubling()])
    # measured alone on regular C4 fields of a real photo (its declared in_type)
    lifted = E2LiftConv(1, "C4")
    x = jnp.asarray(photo_batch)
    feats = lifted.apply(lifted.init(KEY, x), x)
    errors = equivariance.check_equivariance(Doubling(), {}, feats)
    assert set(errors) == {"rot90", "rot180", "rot270"} and max(errors.values()) < BOUND


def test_abilities_are_types_not_names():
    class NamesOnly(nn.Module):  # the right method names, no declaration: no ability
        def exact_group(self, input_shape):
            return G.dihedral(4)

        def inference_arrays(self, x):
            return {}

        def inference_call(self, arrays, x):
            return x

    m = NamesOnly()
    assert not isinstance(m, Exact | Exportable)
    assert equivariance.exact_elements(m, (1, 8, 8, 3)) == []

    class Registered:  # a class that cannot change its bases declares by registration
        def exact_group(self, input_shape):
            return G.cyclic(2)

    Exact.register(Registered)
    labels = [e.label for e in equivariance.exact_elements(Registered(), (1, 8, 8, 3))]
    assert labels == ["rot180"]

    class Incomplete(Exact, nn.Module):  # declared but not implemented: refused at construction
        pass

    with pytest.raises(TypeError, match="abstract method exact_group"):
        Incomplete()


def test_epoch_hooks_default_to_every_epoch_and_an_unchanged_schedule():
    class Hooked(EpochHooks, nn.Module):
        def on_epoch_end(self, variables, epochs_done, images):
            return variables

    h = Hooked()
    assert h.acts_at_epoch_end(3) and h.scaled_schedule(0.5) is h
    assert h.schedule_warning(1) is None


NET_FILE = """
import flax.linen as nn

from invjax import groups
from invjax.contract import Exact
from invjax.fields import Field
from invjax.layers.e2 import E2Conv, E2LiftConv, Restrict
from invjax.layers.ii import E2InvariantIntegration


class OwnNet(Exact, nn.Module):
    num_classes: int = 10

    @nn.compact
    def __call__(self, images, train: bool = False):
        x = E2LiftConv(2, "D4", kernel_size=5)(Field.trivial(images)).map(nn.relu)
        x = Restrict("D4", "C4")(E2Conv(2, "D4", stride=2)(x))
        x = E2Conv(4, "C4", trivial_out=True)(x)
        return nn.Dense(self.num_classes)(E2InvariantIntegration(6, "C4")(nn.relu(x.tensor)))

    def exact_group(self, input_shape):
        return groups.cyclic(4)
"""

CONFIG_FILE = """
from invjax.configs import base


def get_config():
    config = base.get_config()
    config.data.name = "scaled_digits"
    config.data.n_train = 100
    config.model.name = "own_net:OwnNet"
    config.train.batch_size = 50
    config.train.num_epochs = 1
    config.train.lr_boundaries = ()
    return config
"""


def _run(args, tmp_path, **kw):
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.getcwd()])}
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=tmp_path, env=env, capture_output=True, text=True, **kw
    )


@pytest.mark.slow
def test_a_network_named_by_import_path_trains_exports_and_is_measured(tmp_path):
    """``model.name = 'package.module:attribute'``: every command that reads the run later
    rebuilds the researcher's network from the recorded config alone."""
    import json

    (tmp_path / "own_net.py").write_text(NET_FILE)
    (tmp_path / "own.py").write_text(CONFIG_FILE)
    done = _run(["invjax.main", "--config=own.py", "--workdir=run"], tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    cert = json.loads((tmp_path / "run" / "results.json").read_text())["certificate"]
    assert cert["exact_elements"] == ["rot90", "rot180", "rot270"]
    assert cert["by_precision"]["highest"]["holds"], cert
    done = _run(["invjax.export", "--workdir=run", "--out=exported"], tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = json.loads((tmp_path / "exported" / "manifest.json").read_text())
    assert "own_net:OwnNet" in json.dumps(manifest)
    done = _run(
        ["invjax.invariance", "--config=own.py", "--workdir=run", "--transforms=rot90", "--json"],
        tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    assert measured["invariance_error"]["rot90"]["logits"] < BOUND, measured
    # A path that does not import is one clear error before any compute.
    (tmp_path / "bad.py").write_text(CONFIG_FILE.replace("own_net:OwnNet", "no_such_mod:Net"))
    done = _run(["invjax.main", "--config=bad.py", "--workdir=bad", "--dry_run"], tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "module 'no_such_mod' cannot be imported" in done.stderr.strip().splitlines()[-1]
