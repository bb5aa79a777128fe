"""``python -m invjax.export``: a finished run out as a self-describing directory (issue 20, 1).

The failure it fixes: an exported model fed the dataset's own [0, 1] digits gave 77% test error
instead of the run's 2%, silently (it expected normalised images and said nothing). Now the
program takes raw images as the dataset stores them and the loader refuses anything else.
"""

from __future__ import annotations

import json
import os

import flax.linen as nn
import jax
import numpy as np
import pytest
from tiny_runs import run_module

from invjax import data as data_lib
from invjax import equivariance
from invjax import groups as G
from invjax.export import artifact, export, load
from invjax.layers import e2 as e2l
from invjax.layers import ii as iil

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture(scope="module")
def exported(tiny_digits_run, tmp_path_factory):
    """A finished tiny digits run (conftest's: float32 images in [0, 1], 100 training images,
    batch 50, 3 epochs of 2 steps) and its export: ``(run dir, export dir, results, stdout)``."""
    run, out = tiny_digits_run, str(tmp_path_factory.mktemp("export_run") / "export")
    proc = run_module("invjax.export", f"--workdir={run}", f"--out={out}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(os.path.join(run, "results.json")) as f:
        results = json.load(f)
    return run, out, results, proc.stdout


def _digits_test():
    cfg = data_lib.default_config()
    cfg.name, cfg.n_train = "digits", 100
    return data_lib.load(cfg).test


@pytest.mark.slow
def test_export_reproduces_the_run_on_raw_test_images(exported):
    run, out, results, stdout = exported
    assert sorted(os.listdir(out)) == ["manifest.json", "model.npz"]
    model = load(out)
    assert isinstance(model, artifact.ExportedRun)
    test = _digits_test()  # as invjax.data.load(config.data).test.images holds them
    assert test.images.dtype == np.float32
    logits = np.asarray(model(test.images))
    assert logits.shape == (len(test), 10)
    error = 100.0 * int((logits.argmax(-1) != test.labels).sum()) / len(test)
    assert error == results["test_error"], (error, results["test_error"])
    # The manifest records where the program came from and what it needs and guarantees.
    m = model.manifest
    assert m["input"]["dtype"] == "float32" and m["input"]["range"] == [0.0, 1.0]
    assert m["input"]["shape"] == ["B", 28, 28, 1]
    assert "inside the program" in m["input"]["normalisation"]["applied"]
    assert m["output"]["classes"] == [str(k) for k in range(10)]
    src = m["source"]
    assert src["workdir"] == os.path.abspath(run) and src["step"] == results["steps"] == 6
    assert src["selected_by"] == "best validation"  # digits_cnn selects the best epoch
    assert src["model_epoch"] == results["selected_epoch"]
    assert src["config_file"] == "configs/digits_cnn.py" and src["dataset"] == "digits"
    assert m["precision"]["name"] == "highest"
    assert m["test_error"] == {
        "run": results["test_error"],
        "export": results["test_error"],
        "n_test": len(test),
        "identical": True,
    }
    assert m["invariance"]["exact_elements"] == [] and "note" in m["invariance"]
    assert f"(the run: {results['test_error']:.2f}%)" in stdout


@pytest.mark.slow
def test_out_of_contract_images_are_one_message(exported):
    _, out, _, _ = exported
    model = load(out)
    x = _digits_test().images[:3]
    bad = {
        "float64": x.astype(np.float64),  # the silent failure: another encoding
        "uint8": np.rint(x * 255).astype(np.uint8),
        "0..255 floats": x * 255.0,
        "NaN": np.where(np.arange(x.size).reshape(x.shape) == 5, np.nan, x).astype(np.float32),
        "shape": x[:, :14],
        "no batch": x[0],
        "empty": x[:0],
    }
    for what, images in bad.items():
        with pytest.raises(ValueError) as e:
            model(images)
        message = str(e.value)
        assert message.startswith(f"images do not fit the export {out}"), (what, message)
        assert "float32 [B, 28, 28, 1] with values in [0, 1]" in message, (what, message)
    np.testing.assert_array_equal(model(x), model(x.copy()))  # in contract: runs


@pytest.mark.slow
def test_loading_what_is_not_an_export_is_one_clear_error(tmp_path, exported):
    text = tmp_path / "notes.txt"
    text.write_text("not an export\n")
    np.save(tmp_path / "array.npy", np.zeros(3))
    (tmp_path / "empty_dir").mkdir()
    cases = {
        str(text): "is not an invjax export",
        str(tmp_path / "array.npy"): "is not an invjax export",
        str(tmp_path / "empty_dir"): "is not an invjax export: it has no manifest.json",
        str(tmp_path / "missing.npz"): "no such file",
    }
    for path, match in cases.items():
        with pytest.raises(ValueError, match=match):
            load(path)
    # The run directory is not an export either (a common slip: --workdir for --out).
    with pytest.raises(ValueError, match="no manifest.json"):
        load(exported[0])


@pytest.mark.slow
def test_export_command_refuses_bad_input(tmp_path, exported):
    run, out, _, _ = exported
    cases = [
        ([f"--workdir={tmp_path / 'nope'}", f"--out={tmp_path / 'a'}"], "no such directory"),
        ([f"--workdir={tmp_path}", f"--out={tmp_path / 'b'}"], "holds no readable checkpoint"),
        ([f"--workdir={run}", f"--out={out}"], "exists and is not an empty directory"),
    ]
    for args, match in cases:
        proc = run_module("invjax.export", *args, timeout=120)
        err = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(err) == 1, proc.stderr
        assert err[0].startswith("invjax.export: error: ") and match in err[0], err
    assert not os.path.exists(tmp_path / "a") and not os.path.exists(tmp_path / "b")


class _C4Invariant(nn.Module):
    """Exactly invariant to 90-degree rotations: C4 lift, BatchNorm, group pooling, II."""

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = e2l.E2LiftConv(3, "C4", 3, stride=2, name="lift")(x)
        x = nn.relu(e2l.E2BatchNorm("C4", name="bn")(x, train))
        x = e2l.GroupPool("C4")(x)
        x = iil.RotationInvariantIntegration(4, 4, name="ii")(x, train)
        return nn.Dense(5)(x)


class _Plain(nn.Module):
    """No invariance at all: a convolution and a dense layer on the flattened map."""

    @nn.compact
    def __call__(self, x, train: bool = False):
        return nn.Dense(5)(nn.Conv(4, (3, 3))(x).reshape(x.shape[0], -1))


def test_measured_invariance_of_raw_images(monkeypatch):
    """The manifest's invariance: the exact elements transform the *raw* images (uint8 kept
    uint8: rotations by 90 degrees permute pixels) and the exported logits are compared.
    Measured: rot90 2e-7 on a C4-invariant network; a plain CNN changes by O(1)."""
    x = np.rint(_digits_test().images[:4] * 255).astype(np.uint8)[:, 1:-2, 1:-2]  # 25 x 25
    c4 = G.parse_group("C4")
    claimed = [equivariance.Element("rot90", c4, 1), equivariance.Element("rot180", c4, 2)]
    monkeypatch.setattr(equivariance, "exact_elements", lambda module, shape: claimed)
    stats = (np.array([0.13]), np.array([0.3]))
    net = _C4Invariant()
    v = net.init(jax.random.PRNGKey(0), np.zeros((1, 25, 25, 1), np.float32))
    program = export(net, v, (25, 25, 1), input_dtype="uint8", normalise=stats)
    inv = artifact._invariance(program, net, x)
    assert inv["holds"] and max(inv["max_relative_error"].values()) < 1e-5, inv
    assert np.array_equal(artifact._raw_transform(x, c4, 2), x[:, ::-1, ::-1])
    plain = _Plain()
    pv = plain.init(jax.random.PRNGKey(1), np.zeros((1, 25, 25, 1), np.float32))
    inv = artifact._invariance(
        export(plain, pv, (25, 25, 1), input_dtype="uint8", normalise=stats), plain, x
    )
    assert not inv["holds"] and min(inv["max_relative_error"].values()) > 1e-2, inv


@pytest.mark.slow
def test_invariance_json_names_the_checkpoint_step(exported, capsys):
    """Issue 20, 6: the invariance JSON did not name the checkpoint step it measured."""
    from invjax import invariance as I

    run, out, results, _ = exported
    config = os.path.join(os.path.dirname(out), "tiny_config.py")  # beside the export
    with open(config, "w") as f:  # the run's config (its overrides) as a file
        f.write(
            "from configs import digits_cnn\n\n\ndef get_config():\n"
            "    c = digits_cnn.get_config()\n"
            "    c.data.name, c.data.n_train, c.model.width = 'digits', 100, 4\n"
            "    return c\n"
        )
    argv = ["invariance", f"--config={config}", f"--workdir={run}", "--json", "--n_samples=8"]
    argv.append("--transforms=flip")
    assert I.main(argv) == 0, capsys.readouterr().err
    out = json.loads(capsys.readouterr().out)
    assert out["variables"] == "checkpoint" and out["checkpoint_step"] == results["steps"] == 6
    assert out["selected_by"] == "best validation"
    assert out["model_epoch"] == results["selected_epoch"] and out["n_images"] == 8
