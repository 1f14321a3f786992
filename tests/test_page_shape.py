"""The page shape in the browser (README, "How to add a page"; issue 18).

Measured with every fold closed at 1400 x 1000 on each explainer page
(``pageshape.explainer_pages``: every page with a code cell but the home page):
visible assert and glue lines are at most 10 % of the visible code lines, and
the "In short" block (class ``in-short``) starts within the first 1000 px; the
page's height is recorded.  On every page of the site, at 1400 px and at 375 px,
with every fold open, no table breaks a word or an identifier over two lines.

The measures are in ``tests/pageshape.py``; the last tests run them on small
made-up pages, marked up as MyST-NB and sphinx-design mark up the site, to show
that they fail where they must.  Run by ``nox -s browser`` (marked browser).
"""

from __future__ import annotations

import pytest
from gate_figures import record
from pageshape import (
    CLOSE_FOLDS_JS,
    FIRST_SCREEN,
    GOAL,
    HEIGHT_JS,
    IN_SHORT_JS,
    OPEN_FOLDS_JS,
    TABLE_BREAKS_JS,
    VISIBLE_CELLS_JS,
    explainer_pages,
    share,
)
from test_browser import SITE, Visit, _axe_present, base_url, browser, site_pages  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser


DESKTOP = {"width": 1400, "height": 1000}
NARROW = {"width": 375, "height": 812}


def shape_figures(p) -> dict:
    """The page shape of the page open in ``p``, every fold closed: the visible code's
    :class:`pageshape.Share`, the page's height and where the "In short" block starts."""
    p.evaluate(CLOSE_FOLDS_JS)
    visible = p.evaluate(VISIBLE_CELLS_JS)
    return {"cells": len(visible), "share": share(visible), "height": p.evaluate(HEIGHT_JS),
            "in_short": p.evaluate(IN_SHORT_JS)}


def broken_words(p) -> tuple[int, list[dict]]:
    """(how many tables, the table words laid out over two or more lines), every fold open."""
    p.evaluate(OPEN_FOLDS_JS)
    return p.evaluate("document.querySelectorAll('table').length"), p.evaluate(TABLE_BREAKS_JS)


_SHAPES: dict[str, dict] = {}


def shape_of(browser, base_url, page: str) -> dict:  # noqa: F811
    """``shape_figures`` of a site page at 1400 x 1000, measured once per run and recorded."""
    assert (SITE / page).is_file(), f"{page} is not in the built site: run `nox -s docs`"
    if page not in _SHAPES:
        visit = Visit(browser, base_url, viewport=DESKTOP)
        try:
            shape = shape_figures(visit.open(page))
        finally:
            visit.close()
        s = shape["share"]
        record("shape", page, cells=shape["cells"], asserts=s.asserts, glues=s.glues, quotes=s.quotes,
               code=s.code, checks=round(s.checks, 4), machinery=round(s.machinery, 4),
               height=shape["height"], in_short=shape["in_short"])
        _SHAPES[page] = shape
    return _SHAPES[page]


SHAPE_PAGES = [f"{name}.html" for name in explainer_pages()]


@pytest.mark.parametrize("page", SHAPE_PAGES)
def test_visible_code_is_mostly_teaching_code(browser, base_url, page):  # noqa: F811
    s = shape_of(browser, base_url, page)["share"]
    assert s.checks <= GOAL, (
        f"{page}: {s.asserts} assert and {s.glues} glue lines are {s.checks:.0%} of the {s.code} "
        f"visible code lines (goal: at most {GOAL:.0%}); fold them into hide-input cells")


@pytest.mark.parametrize("page", SHAPE_PAGES)
def test_in_short_is_on_the_first_screen(browser, base_url, page):  # noqa: F811
    where = shape_of(browser, base_url, page)["in_short"]
    assert where is not None, f"{page}: no element of class in-short (the \"In short\" admonition)"
    assert where["top"] < FIRST_SCREEN, (
        f"{page}: the \"In short\" block starts at {where['top']} px, below the first "
        f"{FIRST_SCREEN} px at 1400 x 1000")


