"""Every command the README and the configs' docstrings show works as written, run cheaply.

The commands are parsed from the documents at test time (fenced code blocks and inline code that
starts with ``python``, ``python3``, ``pip`` or ``bash``; each config's first docstring line), so
a command added to the README is tested without editing this file. Each README command is run in
a subprocess from the repository root in its cheapest honest form:

- ``invjax.main``: the same arguments with ``--dry_run`` (config, data, model shapes and workdir
  are checked; nothing is computed) and a temporary ``--workdir``; a real dataset that is not
  prepared must stop with exit status 2 and one line naming ``python -m invjax.data.prepare``.
- ``invjax.invariance --table1``: two samples, one column; model mode on two photos.
- ``invjax.report``: on a directory with two finished (fake) runs.
- ``launch/sweep.py``: with ``--dry_run``; other ``python -m`` modules (``invjax.models``): as
  written (shapes only).
- ``invjax.data.prepare NAME``: ``--help``, and ``NAME`` is one it accepts (no download here).
- benchmarks and other scripts: ``--help``; ``pip install``: the extras and files it names exist; ``bash FILE``:
  the file exists and ``bash -n`` parses it.
- templates (``NAME``, ``DIR``, ``[...]``) and ``HEAVY`` ones: the program's ``--help``.

A config's command is always ``python -m invjax.main --config=configs/NAME.py --workdir=runs/NAME``
(checked): its dry run runs in the test process (``dry_run_in_process``), the command line around
it in the README's subprocesses above.

Commands that another change fixes are listed in ``KNOWN_BROKEN`` (expected to fail, with the
reason); delete an entry once it passes.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import subprocess
import sys
import tomllib

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
README = REPO / "README.md"
CONFIGS = REPO / "configs"
HELPERS = ("__init__",)  # configs/ modules that are not experiments
PREPARE = "python -m invjax.data.prepare"
# Command (as written) -> why it is expected to fail on this branch.
KNOWN_BROKEN: dict[str, str] = {}
# Minutes of work even when cheap: only the program's --help is checked.
HEAVY = {"python -m invjax.summary --all": "builds every full-size network of the paper"}
# Run by pytest itself (this suite): not run again from inside it.
NOT_RUN = {
    "python3 -m pytest -q -n 2": "it is this test suite",
    'python3 -m pytest -q -n 2 -m "not slow"': "it is part of this test suite",
}
PLACEHOLDER = re.compile(r"\b(NAME|DIR|FILE|KEY|VALUE)\b|\[|\||\.\.\.")


def readme_commands(text: str) -> list[str]:
    """Commands in fenced code blocks (one per line, ``&&`` split, ``\\`` joined) and in inline
    code spans that start with python / python3 / pip / bash."""
    found = []
    for lang, block in re.findall(r"^```([^\n]*)\n(.*?)^```", text, flags=re.S | re.M):
        if lang.strip() not in ("", "sh", "bash", "console"):  # a program or a listing
            continue  # (the README's Python example: tests/test_readme.py runs it)
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line)  # a shell comment
            found += [c.strip() for c in line.split("&&") if c.strip()]
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M)
    for span in re.findall(r"`([^`]+)`", prose):
        span = " ".join(span.split())
        if re.match(r"(python3?|pip|bash) ", span):
            found.append(span)
    return list(dict.fromkeys(found))  # unique, in order


def config_commands() -> list[tuple[str, str]]:
    out = []
    for path in sorted(CONFIGS.glob("*.py")):
        if path.stem in HELPERS:
            continue
        text = path.read_text()
        doc = re.match(r'\s*"""(.*?)"""', text, flags=re.S)
        assert doc, f"{path.name} has no docstring"
        out.append((path.stem, doc.group(1).strip().splitlines()[0].strip()))
    return out


def run(args, timeout=300, **kw):
    return subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=timeout, **kw)


def _python(words: list[str]) -> list[str]:
    assert words[0] in ("python", "python3"), words
    return [sys.executable, *words[1:]]


def _set(words: list[str], flag: str, value: str) -> list[str]:
    """``--flag=value`` replacing any ``--flag=...`` in ``words``."""
    kept = [w for w in words if not w.startswith(f"{flag}=")]
    return [*kept, f"{flag}={value}"]


def check_stopped_for_data(proc, command: str) -> None:
    """Exit 2 with one line on stderr that names the prepare command; no traceback."""
    lines = [x for x in proc.stderr.strip().splitlines() if x.startswith("invjax")]
    assert proc.returncode == 2, (command, proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert len(lines) == 1 and PREPARE in lines[0], proc.stderr[-2000:]


def prepared(proc) -> bool:
    """False if the command stopped because a real dataset is not prepared here."""
    return not (proc.returncode == 2 and PREPARE in proc.stderr)


def fake_runs(root: pathlib.Path) -> pathlib.Path:
    for n, err in ((100, 20.0), (300, 10.0)):
        d = root / f"n{n}"
        d.mkdir(parents=True)
        results = {
            "test_error": err,
            "val_error": err,
            "params": 1000,
            "n_train": n,
            "seed": 0,
            "dataset": "scaled_digits",
            "config_file": "configs/digits_cnn.py",
            "overrides": {"data.n_train": n},
        }
        (d / "results.json").write_text(json.dumps(results))
        (d / "metrics.jsonl").write_text(
            "".join(
                json.dumps({"step": e, "epoch": e, "split": s, "loss": 1.0 / e, "error": err / e})
                + "\n"
                for e in (1, 2)
                for s in ("train", "val")
            )
        )
    return root


def check_help(words: list[str]) -> None:
    """The program named by a (template) command answers ``--help`` with its usage, exit 0."""
    if words[1] == "-m":
        args = _python(words[:3])
    else:
        args = _python(words[:2])
    proc = run([*args, "--help"], timeout=120)
    assert proc.returncode == 0, (words, proc.stderr[-2000:])
    assert len(proc.stdout) > 200 and "--" in proc.stdout, proc.stdout


def check_pip(words: list[str]) -> None:
    """The extras and requirement files of a pip command exist (nothing is installed here)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project.get("optional-dependencies", {})
    for i, w in enumerate(words):
        m = re.fullmatch(r"""["']?\.\[([\w,-]+)\]["']?""", w)
        if m:
            for extra in m.group(1).split(","):
                assert extra in extras, (
                    f"{w}: no extra {extra!r} in pyproject.toml ({list(extras)})"
                )
        if w == "-r":
            assert (REPO / words[i + 1]).is_file(), f"-r {words[i + 1]}: no such file"


