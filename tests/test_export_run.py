"""``python -m invjax.export``: a finished run out as a self-describing directory, verified when
loaded (checksums and schema: every damaged or edited export is one ExportError).

The failure it fixes: an exported model fed the dataset's own [0, 1] digits gave 77% test error
instead of the run's 2%, silently (it expected normalised images and said nothing). Now the
program takes raw images as the dataset stores them and the loader refuses anything else.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import flax.linen as nn
import jax
import numpy as np
import pytest
from tiny_runs import run_module

from invjax import data as data_lib
from invjax import equivariance
from invjax import groups as G
from invjax.export import (
    ExportError,
    arrays_sha256,
    artifact,
    canonical_json,
    export,
    load,
    sha256,
)
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
        "float64": x.astype(np.float64),  # a silent failure once: another encoding
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
        with pytest.raises(ExportError, match=match):
            load(path)
    # The run directory is not an export either (a common slip: --workdir for --out).
    with pytest.raises(ExportError, match="no manifest.json"):
        load(exported[0])


@pytest.mark.slow
def test_export_command_refuses_bad_input(tmp_path, exported):
    run, out, _, _ = exported
    cases = [
        ([f"--workdir={tmp_path / 'nope'}", f"--out={tmp_path / 'a'}"], "no such directory"),
        ([f"--workdir={tmp_path}", f"--out={tmp_path / 'b'}"], "holds no readable checkpoint"),
        ([f"--workdir={run}", f"--out={out}"], "exists and is not an empty directory"),
        ([f"--workdir={run}"], "the following arguments are required: --out (see --help)"),
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
    """The invariance JSON names the checkpoint step it measured."""
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


# --------------------------------------------------------------------------- damaged and edited


def _copy(out, tmp_path):
    dst = str(tmp_path / "copy")
    shutil.copytree(out, dst)
    return dst


def _manifest(d):
    with open(os.path.join(d, artifact.MANIFEST_FILE)) as f:
        return json.load(f)


def _write_manifest(d, m, sign=False):
    """Write manifest ``m`` into export ``d``; ``sign``: with its checksum recomputed, as a
    forger (or a faulty writer) would, so that the schema check alone must catch it."""
    if sign:
        body = {k: v for k, v in m.items() if k != artifact.CHECKSUMS}
        m[artifact.CHECKSUMS][artifact.MANIFEST_FILE] = sha256(canonical_json(body))
    with open(os.path.join(d, artifact.MANIFEST_FILE), "w") as f:
        json.dump(m, f, indent=2)


def _edit(change):
    def tamper(d, sign):
        m = _manifest(d)
        change(m)
        _write_manifest(d, m, sign)

    return tamper


def _del(key):
    return lambda m: m.pop(key)


def _set(*path_and_value):
    *path, key, value = path_and_value

    def change(m):
        node = m
        for p in path:
            node = node[p]
        node[key] = value

    return change


@pytest.mark.slow
@pytest.mark.parametrize(
    "change, why",
    [
        (_del("input"), "input is NoneType, not an object"),
        (_set("program", None), "program None is not 'model.npz'"),
        (_set("input", "range", [0, 255]), "input.range [0, 255] is not [0.0, 1.0]"),
        (_set("input", "range", [1.0, 0.0]), "input.range [1.0, 0.0] is not [lo, hi] of finite"),
        (_set("input", "dtype", "float16"), "input.dtype 'float16' is not one of"),
        (_set("input", "normalisation", "std", [0.0]), "input.normalisation.std [0.0] is not pos"),
        (_set("output", "classes", ["0"]), "output.classes has 1 name for 10 logits"),
        (_set("output", "logits", ["B", 3]), "output.classes has 10 names for 3 logits"),
    ],
    ids=[
        "no-input",
        "program-null",
        "range-x255",
        "range-reversed",
        "dtype",
        "std-zero",
        "one-class",
        "logits",
    ],
)
def test_an_edited_manifest_is_one_export_error(exported, tmp_path, change, why):
    """Each edit of the contract is caught by the manifest's checksum; re-signed (its checksum
    recomputed), by the schema check, naming the field. Never another exception type."""
    d = _copy(exported[1], tmp_path)
    where = os.path.join(d, artifact.MANIFEST_FILE)
    _edit(change)(d, sign=False)
    with pytest.raises(ExportError) as e:
        load(d)
    assert str(e.value).startswith(f"{where} differs from when it was written (sha256"), e.value
    shutil.copy(os.path.join(exported[1], artifact.MANIFEST_FILE), where)
    _edit(change)(d, sign=True)
    with pytest.raises(ExportError) as e:
        load(d)
    assert str(e.value).startswith(f"{where}: {why}"), e.value
    assert "export the run again" in str(e.value)


def _rewrite_npz(path, change):
    """Rewrite an export file with ``change({entry: array})`` applied to its entries."""
    with np.load(path) as f:
        entries = {k: f[k] for k in f.files}
    change(entries)
    with open(path, "wb") as f:
        np.savez(f, **entries)


def _resign_header(entries):
    """The file's header checksums recomputed for its (changed) program and arrays."""
    meta = json.loads(str(entries["__meta__"]))
    arrays = {k[2:]: v for k, v in entries.items() if k.startswith("a/")}
    meta["sha256"] = {
        "program": sha256(entries["__stablehlo__"].tobytes()),
        "arrays": arrays_sha256(arrays),
    }
    body = {k: v for k, v in meta.items() if k != "sha256"}
    meta["sha256"]["header"] = sha256(canonical_json(body))
    entries["__meta__"] = np.asarray(json.dumps(meta))