@pytest.mark.parametrize("width", ["1400", "375"])
@pytest.mark.parametrize("page", site_pages())
def test_no_table_breaks_a_word(browser, base_url, page, width):  # noqa: F811
    viewport, mobile = (DESKTOP, False) if width == "1400" else (NARROW, True)
    visit = Visit(browser, base_url, viewport=viewport, is_mobile=mobile)
    try:
        tables, broken = broken_words(visit.open(page))
    finally:
        visit.close()
    record("tables", f"{page}:{width}", page=page, width=int(width), tables=tables, broken=len(broken),
           examples=sorted({b["word"] for b in broken})[:5])
    assert broken == [], f"{page} at {width} px: {len(broken)} table words broken over lines: {broken[:5]}"


# The measures on made-up pages, marked up as MyST-NB 1.4 and sphinx-design mark up the site.
def _cell(source: str, fold: bool = False) -> str:
    body = f'<div class="cell_input docutils container"><div class="highlight"><pre>{source}</pre></div></div>'
    if fold:
        body = ('<details class="admonition hide above-input"><summary aria-label="Toggle hidden content">'
                '<p class="collapsed admonition-title">Checks behind this section</p></summary>'
                f"{body}</details>")
    return f'<div class="cell docutils container">{body}</div>'


TEACH = "t = sum([1, 2])\nprint(t)\nprint(t * 2)"
CHECK = "assert t == 3, \"the sum is 3\"\nglue(\"t\", t, display=False)"
IN_SHORT = '<div class="admonition in-short"><p class="admonition-title">In short</p><ul><li>3</li></ul></div>'


def _made_up(browser, html: str, viewport=DESKTOP):  # noqa: F811
    page = browser.new_page(viewport=viewport)
    page.set_content(f"<!doctype html><html><body>{html}</body></html>")
    return page


def test_a_visible_check_counts_and_a_folded_one_does_not(browser):  # noqa: F811
    for fold, expected in ((False, (1, 1, 5, 0.4)), (True, (0, 0, 3, 0.0))):
        p = _made_up(browser, _cell(TEACH) + _cell(CHECK, fold=fold))
        try:
            s = shape_figures(p)["share"]
        finally:
            p.close()
        assert (s.asserts, s.glues, s.code, s.checks) == expected, (fold, s)
        assert (s.checks <= GOAL) is fold


def test_a_fold_left_open_is_closed_before_measuring(browser):  # noqa: F811
    p = _made_up(browser, "<details open><summary>More</summary>" + _cell(CHECK) + "</details>" + _cell(TEACH))
    try:
        assert shape_figures(p)["share"].checks == 0.0
    finally:
        p.close()


def test_in_short_below_the_first_screen_is_seen_as_such(browser):  # noqa: F811
    for spacer, on_first_screen in ((200, True), (1200, False)):
        p = _made_up(browser, f'<div style="height:{spacer}px"></div>{IN_SHORT}')
        try:
            where = shape_figures(p)["in_short"]
        finally:
            p.close()
        assert (where["top"] < FIRST_SCREEN) is on_first_screen, where
    p = _made_up(browser, "<p>No summary.</p>")
    try:
        assert shape_figures(p)["in_short"] is None
    finally:
        p.close()


def test_a_table_that_breaks_an_identifier_is_found(browser):  # noqa: F811
    name = "torch.backends.cuda.matmul.fp32_precision"
    cells = (f'<td><code class="docutils literal notranslate"><span class="pre">{name}</span></code></td>'
             "<td>a per-release value</td>")
    for style, broken in (("overflow-wrap: anywhere; white-space: normal", [name]),
                          ("white-space: nowrap", [])):
        p = _made_up(browser, f"<style>span.pre {{ {style} }} table {{ width: 120px }} td {{ width: 60px }}"
                     f"</style><table><tr>{cells}</tr></table>", viewport=NARROW)
        try:
            tables, found = broken_words(p)
        finally:
            p.close()
        # The prose cell wraps between its words and after its hyphen: that breaks no word.
        assert (tables, [b["word"] for b in found]) == (1, broken), (style, found)
