"""Every reference resolves: README sections that code and docs cite, repository paths they name,
and the relative links of the Markdown pages.

Three kinds of reference, collected at test time so that a new one is checked without editing
this file:

- a **section citation** ``README, "X"`` (also ``README "X"``, ``README's "X"``, ``README: "X"``,
  ``(README, "X", 1)``, and the same with ``docs/NAME.md`` in place of ``README``) in code
  (``invjax/``, ``configs/``, ``launch/``, ``benchmarks/``, ``tests/``), in the docs and in the
  commands' ``--help``: the cited page has a heading ``X``, and a cited item ``N`` is a numbered
  item ``N.`` of that section;
- a **repository path** (``docs/NAME.md``, ``invjax/...py``, ``configs/NAME.py``, ...) written in
  code or docs: the file exists (templates such as ``configs/NAME.py`` or ``DIR/...`` are not
  paths);
- a **relative Markdown link** ``[text](target#anchor)`` in ``README.md`` and ``docs/**/*.md``:
  the target exists relative to the page, and an anchor names a heading of the target;
- a **config key** ``--config.KEY=...`` in ``README.md``, ``docs/*.md`` and the configs' files:
  ``KEY`` is a key of at least one shipped config (``configs/NAME.py``).

Paths and keys that another change creates are listed in ``PENDING`` and ``PENDING_KEYS``, and references in files that another
change rewrites in ``KNOWN_BROKEN``, each with the reason; a test fails once an entry is no longer
needed, so that it is deleted.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
THIS = pathlib.Path(__file__).resolve()
CODE_DIRS = ("invjax", "configs", "launch", "benchmarks", "tests")
CODE_SUFFIXES = (".py", ".sh", ".template")
# The commands whose --help is read for citations and paths (module or script, then arguments).
COMMANDS = (
    ("-m", "invjax.main", "--help"),
    ("-m", "invjax.invariance", "--help"),
    ("-m", "invjax.report", "--help"),
    ("-m", "invjax.summary", "--help"),
    ("-m", "invjax.export", "--help"),
    ("-m", "invjax.data.prepare", "--help"),
    ("-m", "invjax.data.image_folder", "--help"),
    ("launch/sweep.py", "--help"),
)
# Repository paths that are referenced before the change that creates them is in this tree.
PENDING: dict[str, str] = {}
# Config keys that another change adds.
PENDING_KEYS: dict[str, str] = {}
# (file, path it names) -> why it is not fixed in this tree.
KNOWN_BROKEN: dict[tuple[str, str], str] = {}

# README, "X" / README's "X" / README: "X" / docs/NAME.md, "X"; the text between may wrap onto
# the next line of a docstring or a comment. An item number may follow: (README, "X", 1).
CITATION = re.compile(
    r"(?P<page>README(?:\.md)?|docs/[\w/.-]+\.md)(?:'s)?[ \t]*[,:]?\s*(?:#\s*)?(?:section\s+)?"
    r"\"(?P<section>[A-Z][^\"]{0,80}?)\"(?:,\s*(?P<item>\d+)\b)?"
)
# A path into the repository: one of its top-level folders, then path characters, ending in a
# file suffix. Not preceded by a path character (so `runs/x/docs/a.md` and `../docs` are not it).
TOP = r"(?:invjax|configs|docs|launch|benchmarks|tests|requirements|\.ci)"
PATH = re.compile(
    rf"(?<![\w/.~$-]){TOP}/[\w./-]*\.(?:py|md|sh|txt|json|jsonl|png|npz|toml|template)(?![\w/])"
)
# Words that make a path a template rather than a file (configs/NAME.py, docs/results/X/...).
TEMPLATE = re.compile(r"\b(?:NAME|STEM|DIR|FILE|OUT|OUTDIR|RUN|X|N)\b|<|\*|\{")
CONFIG_KEY = re.compile(r"--config\.([a-z_][\w.]*\w)")
LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)\)")


def _rel(path: pathlib.Path) -> str:
    return path.relative_to(REPO).as_posix()


def code_files() -> list[pathlib.Path]:
    out = []
    for top in CODE_DIRS:
        out += [
            p
            for p in sorted((REPO / top).rglob("*"))
            if p.is_file() and p.suffix in CODE_SUFFIXES and p.resolve() != THIS
        ]
    ci = REPO / ".ci" / "run"
    return out + ([ci] if ci.is_file() else [])


def doc_files(results: bool = True) -> list[pathlib.Path]:
    """README.md and docs/**/*.md (with ``results=False``: not the study records under
    docs/results/, whose run logs name files of their own run directories)."""
    docs = sorted((REPO / "docs").rglob("*.md"))
    if not results:
        docs = [p for p in docs if "results" not in p.relative_to(REPO / "docs").parts[:1]]
    return [REPO / "README.md", *docs]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but ``-`` and ``_`` dropped, spaces
    to ``-``."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def headings(page: pathlib.Path) -> list[str]:
    """The headings of a Markdown page, outside fenced code blocks."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    return [m.group(1).strip() for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M)]


