"""The built site in a real browser: Debian's Chromium driven by Playwright, offline.

Run by `nox -s browser` (and so by `nox -s tests`), which installs Chromium
(apt) and axe-core (npm) when missing.  The site is served from
`docs/_build/html` on a free loopback port; every request to any other host
is blocked and counted.

For every page, in the light and the dark theme: no console errors, no
requests off the local server, and no serious or critical axe-core
violations.  Then: each copy button copies exactly the source lines, search
finds each page offline, and a 375 px wide viewport never scrolls sideways.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest
from gate_figures import record

from explainers.sourceblocks import copyable_blocks

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SITE = DOCS / "_build" / "html"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
AXE = Path(os.environ.get("AXE_JS", ROOT / ".cache" / "npm" / "node_modules" / "axe-core" / "axe.min.js"))
THEMES = ("light", "dark")

# axe-core findings excluded: (rule id, CSS selector of the element, reason).
# Only for markup the site does not control; an entry covers only the elements
# its selector names, never the rule as a whole.
AXE_EXCLUDED: list[tuple[str, str, str]] = [
    ("label-content-name-mismatch", "button.search-button__button[aria-label='Search']",
     "pydata-sphinx-theme 0.20's search button: its aria-label 'Search' leaves out the visible "
     "shortcut hint 'Ctrl+K'; the name still starts with the visible word, and the markup is the "
     "theme's (fixing it means overriding the theme's template)"),
]


def site_pages() -> list[str]:
    if not SITE.is_dir():
        return []
    return sorted(p.relative_to(SITE).as_posix() for p in SITE.rglob("*.html") if "_static" not in p.parts)


def source_of(page: str) -> Path | None:
    md = DOCS / Path(page).with_suffix(".md")
    return md if md.is_file() else None


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def base_url():
    if not (SITE / "index.html").is_file():
        pytest.fail(f"no built site at {SITE}: run `nox -s docs` first")
    handler = functools.partial(_Quiet, directory=str(SITE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `nox -s browser` installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-background-networking", "--disable-gpu", "--headless"],
        )
        yield b
        b.close()


class Visit:
    """A browser context on the local site that blocks and records every other host."""

    def __init__(self, browser, base_url: str, theme: str = "light", **context_args):
        self.base = base_url
        self.host = urlparse(base_url).netloc
        self.external: list[str] = []
        self.console_errors: list[str] = []
        self.context = browser.new_context(**context_args)
        self.context.route("**/*", self._route)
        # The pydata theme reads these before first paint (see the <head> of every page).
        self.context.add_init_script(
            f"localStorage.setItem('mode', '{theme}'); localStorage.setItem('theme', '{theme}');"
        )
        self.page = self.context.new_page()
        self.page.on("console", lambda m: m.type == "error" and self.console_errors.append(m.text))
        self.page.on("pageerror", lambda e: self.console_errors.append(str(e)))

    def _route(self, route):
        url = route.request.url
        parsed = urlparse(url)
        if parsed.scheme in ("data", "blob", "about") or parsed.netloc == self.host:
            route.continue_()
        else:
            self.external.append(url)
            route.abort()

    def open(self, page: str, idle: bool = False):
        self.page.goto(self.base + page, wait_until="load")
        if idle:  # let late scripts run (and fail) before judging the console and the requests
            self.page.wait_for_load_state("networkidle")
        return self.page

    def close(self):
        self.context.close()


def _axe(page) -> list[dict]:
    page.add_script_tag(path=str(AXE))
    return page.evaluate(
        """async () => {
            const r = await axe.run(document, {resultTypes: ['violations']});
            return r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
                nodes: v.nodes.map(n => n.target.join(' '))}));
        }"""
    )


def _without_listed_exclusions(page, violations: list[dict]) -> tuple[list[dict], int]:
    """Drop the elements AXE_EXCLUDED lists; return what is left and how many elements were dropped."""
    kept, dropped = [], 0
    for v in violations:
        nodes = [n for n in v["nodes"]
                 if not any(rule == v["id"] and page.evaluate(
                     "([t, s]) => { const e = document.querySelector(t); return !!e && e.matches(s); }", [n, sel])
                     for rule, sel, _ in AXE_EXCLUDED)]
        dropped += len(v["nodes"]) - len(nodes)
        if nodes:
            kept.append({**v, "nodes": nodes[:5]})
    return kept, dropped


@pytest.fixture(scope="module", autouse=True)
def _axe_present():
    if not AXE.is_file():
        pytest.fail(f"{AXE} is missing: `nox -s browser` installs axe-core from npm")


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("page", site_pages())
def test_page_in_theme_is_clean(browser, base_url, page, theme):
    visit = Visit(browser, base_url, theme)
    try:
        p = visit.open(page, idle=True)
        applied = p.evaluate("document.documentElement.dataset.theme")
        violations = [v for v in _axe(p) if v["impact"] in ("serious", "critical")]
        kept, excluded = _without_listed_exclusions(p, violations)
        record("browser", f"page:{page}:{theme}", page=page, theme=theme, violations=len(kept),
               excluded=excluded, external=len(visit.external),
               console_errors=len(visit.console_errors))
        assert applied == theme, f"{page}: the {theme} theme did not apply (data-theme={applied!r})"
        assert visit.console_errors == [], visit.console_errors
        assert visit.external == [], visit.external
        assert kept == [], kept
    finally:
        visit.close()


def _expected_copies(md: Path) -> tuple[list[str], int, list[str]]:
    """(code-cell sources, how many show their input, other texts: fenced bodies, included files)."""
    text = md.read_text(encoding="utf-8")
    cells, shown, others = [], 0, []
    for block in copyable_blocks(text):
        if block.kind == "code-cell":
            cells.append(block.body.rstrip("\n"))
            shown += not {"remove-input", "remove-cell"} & set(block.tags)
        elif block.kind == "literalinclude":
            others.append((md.parent / block.lang).resolve().read_text(encoding="utf-8"))
        else:
            others.append(block.body.rstrip("\n"))
    return cells, shown, others


@pytest.mark.parametrize("page", [p for p in site_pages() if source_of(p)])
def test_copy_buttons_copy_exactly_the_source(browser, base_url, page):
    cells, shown_cells, others = _expected_copies(source_of(page))
    visit = Visit(browser, base_url, permissions=["clipboard-read", "clipboard-write"])
    try:
        p = visit.open(page)
        p.evaluate("document.querySelectorAll('details').forEach(d => { d.open = true; })")  # dropdowns
        blocks = p.locator("div.highlight:has(> button.copybtn)")
        n_cells = n_other = 0
        for i in range(blocks.count()):
            block = blocks.nth(i)
            in_cell = block.evaluate("b => !!b.closest('.cell_input')")
            shown = block.evaluate("b => b.querySelector('pre').innerText")
            p.evaluate("navigator.clipboard.writeText('')")
            block.hover()
            block.locator("button.copybtn").click()
            # What the system clipboard now holds (sphinx-copybutton copies through clipboard.js).
            p.wait_for_function("navigator.clipboard.readText().then(t => t.length > 0)", timeout=5000)
            copied = p.evaluate("navigator.clipboard.readText()").rstrip("\n")
            assert not re.search(r"^(>>> |\.\.\. |\$ |In \[\d*\]: )", copied, re.M), copied
            if in_cell:
                assert copied in cells, f"{page}: a cell's copy button copied {copied!r}"
                n_cells += 1
            elif any(copied == o or copied in o for o in others):
                n_other += 1
            else:
                # A block the build generated (pasted by glue): it copies what it shows.
                assert copied == shown.rstrip("\n"), f"{page}: copied {copied!r}, shows {shown!r}"
                n_other += 1
        record("copy", page, result=f"{n_cells} cells, {n_other} other blocks")
        assert n_cells == shown_cells, f"{page}: {n_cells} cell copy buttons for {shown_cells} shown cells"
    finally:
        visit.close()


def _search_term(page: str) -> str:
    """The longest word of the page's title, which Sphinx's search ranks highest."""
    html = (SITE / page).read_text(encoding="utf-8")
    title = re.search(r"<h1>(.*?)<", html, re.S).group(1)
    return max(re.findall(r"[A-Za-z]{4,}", title), key=len)


@pytest.mark.parametrize("page", [p for p in site_pages() if source_of(p)])
def test_search_finds_the_page_offline(browser, base_url, page):
    term = _search_term(page)
    visit = Visit(browser, base_url)
    try:
        p = visit.open(f"search.html?q={term}")
        p.wait_for_selector(f'#search-results a[href^="{page}"]', timeout=20000)
        assert visit.external == []
        record("search", page, term=term)
    finally:
        visit.close()


@pytest.mark.parametrize("page", site_pages())
def test_narrow_viewport_does_not_scroll_sideways(browser, base_url, page):
    visit = Visit(browser, base_url, viewport={"width": 375, "height": 812}, is_mobile=True)
    try:
        p = visit.open(page)
        widths = p.evaluate("""() => ({
            page: document.documentElement.scrollWidth, view: document.documentElement.clientWidth,
            boxes: [...document.querySelectorAll('pre')].filter(e => e.scrollWidth > e.clientWidth + 1)
                .map(e => getComputedStyle(e).overflowX)})""")
        record("mobile", page, overflow=widths["page"] - widths["view"], boxes=len(widths["boxes"]))
        assert widths["page"] <= widths["view"], f"{page}: {widths['page']} px wide in a {widths['view']} px view"
        # Whatever is wider than its box scrolls inside it.
        assert set(widths["boxes"]) <= {"auto", "scroll"}, widths["boxes"]
    finally:
        visit.close()
