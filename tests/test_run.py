"""The one reader of a finished run (:mod:`invjax.run`): its results, its stored config and
kind, whether it is finished for a config, its reported model from the verified final
checkpoint, and one clear error for every folder that is not a finished run."""

from __future__ import annotations

import json
import os
import shutil

import jax
import numpy as np
import pytest

from invjax import checkpoint, run, workdir


def test_the_names_are_the_writers_own():
    """One definition of each name: the reader's are the very objects the writers use."""
    assert run.CHECKPOINTS_DIR == checkpoint.CHECKPOINT_SUBDIR == "checkpoints"
    assert run.CORRUPT_DIR == checkpoint.CORRUPT_SUBDIR
    assert run.MANIFESTS_DIR == checkpoint.MANIFEST_SUBDIR
    assert run.KIND_FILE == workdir.KIND_FILE and run.LOCK_FILE == workdir.LOCK_FILE
    assert run.write_json_atomic is workdir.write_json_atomic
    assert run.RESULTS_FILE == "results.json" and run.CONFIG_FILE == "config.json"
    assert set(run.NO_RESULTS_DIRS) >= {"checkpoints", "tensorboard", "corrupt_checkpoints"}


def test_write_json_atomic_keeps_the_previous_file_when_a_write_fails(tmp_path):
    path = str(tmp_path / "results.json")
    run.write_json_atomic(path, {"test_error": 1.5, "where": tmp_path})  # a path: its str
    assert json.loads(open(path).read()) == {"test_error": 1.5, "where": str(tmp_path)}
    with pytest.raises(TypeError):
        run.write_json_atomic(path, {(1, 2): "a tuple key JSON cannot hold"})
    assert json.loads(open(path).read())["test_error"] == 1.5  # whole, as before


def test_read_results_names_each_file_that_is_not_a_runs_results(tmp_path):
    assert run.read_results(str(tmp_path)) is None  # none yet
    path = tmp_path / "results.json"
    path.write_text('{"test_error": 2.0, "epochs": 3}')
    assert run.read_results(str(tmp_path)) == {"test_error": 2.0, "epochs": 3}
    for text, why in (
        ('{"test_error": 2', f"unreadable {path}"),
        ("[1, 2]", f"{path}: it holds a JSON list, not a run's results"),
        ('{"epochs": 3}', f"{path}: it has no test_error"),
    ):
        path.write_text(text)
        with pytest.raises(ValueError) as e:
            run.read_results(str(tmp_path))
        assert str(e.value).startswith(why), (text, str(e.value))


def test_folders_that_hold_no_finished_run_are_refused_in_one_line(tmp_path):
    with pytest.raises(ValueError, match="no such directory"):
        run.read_finished(str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="holds no readable checkpoint"):
        run.read_finished(str(tmp_path))
    seeds = tmp_path / "k"
    seeds.mkdir()
    (seeds / run.KIND_FILE).write_text(json.dumps({"kind": "seeds", "seeds": [3, 4]}))
    assert run.holds_seeds(str(seeds)) and not run.holds_seeds(str(tmp_path))
    with pytest.raises(workdir.WorkdirError, match=r"seed_3"):
        run.read_finished(str(seeds))
    with pytest.raises(checkpoint.CheckpointError, match="holds no checkpoint"):
        run.reported(str(tmp_path))
    # Results copied in without their run: nothing to check them against, never finished.
    (tmp_path / "results.json").write_text('{"test_error": 1.0, "epochs": 1, "steps": 6}')
    assert not run.has_checkpoint(str(tmp_path))
    assert run.finished_results(None, str(tmp_path)) is None


def test_check_resume_config_names_the_differences():
    stored = {"seed": 0, "precision": "default", "model": {"width": 4}, "train": {"num_epochs": 2}}
    run.check_resume_config(stored, {**stored, "train": {"num_epochs": 5}}, "w")  # resumable
    with pytest.raises(ValueError) as e:
        run.check_resume_config(stored, {**stored, "model": {"width": 8}}, "w")
    assert "model.width: 4 stored, 8 now" in str(e.value)
    assert os.path.join("w", "config.json") in str(e.value)


@pytest.mark.slow
def test_a_finished_run_read_whole(tiny_digits_run, tmp_path):
    """The shared tiny run: its stored config, kind, results and reported model (the one the
    trainer reported, from the verified final checkpoint); finished for its own config, not
    for more epochs, refused for another model; a final step that is no longer readable is
    named."""
    finished = run.read_finished(tiny_digits_run)
    results = json.loads(open(os.path.join(tiny_digits_run, "results.json")).read())
    assert finished.results == results and finished.kind == "single"
    assert finished.config.data.name == results["dataset"]
    assert isinstance(finished.config.model.to_dict(), dict)
    chosen = finished.reported()
    assert chosen.step == results["steps"] == checkpoint.list_steps(tiny_digits_run)[-1]
    assert chosen.info["selected_by"] in ("best validation", "last epoch")
    same = checkpoint.load_params(tiny_digits_run)
    for a, b in zip(jax.tree.leaves(chosen.variables), jax.tree.leaves(same), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

    assert run.finished_results(finished.config, tiny_digits_run) == results
    longer = finished.config.copy_and_resolve_references()
    longer.train.num_epochs += 1
    assert run.finished_results(longer, tiny_digits_run) is None  # resumes, not finished
    other = finished.config.copy_and_resolve_references()
    other.seed += 1
    with pytest.raises(ValueError, match=r"seed: \d+ stored, \d+ now"):
        run.finished_results(other, tiny_digits_run)

    wd = str(tmp_path / "w")
    shutil.copytree(tiny_digits_run, wd)
    last = checkpoint.list_steps(wd)[-1]
    os.remove(os.path.join(wd, run.MANIFESTS_DIR, f"{last}.json"))  # cannot be verified now
    with pytest.raises(ValueError, match=f"run finished at step {last}: its final checkpoint"):
        run.read_finished(wd).reported()