def section_text(page: pathlib.Path, title: str) -> str:
    """The text under heading ``title`` up to the next heading of the same or a higher level."""
    text = page.read_text()
    m = re.search(rf"^(#+)\s+{re.escape(title)}\s*$", text, re.M)
    assert m, (page, title)
    rest = text[m.end() :]
    end = re.search(rf"^#{{1,{len(m.group(1))}}}\s", rest, re.M)
    return rest[: end.start()] if end else rest


def _one_line(text: str) -> str:
    """A section name wrapped over lines of a docstring or comment, joined again."""
    return re.sub(r"\s*\n\s*(?:#\s*)?", " ", text)


def citation_problems(text: str, where: str) -> list[str]:
    """What is wrong with each section citation in ``text`` (empty: all resolve)."""
    problems = []
    for m in CITATION.finditer(text):
        name, section, item = m.group("page"), _one_line(m.group("section")), m.group("item")
        page = REPO / ("README.md" if name.startswith("README") else name)
        cited = f'{where}: {name}, "{section}"' + (f", {item}" if item else "")
        if not page.is_file():
            problems.append(f"{cited}: {_rel(page)} does not exist")
        elif section not in headings(page):
            problems.append(f"{cited}: {_rel(page)} has no heading {section!r}")
        elif item and not re.search(rf"^{item}\.\s", section_text(page, section), re.M):
            problems.append(f"{cited}: section {section!r} has no numbered item {item}")
    return problems


def broken_paths(text: str) -> list[str]:
    """The repository paths named in ``text`` that do not exist (templates and PENDING aside)."""
    out = []
    for m in PATH.finditer(text):
        path = m.group(0)
        if not (TEMPLATE.search(path) or path in PENDING or (REPO / path).exists()):
            out.append(path)
    return out


def path_problems(text: str, where: str) -> list[str]:
    return [
        f"{where}: {path} does not exist"
        for path in broken_paths(text)
        if (where, path) not in KNOWN_BROKEN
    ]


def link_problems(page: pathlib.Path) -> list[str]:
    problems = []
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    for m in LINK.finditer(text):
        target = m.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        where = f"{_rel(page)}: ({target})"
        if file and _rel(dest) in PENDING:
            continue
        if not dest.exists():
            problems.append(f"{where}: {file} does not exist (relative to {_rel(page.parent)}/)")
        elif anchor and dest.suffix == ".md" and anchor not in map(slug, headings(dest)):
            problems.append(f"{where}: {_rel(dest)} has no heading with anchor #{anchor}")
    return problems


def _lines(problems: list[str]) -> str:
    return "\n".join(problems)