def check_command(command: str, tmp_path: pathlib.Path) -> None:
    words = shlex.split(command)
    if words[0] == "pip" or words[1:3] == ["-m", "pip"]:
        return check_pip(words)
    if words[0] == "bash":
        assert (REPO / words[1]).is_file(), command
        proc = run(["bash", "-n", words[1]])
        assert proc.returncode == 0, proc.stderr
        return None
    if PLACEHOLDER.search(command) or command in HEAVY:
        return check_help(words)
    module = words[2] if words[1] == "-m" else words[1]
    args = _python(words)
    if module == "invjax.main":
        args = _set(args, "--workdir", str(tmp_path / "workdir")) + ["--dry_run"]
        proc = run(args)
        if not prepared(proc):
            return check_stopped_for_data(proc, command)
        assert proc.returncode == 0, (command, proc.stderr[-3000:])
        assert proc.stdout.startswith("dry run:"), proc.stdout
        assert not (tmp_path / "workdir").exists()  # a dry run writes nothing
        return None
    if module == "invjax.invariance":
        if "--table1" in args:
            args = _set(_set(args, "--n_samples", "2"), "--columns", "input")
        else:
            args = _set(args, "--n_samples", "2")
        proc = run(args)
        if not prepared(proc):
            return check_stopped_for_data(proc, command)
        assert proc.returncode == 0, (command, proc.stderr[-3000:])
        if "--json" in args:
            json.loads(proc.stdout.strip().splitlines()[-1])
        return None
    if module == "invjax.report":
        runs = fake_runs(tmp_path / "runs")
        args = [str(runs) if a == "runs" else a for a in args]
        proc = run(args, timeout=120)
        assert proc.returncode == 0, (command, proc.stderr[-3000:])
        assert "digits_cnn" in proc.stdout
        return None
    if module == "invjax.data.prepare":
        check_help(words)
        from invjax.data import prepare

        assert words[3] in (*prepare.NAMES, *prepare.OFFLINE), command
        return None
    if module.startswith("benchmarks/"):
        return check_help(words)
    if module.endswith(".py") and module != "launch/sweep.py":
        return check_help(words)  # other scripts (e.g. requirements/freeze.py) write files
    if module == "launch/sweep.py" and "--dry_run" not in args:
        args.append("--dry_run")
    proc = run(args)
    assert proc.returncode == 0, (command, proc.stderr[-3000:])
    assert proc.stdout.strip(), command
    return None


def _params(commands):
    out = []
    for c in commands:
        marks = []
        if c in KNOWN_BROKEN:
            # strict: once it passes (after the fix is merged), delete its KNOWN_BROKEN entry.
            marks.append(pytest.mark.xfail(reason=KNOWN_BROKEN[c], strict=True))
        if c in NOT_RUN:
            marks.append(pytest.mark.skip(reason=NOT_RUN[c]))
        out.append(pytest.param(c, marks=marks, id=c[:80]))
    return out


