"""The invjax side of the peer benchmark (benchmarks/peers/e2cnn_bench.py) at tiny sizes.

CI has no torch or e2cnn, so the peer side is not run here (``--no-peer``); what is checked is
that the invjax side measures what it claims: parameter and basis counts, timings, and the
rotation calibration and errors of the 45-degree measurement that the peer's outputs go through.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "benchmarks", "peers", "e2cnn_bench.py")


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("e2cnn_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TINY = ["--no-peer", "--fields", "2", "--size", "9", "--batch", "2", "--repeats", "1"]


@pytest.mark.slow
def test_layer_and_equivariance_without_peer(bench, tmp_path, capsys):
    out = tmp_path / "peers.json"
    res = bench.main(
        TINY
        + ["--parts", "layer,equivariance", "--build-repeats", "1", "--seeds", "1"]
        + ["--json", str(out)]
    )
    layer = res["layer"]["invjax"]
    # D8, 2 -> 2 regular fields: 2 * 2 * |G| * B coefficients, B the basis size of one filter.
    assert layer["params"] == 2 * layer["basis_per_field_pair"] * 2
    assert layer["basis_per_field_pair"] % 16 == 0
    assert all(layer[k] > 0 for k in ("build_first_s", "build_rebuild_s", "fwd_bwd_s"))
    assert res["layer"]["e2cnn"]["fwd_bwd_s"] is None  # the peer was not run, and says so
    eq = res["equivariance"]["invjax"]
    for name in ("lift", "conv"):
        assert eq[name]["rot90_max"] < 1e-5  # exact on the grid: the calibration found the element
        assert 1e-3 < eq[name]["rot45"] < 0.08  # interpolation error, as bounded in test_e2.py
        assert eq[name]["rot45_element"] == [0, 1]
    assert json.loads(out.read_text())["results"]["layer"]["invjax"]["params"] == layer["params"]
    text = capsys.readouterr().out
    assert "45-degree equivariance error" in text and "e2cnn/invjax" in text


def test_calibration_follows_the_frameworks_labels(bench):
    """A framework that labels rotations the other way round (r -> -r) gets the same errors."""
    from invjax import groups as G
    from invjax.layers.e2 import E2LiftConv

    photo = jax.numpy.asarray(bench.camera_photo())
    batch = jax.numpy.concatenate(
        [photo, G.rotate(photo, math.pi / 2), G.rotate(photo, math.pi / 4, "bilinear")]
    )
    lift = E2LiftConv(1, "D8", 5)
    y = np.asarray(lift.apply(lift.init(jax.random.PRNGKey(0), batch[:1]), batch))
    g = G.parse_group("D8")
    mats = np.stack([np.eye(16)[g.regular_permutation(e)] for e in range(16)])
    labels = [tuple(int(a) for a in g.element(e)) for e in range(16)]
    mirrored = [(f, (-r) % 8) for f, r in labels]
    a = bench.equivariance_errors(y, mats, labels)
    b = bench.equivariance_errors(y, mats, mirrored)
    assert a["rot45_element"] == [0, 1] and b["rot45_element"] == [0, 7]
    assert a["rot45"] == pytest.approx(b["rot45"]) and a["rot90"] < 1e-5
    # Labels that are not a consistent rotation numbering (r -> r + 4: the 90-degree candidates
    # still match, the 45-degree element is then off by 180 degrees) give a large 45-degree error.
    index = {lab: e for e, lab in enumerate(labels)}
    shifted = mats[[index[(f, (r + 4) % 8)] for f, r in labels]]
    assert bench.equivariance_errors(y, shifted, labels)["rot45"] > 5 * a["rot45"]


@pytest.mark.slow
def test_wrn_part_reads_the_config(bench):
    res = bench.main(
        ["--no-peer", "--parts", "wrn", "--size", "8", "--batch", "2", "--wrn-repeats", "1"]
        + ["--wrn-set", "widen_factor=1", "--wrn-set", "depth=10"]
    )
    inv = res["wrn"]["invjax"]
    assert inv["config"] == os.path.join("configs", "svhn_e2.py")
    assert inv["params"] > 0 and inv["fwd_bwd_s"] > 0
    assert inv["basis_per_field_pair"]  # regular -> regular convolutions were found and counted


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags,named",
    [
        (["--fields", "0"], "--fields=0"),
        (["--parts", "layer,speed"], "--parts='layer,speed'"),
        (["--size", "3"], "--size=3"),
        (["--wrn-set", "widen_factor"], "--wrn-set='widen_factor'"),
        (["--peer-python", "/nonexistent/python"], "run.sh"),
    ],
)
def test_bad_input_exits_2_with_one_message(flags, named):
    extra = [] if "--peer-python" in flags else ["--no-peer"]
    p = subprocess.run(
        [sys.executable, SCRIPT, *extra, *flags],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2, p.stderr
    assert named in p.stderr and len(p.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------------------------------- DISCO

DISCO_SCRIPT = os.path.join(REPO, "benchmarks", "peers", "disco_bench.py")


@pytest.fixture(scope="module")
def disco_bench():
    spec = importlib.util.spec_from_file_location("disco_bench", DISCO_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeDisco:
    """Answers like disco_side.py: a fixed build, then the given step times in turn."""

    def __init__(self, seconds):
        self.seconds, self.calls = list(seconds), []

    def __call__(self, op, **kw):
        self.calls.append(op)
        if op == "build":
            return {"ok": True, "params": 7, "build_s": 0.5}
        return {"ok": True, "seconds": self.seconds.pop(0)}


def test_disco_measure_alternates_and_takes_medians(disco_bench):
    """First calls apart, then each round runs every invjax step and one DISCO step in turn."""
    order = []

    def step(tag):
        def run():
            order.append(tag)
            return np.zeros(1)

        return run

    peer = FakeDisco([9.0, 1.0, 3.0, 2.0])
    r = disco_bench.measure(peer, "conv3", {"a": (step("a"), ()), "b": (step("b"), ())}, 3, 2)
    assert peer.calls == ["build", "fwd_bwd", "fwd_bwd", "fwd_bwd", "fwd_bwd"]
    assert order == ["a", "b"] + ["a", "b"] * 3
    assert r["disco"] == {"params": 7, "build_s": 0.5, "first_s": 9.0, "median_s": 2.0}
    assert set(r["invjax"]) == {"a", "b"} and r["invjax"]["a"]["median_s"] > 0
    assert disco_bench._ratio(2.0, 0.5).strip() == "4.00" and disco_bench._ratio(None, 1.0)


@pytest.mark.slow
def test_disco_bench_invjax_side(disco_bench, tmp_path, capsys):
    """The invjax side at batch 1: the network's parameter count (DISCO's is 494,549 too), the
    lowering each scale convolution gets, and the layer timings."""
    out = tmp_path / "disco.json"
    res = disco_bench.main(
        ["--no-peer", "--batch", "1", "--repeats", "1", "--cases", "conv3"]
        + ["--lowerings", "auto,fft", "--json", str(out)]
    )
    net = res["net"]["invjax"]["auto"]
    assert net["params"] == 494_549
    expect = "fft" if jax.default_backend() == "cpu" else "per_scale"
    assert net["lowerings"].endswith(f"conv3 63->95 on 14x14 k15: {expect}")
    conv3 = res["layers"]["conv3"]["invjax"]
    assert conv3["auto"]["chosen"] == expect and conv3["fft"]["chosen"] == "fft"
    assert conv3["auto"]["params"] == 63 * 95 * 49 + 95
    assert all(v["median_s"] > 0 for v in conv3.values())
    assert res["layers"]["conv3"]["disco"]["median_s"] is None  # not run, and says so
    assert json.loads(out.read_text())["results"]["net"]["invjax"]["auto"]["params"] == 494_549
    text = capsys.readouterr().out
    assert "DISCO/invjax" in text and "load average" in text


@pytest.mark.parametrize(
    "flags,named",
    [
        (["--no-peer", "--lowerings", "fast"], "--lowerings='fast'"),
        (["--no-peer", "--cases", "conv9"], "--cases='conv9'"),
        (["--no-peer", "--batch", "0"], "--batch=0"),
        (["--disco", "/nonexistent"], "--disco=/nonexistent"),
    ],
)
def test_disco_bench_bad_input_exits_2_with_one_message(flags, named):
    p = subprocess.run(
        [sys.executable, DISCO_SCRIPT, *flags],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2, p.stderr
    assert named in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert p.stderr.startswith("invjax: error: ")