def test_the_collectors_find_what_they_look_for():
    """The patterns match the forms in use (so an empty result means none is broken)."""
    text = '(README, "Contracts", 1) README "Under\n    # faults" # README,\n    # "Configs"'
    found = [(_one_line(m.group("section")), m.group("item")) for m in CITATION.finditer(text)]
    assert found == [("Contracts", "1"), ("Under faults", None), ("Configs", None)]
    assert [m.group("section") for m in CITATION.finditer('the README\'s "Configs".')] == [
        "Configs"
    ]
    assert not list(CITATION.finditer('compile(source, "README.md", "exec")'))
    paths = [
        m.group(0) for m in PATH.finditer("see docs/faults.md, `invjax/main.py` runs/docs/x.md")
    ]
    assert paths == ["docs/faults.md", "invjax/main.py"]
    assert path_problems("configs/NAME.py and docs/no_such_page.md.", "t") == [
        "t: docs/no_such_page.md does not exist"
    ]
    assert slug("Equivariance and invariance (tests assert each bound)") == (
        "equivariance-and-invariance-tests-assert-each-bound"
    )
    assert len(code_files()) > 100 and len(doc_files()) > 10


def test_every_readme_and_docs_section_citation_resolves():
    problems = []
    for path in [*code_files(), *doc_files()]:
        problems += citation_problems(path.read_text(), _rel(path))
    assert not problems, "citations of sections that do not exist:\n" + _lines(problems)


def test_every_repository_path_named_in_code_and_docs_exists():
    problems = []
    for path in [*code_files(), *doc_files(results=False)]:
        problems += path_problems(path.read_text(), _rel(path))
    assert not problems, "paths that do not exist:\n" + _lines(problems)


def test_every_relative_markdown_link_resolves():
    problems = []
    for page in doc_files():
        problems += link_problems(page)
    assert not problems, "links that do not resolve:\n" + _lines(problems)


def test_pending_paths_are_still_missing():
    """An entry of PENDING whose file now exists is checked like any other: delete it."""
    landed = [p for p in PENDING if (REPO / p).exists()]
    assert not landed, f"these exist now, delete them from PENDING: {landed}"


def test_known_broken_references_are_still_broken():
    """An entry of KNOWN_BROKEN whose file no longer names the missing path: delete it."""
    fixed = [
        (where, path)
        for where, path in KNOWN_BROKEN
        if not (REPO / where).is_file() or path not in broken_paths((REPO / where).read_text())
    ]
    assert not fixed, f"these resolve now, delete them from KNOWN_BROKEN: {fixed}"


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS, ids=[c[1] for c in COMMANDS])
def test_every_help_text_cites_what_exists(command):
    proc = subprocess.run(
        [sys.executable, *command], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = proc.stdout + proc.stderr
    assert "--" in text, text  # it printed a usage, not nothing
    problems = citation_problems(text, " ".join(command)) + path_problems(text, command[1])
    assert not problems, _lines(problems)


def config_keys() -> set[str]:
    """Every key (dotted, sections included) of every shipped config."""
    import ml_collections

    from invjax import configs

    keys: set[str] = set()

    def walk(section, prefix: str) -> None:
        for name, value in section.items():
            keys.add(prefix + name)
            if isinstance(value, ml_collections.ConfigDict):
                walk(value, f"{prefix}{name}.")

    for path in sorted((REPO / "configs").glob("*.py")):
        if path.stem != "__init__":
            walk(configs.load(str(path)), "")
    return keys


def test_every_config_key_the_readme_docs_and_configs_name_exists():
    keys = config_keys()
    assert {"seed", "data.n_train", "train.num_epochs", "model.head"} <= keys
    pages = [*doc_files(results=False), *sorted((REPO / "configs").glob("*.py"))]
    problems = [
        f"{_rel(page)}: --config.{m.group(1)}"
        for page in pages
        for m in CONFIG_KEY.finditer(page.read_text())
        if m.group(1) not in keys and m.group(1) not in PENDING_KEYS
    ]
    assert not problems, "config keys that no shipped config has:\n" + _lines(problems)
    landed = [k for k in PENDING_KEYS if k in keys]
    assert not landed, f"these keys exist now, delete them from PENDING_KEYS: {landed}"
