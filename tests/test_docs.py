"""The documentation holds together: the README's two set-up commands are the ones CI runs, every
link between the pages reaches a page and a heading that exist, the pages ship inside the package
(`python -m sweep.docs` prints their folder, and `--help` says so), and the tests cite the theory
page of the repository, not a file outside it."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _prose_lines(text: str) -> list[str]:
    """The lines of a Markdown text outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation but `-` and `_` removed, spaces as
    `-`, and `-1`, `-2` ... after a repeated one."""
    seen: dict[str, int] = {}
    for line in _prose_lines(page.read_text()):
        heading = re.match(r"#{1,6}\s+(.*)", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            if count:
                seen[f"{slug}-{count}"] = 1
    return set(seen)


def _setup_commands() -> list[str]:
    """The code blocks of the README's "Set up" section, each as its text."""
    section = ROOT.joinpath("README.md").read_text().split("\n## Set up\n", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```\n(.*?)```", section, flags=re.S)]


def test_the_readme_has_two_setup_commands_and_ci_runs_the_test_one() -> None:
    main_job, tests = _setup_commands()  # exactly two
    for command in (main_job, tests):
        assert "\n" not in command and command.startswith("python3 -m venv .venv && . .venv/bin/activate && ")
    assert main_job.endswith("python -m sweep -m experiment=quickstart")
    assert tests.endswith("python -m pytest -q")
    ci_lines = [line.strip() for line in ROOT.joinpath(".ci", "run").read_text().splitlines()]
    assert tests in ci_lines


def test_every_link_reaches_an_existing_page_and_heading() -> None:
    pages = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted(DOCS.glob("*.md"))]
    broken = []
    for page in pages:
        for line in _prose_lines(page.read_text()):
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target):  # https:, mailto:
                    continue
                path, _, anchor = target.partition("#")
                linked = (page.parent / path).resolve() if path else page
                if not linked.exists():
                    broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
                elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                    broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def test_every_page_starts_with_its_contents() -> None:
    """A page of more than one section opens with a list of them, before its first section."""
    for page in sorted(DOCS.glob("*.md")):
        lines = _prose_lines(page.read_text())
        sections = [index for index, line in enumerate(lines) if line.startswith("## ")]
        if len(sections) > 1:
            before = "\n".join(lines[:sections[0]])
            assert len(LINK.findall(before)) >= 2, page.name


def test_the_docs_ship_in_the_package_and_the_command_prints_their_folder() -> None:
    """Every file of docs/ matches the package data of `sweep/manual` (so a wheel carries it) and
    `python -m sweep.docs` prints a folder holding the same pages."""
    package_data = tomllib.loads(ROOT.joinpath("pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    patterns = [pattern for pattern in package_data["sweep"] if pattern.startswith("manual/")]
    assert [f.name for f in DOCS.iterdir() if not any(fnmatch(f"manual/{f.name}", p) for p in patterns)] == []
    printed = subprocess.run([sys.executable, "-m", "sweep.docs"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
    folder = Path(printed)
    assert folder.is_absolute() and folder.is_dir()
    assert sorted(p.name for p in folder.glob("*.md")) == sorted(p.name for p in DOCS.glob("*.md"))
    assert {"README.md", "configuration.md", "results.md", "theory.md"} <= {p.name for p in folder.glob("*.md")}


def test_help_tells_where_the_docs_are() -> None:
    help_text = yaml.safe_load(ROOT.joinpath("conf", "config.yaml").read_text())["hydra"]["help"]["template"]
    assert "python -m sweep.docs" in help_text and "README explains" not in help_text


def test_tests_cite_the_theory_page_of_the_repository() -> None:
    """Expected values cite docs/theory.md, which a clone has; every section they name exists there."""
    anchors = _anchors(DOCS / "theory.md")
    for path in sorted(p for p in (ROOT / "tests").glob("*.py") if p.name != Path(__file__).name):
        text = path.read_text()
        assert "THEORY" not in text, path.name
        for anchor in re.findall(r"docs/theory\.md#([\w\-]+)", text):
            assert anchor in anchors, (path.name, anchor)
