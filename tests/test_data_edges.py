"""The edges of the data sources, the converters and the run folder, as a user meets them:
each case runs the real command in a subprocess and asserts one line and nothing lost (exit 0
only with a correct result; 2 refused before compute, nothing written; 143 on SIGTERM)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys

import numpy as np
import pytest
from test_data_idx import _write as write_idx_dir
from test_image_folder import _tiny
from tiny_runs import one_line_error, run_module

from invjax import export as export_lib
from invjax.data import datasets, fingerprint, idx

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

TINY = [  # a width-4 CNN, 2 epochs of a few steps
    "--config=configs/digits_cnn.py",
    "--config.model.width=4",
    "--config.train.batch_size=16",
    "--config.train.num_epochs=2",
    "--config.train.lr_boundaries=(1,)",
    "--config.train.log_every_steps=0",
]


def _main(*args, fault=None):
    return run_module("invjax.main", *TINY, *args, fault=fault)


def _mnist(path, *extra):
    return ["--config.data.name=mnist", f"--config.data.path={path}", *extra]


def _tree(path) -> dict:
    """Every file under ``path`` with its bytes."""
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, path)] = fh.read()
    return out


# --------------------------------------------------------------------------- data lost


@pytest.mark.slow
def test_a_finished_run_on_replaced_files_is_refused_naming_both_fingerprints(tmp_path):
    data, wd = tmp_path / "mnist", tmp_path / "run"
    write_idx_dir(str(data), 60, 20)
    first = _main(*_mnist(data), f"--workdir={wd}")
    assert first.returncode == 0, first.stderr[-3000:]
    stored = json.loads((wd / fingerprint.FILE).read_text())
    results = (wd / "results.json").read_bytes()
    original = _tree(data)
    write_idx_dir(str(data), 60, 20, seed=7)  # other training images, same names and sizes
    line = one_line_error(_main(*_mnist(data), f"--workdir={wd}"))
    assert "was trained on other data" in line
    assert fingerprint.short(stored["fingerprint"]) in line and line.count("sha256:") == 2
    assert (wd / "results.json").read_bytes() == results  # not replaced
    for name, content in original.items():  # the run's own data back: it is the same run
        (data / name).write_bytes(content)
    again = _main(*_mnist(data), f"--workdir={wd}")
    assert again.returncode == 0, again.stderr[-3000:]
    assert (
        json.loads((wd / "results.json").read_text())["test_error"]
        == json.loads(results)["test_error"]
    )


def _export_line(proc) -> str:
    """The export command's one error line (exit 2, its own prefix, no traceback)."""
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("invjax.export: error: "), proc.stderr
    return lines[0]


@pytest.mark.slow
def test_export_into_the_runs_checkpoints_is_refused_and_the_run_still_exports(
    tiny_digits_run, tmp_path
):
    wd = tmp_path / "w"
    shutil.copytree(tiny_digits_run, wd)
    before = _tree(wd)
    for out in (wd / "checkpoints" / "999", wd / "checkpoint_manifests" / "x" / "y"):
        line = _export_line(run_module("invjax.export", f"--workdir={wd}", f"--out={out}"))
        assert f"--out={out} is inside the run's {out.relative_to(wd).parts[0]}/ folder" in line
    assert _tree(wd) == before
    done = run_module("invjax.export", f"--workdir={wd}", f"--out={wd / 'export'}")
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_manifest_nested_too_deeply_is_one_export_error(tmp_path):
    (tmp_path / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(export_lib.ExportError, match=r"manifest.json is not readable JSON"):
        export_lib.load(str(tmp_path))


def test_study_pack_never_replaces_a_file(tmp_path):
    runs = tmp_path / "runs"
    (runs / "r").mkdir(parents=True)
    results = runs / "r" / "results.json"
    results.write_text('{"test_error": 1.5}')
    proc = run_module("launch.studies", "digits", "pack", str(results), f"--runs_dir={runs}")
    line = one_line_error(proc)
    assert f"archive {str(results)!r} is invalid: it exists" in line
    assert results.read_text() == '{"test_error": 1.5}'
    archive = tmp_path / "new.tar.gz"
    done = run_module("launch.studies", "digits", "pack", str(archive), f"--runs_dir={runs}")
    assert done.returncode == 0 and archive.is_file(), done.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["garbled", "a directory"])
