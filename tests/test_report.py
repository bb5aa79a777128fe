"""invjax.report on fake runs (grouping, mean +- std, Markdown, the plot's fallback) and the sweep
builder launch/sweep.py (the paper's sizes and seeds, phase-1 reuse, SLURM script, local runs
side by side on pinned devices, resumed sweeps)."""

from __future__ import annotations

import functools
import json
import os
import pathlib
import shlex
import signal
import subprocess
import sys
import time

import pytest

from invjax import report

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "launch"))
import sweep  # noqa: E402


def write_run(root, rel, test_error, seed, n_train, config="configs/cifar10_std.py", **extra):
    d = root / rel
    d.mkdir(parents=True)
    results = {
        "test_error": test_error,
        "val_error": None,
        "params": 1000,
        "n_train": n_train,
        "seed": seed,
        "dataset": "cifar10",
        "wall_time_s": 10.0 * (seed + 1),
        "config_file": config,
        "overrides": {"seed": seed, "data.n_train": n_train},
        **extra,
    }
    (d / "results.json").write_text(json.dumps(results))
    return d


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "runs"
    for seed, err in zip((0, 1, 2), (10.0, 12.0, 14.0)):
        write_run(root, f"cifar10_std/n100_s{seed}", err, seed, 100)
    for seed, err in zip((0, 1), (5.0, 6.0)):
        write_run(root, f"cifar10_std/n1000_s{seed}", err, seed, 1000)
    triple = write_run(root, "cifar10_triple/n100_s0", 8.0, 0, 100, "configs/cifar10_triple.py")
    write_run(triple / "streams", "e2", 9.0, 0, 100, "configs/cifar10_triple.py", stream="e2")
    # The heads ablation: an override that names another experiment.
    write_run(
        root,
        "cifar10_triple-head_concat/n100_s0",
        9.5,
        0,
        100,
        "configs/cifar10_triple.py",
        overrides={"seed": 0, "data.n_train": 100, "model.head": "concat"},
    )
    (root / "broken").mkdir()
    (root / "broken" / "results.json").write_text("{not json")
    return root


def test_groups_runs_and_computes_mean_and_sample_std(runs, capsys):
    rows = report.aggregate(report.find_results(str(runs)), str(runs))
    by = {(r["experiment"], r["n_train"]): r for r in rows}
    assert "unreadable" in capsys.readouterr().err  # the broken results.json is skipped
    assert set(by) == {
        ("cifar10_std", 100),
        ("cifar10_std", 1000),
        ("cifar10_triple", 100),
        ("cifar10_triple[model.head=concat]", 100),
    }
    std100 = by[("cifar10_std", 100)]
    # 10, 12, 14: mean 12, sample standard deviation sqrt((4 + 0 + 4) / 2) = 2.
    assert std100["runs"] == 3 and std100["seeds"] == [0, 1, 2]
    assert std100["test_error_mean"] == pytest.approx(12.0)
    assert std100["test_error_std"] == pytest.approx(2.0)
    assert std100["wall_time_s_mean"] == pytest.approx(20.0)
    assert by[("cifar10_std", 1000)]["test_error_std"] == pytest.approx(0.5**0.5)
    single = by[("cifar10_triple", 100)]
    assert (single["runs"], single["test_error_mean"], single["test_error_std"]) == (1, 8.0, 0.0)


def test_stream_runs_only_on_request(runs):
    names = {
        r["experiment"] for r in report.aggregate(report.find_results(str(runs), True), str(runs))
    }
    assert "cifar10_triple/e2" in names


