"""The Scale-II probe (launch/studies/ii_probe.py) and the layer knob it trains with: the recorded
statistics against a direct computation, on a tiny Scaled-MNIST network and real digits; the
WS without its division by the mean (``divide=False``) against eq. (7)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from invjax import groups as G
from invjax.data.digits import digits
from invjax.layers import ii as L
from invjax.models.mnist import ScaledMNISTNet
from invjax.ops import ii as ops
from launch.studies import ii_probe, record

KEY = jax.random.PRNGKey(0)
SCALES = (0.5, 0.7, 0.9)


@pytest.fixture(scope="module")
def real_digits():
    images, labels = digits()
    return jnp.asarray(images[:4]), jnp.asarray(labels[:4], jnp.int32)  # [4, 28, 28, 1] in [0, 1]


def _rescaled(x):
    """``[S, B, H, W, C]``: ``x`` rescaled by each of :data:`SCALES` (bicubic, zeros outside)."""
    one = jax.vmap(lambda img, s: G.scale(img, s), in_axes=(0, None))
    return jnp.stack([one(x, s) for s in SCALES])


def _delta(fn, x) -> np.ndarray:
    """Per image, the mean over the scales of ``||f(L_s x) - f(x)||^2 / ||f(x)||^2``."""
    f0 = np.asarray(fn(x), np.float64)
    fs = np.stack([np.asarray(fn(z), np.float64) for z in _rescaled(x)])
    return (((fs - f0) ** 2).sum(-1) / (f0**2).sum(-1)).mean(0)


# --------------------------------------------------------------------------- the layer knob


def test_the_default_layer_is_eq7_bit_for_bit_and_divide_false_its_numerator(real_digits):
    x, _ = real_digits
    ws = L.ScaleInvariantIntegration(5)
    v = ws.init(KEY, x)
    k = v["params"]["kernel"]
    # the default computes exactly what the layer computed before the knob (eq. 7, fast form)
    np.testing.assert_array_equal(ws.apply(v, x), ops.scale_ws_integrate(x, k))
    nodiv = L.ScaleInvariantIntegration(5, divide=False)
    y = nodiv.apply(v, x)
    np.testing.assert_array_equal(y, ops.ws_integrate(ops.clamp(x, ops.DEFAULT_EPSILON), k))
    ref = L.ScaleInvariantIntegration(5, divide=False, method="reference").apply(v, x)
    np.testing.assert_allclose(ref, y, rtol=1e-5, atol=1e-7)
    # the division by the mean is what differs: y / mean(x') is eq. 7
    den = np.maximum(np.asarray(x), ops.DEFAULT_EPSILON).mean(axis=(1, 2, 3))[:, None]
    np.testing.assert_allclose(np.asarray(y) / den, ws.apply(v, x), rtol=1e-5)
    assert np.abs(np.asarray(y) - np.asarray(ws.apply(v, x))).max() > 1e-2


def test_without_the_division_the_layer_is_not_scale_invariant_on_rescaled_digits(real_digits):
    x, _ = real_digits
    ws = L.ScaleInvariantIntegration(5)
    v = ws.init(KEY, x)
    nodiv = L.ScaleInvariantIntegration(5, divide=False)
    d_ws = _delta(lambda z: ws.apply(v, z), x)
    d_nodiv = _delta(lambda z: nodiv.apply(v, z), x)
    # eq. 7 is invariant to float32 rounding; the numerator alone scales as s^2 (0.1 is far below)
    assert d_ws.max() < 1e-6, d_ws
    assert d_nodiv.min() > 0.1, d_nodiv


def _tiny(head: str, **kw) -> ScaledMNISTNet:
    """Table 7's network at widths 4/4/4 on the shipped 5 x 5 DISCO basis (three scales)."""
    small = dict(widths=(4, 4, 4), hidden=8, kernel_size=5, effective_size=3, scales=(1, 1.414, 2))
    if head == "mixed":
        return ScaledMNISTNet(head="mixed", spatial_pool="avg", **small)
    return ScaledMNISTNet(head="ii", **small, **kw)


