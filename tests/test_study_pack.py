"""``python -m launch.studies digits pack``: the unfinished runs' latest checkpoints, nothing of
the finished (unless asked for by path or glob), to resume them in another run directory."""

import pathlib
import tarfile

import pytest

from launch.studies import run
from launch.studies.__main__ import main


def _touch(path: pathlib.Path, text: str = "x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_packs_only_the_latest_checkpoint_of_unfinished_runs(tmp_path, capsys):
    runs = tmp_path / "runs"
    done = runs / "main" / "d" / "f" / "n20" / "seed_0"
    _touch(done / "results.json", "{}")
    _touch(done / "checkpoints" / "600" / "state")
    half = runs / "main" / "d" / "f" / "n20" / "seed_1"
    for step in (60, 120):
        _touch(half / "checkpoints" / str(step) / "state" / "data", str(step))
        _touch(half / "checkpoint_manifests" / f"{step}.json", "{}")
    _touch(half / "metrics.jsonl")
    _touch(half / "tensorboard" / "events")
    _touch(runs / "xla_cache" / "entry")
    _touch(runs / "main" / "d" / "f" / "n20" / "seeds.json", "[0, 1]")

    files = run.unfinished_files(str(runs))
    assert files == [
        "main/d/f/n20/seeds.json",
        "main/d/f/n20/seed_1/metrics.jsonl",
        "main/d/f/n20/seed_1/checkpoint_manifests/120.json",
        "main/d/f/n20/seed_1/checkpoints/120/state/data",
    ]
    dest = tmp_path / "p.tgz"
    assert main(["digits", "pack", str(dest), "--runs_dir", str(runs)]) == 0
    assert f"{dest}: 4 files of the unfinished runs" in capsys.readouterr().out
    with tarfile.open(dest) as tar:
        assert sorted(tar.getnames()) == sorted(files)
        assert tar.extractfile("main/d/f/n20/seed_1/checkpoints/120/state/data").read() == b"120"


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "the following arguments are required: archive"),
        (["a.tgz", "--runs_dir", "/no/such/dir"], "--runs_dir='/no/such/dir' is invalid"),
        (["a.tgz", "--finished"], "argument --finished: expected one argument"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv, message, capsys):
    try:
        code = main(["digits", "pack", *argv])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("invjax: error: ")
    assert message in err[0]


def test_finished_runs_matching_a_glob_come_with_their_final_checkpoint(tmp_path):
    runs = tmp_path / "runs"
    for family in ("scale_iiws_disco", "wrn_std"):
        done = runs / "main" / "d" / family / "n20" / "seed_0"
        _touch(done / "results.json", "{}")
        for step in (540, 600):
            _touch(done / "checkpoints" / str(step) / "state", str(step))
            _touch(done / "checkpoint_manifests" / f"{step}.json", "{}")
        _touch(done / "tensorboard" / "events")
    # what --rerun moved aside matches the glob too, but is not a run of the study any more
    _touch(runs / "replaced" / "main" / "d" / "scale_iiws_disco" / "n20" / "seed_0" / "curve.json")
    dest = tmp_path / "p.tgz"
    argv = ["digits", "pack", str(dest), "--runs_dir", str(runs)]
    assert main([*argv, "--finished", "*/scale_iiws_disco/*"]) == 0
    one = "main/d/scale_iiws_disco/n20/seed_0"
    want = [f"{one}/results.json", f"{one}/checkpoint_manifests/600.json"]
    want.append(f"{one}/checkpoints/600/state")
    with tarfile.open(dest) as tar:
        assert tar.getnames() == want  # wrn_std's run, older steps and events stay out
    # a path names the same run
    assert run.unfinished_files(str(runs), [one]) == want


def test_a_run_counts_as_started_by_its_own_checkpoint_or_a_stream_s(tmp_path):
    """``status``'s "started" column: a run with a checkpoint of its own, or a two-phase run
    whose first stream has one (``streams/<name>/checkpoints``), and not once it finished."""
    fresh, own, stream, done = (tmp_path / n for n in ("fresh", "own", "stream", "done"))
    _touch(fresh / "config.json", "{}")
    _touch(own / "checkpoints" / "60" / "state")
    _touch(stream / "streams" / "e2" / "results.json", "{}")
    _touch(stream / "streams" / "scale" / "checkpoints" / "120" / "state")
    _touch(done / "streams" / "e2" / "checkpoints" / "600" / "state")
    _touch(done / "results.json", "{}")
    started = {p.name: run.started_here(str(p)) for p in (fresh, own, stream, done)}
    assert started == {"fresh": False, "own": True, "stream": True, "done": False}
