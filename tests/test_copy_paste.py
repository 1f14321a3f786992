"""Every block on the Snippets page runs when pasted alone, and prints what the page says.

The browser test clicks each copy button of the built page in Chromium (as
`tests/test_browser.py` does) and reads the clipboard: exactly what a reader
pastes.  Each copied text is saved alone in an empty temporary folder and run
with the command the page shows under the block, by a Python that cannot
import this checkout (`python -I`) or by bash; it must exit 0, write nothing
to stderr and print what the page shows.  A Python block must also import
nothing of this project and nothing beyond the standard library, torch and
numpy (`explainers.page.pasted.check_pasted`).

The other tests check that the check fails where it must.
"""

from __future__ import annotations

import pytest
from gate_figures import record
from test_browser import Visit, base_url, browser  # noqa: F401 (the browser gate's fixtures)

from explainers.page.pasted import check_pasted

PAGE = "snippets.html"
RESULT = "div.cell.tag_snippet-result"


def copied_and_stated(page) -> list[tuple[str, str | None]]:
    """(what the copy button copied, the result the page shows under the block) per block."""
    found: list[tuple[str, str | None]] = []
    items = page.locator(f"div.highlight:has(> button.copybtn), {RESULT}")
    for i in range(items.count()):
        item = items.nth(i)
        if item.evaluate(f"e => e.matches('{RESULT}')"):
            assert found and found[-1][1] is None, f"{PAGE}: a stated result with no block above it"
            found[-1] = (found[-1][0], item.evaluate("e => e.querySelector('.cell_output pre').innerText"))
            continue
        if item.evaluate("e => !!e.closest('.cell_input')"):
            continue  # a code cell's own source (the page's checks, folded), not a snippet to paste
        if item.evaluate("e => !!e.closest('.highlight-json')"):
            continue  # a settings fragment (marked not-run in the source): read by a program, not run
        page.evaluate("navigator.clipboard.writeText('')")
        item.hover()
        item.locator("button.copybtn").click()
        page.wait_for_function("navigator.clipboard.readText().then(t => t.length > 0)", timeout=5000)
        found.append((page.evaluate("navigator.clipboard.readText()"), None))
    return found


@pytest.mark.browser
def test_every_snippet_runs_pasted_alone_and_prints_the_stated_result(browser, base_url):  # noqa: F811
    visit = Visit(browser, base_url, permissions=["clipboard-read", "clipboard-write"])
    try:
        blocks = copied_and_stated(visit.open(PAGE))
    finally:
        visit.close()
    problems = {}
    for i, (copied, stated) in enumerate(blocks, 1):
        if stated is None:
            problems[i] = ["the page states no result under it"]
            continue
        found = check_pasted(copied, stated)
        if found:
            problems[i] = found
    ok = len(blocks) - len(problems)
    record("snippets", "copy-and-run",
           result=f"{ok} of {len(blocks)} blocks on {PAGE} ran pasted alone and printed the stated result")
    assert blocks, f"{PAGE} has no copy buttons"
    assert problems == {}, problems


def test_a_block_that_imports_the_project_fails_even_where_it_is_installed():
    found = check_pasted("from explainers.render import render\nprint(1)", "$ python render.py\n1")
    assert "render.py imports explainers, which a reader does not have" in found


def test_a_block_that_lacks_an_import_fails():
    found = check_pasted("print(torch.ones(1).item())", "$ python a.py\n1.0")
    assert any("NameError: name 'torch' is not defined" in f for f in found), found


def test_a_block_that_prints_something_else_fails():
    stated = "$ python a.py\n2.0"
    assert check_pasted("import torch\nprint(torch.ones(2).sum().item())", stated) == []
    assert check_pasted("import torch\nprint(torch.ones(3).sum().item())", stated) != []


def test_a_block_that_needs_more_than_torch_and_numpy_fails():
    found = check_pasted("import pytest\nprint(1)", "$ python a.py\n1")
    assert found == ["a.py needs ['pytest'], beyond the standard library, torch and numpy"], found


def test_a_shell_block_runs_with_the_stated_command():
    stated = "$ printf 'hi' | bash echo.sh\nhi"
    assert check_pasted("cat", stated) == []
    assert check_pasted("cat; echo oops >&2", stated) == ["wrote to stderr: 'oops\\n'"]