@pytest.fixture(scope="module")
def probed(real_digits):
    """head -> (model, variables, the probe's statistics, :func:`head_gradients`'s result) at
    initialisation."""
    x, labels = real_digits
    out = {}
    for head in ("ii", "mixed"):
        model = _tiny(head)
        v = model.init(KEY, x)
        measured = ii_probe.head_gradients(model, v, x, labels, KEY)
        out[head] = (model, v, ii_probe.probe_stats(model, v, x, labels, KEY, measured), measured)
    return out


def test_the_model_passes_its_epsilon_and_divide_to_the_ws_head(real_digits, probed):
    import flax.linen as nn

    x, _ = real_digits
    base, v, *_ = probed["ii"]
    seen = []

    def spy(next_fun, args, kwargs, context):
        if isinstance(context.module, L.ScaleInvariantIntegration):
            seen.append((context.module.epsilon, context.module.divide))
        return next_fun(*args, **kwargs)

    for model in (base, base.clone(ii_epsilon=0.1), base.clone(ii_divide=False)):
        with nn.intercept_methods(spy):
            jax.eval_shape(model.apply, v, x)  # traced, not compiled
    assert seen == [(ops.DEFAULT_EPSILON, True), (0.1, True), (ops.DEFAULT_EPSILON, False)]


# --------------------------------------------------------------------------- the statistics


def test_feature_stats_equal_a_direct_computation():
    x = np.array([[[0.0, 2.0], [1e-7, 4.0]], [[1.0, -1.0], [3.0, 0.5]]], np.float32)
    got = ii_probe.feature_stats(x, 1e-6)
    flat = x.reshape(2, -1).astype(np.float64)
    assert got["mean"] == pytest.approx((9.5 + 1e-7) / 8, rel=1e-7)
    assert got["sd"] == pytest.approx(flat.std())
    assert (got["min"], got["max"]) == (-1.0, 4.0)
    assert got["frac_floor"] == pytest.approx(3 / 8)  # 0, 1e-7 and -1 are <= 1e-6
    assert got["batch_sd"] == pytest.approx(np.mean([0.5, 1.5, (3 - 1e-7) / 2, 1.75]), rel=1e-6)
    assert got["dynamic_range"] == pytest.approx(4.0 / np.median(np.abs(flat)))


@pytest.mark.parametrize("head", ["ii", "mixed"])
def test_probe_stats_match_the_models_own_intermediates_and_gradient(real_digits, probed, head):
    x, labels = real_digits
    model, v, got, _ = probed[head]

    def loss(p):
        (logits, st) = model.apply(
            {**v, "params": p}, x, train=True, rngs={"dropout": KEY},
            mutable=["batch_stats", "intermediates"], capture_intermediates=True,
        )  # fmt: skip
        nll = -jax.nn.log_softmax(logits)[jnp.arange(len(labels)), labels]
        return jnp.mean(nll), st["intermediates"]

    grads, inter = jax.jit(jax.grad(loss, has_aux=True))(v["params"])
    # the head's input is the max projection's output (after the ReLU for Scale-II)
    proj = np.asarray(inter["projection"]["__call__"][0])
    head_in = np.maximum(proj, 0.0) if head == "ii" else proj
    floor = ops.DEFAULT_EPSILON if head == "ii" else 0.0
    relu = np.maximum(proj, 0)
    want_in = ii_probe.feature_stats(head_in, floor) | {"relu_mean": relu.mean()}
    got_in = dict(got["head_in"])
    below = got_in.pop("frac_below")
    assert got_in == pytest.approx(want_in, rel=1e-5)
    assert below == pytest.approx({str(t): np.mean(relu <= t) for t in (1e-6, 1e-3, 1e-1)})
    out = np.asarray(inter[ii_probe.head_name(model)]["__call__"][0])
    assert got["head_out"] == pytest.approx(ii_probe.feature_stats(out, -np.inf), rel=1e-5)
    # the zero perturbations at the head leave the parameter gradient as the plain loss's
    assert got["grad_params"] == pytest.approx(ii_probe.group_norms(grads), rel=1e-4)
    assert got["param_norms"] == pytest.approx(ii_probe.group_norms(v["params"]), rel=1e-6)
    assert got["grad_head_in"] > 0 and got["grad_head_out"] > 0
    assert 0 <= got["eval_mode_error"] <= 100 and got["train_mode_error"] >= 0


