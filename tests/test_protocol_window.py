"""launch/protocol_window.sh: RERUN trains recorded runs again without touching the record,
SIZE_GROUPS set empty tunes only, PACK_FINISHED brings finished runs' checkpoints, bad RERUN,
the retrained runs come back apart;
launch/protocol_session.sh: windows side by side, packed into what a lent machine sends back;
launch/protocol_land.sh: what came back lands in the record and the run directory."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import tarfile

import pytest

pytestmark = pytest.mark.slow  # subprocesses or training throughout

REPO = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = REPO / "launch" / "protocol_window.sh"
SESSION = REPO / "launch" / "protocol_session.sh"
RUN = "main/scaled_digits/wrn_std/n20/seed_0"


def _record(record):
    """A record holding one landed run, RUN."""
    (record / "runs" / RUN).mkdir(parents=True)
    (record / "runs" / RUN / "results.json").write_text(json.dumps({"test_error": 9.0}))


def _bash(script, *args, cwd=REPO, **env):
    env = dict(os.environ, WINDOW_S="120", PROTOCOL_ARGS="--dry-run", **env)
    return subprocess.run(
        ["bash", str(script), *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _window(tmp_path, **env):
    record, runs = tmp_path / "out", tmp_path / "runs"
    _record(record)
    ckpt = runs / RUN / "checkpoints" / "600"
    ckpt.mkdir(parents=True)
    (ckpt / "state").write_text("600")
    env = dict(RUNS=str(runs), PROTOCOL_OUT=str(record), DATASETS="scaled_digits") | env
    proc = _bash(SCRIPT, tmp_path / "w", FAMILIES="svm", **env)
    return proc, record, runs


def test_rerun_removes_the_run_but_not_the_record_and_empty_size_groups_only_tune(tmp_path):
    """RERUN's paths (commas or spaces between them) are moved aside in the run directory, the
    record stays; a path that already holds a checkpoint here (an earlier call's) is kept, so the same
    command resumes it on a warm machine."""
    landed = "main/scaled_digits/e2_ii/n20/seed_0"  # in the record only: no checkpoint
    (tmp_path / "out" / "runs" / landed).mkdir(parents=True)
    (tmp_path / "out" / "runs" / landed / "results.json").write_text("{}")
    rerun = "main/scaled_digits/e2_ii/n20,main/scaled_digits/wrn_std/n20"
    proc, record, runs = _window(tmp_path, RERUN=rerun, SIZE_GROUPS="")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    e2 = "main/scaled_digits/e2_ii/n20"
    assert f"== {e2}: moved to replaced/{e2}: it trains again" in proc.stdout
    assert not (runs / e2).exists() and (runs / "replaced" / landed / "results.json").exists()
    assert "main/scaled_digits/wrn_std/n20: kept (it has checkpoints here)" in proc.stdout
    assert (runs / RUN / "checkpoints" / "600" / "state").read_text() == "600"
    assert (record / "runs" / landed / "results.json").exists()
    assert json.loads((record / "runs" / RUN / "results.json").read_text()) == {"test_error": 9.0}
    assert "--stage tune" in proc.stdout and "--stage main" not in proc.stdout
    # the kept run is finished here: its results come back apart from the record's
    with tarfile.open(tmp_path / "w" / "protocol_rerun.tgz") as tar:
        names = tar.getnames()
    assert f"runs/{RUN}/results.json" in names and f"runs/{RUN}/curve.json" in names
    assert not any("e2_ii" in n for n in names)


def test_pack_finished_brings_the_final_checkpoint_of_matching_runs(tmp_path):
    proc, _, _ = _window(tmp_path, SIZE_GROUPS="", PACK_FINISHED="*/wrn_std/*")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    with tarfile.open(tmp_path / "w" / "protocol_partial.tgz") as tar:
        names = tar.getnames()
    assert f"{RUN}/checkpoints/600/state" in names and f"{RUN}/results.json" in names


def test_a_rerun_path_outside_the_run_directory_is_refused_before_anything_runs(tmp_path):
    proc, _, runs = _window(tmp_path, RERUN="../elsewhere")
    assert proc.returncode == 2
    assert "RERUN: ../elsewhere must be a path inside the run directory" in proc.stderr
    assert "--stage tune" not in proc.stdout and (runs / RUN / "checkpoints").exists()


def test_the_runs_archive_holds_only_what_landed_in_the_window(tmp_path):
    """A lent machine sends back few, small files: the archive leaves out the record it started
    from and holds the run that landed (copied into the record by the report stage)."""
    landed = "main/scaled_digits/wrn_std/n50/seed_0"
    (tmp_path / "runs" / landed).mkdir(parents=True)
    (tmp_path / "runs" / landed / "results.json").write_text(json.dumps({"test_error": 5.0}))
    proc, record, _ = _window(tmp_path, SIZE_GROUPS="")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert json.loads((record / "runs" / landed / "results.json").read_text())["test_error"] == 5.0
    with tarfile.open(tmp_path / "w" / "protocol_runs.tgz") as tar:
        names = tar.getnames()
    assert f"runs/{landed}/results.json" in names
    assert f"runs/{RUN}/results.json" not in names


def _session(tmp_path, *windows):
    _record(tmp_path / "record")
    env = dict(SESSION_ROOT=str(tmp_path), RECORD=str(tmp_path / "record"))
    return _bash(SESSION, "out", *windows, cwd=tmp_path, **env)  # OUT relative to the caller


def test_a_session_packs_its_windows_into_few_files(tmp_path):
    landed = "main/rotscaled_digits/wrn_std/n50/seed_0"
    (tmp_path / "rB" / landed).mkdir(parents=True)
    (tmp_path / "rB" / landed / "results.json").write_text(json.dumps({"test_error": 5.0}))
    proc = _session(
        tmp_path,
        "A DATASETS=scaled_digits FAMILIES=svm SIZE_GROUPS=",
        "B DATASETS=rotscaled_digits FAMILIES=svm SIZE_GROUPS=",
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == ["landed.tgz", "logs.tgz", "partial.tar"]
    with tarfile.open(tmp_path / "out" / "landed.tgz") as tar:
        names = tar.getnames()
    assert f"./runs/{landed}/results.json" in names
    assert not any(RUN in n for n in names)  # the record it started from stays out
    with tarfile.open(tmp_path / "out" / "logs.tgz") as tar:
        assert {"A.out", "B.out", "A/tune.log", "B/tune.log"} <= set(tar.getnames())
    with tarfile.open(tmp_path / "out" / "partial.tar") as tar:
        assert {"./A/protocol_partial.tgz", "./B/protocol_partial.tgz"} <= set(tar.getnames())


def test_a_session_brings_the_retrained_runs_apart_from_what_landed(tmp_path):
    """A window's RERUN runs that trained again (here: kept, with a checkpoint and results in
    its run directory) come back in rerun.tgz, not in landed.tgz: the record keeps its own
    results unless they are replaced on purpose."""
    run = tmp_path / "rA" / RUN
    (run / "checkpoints" / "600").mkdir(parents=True)
    (run / "results.json").write_text(json.dumps({"test_error": 7.0}))
    rerun = "RERUN=main/scaled_digits/wrn_std/n20,main/scaled_digits/e2_ii/n20"
    proc = _session(tmp_path, f"A DATASETS=scaled_digits FAMILIES=svm SIZE_GROUPS= {rerun}")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    with tarfile.open(tmp_path / "out" / "rerun.tgz") as tar:
        member = tar.extractfile(f"runs/{RUN}/results.json")
        assert json.loads(member.read()) == {"test_error": 7.0}
    with tarfile.open(tmp_path / "out" / "landed.tgz") as tar:
        assert not any(RUN in n for n in tar.getnames())
    assert json.loads((tmp_path / "record" / "runs" / RUN / "results.json").read_text()) == {
        "test_error": 9.0
    }


def test_a_session_with_a_malformed_window_starts_none(tmp_path):
    proc = _session(tmp_path, "A DATASETS=scaled_digits FAMILIES=svm", "B datasets scaled")
    assert proc.returncode == 2
    assert "window B: 'datasets' is not a NAME=value setting" in proc.stderr
    assert not (tmp_path / "pA").exists() and not (tmp_path / "out").exists()


LAND = REPO / "launch" / "protocol_land.sh"


def _session_out(tmp_path, rel=("runs",)):
    """What protocol_session.sh brings back: landed.tgz (./runs/...), rerun.tgz (runs/...) and
    partial.tar in two pieces holding window S's protocol_partial.tgz."""
    out, src = tmp_path / "session", tmp_path / "src"
    for name, runs in (
        ("landed", {RUN: 1.0, "main/scaled_digits/cnn/n20/seed_0": 2.0}),
        ("rerun", {RUN: 5.0}),
    ):
        for run, err in runs.items():
            d = src / name / pathlib.Path(*rel) / run
            d.mkdir(parents=True)
            (d / "results.json").write_text(json.dumps({"test_error": err}))
    out.mkdir()
    with tarfile.open(out / "landed.tgz", "w:gz") as t:
        t.add(src / "landed" / rel[0], arcname=f"./{rel[0]}")
    with tarfile.open(out / "rerun.tgz", "w:gz") as t:
        t.add(src / "rerun" / rel[0], arcname=rel[0])
    ckpt = src / "partial" / "main/scaled_digits/scale_iiws_disco/nall_e300/seed_0/checkpoints/510"
    ckpt.mkdir(parents=True)
    (ckpt / "state").write_bytes(os.urandom(40_000))  # incompressible: the pieces are not empty
    (src / "w" / "S").mkdir(parents=True)
    with tarfile.open(src / "w" / "S" / "protocol_partial.tgz", "w:gz") as t:
        t.add(src / "partial" / "main", arcname="main")
    with tarfile.open(src / "partial.tar", "w") as t:
        t.add(src / "w" / "S", arcname="S")
    data = (src / "partial.tar").read_bytes()
    (out / "partial.tar.aa").write_bytes(data[: len(data) // 2])
    (out / "partial.tar.ab").write_bytes(data[len(data) // 2 :])
    return out


def test_landing_a_session_keeps_the_record_unless_replace_and_resumes_the_partial_runs(tmp_path):
    out, record, runs = _session_out(tmp_path), tmp_path / "record", tmp_path / "runs"
    _record(record)
    proc = _bash(LAND, out, runs, RECORD=str(record))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 of 2 landed runs are new" in proc.stdout
    assert "1 retrained runs in rerun.tgz left out (--replace lands them)" in proc.stdout
    # the record's first result stays; the new run landed; the partial run is in RUNS
    assert json.loads((record / "runs" / RUN / "results.json").read_text()) == {"test_error": 9.0}
    assert (record / "runs" / "main/scaled_digits/cnn/n20/seed_0/results.json").is_file()
    state = runs / "main/scaled_digits/scale_iiws_disco/nall_e300/seed_0/checkpoints/510/state"
    assert state.stat().st_size == 40_000
    proc = _bash(LAND, out, runs, "--replace", RECORD=str(record))
    assert proc.returncode == 0 and "1 retrained runs replace the record's" in proc.stdout
    assert json.loads((record / "runs" / RUN / "results.json").read_text()) == {"test_error": 5.0}


def test_landing_refuses_bad_input_before_unpacking_anything(tmp_path):
    record, runs = tmp_path / "record", tmp_path / "runs"
    _record(record)
    proc = _bash(LAND, tmp_path, runs, RECORD=str(record))
    assert proc.returncode == 2 and f"{tmp_path}/landed.tgz is missing" in proc.stderr
    out = _session_out(tmp_path)
    proc = _bash(LAND, out, runs, "--force", RECORD=str(record))
    assert proc.returncode == 2 and "'--force' is invalid" in proc.stderr
    bad = _session_out(tmp_path / "bad", rel=("elsewhere",))
    proc = _bash(LAND, bad, runs, RECORD=str(record))
    assert proc.returncode == 2 and "holds paths outside runs/" in proc.stderr
    assert not runs.exists()  # nothing unpacked
    assert sorted(p.name for p in (record / "runs" / "main" / "scaled_digits").iterdir()) == [
        "wrn_std"
    ]