def test_a_damaged_run_kind_record_is_refused_not_rewritten(tmp_path, damage):
    wd = tmp_path / "w"
    wd.mkdir()
    kind = wd / "run_kind.json"
    if damage == "garbled":
        kind.write_text('{"kind": "se')
    else:
        kind.mkdir()
    line = one_line_error(_main("--config.data.name=digits", "--config.data.n_train=100",
                                f"--workdir={wd}"))  # fmt: skip
    assert "run_kind.json is not a record of what the folder holds" in line
    assert sorted(os.listdir(wd)) == ["run_kind.json"]  # no .tmp, nothing else
    if damage == "garbled":
        assert kind.read_text() == '{"kind": "se'


# --------------------------------------------------------------------------- unbounded


def _flip_count(directory) -> str:
    """The training images' count with its top bit set (n -> 2^31 + n): 1.7 TB announced."""
    path = os.path.join(directory, idx.FILES["train"][0] + ".gz")
    with gzip.open(path, "rb") as fh:
        raw = bytearray(fh.read())
    raw[4] ^= 0x80
    with gzip.open(path, "wb") as fh:
        fh.write(bytes(raw))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("dry_run", [True, False])
def test_an_idx_count_beyond_the_file_is_one_line(tmp_path, dry_run):
    data = tmp_path / "mnist"
    write_idx_dir(str(data), 60, 20)
    path = _flip_count(data)
    args = [*_mnist(data), f"--workdir={tmp_path / 'w'}"] + (["--dry_run"] if dry_run else [])
    line = one_line_error(_main(*args))
    assert path in line and f"({(2**31 + 60) * 784:,} bytes of data)" in line
    assert not (tmp_path / "w").exists()


@pytest.mark.slow
def test_eval_batch_and_seeds_beyond_memory_are_refused_naming_the_knob(tmp_path):
    digits = ["--config.data.name=digits", "--config.data.n_train=100"]
    line = one_line_error(
        _main(*digits, "--config.train.eval_batch_size=10000000", f"--workdir={tmp_path / 'a'}")
    )
    assert "train.eval_batch_size=10000000 is too large" in line
    assert "use train.eval_batch_size <= " in line
    seeds = ",".join(str(k) for k in range(10_000))
    line = one_line_error(
        _main(*digits, f"--config.seeds={seeds}", f"--workdir={tmp_path / 'b'}", "--dry_run")
    )
    assert "config.seeds names 10000 models" in line and "train at most " in line
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.slow
def test_a_huge_image_size_is_refused_before_compute(tmp_path):
    folder = _tiny(tmp_path / "f", classes=("a", "b", "c"))
    args = ["--config.data.name=image_folder", f"--config.data.path={folder}",
            "--config.data.val_fraction=0", "--config.train.select_best=False",
            "--config.train.batch_size=2"]  # fmt: skip
    line = one_line_error(
        _main(*args, "--config.data.image_size=(2048,2048)", f"--workdir={tmp_path / 'w'}")
    )
    assert "train.eval_batch_size=500 is too large" in line, line
    assert not (tmp_path / "w").exists()


def test_channel_statistics_take_bounded_memory_and_the_same_values(monkeypatch):
    import tracemalloc

    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (3, 256, 256, 1), dtype=np.uint8)
    unbounded = datasets._channel_stats(images)
    monkeypatch.setattr(datasets, "STATS_CHUNK_BYTES", 1 << 16)
    tracemalloc.start()
    bounded = datasets._channel_stats(images)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 4 << 16  # one image is 8 x 65536 bytes in float64
    np.testing.assert_allclose(bounded[0], unbounded[0], rtol=1e-6)
    np.testing.assert_allclose(bounded[1], unbounded[1], rtol=1e-6)


@pytest.mark.slow
def test_sigterm_while_the_models_are_prepared_exits_143(tmp_path):
    proc = _main("--config.data.name=digits", "--config.data.n_train=100",
                 "--config.seeds=0,1,2", f"--workdir={tmp_path / 'w'}",
                 fault="sigterm_in_init:2")  # fmt: skip
    assert proc.returncode == 143, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [
        "invjax: stopped by SIGTERM outside training (nothing unsaved was lost); run the same "
        "command to resume"
    ]


