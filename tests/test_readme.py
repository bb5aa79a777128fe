"""The README's example of the layers in a Flax model runs as written, and its claims hold."""

from __future__ import annotations

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def example() -> str:
    """The Python block of the README's section "Using the layers in your own Flax model"."""
    text = README.read_text()
    section = text.split("## Using the layers in your own Flax model", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```python\n(.*?)^```", section, flags=re.S | re.M)
    assert len(blocks) == 1, "the section has one Python example"
    return blocks[0]


def test_the_readme_example_runs_and_measures_float32_rounding():
    namespace: dict = {}
    exec(compile(example(), "README.md", "exec"), namespace)  # noqa: S102 (our own README)
    errors = namespace["errors"]
    assert list(errors) == ["rot90", "rot180", "rot270"]
    assert max(errors.values()) < 1e-5


def test_the_wrong_chain_the_readme_describes_is_one_clear_error():
    source = example()
    old = 'E2Conv(8, "C4", trivial_out=True)'
    assert old in source
    with pytest.raises(ValueError, match=r"E2Conv\(C8\) expects regular C8 fields, got regular C4"):
        exec(compile(source.replace(old, old.replace("C4", "C8")), "README.md", "exec"), {})