def test_tables_and_the_command_line(runs, capsys):
    assert report.main([str(runs), "--markdown", "--no-plot"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].startswith("| experiment | dataset | n_train | runs | test error [%]")
    assert "| cifar10_std | cifar10 | 100 | 3 | 12.00 ± 2.00 | n/a | 1000 | 20 |" in out
    assert len(out) == 2 + 4
    assert report.main([str(runs), "--no-plot"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].split()[:3] == ["experiment", "dataset", "n_train"]
    assert any(line.split()[:5] == ["cifar10_std", "cifar10", "1000", "2", "5.50"] for line in text)
    assert report.main([str(runs.parent / "nothing_here")]) == 2


def test_plot_or_a_message_without_matplotlib(runs, tmp_path, capsys):
    rows = report.aggregate(report.find_results(str(runs)), str(runs))
    path = report.plot(rows, str(tmp_path / "plot.png"))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert path is None and "matplotlib is not installed" in capsys.readouterr().err
    else:
        assert path and os.path.getsize(path) > 1000  # cifar10_std has two sizes: one curve


# ----------------------------------------------------------------------------- launch/sweep.py


def dry_run(*args):
    proc = subprocess.run(
        [sys.executable, str(REPO / "launch" / "sweep.py"), *args, "--dry_run"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()


@pytest.mark.slow
def test_sweep_dry_run_lists_table3_with_phase_one_reuse():
    lines = dry_run("table3:cifar10", "--sizes", "100,50000", "--seeds", "0,1")
    assert len(lines) == 9 * 2 * 2  # rows x sizes x seeds
    assert lines[0] == (
        "python -m invjax.main --config=configs/cifar10_std.py "
        "--workdir=runs/cifar10_std/n100_s0 --config.data.n_train=100 --config.seed=0"
    )
    triple = [x for x in lines if "cifar10_triple.py" in x and "n100_s1" in x]
    assert len(triple) == 1
    for stream, own in (
        ("e2", "cifar10_e2_ii"),
        ("scale", "cifar10_scale_ii"),
        ("std", "cifar10_std"),
    ):
        assert f"--config.phase1.{stream}.workdir=runs/{own}/n100_s1" in triple[0]
    # The constant-parameter streams are narrower: never shared with the full ones.
    star = [x for x in lines if "cifar10_triple_star.py" in x]
    assert star and not any("phase1" in x for x in star)
    # Within a point the single-stream runs come first (phase 1 of the others reuses them).
    point = [x.split("--config=configs/")[1].split(".py")[0] for x in lines if "/n100_s1 " in x]
    multi = [("dual" in x or "triple" in x) for x in point]
    assert multi == [False] * 5 + [True] * 4
    assert "--config.data.n_train=50000" in [x for x in lines if "n50000_s0" in x][0]
    # The paper's sizes: CIFAR-10's 50k is the whole training split.
    paper = dry_run("cifar10_std", "--seeds", "0")
    assert [x.split("--workdir=runs/cifar10_std/")[1].split(" ")[0] for x in paper] == [
        f"n{n}_s0" for n in (100, 500, 1000, 5000, 10000, 50000)
    ]
    assert paper[-1].endswith("--config.data.n_train=0 --config.seed=0")


@pytest.mark.slow
def test_sweep_paper_sizes_and_realisations_for_scaled_mnist():
    lines = dry_run("mnist_ii_disco_ws")
    assert len(lines) == 8 * 6
    sizes = sorted({x.split("--workdir=runs/mnist_ii_disco_ws/")[1].split("_s")[0] for x in lines})
    assert sizes == sorted(f"n{n}" for n in (10, 50, 100, 500, 1000, 5000, 10000, 12000))
    pooled = [x for x in lines if "/n12000_s3 " in x][0]
    assert (
        "--config.data.val_fraction=0.0" in pooled and "--config.train.select_best=False" in pooled
    )
    assert "--config.seed=3" in pooled and "--config.data.realisation=3" in pooled


@pytest.mark.slow
def test_sweep_heads_share_phase_one_and_slurm_script(tmp_path):
    runs = sweep.build(["heads"], sizes="full", seeds="0")
    assert [r.overrides["model.head"] for r in runs] == list(sweep.HEADS)
    first = runs[0].workdir
    for r in runs[1:]:
        for s in ("e2", "scale", "std"):
            assert r.overrides[f"phase1.{s}.workdir"] == os.path.join(first, "streams", s)

    class Args:
        job_name, nodes, gpus_per_node, cpus_per_task, time = "t", 2, 4, 16, "1:00:00"
        partition, max_parallel, log_dir, setup = "gpu", 4, str(tmp_path / "logs"), None

    script, commands = sweep.write_slurm(runs, str(tmp_path / "job.sh"), Args)
    text = open(script).read()
    assert "#SBATCH --array=0-0%4" in text and "#SBATCH --nodes=2" in text
    assert "#SBATCH --partition=gpu" in text and "--config.multi_host=True" in text
    lines = open(commands).read().splitlines()
    assert len(lines) == 1 and lines[0].count(" ;; ") == len(runs) - 1
    proc = subprocess.run(["bash", "-n", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_sweep_rejects_unknown_experiments():
    with pytest.raises(ValueError, match="neither a group"):
        sweep.expand(["cifar10_quadruple"])


def test_sweep_shares_phase_one_between_dual_and_triple():
    """Without single-stream runs in the sweep, the triple network reuses the dual network's
    E(2) and scale streams (the same stream configs) and trains only its standard stream."""
    runs = sweep.build(["cifar10_dual", "cifar10_triple"], sizes="100", seeds="0")
    dual, triple = runs
    assert not any(k.startswith("phase1.") for k in dual.overrides)
    for s in ("e2", "scale"):
        assert triple.overrides[f"phase1.{s}.workdir"] == os.path.join(dual.workdir, "streams", s)
    assert "phase1.std.workdir" not in triple.overrides


def test_sweep_local_pins_devices_and_slots(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,6,7")
    envs = sweep.slot_envs(2, 2, "gpu")
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["3,5", "6,7"]
    with pytest.raises(ValueError, match=r"--parallel=3 x --devices-per-run=2 needs 6 GPUs, but 4"):
        sweep.slot_envs(3, 2, "gpu")
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=9 --foo")
    envs = sweep.slot_envs(2, 4, "cpu")
    assert envs[0]["XLA_FLAGS"] == "--foo --xla_force_host_platform_device_count=4"
    assert envs[0]["JAX_PLATFORMS"] == "cpu" and len(envs) == 2
    with pytest.raises(ValueError, match=r"--devices-per-run=0 is invalid"):
        sweep.slot_envs(1, 0, "cpu")
    # small runs side by side on one GPU, each with its share of its memory
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    envs = sweep.slot_envs(5, 1, "gpu", per_gpu=3)
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0", "0", "0", "1", "1"]
    assert {e["XLA_PYTHON_CLIENT_MEM_FRACTION"] for e in envs} == {"0.300"}
    with pytest.raises(ValueError, match=r"--parallel=7 / --runs-per-gpu=3 x --devices-per-run=1"):
        sweep.slot_envs(7, 1, "gpu", per_gpu=3)


class _Timed(sweep.Run):
    """A run whose command only logs its start and end (``LOG``) around a short sleep."""

    def command(self, python: str = "python") -> str:
        log = os.path.join(os.path.dirname(self.workdir), "LOG")
        body = (
            "import sys, time; w = lambda e: open(sys.argv[1], 'a').write(e + ' ' + sys.argv[2]"
            " + '\\n'); w('start'); time.sleep(float(sys.argv[3])); w('end')"
        )
        return shlex.join([python, "-c", body, log, self.experiment, self.point[0]])


def _timed(tmp_path, name: str, seconds: float, **phase1) -> _Timed:
    """A :class:`_Timed` run ``name`` in ``tmp_path`` that sleeps ``seconds``; ``phase1``:
    stream -> the folder (under ``tmp_path``) its phase 1 reuses, making it a head."""
    overrides = {f"phase1.{s}.workdir": str(tmp_path / w) for s, w in phase1.items()}
    return _Timed(name, "x", overrides, (str(seconds), 0), str(tmp_path / name), bool(phase1))


@pytest.mark.slow
def test_sweep_local_starts_a_head_once_the_runs_it_reuses_ended_and_fills_free_slots(tmp_path):
    """Two slots; the heads' phase 1 reuses a stream run (``phase1.e2.workdir``) or a stream
    that another head trains first (``<its workdir>/streams/scale``). No head starts before
    what it reuses has ended, and a slot whose next run must wait takes a later one that is
    ready: the independent run ``c`` starts before the stream run ``a`` ends."""

    timed = functools.partial(_timed, tmp_path)

    runs = [
        timed("a", 3.0),
        timed("h1", 0.2, e2="a"),
        timed("h2", 0.2, e2="a", scale="h1/streams/scale"),
        timed("c", 0.2),
    ]
    assert sweep.needs(runs) == [set(), {0}, {0, 1}, set()]
    assert sweep.run_local(runs, 2, None, "cpu") == 0
    events = (tmp_path / "LOG").read_text().split()
    order = [f"{e} {n}" for e, n in zip(events[::2], events[1::2])]
    at = {e: i for i, e in enumerate(order)}
    assert at["start h1"] > at["end a"] and at["start h2"] > at["end h1"], order
    assert at["start c"] < at["end a"], order  # the free slot did not wait for "a"
    assert len(order) == 8, order


@pytest.mark.slow
def test_sweep_local_does_not_start_a_run_that_skip_names_and_goes_on(tmp_path, capsys):
    """``skip(run)`` is asked once a run is ready: a reason keeps it from starting (printed
    with its workdir) and counts as its end, so the head that would reuse its stream starts
    (and trains that stream itself) and the other runs train as before."""

    timed = functools.partial(_timed, tmp_path)

    runs = [timed("a", 0.5), timed("h1", 0.2, e2="a"), timed("h2", 0.2, scale="h1/streams/x")]
    asked = []

    def skip(run):
        asked.append(run.experiment)
        return "its stream did not reproduce" if run.experiment == "h1" else None

    assert sweep.run_local(runs, 2, None, "cpu", skip=skip) == 0
    events = (tmp_path / "LOG").read_text().split()
    started = sorted(f"{e} {n}" for e, n in zip(events[::2], events[1::2]))
    assert started == ["end a", "end h2", "start a", "start h2"], events
    assert sorted(asked) == ["a", "h1", "h2"]  # each once
    out = capsys.readouterr().out
    assert f"sweep: not starting {tmp_path / 'h1'}: its stream did not reproduce" in out


@pytest.mark.slow
def test_sweep_local_stops_a_run_that_watch_names_and_goes_on(tmp_path, capsys):
    """``watch(run)``, asked while a run trains, stops it with SIGTERM once it gives a reason
    (printed): the run ends there, has not failed, and the head that waits on it starts. A
    watch that raises is said once and the run trains to its end."""

    timed = functools.partial(_timed, tmp_path)

    runs = [timed("a", 600.0), timed("h", 0.2, e2="a"), timed("b", 1.0)]
    watched = []

    def watch(run):
        watched.append(run.experiment)
        if run.experiment == "b":
            raise OSError("metrics unreadable")
        return "it departs from its row" if run.experiment == "a" else None

    assert sweep.run_local(runs, 1, None, "cpu", watch=watch, watch_every=0.2) == 0
    events = (tmp_path / "LOG").read_text().split()
    assert [f"{e} {n}" for e, n in zip(events[::2], events[1::2])] == [
        "start a",
        "start h",
        "end h",
        "start b",
        "end b",  # a watch that fails leaves its run training, unwatched
    ]
    assert watched.count("a") == 1 and watched.count("b") == 1  # no more once it said why
    out = capsys.readouterr().out
    assert f"sweep: stopping {tmp_path / 'a'}: it departs from its row" in out
    assert f"sweep: its watch failed on {tmp_path / 'b'}: OSError: metrics unreadable" in out
    assert "1 of 3 commands stopped by the watch" in out and "failed:" not in out


@pytest.mark.slow
def test_sweep_local_runs_side_by_side_and_resumes(tmp_path):
    """Two tiny runs at once, each on its own 2 forced CPU devices; a second call skips the
    finished runs and resumes an unfinished one from its checkpoint."""
    runs_dir = tmp_path / "runs"
    tiny = {
        "model.width": 4,
        "train.batch_size": 16,
        "train.eval_batch_size": 64,
        "train.num_epochs": 2,
        "train.lr_boundaries": "(1,)",
    }
    cmd = [sys.executable, str(REPO / "launch" / "sweep.py"), "digits_cnn", "--sizes", "100"]
    cmd += ["--seeds", "0,1", "--runs-dir", str(runs_dir), "--local", "--platform", "cpu"]
    cmd += ["--parallel", "2", "--devices-per-run", "2"]
    for k, v in tiny.items():
        cmd += ["--set", f"{k}={v}"]
    env = dict(
        os.environ,
        XLA_FLAGS="--xla_backend_optimization_level=0",
        JAX_COMPILATION_CACHE_DIR=str(tmp_path / "xla_cache"),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
    )
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    starts = [i for i, x in enumerate(lines) if " start: " in x]
    exits = [i for i, x in enumerate(lines) if " exit 0 " in x]
    # Side by side: both runs started before the first one ended, on different slots.
    assert len(starts) == 2 and len(exits) == 2 and max(starts) < min(exits), proc.stdout
    assert {lines[i].split(" slot ")[1][0] for i in starts} == {"0", "1"}
    point = {s: runs_dir / "digits_cnn" / f"n100_s{s}" for s in (0, 1)}
    first = {s: json.loads((d / "results.json").read_text()) for s, d in point.items()}
    assert [first[s]["devices"] for s in (0, 1)] == [2, 2]
    assert first[0]["seed"] == 0 and first[1]["seed"] == 1
    # Half-finished: seed 1 lost its results (stopped after its last checkpoint).
    (point[1] / "results.json").unlink()
    again = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 of 2 runs finished already (skipped)" in again.stdout
    assert " resume: " in again.stdout and "n100_s1" in again.stdout
    assert "n100_s0 " not in again.stdout
    log = (runs_dir / "digits_cnn" / "n100_s1.log").read_text()
    assert "resuming from the checkpoint of step" in log
    assert json.loads((point[1] / "results.json").read_text())["test_error"] == pytest.approx(
        first[1]["test_error"]
    )


# ----------------------------------------------------------------------------- readable output


def test_a_single_run_shows_no_spread(runs, capsys):
    assert report.main([str(runs), "--markdown", "--no-plot"]) == 0
    out = capsys.readouterr().out
    # cifar10_triple has one run: its figure with (n=1), not "8.00 ± 0.00".
    assert "| cifar10_triple | cifar10 | 100 | 1 | 8.00 (n=1) |" in out
    assert "± 0.00" not in out
    assert report._pm(12.0, 2.0, 3) == "12.00 ± 2.00" and report._pm(20.33, 0.0, 1) == "20.33 (n=1)"


def test_percent_tick_labels_on_log_axes():
    plt = pytest.importorskip("matplotlib.pyplot")
    fig, ax = plt.subplots()
    ax.plot([100, 1000], [4.0, 40.0])
    ax.set_yscale("log")
    report._percent_axis(ax.yaxis, log=True)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels(minor=False)]
    labels += [t.get_text() for t in ax.get_yticklabels(minor=True)]
    plt.close(fig)
    shown = {x for x in labels if x}
    # The decade and the 2x / 5x ticks in between read as percentages (not 4x10^1).
    assert {"10%", "20%", "5%"} <= shown, shown
    assert all(x.endswith("%") and "10^" not in x for x in shown), shown


def test_training_curves_from_metrics(runs, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    run_dir = runs / "cifar10_std" / "n100_s0"
    recs = [
        {"step": e, "epoch": e, "split": s, "loss": 2.0 / e, "error": 50.0 / e}
        for e in (1, 2, 3)
        for s in ("train", "val")
    ]
    recs.append(
        {"step": 3, "epoch": 3, "split": "test", "loss": 0.7, "error": 20.0, "final": True,
         "model_epoch": 2, "selected_by": "best validation"}
    )  # fmt: skip
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs) + "{cut")
    assert len(report.read_metrics(str(run_dir))) == 7  # the cut line is skipped
    found = report.find_results(str(runs))
    path = report.plot_curves(found, str(runs), str(tmp_path / "curves.png"))
    assert path and os.path.getsize(path) > 1000
    # No metrics.jsonl anywhere: a message, no file.
    others = [r for r in found if r[0] != str(run_dir)]
    assert report.plot_curves(others, str(runs), str(tmp_path / "none.png")) is None
    assert "no training curves" in capsys.readouterr().err
    # The command line writes both plots where asked.
    assert report.main([str(runs), "--plot", str(tmp_path / "a.png"), "--curves",
                        str(tmp_path / "b.png")]) == 0  # fmt: skip
    assert (tmp_path / "a.png").exists() and (tmp_path / "b.png").exists()


def test_legend_labels_drop_the_overrides_all_curves_share():
    names = [
        "digits_cnn[model.width=16, train.num_epochs=15]",
        "digits_cnn[model.width=32, train.num_epochs=15]",
    ]
    assert report.short_labels(names) == {
        names[0]: "digits_cnn[model.width=16]",
        names[1]: "digits_cnn[model.width=32]",
    }
    assert report.short_labels(["a", "b[x=1]"]) == {"a": "a", "b[x=1]": "b[x=1]"}


def _labels(fig, axis, minor=False):
    """The drawn, non-empty tick labels of ``axis``: ``[(text, bounding box)]``."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    out = []
    for t in axis.get_ticklabels(minor=minor):
        if t.get_visible() and t.get_text():
            out.append((t.get_text(), t.get_window_extent(renderer)))
    return out


@pytest.mark.parametrize("lo, hi", [(0.62, 0.95), (0.9, 2.3), (0.05, 2.3), (1e-4, 2.3)])
def test_loss_axis_ticks_do_not_overlap(lo, hi):
    """The loss axis of the training curves once labelled every minor tick of a narrow log
    range (overlapping). Now 2+ labels, in one plain notation, none overlapping."""
    plt = pytest.importorskip("matplotlib.pyplot")
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    ax.plot([1, 2, 3], [hi, (lo * hi) ** 0.5, lo])
    ax.set_yscale("log")
    report._log_axis_ticks(ax.yaxis, lo, hi, lambda v, _: f"{v:g}")
    lo_y, hi_y = ax.get_ylim()
    shown = [
        (t, box)
        for t, box in _labels(fig, ax.yaxis) + _labels(fig, ax.yaxis, minor=True)
        if lo_y <= float(t) <= hi_y
    ]
    plt.close(fig)
    assert len(shown) >= 2, shown
    assert all("10^" not in t and "times" not in t for t, _ in shown), shown
    ys = sorted((b.y0, b.y1) for _, b in shown)
    assert all(a[1] <= b[0] for a, b in zip(ys, ys[1:])), (lo, hi, [t for t, _ in shown])


def test_n_train_ticks_in_one_notation(runs, tmp_path):
    """The N_t axis once mixed ``2x10^1`` (minor ticks) with ``100``: now one tick per
    training size of the plot, all plain numbers."""
    plt = pytest.importorskip("matplotlib.pyplot")
    fig, ax = plt.subplots()
    ax.plot([20, 50, 100, 300, 1079], [30, 20, 10, 5, 3])
    ax.set_xscale("log")
    report._n_train_axis(ax.xaxis, [20, 50, 100, 300, 1079])
    texts = [t for t, _ in _labels(fig, ax.xaxis) + _labels(fig, ax.xaxis, minor=True)]
    plt.close(fig)
    assert texts == ["20", "50", "100", "300", "1,079"], texts


def test_parameter_counts_in_one_unit():
    """Counts were once ``36.48M`` beside ``7234``; now one unit for the column."""
    rows = [{"params": 36_479_194}, {"params": 7_234}, {"params": [1_500_000, 2_000_000]}]
    unit = report.params_unit(report._flat_counts(rows))
    assert unit[0] == "M"
    cells = [report._params(r["params"], unit) for r in rows]
    assert cells == ["36.479M", "0.007M", "1.500M/2.000M"], cells
    assert all(c.count("M") == len(c.split("/")) for c in cells)
    small = [{"params": 7_234}, {"params": 95_000}]
    unit = report.params_unit(report._flat_counts(small))
    assert [report._params(r["params"], unit) for r in small] == ["7.2k", "95.0k"]
    table = report.table(
        [
            dict(experiment="a", dataset="d", n_train=20, runs=1, test_error_mean=1.0,
                 test_error_std=0.0, test_error_n=1, val_error_mean=1.0, val_error_std=0.0,
                 val_error_n=1, params=p, wall_time_s_mean=1.0)
            for p in (36_479_194, 7_234)
        ]
    )  # fmt: skip
    assert "36.479M" in table and "0.007M" in table and " 7234 " not in table


def test_a_run_of_several_models_resumes_and_finishes_by_its_models_dirs(tmp_path):
    """A K-model run (``--config.seeds``) keeps its checkpoints and results under
    ``seed_<k>/``: it resumes (the sweep's log says so) when any model has a checkpoint, and is
    finished only when every model has its results."""
    run = sweep.Run("e", "digits_cnn", {"seeds": (0, 1)}, ("n20", 0), str(tmp_path / "r"))
    assert not sweep.resumes(run) and not sweep.finished(run)
    (tmp_path / "r" / "seed_1" / "checkpoints").mkdir(parents=True)
    assert sweep.resumes(run) and not sweep.finished(run)
    (tmp_path / "r" / "seed_0").mkdir()
    (tmp_path / "r" / "seed_0" / "results.json").write_text("{}")
    assert not sweep.finished(run)
    (tmp_path / "r" / "seed_1" / "results.json").write_text("{}")
    # Results copied in without their run (no stored config.json to compare: a record landed
    # from elsewhere) are taken as they are; a run's own: test_sweep_reruns_changed_points.
    assert sweep.finished(run)
    single = sweep.Run("e", "digits_cnn", {"seed": 0}, ("n20", 0), str(tmp_path / "s"))
    (tmp_path / "s" / "checkpoints").mkdir(parents=True)
    assert sweep.resumes(single) and not sweep.finished(single)


# ----------------------------------------------------------------------------- each run once


def test_each_run_counted_once_and_odd_results_named(tmp_path, capsys):
    """A run of seeds 0, 1 whose folder also got a single run of seed 0 (trained into it by the
    same command without ``--config.seeds``), and a copy of a finished run elsewhere: two runs,
    not four; a ``results.json`` holding a list is named, not skipped silently."""
    root = tmp_path / "runs"
    k = root / "k"
    for seed, err in ((0, 89.5), (1, 88.6)):
        write_run(k, f"seed_{seed}", err, seed, 100)
    (k / "seeds.json").write_text(json.dumps({"seeds": [0, 1]}))
    stray = dict(config_file="configs/cifar10_std.py", overrides={"data.n_train": 100})
    (k / "results.json").write_text(
        json.dumps(dict(test_error=89.5, seed=0, n_train=100, dataset="cifar10", **stray))
    )
    write_run(root, "copy/of_seed_1", 88.6, 1, 100)
    (root / "listed").mkdir()
    (root / "listed" / "results.json").write_text("[1, 2]")
    rows = report.aggregate(report.find_results(str(root)), str(root))
    err = capsys.readouterr().err
    assert [(r["runs"], r["seeds"]) for r in rows] == [(2, [0, 1])]
    assert rows[0]["test_error_mean"] == pytest.approx(89.05)
    assert rows[0]["test_error_std"] == pytest.approx(0.9 / 2**0.5)
    assert f"skipping {k / 'results.json'}: {k} holds the models of a run of several" in err
    assert f"skipping {root / 'listed' / 'results.json'}: it holds a JSON list" in err
    assert (
        f"skipping {k / 'seed_1' / 'results.json'}: the same run (seed 1, same config and "
        f"overrides) as {root / 'copy' / 'of_seed_1'}, counted once"
    ) in err
    # The folder's record says the same without seeds.json.
    (k / "seeds.json").unlink()
    (k / "run_kind.json").write_text(json.dumps({"kind": "seeds", "seeds": [0, 1]}))
    rows = report.aggregate(report.find_results(str(root)), str(root))
    assert [r["runs"] for r in rows] == [2]


@pytest.mark.slow
def test_report_on_a_read_only_runs_folder(runs, tmp_path):
    """Every write under the runs folder fails (EROFS, as a read-only mount): the report is
    printed and says where no plot could go (exit 0); a plot asked for there is refused in
    one line before anything is read (exit 2); a plot elsewhere is drawn."""
    import tiny_runs

    def report_cmd(*args):
        return tiny_runs.run_module(
            "invjax.report", str(runs), *args, fault=f"read_only:{runs}", timeout=120
        )

    proc = report_cmd("--markdown")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert "| cifar10_std | cifar10 | 100 | 3 | 12.00 ± 2.00 |" in proc.stdout
    assert f"report: no plot drawn: {runs} is not writable (Read-only file system)" in proc.stderr
    assert not (runs / "error_vs_n_train.png").exists()
    proc = report_cmd("--plot", str(runs / "p.png"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"invjax: error: --plot={runs / 'p.png'}: {runs} is not writable (Read-only file system)"
    ]
    assert proc.stdout == ""
    proc = report_cmd("--plot", str(tmp_path / "p.png"), "--curves", str(tmp_path / "c.png"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "p.png").stat().st_size > 1000


def _png_size(path) -> tuple[int, int]:
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def test_plots_keep_their_size_with_long_override_strings(tmp_path):
    """Two experiments that differ in a long override string (a sweep's ``--set`` of a
    multi-stream recipe): the legend labels wrap, so the plot keeps one panel's width (was
    3471 x 498 px, the legend squeezing the plots) and its height stays bounded."""
    root = tmp_path / "runs"
    for head in ("concat", "weighted_sum"):
        long = {
            f"phase1.stream_{i}.train.learning_rate_schedule_boundaries": f"({len(head)}, 24)"
            for i in range(6)
        }  # fmt: skip, differs between the experiments
        for n in (100, 1000):
            for seed in (0, 1):
                d = write_run(
                    root, f"{head}/n{n}_s{seed}", 10.0 + seed, seed, n, "configs/cifar10_triple.py",
                    overrides={"seed": seed, "data.n_train": n, "model.head": head, **long},
                )  # fmt: skip
                metrics = [
                    {"step": e, "epoch": e, "split": s, "loss": 1.0 / e, "error": 50.0 / e}
                    for e in (1, 2, 3) for s in ("train", "val")
                ]  # fmt: skip
                (d / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    assert report.main([str(root), "--no-plot"]) == 0
    rows = report.aggregate(report.find_results(str(root)), str(root))
    width, height = _png_size(report.plot(rows, str(tmp_path / "p.png")))
    # One panel: 5.5 x 4.2 in at 120 dpi (660 x 504 px) plus the axis labels and the legend.
    assert width <= 800 and height <= 900, (width, height)
    # A single run's own folder: its label is its long experiment name.
    one = root / "concat" / "n100_s0"
    path = report.plot_curves(report.find_results(str(one)), str(one), str(tmp_path / "c.png"))
    width, height = _png_size(path)
    assert width <= 1500 and height <= 900, (width, height)
    assert "\n" in report.legend_label("a" * 50 + ", " + "b" * 50)
    assert report.legend_label("x, " * 100).count("\n") == 2


# ----------------------------------------------------------------------------- sweeps keep promises

TINY_SWEEP = {
    "data.name": "digits",
    "model.width": 4,
    "train.batch_size": 50,
    "train.eval_batch_size": 400,
    "train.lr_boundaries": "()",
    "train.log_every_steps": 0,
}


def sweep_cmd(runs_dir, **settings) -> list[str]:
    cmd = [sys.executable, str(REPO / "launch" / "sweep.py"), "digits_cnn", "--sizes", "100"]
    cmd += ["--seeds", "0", "--runs-dir", str(runs_dir), "--local"]
    for k, v in {**TINY_SWEEP, **settings}.items():
        cmd += ["--set", f"{k}={v}"]
    return cmd


def run_sweep(runs_dir, **settings):
    return subprocess.run(
        sweep_cmd(runs_dir, **settings), cwd=REPO, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_sweep_reruns_changed_points(tmp_path):
    """A 1-epoch sweep, then the same points with ``train.num_epochs=2``: the point is run
    again and resumes to 2 epochs (it was "1 of 1 runs finished already (skipped)"); then it is
    finished; a changed model is refused before any run starts, naming the difference."""
    runs_dir = tmp_path / "runs"
    point = runs_dir / "digits_cnn" / "n100_s0"
    first = run_sweep(runs_dir, **{"train.num_epochs": 1})
    assert first.returncode == 0, first.stdout + first.stderr
    assert json.loads((point / "results.json").read_text())["epochs"] == 1
    longer = run_sweep(runs_dir, **{"train.num_epochs": 2})
    assert longer.returncode == 0, longer.stdout + longer.stderr
    assert "0 of 1 runs finished already (skipped)" in longer.stdout
    assert (
        " resume: " in longer.stdout and "resuming from the checkpoint of step 2" in longer.stdout
    )
    assert json.loads((point / "results.json").read_text())["epochs"] == 2
    again = run_sweep(runs_dir, **{"train.num_epochs": 2})
    assert again.returncode == 0 and "1 of 1 runs finished already (skipped)" in again.stdout
    before = sorted(p.name for p in point.iterdir())
    other = run_sweep(runs_dir, **{"train.num_epochs": 2, "model.width": 8})
    assert other.returncode == 2, other.stdout + other.stderr
    assert " start: " not in other.stdout and "Traceback" not in other.stderr
    (line,) = other.stderr.strip().splitlines()
    assert line.startswith(f"invjax: error: {point} was run with other settings than this sweep's")
    assert "model.width: 4 stored, 8 now" in line
    assert sorted(p.name for p in point.iterdir()) == before


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def _wait_for(predicate, timeout=240, what=""):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and PR_SET_PDEATHSIG")
def test_sweep_sighup_and_sigkill_stop_its_runs(tmp_path):
    """SIGHUP (a closed terminal) to ``sweep.py --local`` stops its run as SIGTERM does (the
    run saves, exits 143; the sweep exits 129); SIGKILL to the sweep leaves no orphan training
    on: the run gets SIGTERM from the kernel, saves its step and stops, releasing its lock."""
    runs_dir = tmp_path / "runs"
    point = runs_dir / "digits_cnn" / "n100_s0"
    ckpts = point / "checkpoints"
    steps = lambda: (
        sorted(int(d) for d in os.listdir(ckpts) if d.isdigit()) if ckpts.is_dir() else []
    )  # noqa: E731, E501
    cmd = sweep_cmd(runs_dir, **{"train.num_epochs": 500})
    outs = []
    for sig in (signal.SIGHUP, signal.SIGKILL):
        out, err = (open(tmp_path / f"{sig.name}.{s}", "w+") for s in ("out", "err"))
        outs.append((out, err))
        sweep_proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=err, text=True)
        seen = steps()[-1] if steps() else 0
        (run_pid,) = _wait_for(lambda p=sweep_proc.pid: _children(p), what="the run")
        _wait_for(lambda s=seen: steps() and steps()[-1] > s, what="a checkpoint")
        sweep_proc.send_signal(sig)
        status = sweep_proc.wait(timeout=120)
        _wait_for(lambda p=run_pid: not os.path.exists(f"/proc/{p}"), timeout=120, what="the run")
        out.seek(0)
        err.seek(0)
        text, errors = out.read(), err.read()
        if sig == signal.SIGHUP:
            assert status == 128 + signal.SIGHUP, text + errors
            assert "sweep: SIGHUP: passed to 1 run(s) as SIGTERM" in text
            assert "slot 0 exit 143 " in text, text
        else:
            assert status == -signal.SIGKILL
        stopped = [x for x in errors.splitlines() if "stopped by SIGTERM after step" in x]
        assert len(stopped) == 1 and "checkpoint saved in" in stopped[0], errors[-3000:]
        step = int(stopped[0].split("after step ")[1].split()[0])
        assert steps()[-1] == step
        assert not (point / "invjax.lock").exists()  # released: a rerun is not "in use"
    for f in (f for pair in outs for f in pair):
        f.close()