def test_the_division_split_adds_up_and_shows_the_invariance(real_digits, probed):
    x, labels = real_digits
    model, v, ws, (_, _, h_in, _, g) = probed["ii"]
    # the two paths of eq. 7 make up the gradient the network sees at the head's input
    num, div, cos = ws["grad_numerator_path"], ws["grad_divisor_path"], ws["cos_paths"]
    assert div > 0
    assert np.sqrt(num**2 + div**2 + 2 * cos * num * div) == pytest.approx(
        ws["grad_head_in"], rel=1e-4
    )
    # homogeneous of degree 0 in its input: the gradient is orthogonal to the input (Euler);
    # without the division it is not, and the divisor's path is empty
    assert abs(ws["cos_grad_input"]) < 1e-3, ws
    plain = model.clone(ii_divide=False)
    nodiv = ii_probe.division_split(plain, v["params"], h_in, g["out"])
    assert nodiv["grad_divisor_path"] == 0.0 and nodiv["grad_numerator_path"] > 0
    # degree 1: <dL/dx, x> = <g_out, A(x)> (the clamped entries add ~eps, nothing here)
    a = ops.ws_integrate(ops.clamp(h_in, ops.DEFAULT_EPSILON), v["params"]["ii"]["kernel"])
    euler = float(jnp.sum(g["out"] * a))
    assert nodiv["grad_dot_input"] == pytest.approx(euler, rel=1e-3)
    assert abs(euler) > 1e2 * abs(ws["grad_dot_input"]), (euler, ws["grad_dot_input"])


def test_variables_at_draws_the_trainers_initialisation_and_reads_a_saved_epoch(
    tmp_path, real_digits, probed
):
    import types

    import optax

    from invjax import checkpoint
    from invjax.training import state as state_lib

    x, _ = real_digits
    model, *_ = probed["ii"]
    config = types.SimpleNamespace(seed=3)
    st = state_lib.create_state(model, optax.adam(1e-3), x.shape[1:], 3, False)
    moved = st.replace(params=jax.tree.map(lambda p: p + 1.0, st.params))
    writer = checkpoint.Writer(str(tmp_path), keep=3)
    writer.save(12, moved, {"epoch": 6})
    writer.close()
    at0 = ii_probe.variables_at(config, str(tmp_path), model, x.shape[1:], 0, 2)
    at6 = ii_probe.variables_at(config, str(tmp_path), model, x.shape[1:], 6, 2)  # step 12
    for got, want in ((at0, st.variables()), (at6, moved.variables())):
        assert jax.tree.structure(got) == jax.tree.structure(want)
        jax.tree.map(np.testing.assert_array_equal, got, want)


# --------------------------------------------------------------------------- payoff and rows


def test_ink_kept_is_one_inside_the_canvas_and_less_when_cut_off(real_digits):
    from invjax.data import augment

    x, _ = real_digits
    xf = (x - 0.1) / 0.3  # normalised like the training data (background below 0)
    kept = {}
    for f in (0.5, 1.0, 3.0):
        scaled = augment.scale_images(xf, jnp.full((len(x),), f), fill="border")
        kept[f] = ii_probe.ink_kept(xf, scaled, f)
    np.testing.assert_allclose(kept[1.0], 1.0, rtol=1e-5)
    assert np.abs(kept[0.5] - 1).max() < 0.1, kept[0.5]  # bicubic ringing, nothing cut off
    assert kept[3.0].max() < 0.7, kept[3.0]


