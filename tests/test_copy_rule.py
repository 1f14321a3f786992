"""Copying teaches (issue 18): what a reader copies from an explainer page is code to learn from.

For every explainer page (``pageshape.explainer_pages``: every page with a code
cell but the home page), read from its MyST source:

- no visible code cell (one without a hide-input, hide-cell, remove-input or
  remove-cell tag) holds an ``assert`` or a ``glue(...)`` call: those are the
  page's checks, and go in folded cells;
- the visible cells, in order, run in one fresh kernel that runs nothing else
  (not the page's hidden setup, not its checks): a reader who copies them one
  after another gets no error.  Slow: one kernel per page, each importing torch.

The last tests show, on small made-up pages, that both checks fail where they must.
"""

from __future__ import annotations

import doctest
import os
from pathlib import Path

import pageshape
import pytest
from gate_figures import record
from pageshape import explainer_pages, forbidden, run_visible, visible_cells

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = explainer_pages()


def kernel_env() -> dict[str, str]:
    """The build's environment for a kernel: this checkout's `explainers` importable (a reader
    installs the project, as each page's notebook says), nothing else of the test run."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONHASHSEED": "0", "MPLBACKEND": "agg"}


def copied_checks(text: str) -> dict[int, list[str]]:
    """{line of a visible cell in the page: its assert and glue lines}, for cells that have any."""
    return {c.line: found for c in visible_cells(text) if (found := forbidden(c.source))}


@pytest.mark.parametrize("page", PAGES)
def test_visible_cells_hold_no_assert_and_no_glue(page):
    text = (DOCS / f"{page}.md").read_text(encoding="utf-8")
    cells = visible_cells(text)
    found = copied_checks(text)
    record("copyrule", f"checks:{page}", page=page, visible=len(cells), with_checks=len(found),
           lines=sum(map(len, found.values())))
    assert found == {}, (f"{page}.md: visible cells (by their line) copy these checks; move them to a "
                         f"cell tagged hide-input right after: {found}")


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_visible_cells_run_in_order_in_a_fresh_kernel(page):
    text = (DOCS / f"{page}.md").read_text(encoding="utf-8")
    total = len(visible_cells(text))
    ran, error = run_visible(text, DOCS, kernel_env())
    record("copyrule", f"run:{page}", page=page, ran=ran, visible=total, error=error)
    assert error is None, f"{page}.md: {ran} of {total} visible cells ran, then {error}"


# -- the checks fail where they must, on made-up pages ---------------------------------------------

def _page(*cells: tuple[str, str]) -> str:
    """A MyST notebook of ``(tags, source)`` cells."""
    return "# A page\n\n" + "\n\n".join(
        f"```{{code-cell}} ipython3\n{f':tags: [{tags}]' + chr(10) if tags else ''}{source}\n```"
        for tags, source in cells)


VISIBLE_ASSERT = _page(("remove-cell", "from myst_nb import glue"),
                       ("", "x = sum([1, 2])\nprint(x)\nassert x == 3, 'the sum is 3'"))
FOLDED_ASSERT = _page(("remove-cell", "from myst_nb import glue"),
                      ("", "x = sum([1, 2])\nprint(x)"),
                      ("hide-input", "assert x == 3, 'the sum is 3'\nglue('x', x, display=False)"))
VISIBLE_GLUE = _page(("", "from myst_nb import glue\nglue(\n    'x',\n    3,\n    display=False,\n)"))
# A visible cell uses a name that only a folded cell defines: a reader's copy fails.
NEEDS_HIDDEN = _page(("hide-input", "import math"), ("", "print(math.pi)"))
NEEDS_VISIBLE = _page(("remove-cell", "import os"), ("", "import math"), ("hide-output", "print(math.pi)"))


def test_a_visible_assert_is_found_and_a_folded_one_is_not():
    assert copied_checks(VISIBLE_ASSERT) == {8: ["line 3: assert x == 3, 'the sum is 3'"]}
    assert copied_checks(FOLDED_ASSERT) == {}


def test_a_visible_glue_call_is_found_with_all_its_lines():
    found = copied_checks(VISIBLE_GLUE)
    assert list(found) == [3] and len(found[3]) == 5, found


@pytest.mark.slow
def test_a_visible_cell_that_needs_a_folded_cell_fails_in_a_fresh_kernel(tmp_path):
    ran, error = run_visible(NEEDS_HIDDEN, tmp_path, kernel_env())
    assert (ran, error) == (0, "the visible cell at line 8: NameError: name 'math' is not defined")
    assert run_visible(NEEDS_VISIBLE, tmp_path, kernel_env()) == (2, None)


def test_pageshape_doctests_pass():
    result = doctest.testmod(pageshape)
    assert result.attempted > 0 and result.failed == 0, result