def _truncate(path):
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size // 2)


def _flip(path):
    raw = bytearray(open(path, "rb").read())
    raw[len(raw) // 2] ^= 0x01
    open(path, "wb").write(bytes(raw))


def _zero_arrays(entries):
    for k in entries:
        if k.startswith("a/"):
            entries[k] = np.zeros_like(entries[k])


def _garbage_program(entries):
    entries["__stablehlo__"] = np.frombuffer(np.random.default_rng(0).bytes(4096), np.uint8)


@pytest.mark.slow
@pytest.mark.parametrize(
    "tamper, why",
    [
        (_truncate, ("is damaged: NumPy cannot read it as an .npz archive (BadZipFile",)),
        (_flip, ("is damaged: an entry cannot be read", "differ from when", "cannot be deser")),
        (lambda p: _rewrite_npz(p, _zero_arrays), ("its arrays differ from when they were saved",)),
        (lambda p: _rewrite_npz(p, _garbage_program), ("its program differs from when it was",)),
        (
            lambda p: _rewrite_npz(p, lambda e: (_garbage_program(e), _resign_header(e))),
            ("its program cannot be deserialised (",),
        ),
        (
            lambda p: _rewrite_npz(
                p, lambda e: e.pop("a/" + sorted(k[2:] for k in e if k.startswith("a/"))[0])
            ),
            ("its arrays differ from when they were saved",),
        ),
        (
            lambda p: _rewrite_npz(
                p,
                lambda e: e.__setitem__(
                    "__meta__",
                    np.asarray(
                        json.dumps(
                            {
                                "format": "invjax-export/2",
                                "input_shape": [28, 28, 1],
                                "input_dtype": "float32",
                            }
                        )
                    ),
                ),
            ),
            ("format 'invjax-export/2' was written by an earlier invjax and carries no checksums",),
        ),
    ],
    ids=[
        "truncated",
        "bit-flip",
        "zeroed",
        "garbage-program",
        "forged-garbage",
        "array-gone",
        "old-format",
    ],
)
def test_a_damaged_program_file_is_one_export_error(exported, tmp_path, tamper, why):
    """``model.npz`` truncated, one bit flipped, its arrays zeroed, its program replaced by
    garbage (also with the file's own checksums recomputed), an array removed, or an old header
    without checksums: through the directory, the manifest's checksum of the file fails; loaded
    alone, the file's own checks (or NumPy's reading) fail. One ExportError each way."""
    d = _copy(exported[1], tmp_path)
    npz = os.path.join(d, artifact.PROGRAM_FILE)
    tamper(npz)
    with pytest.raises(ExportError) as e:
        load(d)
    assert str(e.value).startswith(f"{npz} differs from when it was written (sha256)"), e.value
    with pytest.raises(ExportError) as e:
        load(npz)
    message = str(e.value)
    assert message.startswith(npz) and any(w in message for w in why), message
    assert len(message.splitlines()) == 1


@pytest.mark.slow
def test_json_without_numbers_and_old_exports_are_refused(exported, tmp_path):
    """A NaN range (Python's json writes and reads ``NaN``; JSON has none) and an export of the
    earlier format (no checksums): one ExportError each, the latter saying to export again."""
    d = _copy(exported[1], tmp_path)
    where = os.path.join(d, artifact.MANIFEST_FILE)
    m = _manifest(d)
    m["input"]["range"] = [float("nan"), 1.0]
    _write_manifest(d, m, sign=False)
    with pytest.raises(ExportError, match="is not readable JSON .*NaN is not a JSON number"):
        load(d)
    m["input"]["range"] = [0.0, 1.0]
    m["format"] = "invjax-export-dir/1"
    del m[artifact.CHECKSUMS]
    _write_manifest(d, m)
    with pytest.raises(ExportError) as e:
        load(d)
    assert str(e.value) == (
        f"{where}: format 'invjax-export-dir/1' was written by an earlier invjax and carries no "
        "checksums, so the export cannot be verified: export the run again (python -m "
        f"invjax.export --workdir={os.path.abspath(exported[0])} --out=NEW_DIR)"
    )
    os.remove(os.path.join(d, artifact.PROGRAM_FILE))
    _write_manifest(d, _manifest(exported[1]))
    with pytest.raises(ExportError, match=r"model.npz cannot be read \(FileNotFoundError"):
        load(d)


@pytest.mark.slow
def test_the_checksums_cover_the_whole_export(exported):
    """The manifest's checksums are those of the files as written (recomputed here), and the
    program file's own ones of its program, arrays and header."""
    _, out, _, _ = exported
    m = _manifest(out)
    body = {k: v for k, v in m.items() if k != artifact.CHECKSUMS}
    assert m[artifact.CHECKSUMS][artifact.MANIFEST_FILE] == sha256(canonical_json(body))
    npz = os.path.join(out, artifact.PROGRAM_FILE)
    assert m[artifact.CHECKSUMS][artifact.PROGRAM_FILE] == sha256(open(npz, "rb").read())
    with np.load(npz) as f:
        meta = json.loads(str(f["__meta__"]))
        arrays = {k[2:]: f[k] for k in f.files if k.startswith("a/")}
        assert meta["sha256"]["program"] == sha256(f["__stablehlo__"].tobytes())
    assert meta["sha256"]["arrays"] == arrays_sha256(arrays) and len(arrays) > 0


# --------------------------------------------------------------------------- --out


@pytest.mark.slow
def test_a_bad_destination_is_refused_before_the_run_is_read(tmp_path):
    """``--out`` empty, under a file, inside /proc (tests run as root, for whom permission bits
    do not stop a write: a read-only place is a path the kernel refuses, whoever asks), a file,
    an empty mount point or a read-only one (where this process may mount a tmpfs): exit 2 and one line about
    ``--out``, with a ``--workdir`` that does not exist, so the destination is provably checked
    first; nothing is created."""
    missing_run = str(tmp_path / "no_run")
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    cases = [
        ("", "--out is empty"),
        (str(a_file / "export"), f"--out={a_file}/export is under {a_file}, which is a file"),
        ("/proc/invjax-export-test", "--out=/proc/invjax-export-test cannot be created: /proc"),
        (str(a_file), "exists and is not an empty directory"),
    ]
    mounts = {"mnt": "size=1m", "ro": "ro,size=1m"}  # an empty one; a read-only one
    for name in mounts:
        (tmp_path / name).mkdir()
    mounted = [
        name
        for name, options in mounts.items()
        if subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(tmp_path / name)],
            capture_output=True,
        ).returncode
        == 0
    ]
    if "mnt" in mounted:
        cases.append((str(tmp_path / "mnt"), "is a mount point"))
    if "ro" in mounted:
        ro = tmp_path / "ro"
        cases.append((str(ro / "export"), f"cannot be created: {ro} does not let this process"))
    try:
        for out, match in cases:
            proc = run_module(
                "invjax.export", f"--workdir={missing_run}", f"--out={out}", timeout=120
            )
            assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
            (line,) = proc.stderr.strip().splitlines()
            assert line.startswith("invjax.export: error: ") and match in line, (out, line)
    finally:
        for name in mounted:
            subprocess.run(["umount", "-l", str(tmp_path / name)], check=False)
    assert sorted(os.listdir(tmp_path)) == ["a_file", "mnt", "ro"]
    assert not os.path.exists("/proc/invjax-export-test")
