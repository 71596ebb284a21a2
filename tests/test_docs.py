"""The README and ``docs/`` as a clone has them: every relative link resolves (the file, and the
heading an ``#anchor`` names), nothing cites a file outside the repository, the README fits on
a page, and every Python example imports only public names -- those of the README run.

An example that cannot run here (it needs files or a cluster) says so on the line before its
fence: ``<!-- example: not run (why) -->``."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [README] + DOCS
NOT_RUN = re.compile(r"<!-- example: not run \(.+\) -->")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def broken_links(page: Path) -> list:
    """The relative links of ``page`` that name no file, or no heading of it."""
    bad = []
    for target in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(target)
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            bad.append(target)
    return bad


def python_examples(page: Path) -> list:
    """``(code, runs)`` of each fenced python block of ``page``."""
    text = page.read_text(encoding="utf-8")
    found = []
    for m in FENCE.finditer(text):
        if m.group(1) == "python":
            before = text[: m.start()].rstrip("\n").rpartition("\n")[2]
            found.append((m.group(2), not NOT_RUN.fullmatch(before.strip())))
    return found


def private_imports(code: str) -> list:
    """What ``code`` imports from the package other than the public names of ``bpe_stream``."""
    import bpe_stream

    bad = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "bpe_stream":
            if node.module != "bpe_stream":
                bad.append(node.module)
            bad += [a.name for a in node.names if a.name not in bpe_stream.__all__]
        elif isinstance(node, ast.Import):
            bad += [a.name for a in node.names if a.name.startswith("bpe_stream.")]
    return bad


def test_the_checks_can_fail(tmp_path):
    (tmp_path / "a.md").write_text("# Top\n## export / eval\n[ok](#export--eval) [no](b.md) [gone](#top-2)\n"
                                   "[web](https://example.org)\n```sh\n[not a link](nowhere.md)\n```\n")
    assert slug("count: text into the word-frequency store") == "count-text-into-the-word-frequency-store"
    assert broken_links(tmp_path / "a.md") == ["b.md", "#top-2"]
    assert private_imports("from bpe_stream.count.counting import count_sources") == ["bpe_stream.count.counting",
                                                                                       "count_sources"]
    assert private_imports("from bpe_stream import Tokenizer\nimport bpe_stream.store") == ["bpe_stream.store"]
    (tmp_path / "b.md").write_text("<!-- example: not run (needs a file) -->\n```python\nx = 1\n```\n"
                                   "```python\ny = 2\n```\n")
    assert python_examples(tmp_path / "b.md") == [("x = 1\n", False), ("y = 2\n", True)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_nothing_cites_a_file_a_clone_lacks(page):
    assert "shared/spec" not in page.read_text(encoding="utf-8")


def test_the_readme_fits_on_a_page_and_starts_with_the_two_commands():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 170, len(lines)
    assert lines[2].split()[:2] == ["make", "run"] and lines[3].split()[:2] == ["make", "test"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_examples_import_public_names_only(page):
    for code, _ in python_examples(page):
        assert private_imports(code) == [], code


@pytest.mark.parametrize("index", range(len(python_examples(README))))
def test_the_readme_examples_run(index, tmp_path):
    code, runs = python_examples(README)[index]
    if not runs:
        pytest.skip("marked: not run")
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert res.returncode == 0, res.stderr


def test_the_readme_has_an_example_that_runs():
    assert any(runs for _, runs in python_examples(README))