def test_probe_config_is_the_study_rows_recipe_with_the_variants_fields():
    row = {
        "run": "main/scaled_mnist_10k/ii_ws/n100/seed_3",
        "config_file": "configs/mnist_ii_disco_ws.py",
        "overrides": {"data.n_train": 100, "data.realisation": 3, "seed": 3,
                      "model.bn_momentum": 0.926, "train.num_epochs": 60,
                      "train.checkpoint_every_epochs": 6, "data.path": "elsewhere"},
        "test_error": 21.0,
    }  # fmt: skip
    rows = {row["run"]: row}
    config, got = ii_probe.probe_config("ii_nodiv", 3, rows, "DIR")
    assert got is row
    assert (config.seed, config.data.realisation, config.data.path) == (3, 3, "DIR")
    assert config.model.bn_momentum == 0.926 and config.model.ii_divide is False
    assert config.train.keep_checkpoints == 11
    config, _ = ii_probe.probe_config("ii_eps1e-1", 3, rows, "DIR")
    assert config.model.ii_epsilon == 0.1 and "ii_divide" not in config.model


def test_the_study_records_rows_load_as_the_probes_recipe():
    rows = {r["run"]: r for r in record.read(ii_probe.STUDY_RECORD)}
    for variant in ii_probe.VARIANTS:
        config, row = ii_probe.probe_config(variant, 0, rows)
        assert row["run"] == ii_probe.study_run(ii_probe.VARIANTS[variant][0], 0)
        assert config.data.n_train == ii_probe.N_TRAIN and config.train.num_epochs == 60
        assert config.train.batch_size == 100 and config.precision == "highest"
        momentum = 0.926 if variant.startswith("ii") else 0.9  # the study's amended momentum
        assert config.model.bn_momentum == momentum


def test_show_prints_each_kind(tmp_path):
    rows = [
        {"kind": "train", "variant": "ii_ws", "realisation": 0, "test_error": 20.5,
         "study_test_error": 26.9, "train_loss": 0.3, "convergence": {"converged": True}},
        {"kind": "payoff", "variant": "ii_ws", "realisation": 0, "factor": 0.3, "error": 50.0},
        {"kind": "payoff", "variant": "ii_ws", "realisation": 1, "factor": 0.3, "error": 40.0},
    ]  # fmt: skip
    rows[0]["host"] = {"cpu_id": "AuthenticAMD 25/1/1"}
    rows.append(rows[0] | {"variant": "ii_nodiv", "test_error": 18.0})
    # the same realisation on another processor: paired with ii_ws on that processor only
    other = {"host": {"cpu_id": "x 6/167"}}
    rows.append(rows[0] | other | {"variant": "ii_gap", "test_error": 19.0})
    rows.append(rows[0] | other | {"test_error": 30.0})
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    study = {ii_probe.study_run("ii_ws", 0): {"test_error": 26.9}}
    study[ii_probe.study_run("disco", 0)] = {"test_error": 24.3}
    text = "\n".join(ii_probe.show_lines(ii_probe.read_rows(str(path)), study))
    assert "ii_ws       0   20.50 ( 26.90)  0.300  True  AuthenticAMD 25/1/1" in text
    assert "ii_ws       (2)  45.00" in text
    # ii_nodiv - ii_ws here, - the study's ii_ws, - the study's disco (realisation 0)
    assert "ii_nodiv    (1)  18.00   -2.50 (1)   -8.90 (1)   -6.30 (1)" in text
    assert "ii_ws       0   30.00 ( 26.90)  0.300  True  x 6/167" in text  # both processors' rows
    assert "ii_gap      (1)  19.00  -11.00 (1)   -7.90 (1)   -5.30 (1)" in text
