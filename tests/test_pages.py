"""Checks over the page sources in docs/: what every explainer page owes its reader.

- It ends with a ``## Sources`` section that lists the evidence for its claims, and every
  link there (and anywhere on the page) to a file of PyTorch names a release tag, so the
  line it points at cannot move under the reader.
- Every ``assert`` in its cells carries a message naming the claim, so a failure on a new
  torch reads as a sentence instead of a bare ``AssertionError``.
- Its prose is about PyTorch, not about how the page was made.

These read the MyST sources only; they need no build.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from IPython.core.inputtransformer2 import TransformerManager
from myst_nb.core.read import read_myst_markdown_notebook

DOCS = Path(__file__).resolve().parents[1] / "docs"
# An explainer page starts its stamp in its first cell; index and verification are not explainers.
PAGES = sorted(p for p in DOCS.glob("*.md") if "\nbegin_page()\n" in p.read_text(encoding="utf-8"))

# A link into pytorch/pytorch is a thread (issue, pull request) or a file at a release tag.
PYTORCH_LINK = re.compile(r"https?://github\.com/pytorch/pytorch/[^\s)>\]\"'`]*")
# A file at a release tag, written out or filled in by the cell that links it (v{release}).
TAGGED_FILE = re.compile(r"https://github\.com/pytorch/pytorch/(?:blob|tree)/v(?:\d+\.\d+\.\d+|\{\w+\})/\S+")
THREAD = re.compile(r"https://github\.com/pytorch/pytorch/(?:issues|pull)/(?:\d+|\{\w+\})(?:#[\w-]+)?")
# Provenance talk that does not belong in prose about PyTorch.
PROVENANCE = re.compile(r"research notes|no network is used|per the notes|the notes'", re.I)


def _cells(page: Path):
    return read_myst_markdown_notebook(page.read_text(encoding="utf-8")).cells


def _prose(page: Path) -> str:
    return "\n".join(c.source for c in _cells(page) if c.cell_type == "markdown")


def test_every_explainer_page_is_checked():
    assert {p.stem for p in PAGES} >= {"render", "mesh", "allocator", "precision", "snippets"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_page_ends_with_its_sources(page):
    headings = re.findall(r"^## (.+)$", _prose(page), flags=re.M)
    assert headings and headings[-1].strip() == "Sources", (
        f"{page.name}: the last section must be '## Sources', found {headings[-1:]}")
    sources = _prose(page).split("\n## Sources", 1)[1]
    assert re.search(r"^\s*[-*] ", sources, flags=re.M), f"{page.name}: its Sources section lists nothing"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_links_to_pytorch_files_name_a_release_tag(page):
    text = page.read_text(encoding="utf-8")
    bad = [url for url in PYTORCH_LINK.findall(text)
           if not (TAGGED_FILE.fullmatch(url) or THREAD.fullmatch(url))]
    assert bad == [], f"{page.name}: links into pytorch/pytorch must be a thread or a file at a release tag: {bad}"


def _bare_asserts(source: str) -> list[str]:
    tree = ast.parse(TransformerManager().transform_cell(source))
    return [ast.unparse(node) for node in ast.walk(tree) if isinstance(node, ast.Assert) and node.msg is None]


def test_a_bare_assert_is_found():
    assert _bare_asserts("x = 1\nassert x == 1\nassert x, 'x is set'\n") == ["assert x == 1"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_every_assert_on_a_page_names_its_claim(page):
    bare = [a for c in _cells(page) if c.cell_type == "code" for a in _bare_asserts(c.source)]
    assert bare == [], f"{page.name}: asserts without a message naming the claim: {bare}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_prose_is_about_pytorch_not_about_the_build(page):
    found = PROVENANCE.findall(_prose(page))
    assert found == [], f"{page.name}: the prose talks about how the page was made: {found}"
