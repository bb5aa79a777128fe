"""The real-image study's plan: its power arithmetic against simulation, and its consistency."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

from launch.studies import power, realimages
from launch.studies import realimages_cost as cost

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _simulated_rejection_rate(delta, sd, n, alpha, trials=40_000, seed=0):
    from scipy import stats

    rng = np.random.default_rng(seed)
    d = rng.normal(delta, sd, size=(trials, n))
    t = d.mean(1) / (d.std(1, ddof=1) / np.sqrt(n))
    return float(np.mean(np.abs(t) > stats.t.ppf(1 - alpha / 2, n - 1)))


@pytest.mark.parametrize("n, alpha", [(10, 0.05), (10, 0.05 / 12), (6, 0.05)])
def test_minimum_detectable_effect_is_detected_with_the_planned_power(n, alpha):
    sd = 0.37
    mde = power.minimum_detectable_effect(sd, n, alpha, 0.8)
    rate = _simulated_rejection_rate(mde, sd, n, alpha)
    # 40,000 trials: the rate's standard error is 0.002.
    assert abs(rate - 0.8) < 0.01, (mde, rate)


def test_power_at_no_effect_is_the_level():
    assert power.paired_t_power(0.0, 1.0, 10, 0.05) == pytest.approx(0.05, abs=1e-9)
    rate = _simulated_rejection_rate(0.0, 1.0, 10, 0.05)
    assert abs(rate - 0.05) < 0.005


def test_minimum_detectable_effect_scales_with_sd_and_shrinks_with_pairs():
    a = power.minimum_detectable_effect(1.0, 10)
    assert power.minimum_detectable_effect(2.5, 10) == pytest.approx(2.5 * a, rel=1e-6)
    assert power.minimum_detectable_effect(1.0, 20) < a < power.minimum_detectable_effect(1.0, 6)
    # The textbook figure: a paired t-test on 10 pairs at alpha 0.05 detects about 1 sd with
    # power 0.8 (Cohen's tables: d_z = 0.99).
    assert a == pytest.approx(0.996, abs=0.005)


def test_test_set_sd_matches_simulated_disagreements():
    rng = np.random.default_rng(1)
    n, q = 4_000, 0.02
    diffs = []
    for _ in range(4_000):
        # Each disagreement is an error of one classifier and not the other, equally likely.
        disagree = rng.random(n) < q
        sign = rng.choice([-1, 1], size=n)
        diffs.append(100.0 * np.sum(disagree * sign) / n)
    assert np.std(diffs) == pytest.approx(power.test_set_sd(q, n), rel=0.05)


def test_holm_levels():
    assert power.holm_levels(4, 0.05) == pytest.approx([0.0125, 0.05 / 3, 0.025, 0.05])


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: power.minimum_detectable_effect(0.0, 10), "sd_d=0.0"),
        (lambda: power.minimum_detectable_effect(1.0, 1), "n_pairs=1"),
        (lambda: power.minimum_detectable_effect(1.0, 10, alpha=1.5), "alpha=1.5"),
        (lambda: power.minimum_detectable_effect(1.0, 10, power=0.01), "power=0.01"),
        (lambda: power.minimum_detectable_effect(float("nan"), 10), "sd_d=nan"),
        (lambda: power.test_set_sd(0.1, 0), "n_test=0"),
        (lambda: power.holm_levels(0), "m=0"),
    ],
)
def test_bad_arguments_name_the_value(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_the_plan_is_a_small_consistent_family():
    realimages.check_plan()
    assert 8 <= len(realimages.CLAIMS) <= 14
    assert realimages.REALISATIONS >= 10
    rows = realimages.power_rows()
    for r in rows:
        assert r["sd_assumed"] >= r["sd_floor"] > 0
        assert r["mde_first"] > r["mde_last"] > 0


def _load_config(name, variant):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "configs", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(variant) if variant else module.get_config()


def test_every_arm_is_a_config_for_its_datasets():
    for c in realimages.CLAIMS:
        for arm in realimages.arms_of(c):
            path, _, variant = realimages.config_arg(arm, c.dataset).partition(":")
            name = os.path.basename(path)[: -len(".py")]
            config = _load_config(name, variant)
            if realimages.ARMS[arm].family == "M":
                assert config.data.name == c.dataset, (arm, c.dataset)


def test_fashion_streams_integrate_on_seven_by_seven_maps_and_match_the_data():
    plain, rot = _load_config("fashion_triple", ""), _load_config("fashion_triple", "rot")
    for config in (plain, rot):
        for s in config.model.streams.values():
            assert s.first_stride == 1  # 28 -> 28 -> 14 -> 7: II on 7x7 maps
    assert plain.model.streams.e2.ii_group == "D1"  # flips keep Fashion-MNIST's labels
    assert rot.model.streams.e2.ii_group == "C4"  # rotated data: the four rotations
    with pytest.raises(ValueError, match="'flip'"):
        _load_config("fashion_std", "flip")


@pytest.mark.parametrize(
    "variant, exact", [("", ["flip"]), ("rot", ["rot90", "rot180", "rot270"])], ids=["plain", "rot"]
)
def test_the_e2_stream_is_exactly_invariant_to_its_datas_symmetry(variant, exact, camera64):
    """The study's E(2) stream at its full width, on two 28x28 crops of a real photo: exact (to
    float32 rounding) for the horizontal flip on Fashion-MNIST, for the rotations by 90 degrees
    on the rotated variant, and for nothing else (the other elements of D4 are not claimed)."""
    import jax
    import jax.numpy as jnp

    from invjax import equivariance, models

    model = models.build(_load_config("fashion_e2", variant).model)
    img = jnp.asarray(camera64[0, :56:2, :56:2, :])
    x = jnp.stack([img, jnp.transpose(img, (1, 0, 2))])  # [2, 28, 28, 1]
    variables = model.init(jax.random.PRNGKey(0), x, train=False)
    errors = equivariance.check_equivariance(model, variables, x, train=False)
    assert list(errors) == exact
    assert all(e < 1e-5 for e in errors.values()), errors  # measured: 5e-7 to 7e-7
    logits = model.apply(variables, x, train=False)
    assert float(jnp.abs(logits[0] - logits[1]).max()) > 1e-3  # the crops differ: not constant


def test_budget_counts_shared_arms_once_and_grows_with_the_data():
    flops = {k: {"train": 1.0, "eval": 0.5} for k in cost.flops_keys()}
    rows = cost.budget_rows(flops, cpu_gflops=10.0, gpu_tflops=1.0)
    by_id = {r["claim"]: r for r in rows}
    assert by_id["T1"]["arms"] == ["ii_ws", "disco"]
    assert by_id["T2"]["arms"] == ["ii_mono"]  # disco at 5k is T1's
    assert by_id["M2"]["arms"] == ["triple_std"]  # triple and the streams are M1's
    small = cost.run_gflop("disco", "scaled_mnist_10k", 100, flops)
    large = cost.run_gflop("disco", "scaled_mnist_10k", 5_000, flops)
    assert large > small > 0
    assert realimages.epochs_for(10, 100, 64, 1_500) == 1_500  # one step per epoch
    assert realimages.epochs_for(1_000, 100, 64, 1_500) == 100  # 16 steps per epoch
    assert realimages.epochs_for(10, 60, 128, 0) == 60  # the paper's recipe


def test_a_two_phase_run_is_priced_part_by_part_at_each_parts_own_rate():
    """The head trains for the epochs phase 2 gives it (the plan's head_schedule), each
    private stream for the streams' epochs (the plan's schedule), each at its own network's
    measured rate: triple_star's narrow streams are networks of their own in the table."""
    from launch.studies import plan

    keys = cost.flops_keys()
    assert {"fashion_std_star", "fashion_e2_star", "fashion_scale_star"} <= set(keys)
    rates = {k: 100.0 * (i + 1) for i, k in enumerate(keys)}  # images/s, all different
    flops = {k: {"train": 1.0, "eval": 0.0, "images_per_s": rates[k]} for k in keys}
    rule = realimages.recipe("M")
    for n in (100, 1_000, 58_000):
        streams = plan.schedule(n, rule, 58_000)["num_epochs"]
        head = plan.head_schedule(n, rule, 58_000)["num_epochs"]
        if n == 1_000:  # as M1-M3's runs trained: 100 epochs of the streams, 25 of the head
            assert (streams, head) == (100, 25)
        assert cost.run_parts("scale", "fashion_mnist", n) == [("fashion_scale", streams)]
        assert cost.run_parts("triple", "fashion_mnist", n) == [("fashion_triple", head)]
        star = cost.run_parts("triple_star", "fashion_mnist", n)
        assert star == [("fashion_triple_star", head)] + [
            (f"fashion_{s}_star", streams) for s in ("std", "e2", "scale")
        ]
        std = cost.run_parts("triple_std", "fashion_mnist", n)
        assert std == [("fashion_triple_std", head)] + [("fashion_std", streams)] * 2
        # with no evaluation cost: epochs x images x GFLOP, and seconds at each part's rate
        got = cost.run_gflop("triple_star", "fashion_mnist", n, flops)
        assert got == pytest.approx(n * (head + 3 * streams))
        seconds = cost.run_cpu_seconds("triple_star", "fashion_mnist", n, flops, 1.0)
        assert seconds == pytest.approx(sum(e * n / rates[k] for k, e in star))
    # the paper's networks train one program for the family's epochs
    assert cost.run_parts("disco", "scaled_mnist_10k", 100) == [("mnist_disco", 60)]


def test_the_budget_refuses_a_flops_table_without_a_network_it_prices(tmp_path, capsys):
    import json

    from launch.studies.__main__ import main

    table = {k: {"train": 1.0, "eval": 1.0} for k in cost.flops_keys()}
    del table["fashion_scale_star"]
    path = tmp_path / "flops.json"
    path.write_text(json.dumps(table))
    assert main(["realimages", "power", f"--flops={path}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "lacks the networks ['fashion_scale_star']" in err[0]