@pytest.mark.slow
def test_a_dry_run_of_a_scaled_idx_dataset_makes_and_writes_no_realisation(tmp_path):
    data, cache = tmp_path / "npm", tmp_path / "tfds"
    write_idx_dir(str(data), 10_000)
    scaled = ["--config.data.name=scaled_mnist_10k", f"--config.data.path={data}",
              f"--config.data.data_dir={cache}", "--config.data.n_train=100"]  # fmt: skip
    dry = _main(*scaled, f"--workdir={tmp_path / 'a'}", "--dry_run")
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "train 100 / val 1,000 / test 4,000" in dry.stdout
    assert not cache.exists() and not (tmp_path / "a").exists()
    refused = _main(*scaled, "--config.train.batch_size=101", f"--workdir={tmp_path / 'b'}")
    assert "batch_size=101 is larger than the training set" in one_line_error(refused)
    assert not cache.exists()  # generated for the checks, not kept by a refused run
    done = _main(*scaled, f"--workdir={tmp_path / 'c'}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert [p.name for p in cache.rglob("*.npz")] == ["realisation_0.npz"]


# --------------------------------------------------------------------------- messages


@pytest.mark.slow
@pytest.mark.parametrize(
    "case", ["data_dir a file", "image_size ignored", "dangling path", "image folder loop",
             "empty split"])  # fmt: skip
def test_data_values_are_named_by_their_own_key(tmp_path, case):
    data = tmp_path / "mnist"
    write_idx_dir(str(data), 60, 20)
    (tmp_path / "file").write_text("x")
    args, expect = {
        "data_dir a file": (
            ["--config.data.name=scaled_mnist_10k", f"--config.data.data_dir={tmp_path / 'file'}"],
            f"data.data_dir='{tmp_path / 'file'}' is a file, not a directory",
        ),
        "image_size ignored": (
            [*_mnist(data), "--config.data.image_size=(8,8)"],
            "data.image_size=(8, 8) is read only by data.name='image_folder'",
        ),
        "dangling path": (
            [*_mnist(tmp_path / "link")],
            f"{tmp_path / 'link'} is a symbolic link to '{tmp_path / 'gone'}', which does not exist",
        ),
        "image folder loop": (
            ["--config.data.name=image_folder", f"--config.data.path={tmp_path / 'loop'}"],
            f"{tmp_path / 'loop'} is a loop of symbolic links",
        ),
        "empty split": (
            [*_mnist(data)],
            f"{data / 'train-images-idx3-ubyte.gz'} holds no images",
        ),
    }[case]
    os.symlink(tmp_path / "gone", tmp_path / "link")
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    if case == "empty split":
        idx.write_idx(str(data / "train-images-idx3-ubyte.gz"), np.zeros((0, 28, 28), np.uint8))
        idx.write_idx(str(data / "train-labels-idx1-ubyte.gz"), np.zeros(0, np.uint8))
    line = one_line_error(_main(*args, f"--workdir={tmp_path / 'w'}", "--dry_run"))
    assert expect in line and "--workdir" not in line, line


@pytest.mark.slow
def test_report_sweep_and_invariance_edges_are_one_line(tmp_path):
    (tmp_path / "runs").mkdir()
    proc = run_module("invjax.report", str(tmp_path / "runs"), f"--plot={tmp_path / 'x.xyz'}")
    assert "matplotlib cannot write .xyz files" in one_line_error(proc)
    sweep = [sys.executable, "launch/sweep.py", "digits_cnn"]
    line = one_line_error(_sweep(sweep, "--slurm", str(tmp_path)))
    assert f"--slurm {tmp_path}: is a directory" in line
    (tmp_path / "file").write_text("x")
    line = one_line_error(_sweep(sweep, "--slurm", str(tmp_path / "file" / "s.sh")))
    assert f"{tmp_path / 'file'} is a file, not a directory" in line
    line = one_line_error(_sweep(sweep, "--set=bogus.key=1", "--dry_run"))
    assert "config key 'bogus.key' of configs/digits_cnn.py is unknown: the config has no " \
        "'bogus'" in line  # fmt: skip
    images = np.zeros((1, 28, 28, 1), np.float32)
    images[0, 0, 0, 0] = np.float32(1.0000001)
    np.save(tmp_path / "hi.npy", images)
    proc = run_module("invjax.invariance", "--config=configs/digits_cnn.py",
                      f"--images={tmp_path / 'hi.npy'}")  # fmt: skip
    assert proc.returncode == 2 and "1.0000001" in proc.stderr and "[1, 1]" not in proc.stderr


def _sweep(argv, *args):
    import subprocess

    from tiny_runs import REPO

    return subprocess.run([*argv, *args], cwd=REPO, capture_output=True, text=True, timeout=300)
