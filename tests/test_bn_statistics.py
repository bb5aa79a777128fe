"""BatchNorm running statistics and run length: the warning of a run too short for its momentum.

The digits monomial network with the WS head trained to 9.5% training error but evaluated at
59.6% test error (Table 6's momentum 0.99, 204 steps); with the training set's statistics the
same parameters read 9.2% (docs/monomials.md). :func:`invjax.training.experiment.
bn_statistics_warning` names the case at start-up; these tests hold its arithmetic to Flax's.
"""

from __future__ import annotations

import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ml_collections import ConfigDict

from invjax import configs as invjax_configs
from invjax.configs import models
from invjax.training import experiment

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize(("momentum", "steps"), [(0.99, 204), (0.9, 20)])
def test_flax_running_statistics_keep_momentum_to_the_steps_of_their_start(momentum, steps):
    """The warning's share ``m ** T``: Flax's running variance after ``T`` steps on batches of
    variance ``v`` is ``m ** T * 1 + (1 - m ** T) * v`` (its start is mean 0, variance 1)."""
    bn = nn.BatchNorm(use_running_average=False, momentum=momentum)
    x = jax.random.normal(jax.random.PRNGKey(0), (256, 3)) * jnp.sqrt(0.05) + 2.0
    variables = bn.init(jax.random.PRNGKey(1), x)
    step = jax.jit(lambda v: bn.apply(v, x, mutable=["batch_stats"])[1])
    for _ in range(steps):
        variables = {**variables, **step(variables)}
    share = momentum**steps
    batch_var = np.asarray(x.var(axis=0))
    np.testing.assert_allclose(
        variables["batch_stats"]["var"], share + (1 - share) * batch_var, rtol=1e-4
    )
    np.testing.assert_allclose(
        variables["batch_stats"]["mean"], (1 - share) * np.asarray(x.mean(axis=0)), rtol=1e-4
    )


def test_warning_names_the_momentum_the_steps_the_share_and_both_ways_out():
    config = models.mnist("ii_disco_ws")  # Table 6: momentum 0.99
    text = experiment.bn_statistics_warning(config, 204)
    assert text is not None
    assert "bn_momentum=0.99 with 204 training steps" in text
    assert f"still hold {0.99**204:.1%} of their initial values" in text
    assert "train at least 459 steps" in text  # 0.99 ** 459 < 1% < 0.99 ** 458
    assert 0.99**459 < experiment.BN_RESIDUAL_LIMIT < 0.99**458
    assert "bn_momentum <= 0.977" in text and 0.977**204 < experiment.BN_RESIDUAL_LIMIT
    assert experiment.bn_statistics_warning(config, 459) is None
    config.bn_momentum = 0.9
    assert experiment.bn_statistics_warning(config, 204) is None
    assert experiment.bn_statistics_warning(models.mnist("ii_disco_ws"), 0) is None


def test_warning_reads_every_stream_and_ignores_models_without_the_key():
    streams = ConfigDict({"name": "multistream", "streams": {"a": {"bn_momentum": 0.9}}})
    assert experiment.bn_statistics_warning(streams, 100) is None
    streams.streams.b = {"bn_momentum": 0.999}  # the slower of the two decides
    assert "bn_momentum=0.999 with 100 training steps" in experiment.bn_statistics_warning(
        streams, 100
    )
    assert experiment.bn_statistics_warning(ConfigDict({"name": "wrn", "width": 4}), 5) is None


def test_the_start_up_banner_carries_the_warning(tmp_path):
    """A short digits run of the Scaled-MNIST WS network at Table 6's momentum (prepared only:
    data, shapes and checks, no training compute)."""
    config = invjax_configs.load(os.path.join(REPO, "configs", "mnist_ii_disco_ws.py"))
    config.data.name, config.data.n_train = "digits", 100
    config.model.widths, config.model.hidden = (4, 4, 4), 8
    config.model.kernel_size, config.model.effective_size = 5, 3
    config.model.scales = (1.0, 1.4142135623730951, 2.0)
    config.train.batch_size, config.train.num_epochs, config.train.lr_boundaries = 50, 3, (2,)
    exp = experiment.prepare(config, str(tmp_path / "run"))
    assert exp.num_steps == 6
    last = experiment.describe(exp).splitlines()[-1]
    assert last.startswith("  warning: model bn_momentum=0.99 with 6 training steps")
    config.model.bn_momentum = 0.4  # 0.4 ** 6 = 0.4%: no warning
    assert "warning" not in experiment.describe(experiment.prepare(config, str(tmp_path / "r")))