def test_the_readme_has_commands_to_test():
    commands = readme_commands(README.read_text())
    # The quick start's two commands, the sweeps, the report, Table 1 at least.
    assert len(commands) >= 8, commands
    assert any("invjax.main --config=configs/digits_triple.py" in c for c in commands)
    assert any(c.startswith("python -m invjax.report") for c in commands)
    unknown = [c for c in KNOWN_BROKEN if c not in commands]
    assert not unknown, f"KNOWN_BROKEN lists commands the README no longer has: {unknown}"


@pytest.mark.slow
@pytest.mark.parametrize("command", _params(readme_commands(README.read_text())))
def test_readme_command(command, tmp_path):
    check_command(command, tmp_path)


def dry_run_in_process(config_path: pathlib.Path, workdir: pathlib.Path) -> None:
    """What ``python -m invjax.main --config=CONFIG --workdir=WORKDIR --dry_run`` does once its
    flags are parsed (``invjax.main._run``), in this process: the file loaded and locked, then
    :func:`invjax.train.dry_run`; a real dataset that is not prepared here must stop with the
    error that ``invjax.main`` prints as its one line (exit 2), naming the prepare command."""
    from invjax import configs, train

    config = configs.load(str(config_path))
    config.lock()
    try:
        out = train.dry_run(config, str(workdir))
    except (ValueError, FileNotFoundError) as e:  # invjax.main: exit 2, this one line
        assert PREPARE in str(e), (config_path.name, str(e))
        return
    assert out.startswith("dry run:"), out
    assert not workdir.exists()  # a dry run writes nothing


@pytest.mark.slow  # every config's full-size network traced: seconds each
@pytest.mark.parametrize("name,command", config_commands(), ids=[n for n, _ in config_commands()])
def test_config_docstring_command(name, command, tmp_path):
    """Each config's command, dry-run in this process: the command line around the config is the
    same for every config, and its subprocess form (flag parsing, the exit status and the one line
    of a dataset not prepared here) is run by ``test_readme_command`` on the README's
    ``invjax.main`` commands, a prepared dataset's and unprepared ones'. (A process per config
    would import JAX, Flax and the data libraries again for each.)"""
    assert command == (f"python -m invjax.main --config=configs/{name}.py --workdir=runs/{name}"), (
        f"configs/{name}.py: its docstring must start with the command that runs it"
    )
    dry_run_in_process(CONFIGS / f"{name}.py", tmp_path / "workdir")


@pytest.mark.slow
def test_every_cli_has_a_useful_help():
    for module, expect in (
        ("invjax.main", "--config.data.n_train"),
        ("invjax.invariance", "--images"),
        ("invjax.report", "--curves"),
        ("invjax.data.prepare", "cifar10"),
        ("invjax.summary", "--input_shape"),
    ):
        proc = run([sys.executable, "-m", module, "--help"], timeout=120)
        assert proc.returncode == 0 and expect in proc.stdout, (module, proc.stdout[-2000:])
    for bench in sorted((REPO / "benchmarks").glob("*.py")):
        proc = run([sys.executable, str(bench), "--help"], timeout=120)
        assert proc.returncode == 0 and "usage:" in proc.stdout, (bench, proc.stderr[-2000:])
    # With a config, main's help lists the keys that config can override, with its values.
    proc = run(
        [sys.executable, "-m", "invjax.main", "--config=configs/digits_cnn.py", "--help"],
        timeout=120,
    )
    assert proc.returncode == 0 and "--config.train.lr_boundary_fractions=(0.666" in proc.stdout


def test_commands_parser_finds_blocks_spans_and_continuations():
    text = (
        "Run `python -m invjax.report runs\n--markdown` or `pip install -e .`; not `foo`.\n"
        "```\nA=1 python3 -m x --a \\\n  --b && python3 -m y  # a comment\n```\n"
        "```python\nimport invjax\n```\n"
    )
    assert readme_commands(text) == [
        "A=1 python3 -m x --a    --b",
        "python3 -m y",
        "python -m invjax.report runs --markdown",
        "pip install -e .",
    ]


@pytest.mark.slow
def test_invariance_on_own_images_needs_no_dataset(tmp_path):
    """``--config`` of a real dataset (not prepared here) with ``--images``: no data is read."""
    images = tmp_path / "photos.npy"
    rng = np.random.default_rng(0)
    np.save(images, rng.random((2, 32, 32, 3), np.float32))
    proc = run(
        [
            sys.executable,
            "-m",
            "invjax.invariance",
            "--config=configs/svhn_std.py",
            "--config.model.depth=10",
            "--config.model.widen_factor=1",
            "--config.model.stem_width=4",
            f"--images={images}",
            "--transforms=rot90,flip",
            "--json",
        ],
        env={**os.environ, "TFDS_DATA_DIR": str(tmp_path / "no_datasets_here")},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["normalisation"] == "the images' own" and out["n_images"] == 2
    # A plain WRN on noise: a finite, non-zero invariance error (it is not invariant).
    for t in ("rot90", "flip"):
        assert 0 < out["invariance_error"][t]["logits"] < float("inf")
