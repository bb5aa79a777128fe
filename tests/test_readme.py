"""The README's example of the layers in a Flax model runs as written, its claims hold, and the
README stays a guide: its sections, the quick start's measured figure, one results table."""

from __future__ import annotations

import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def python_blocks() -> list[str]:
    """Every Python block of the README, in order."""
    return re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)


def example() -> str:
    """The Flax Linen example of the README's section "Using the layers in your own Flax model"
    (the first of its two Python blocks; the second is the same network in Flax NNX)."""
    text = README.read_text()
    section = text.split("## Using the layers in your own Flax model", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```python\n(.*?)^```", section, flags=re.S | re.M)
    assert len(blocks) == 2, "the section has a Linen and an NNX example"
    assert "flax.linen" in blocks[0] and "from flax import nnx" in blocks[1]
    return blocks[0]


@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_every_readme_python_block_runs_and_measures_float32_rounding(index):
    """Each block on its own (a reader copies one): the Linen and the NNX example both assert the
    same exactness bound on the same elements."""
    namespace: dict = {}
    exec(compile(python_blocks()[index], "README.md", "exec"), namespace)  # noqa: S102
    errors = namespace["errors"]
    assert list(errors) == ["rot90", "rot180", "rot270"]
    assert max(errors.values()) < 1e-5


def test_one_readme_python_block_is_flax_nnx():
    nnx_blocks = [b for b in python_blocks() if "from flax import nnx" in b]
    assert len(nnx_blocks) == 1 and "from invjax.nnx import" in nnx_blocks[0]
    assert "check_equivariance(model, None, images)" in nnx_blocks[0]


def test_the_wrong_chain_the_readme_describes_is_one_clear_error():
    source = example()
    old = 'E2Conv(8, "C4", trivial_out=True)'
    assert old in source
    with pytest.raises(ValueError, match=r"E2Conv\(C8\) expects regular C8 fields, got regular C4"):
        exec(compile(source.replace(old, old.replace("C4", "C8")), "README.md", "exec"), {})


def _section(title: str) -> str:
    text = README.read_text()
    assert f"\n## {title}\n" in text, f"the README has no section {title!r}"
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_is_a_guide_of_at_most_250_lines_in_this_order():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    sections = re.findall(r"^## (.+)$", text, flags=re.M)
    assert sections == [
        "Install",
        "Quick start",
        "Using the layers in your own Flax model",
        "Configs",
        "Your own images, and a trained model out",
        "Precision and the guarantee",
        "Scaling out",
        "Contracts",
        "Under faults",
        "Results",
    ]


def test_the_quick_start_says_what_the_default_job_reaches_as_measured():
    """The figure and time the README promises are the ones docs/benchmarks.md records beside the
    same command."""
    quick = _section("Quick start")
    command = "invjax.main --config=configs/digits_triple.py --workdir=runs/digits_triple"
    assert command in quick
    bench = (REPO / "docs" / "benchmarks.md").read_text()
    default_job = bench.split("## The default job", 1)[1].split("\n## ", 1)[0]
    assert command in default_job
    figure = re.search(r"`test_error=(\d+\.\d\d)%`", quick).group(1)
    minutes = re.search(r"(\d+ min \d+ s)", quick).group(1)
    assert f"`test_error={figure}%`" in default_job
    assert minutes in default_job
    assert "(docs/benchmarks.md#the-default-job)" in quick


def test_the_quick_start_has_the_quick_trial_and_both_test_loops():
    quick = _section("Quick start")
    blocks = "\n".join(re.findall(r"^```\n(.*?)^```", quick, flags=re.S | re.M))
    assert (
        "python3 -m invjax.main --config=configs/digits_triple.py --workdir=runs/try "
        "--config.train.epochs_scale=0.25"
    ) in blocks
    assert '-e ".[test]" && python3 -m pytest -q -n 2\n' in blocks
    assert 'python3 -m pytest -q -n 2 -m "not slow"' in blocks
    # TensorBoard is not a dependency: the README says which extra installs it, first.
    extra = quick.index('python3 -m pip install -e ".[tensorboard]"')
    assert extra < quick.index("tensorboard --logdir runs")


def test_the_faults_table_lists_every_exit_status():
    faults = _section("Under faults")
    rows = re.findall(r"^\| ([\d, ]+) \|", faults, flags=re.M)
    assert rows == ["0", "1", "2", "130, 143"]
    assert "invjax: error: ..." in faults


def test_the_results_are_one_table_of_one_screen():
    results = _section("Results")
    assert len(results.strip().splitlines()) <= 25
    tables = re.findall(r"(?:^\|.*\|\n)+", results, flags=re.M)
    assert len(tables) == 1
    for link in ("docs/results/digits/README.md", "docs/results/realimages/README.md"):
        assert f"]({link})" in tables[0]
    for fact in ("1,140 runs", "175 comparisons", "19 are", "smallest detectable effect"):
        assert fact in results, fact


ORGANISATION = re.compile(
    r"\bsessions?\b|\blent\b|\bborrowed\b|card time|\bengineers?\b|the brief|\bissue \d+",
    flags=re.I,
)


def test_the_readme_and_docs_speak_about_the_software_not_how_the_work_was_organised():
    """README.md and the pages of docs/ (not the study records under docs/results/)."""
    found = []
    for page in [README, *sorted((REPO / "docs").glob("*.md"))]:
        for n, line in enumerate(page.read_text().splitlines(), 1):
            if ORGANISATION.search(line):
                found.append(f"{page.relative_to(REPO)}:{n}: {line.strip()}")
    assert not found, "\n".join(found)


def test_the_docs_index_lists_every_page_once():
    """docs/README.md: one table row per page of docs/, each saying what the page teaches."""
    index = (REPO / "docs" / "README.md").read_text()
    rows = re.findall(r"^\| \[([\w/.]+)\]\(([\w/.]+)\) \| (.+) \|$", index, flags=re.M)
    linked = [target for _, target, _ in rows]
    pages = sorted(p.name for p in (REPO / "docs").glob("*.md") if p.name != "README.md")
    assert sorted(t for t in linked if "/" not in t) == pages
    assert len(linked) == len(set(linked))
    assert all(len(what.split()) >= 4 for _, _, what in rows)
