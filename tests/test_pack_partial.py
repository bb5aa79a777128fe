"""launch/pack_partial.py: the unfinished runs' latest checkpoints, nothing of the finished."""

import pathlib
import runpy
import tarfile

PACK = runpy.run_path(str(pathlib.Path(__file__).parents[1] / "launch" / "pack_partial.py"))


def _touch(path: pathlib.Path, text: str = "x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_packs_only_the_latest_checkpoint_of_unfinished_runs(tmp_path):
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

    files = PACK["partial_files"](str(runs))
    assert files == [
        "main/d/f/n20/seeds.json",
        "main/d/f/n20/seed_1/metrics.jsonl",
        "main/d/f/n20/seed_1/checkpoint_manifests/120.json",
        "main/d/f/n20/seed_1/checkpoints/120/state/data",
    ]
    dest = tmp_path / "p.tgz"
    assert PACK["main"]([str(runs), str(dest)]) == 0
    with tarfile.open(dest) as tar:
        assert sorted(tar.getnames()) == sorted(files)
        assert tar.extractfile("main/d/f/n20/seed_1/checkpoints/120/state/data").read() == b"120"


def test_usage_error_without_two_arguments(capsys):
    assert PACK["main"](["only-one"]) == 2
    assert "pack_partial.py RUNS_DIR ARCHIVE.tgz" in capsys.readouterr().err


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
    assert PACK["main"]([str(runs), str(dest), "--finished", "*/scale_iiws_disco/*"]) == 0
    run = "main/d/scale_iiws_disco/n20/seed_0"
    want = [f"{run}/results.json", f"{run}/checkpoint_manifests/600.json"]
    want.append(f"{run}/checkpoints/600/state")
    with tarfile.open(dest) as tar:
        assert tar.getnames() == want  # wrn_std's run, older steps and events stay out
    assert PACK["main"]([str(runs), str(dest), "--finished"]) == 2
