"""Checks over the built HTML (run by `nox -s tests` after the strict build)."""

from __future__ import annotations

import os
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlparse

import pytest
from gate_figures import record
from siteconf import base_path, base_url

pytestmark = pytest.mark.site

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def executed_pages() -> list[str]:
    return sorted(
        str(p.relative_to(DOCS).with_suffix(""))
        for p in DOCS.rglob("*.md")
        if "_build" not in p.parts and "file_format: mystnb" in p.read_text(encoding="utf-8")
    )


class Links(HTMLParser):
    """Collects ids, hrefs and resource URLs of one page."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.hrefs: list[str] = []
        self.resources: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"])
        for attr in ("src", "srcset", "data", "poster"):
            if a.get(attr):
                self.resources.append((tag, a[attr]))
        # A canonical link (html_baseurl) names the page's published address; no browser fetches it.
        if tag == "link" and a.get("href") and a.get("rel") != "canonical":
            self.resources.append((tag, a["href"]))


def parse(path: Path) -> Links:
    links = Links()
    links.feed(path.read_text(encoding="utf-8"))
    return links


def html_pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if "_static" not in p.parts)


def test_expected_pages_exist(site):
    for name in ["index", "render", "verification", *executed_pages()]:
        assert (site / f"{name}.html").is_file(), name


@pytest.mark.parametrize("page", [p for p in executed_pages() if p not in ("verification", "versions")])
def test_executed_page_carries_its_stamp_under_the_title(site, page):
    html = (site / f"{page}.html").read_text(encoding="utf-8")
    # The theme repeats the title in a print-only header; measure from the article's <h1>.
    title = html.index("<h1", html.index("<article"))
    stamp = re.search(r"sd-badge[^>]*>verified on ([^<]+)</span>\s*torch (\S+)[^<]*executed in ([\d.]+) s",
                      html)
    assert stamp, f"{page}: no verification stamp"
    assert stamp.start() - title < 2000, f"{page}: the stamp is not near the title"
    import torch

    assert stamp.group(2) == torch.__version__
    # It names every release this build verified the page on, the published one first.
    built = os.environ.get("TORCH_EXPLAINERS_VERIFIED_ON", "").split(",")
    named = re.findall(r"\d+\.\d+\.\d+", stamp.group(1))
    # Exactly those: never a release the page was not executed for, never one fewer.
    assert named[0] == torch.__version__.split("+")[0] and set(named) == {r for r in built if r}, (
        f"{page}: the stamp names {named}, the build verified {built}")


def test_verification_page_lists_every_executed_page(site):
    html = (site / "verification.html").read_text(encoding="utf-8")
    table = html[html.index("<table") : html.index("</table>")]
    for page in executed_pages():
        assert re.search(rf">\s*{re.escape(page)}\s*<", table), f"{page} missing from the exec table"
    assert "❌" not in table


def test_no_external_resources(site):
    offenders = []
    for page in [*html_pages(site), *site.glob("_static/**/*.css")]:
        text = page.read_text(encoding="utf-8", errors="replace")
        if page.suffix == ".css":
            offenders += [(page.name, u) for u in re.findall(r"url\((['\"]?)(https?:)?//[^)]*\)", text)]
            continue
        for tag, url in parse(page).resources:
            if urlparse(url).scheme in ("http", "https") or url.startswith("//"):
                offenders.append((page.name, tag, url))
    assert offenders == []


def test_no_stderr_or_error_outputs_on_pages(site):
    # Per cell: an error output is allowed only in a cell tagged raises-exception.
    # (A traceback elsewhere, e.g. in a docstring shown by literalinclude, is text.)
    offenders = []
    for page in html_pages(site):
        html = page.read_text(encoding="utf-8")
        if "output stderr" in html:
            offenders.append((page.name, "stderr output"))
        for cell in re.split(r'(?=<div class="cell[ "])', html)[1:]:
            head = cell[: cell.index(">")]
            if "output traceback" in cell and "tag_raises-exception" not in head:
                offenders.append((page.name, "a traceback in a cell not tagged raises-exception"))
    assert offenders == []


#: A MyST role that reached the HTML as text: ``{glue:text}`x``` inside a code span is not parsed.
_UNRENDERED_ROLE = re.compile(r"\{(?:glue(?::\w+)?|doc|ref|term)\}")


def unrendered_roles(html: str) -> list[str]:
    """MyST roles left as literal text in ``html``, outside code blocks (``<pre>``), which may quote them.

    >>> unrendered_roles('<p><code><span class="pre">-f={glue:text}</span></code></p><pre>{glue:md} x</pre>')
    ['{glue:text}']
    """
    prose = re.sub(r"<pre\b.*?</pre>", "", html, flags=re.DOTALL)
    return _UNRENDERED_ROLE.findall(prose)


def test_no_myst_role_left_unrendered_in_prose(site):
    offenders = {page.name: found for page in html_pages(site)
                 if (found := unrendered_roles(page.read_text(encoding="utf-8")))}
    assert offenders == {}


#: A paragraph that is a Markdown table left as text: a cell's ``text/markdown`` output is rendered as
#: CommonMark, which has no tables, so ``| a | b |`` rows reach the HTML as one ``<p>``.
_TABLE_AS_TEXT = re.compile(r"<p>\s*\|[^<]*\|[^<]*\|[^<]*\|", re.DOTALL)


def tables_left_as_text(html: str) -> int:
    """Paragraphs of ``html`` that hold Markdown table rows as text.

    >>> tables_left_as_text("<p>| a | b |\\n| 1 | 2 |</p><table><tr><td>1</td></tr></table>")
    1
    >>> tables_left_as_text("<p>a | b</p>")
    0
    """
    return len(_TABLE_AS_TEXT.findall(html))


def test_no_markdown_table_left_as_text(site):
    offenders = {page.name: n for page in html_pages(site)
                 if (n := tables_left_as_text(page.read_text(encoding="utf-8")))}
    assert offenders == {}, f"Markdown tables rendered as paragraphs (glue them and show with glue:md): {offenders}"


def test_internal_links_and_anchors_resolve(site):
    broken = []
    checked = 0
    pages = html_pages(site)
    ids = {p: parse(p).ids for p in pages}
    for page in pages:
        for href in parse(page).hrefs:
            if urlparse(href).scheme or href.startswith(("mailto:", "//")):
                continue
            checked += 1
            path, frag = urldefrag(href)
            if path.startswith("/"):  # the 404 page's links: absolute paths under the published base path
                under = path.startswith(base_path())
                target = (site / unquote(path[len(base_path()):])).resolve() if under else site / "missing"
            else:
                target = (page.parent / unquote(path)).resolve() if path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append((page.name, href))
            elif frag and target.suffix == ".html" and frag not in ids.setdefault(target, parse(target).ids):
                broken.append((page.name, href))
    record("links", "internal", result=f"{checked} internal links and anchors checked, {len(broken)} dead")
    assert broken == []


def downloads(site: Path) -> list[Path]:
    """The notebooks and MyST sources the pages offer for download."""
    return sorted((site / "_sources").rglob("*.ipynb")) + sorted((site / "_sources").rglob("*.md"))


def test_no_page_contains_the_folder_it_was_built_in(site):
    # A path of the build machine would change the published page with the checkout's folder.
    folder = str(ROOT)
    offenders = [p.relative_to(site).as_posix() for p in [*html_pages(site), *downloads(site)]
                 if folder in p.read_text(encoding="utf-8", errors="replace")]
    record("paths", "build-folder", result=f"{len(html_pages(site))} pages and {len(downloads(site))} "
           f"downloads checked, {len(offenders)} name the build folder")
    assert offenders == [], f"these name the build folder {folder}: {offenders}"


@pytest.mark.parametrize("page", executed_pages())
def test_executed_page_offers_its_notebook_and_its_source(site, page):
    import nbformat

    html = (site / f"{page}.html").read_text(encoding="utf-8")
    hrefs = set(parse(site / f"{page}.html").hrefs)
    assert f"_sources/{page}.ipynb" in hrefs and "download-notebook-button" in html, (
        f"{page}: the download button offers no notebook")
    assert f"_sources/{page}.md" in hrefs, f"{page}: no link to the page's MyST source"
    source = (site / "_sources" / f"{page}.md").read_text(encoding="utf-8")
    assert source == (DOCS / f"{page}.md").read_text(encoding="utf-8"), f"{page}: the source differs"
    nb = nbformat.read(site / "_sources" / f"{page}.ipynb", as_version=4)
    nbformat.validate(nb)
    first = nb.cells[0]
    assert first.cell_type == "markdown" and "pip install ." in first.source, (
        f"{page}: the notebook's first cell does not say how to install what it imports")
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert any(c.outputs for c in code), f"{page}: the notebook has no outputs (not the executed one)"
    # The very execution the page shows: the stamp end_page() returns in the notebook (its last
    # cell's result) names the releases the HTML's stamp names.
    shown = re.search(r"sd-badge[^>]*>verified on ([^<]+)</span>", html)
    if shown is None:
        return  # a page without a stamp (Verification, Versions) has none to compare
    texts = [str(v) for c in code for o in c.outputs for v in o.get("data", {}).values()]
    stamps = [m for t in texts for m in re.findall(r"`verified on ([^`]+)`", t)]
    assert stamps, f"{page}: the page shows a stamp, the notebook's outputs hold none"
    assert stamps[-1] == shown.group(1), (
        f"{page}: the notebook's stamp is not the page's ({shown.group(1)!r})")


class Images(HTMLParser):
    """Each <img>'s (src, alt); alt is None when the attribute is missing."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            a = dict(attrs)
            self.images.append((a.get("src", ""), a.get("alt")))


def images_without_alt_text(html: str) -> list[str]:
    """The src of every image whose alt text is missing, empty or only its file name.

    (Sphinx writes an image's URI as its alt text when none is given.)
    """
    parser = Images()
    parser.feed(html)
    bad = []
    for src, alt in parser.images:
        text = (alt or "").strip()
        if not text or text == src or Path(unquote(urlparse(src).path)).name in text:
            bad.append(src)
    return bad


def test_the_alt_text_check_catches_missing_empty_and_file_name_alts():
    html = ('<img src="a.svg"><img alt="" src="b.svg"><img alt="_images/c.svg" src="_images/c.svg">'
            '<img alt="Error of each all-reduce order against fp64" src="_images/d.svg">')
    assert images_without_alt_text(html) == ["a.svg", "b.svg", "_images/c.svg"]


def test_every_image_says_what_it_shows(site):
    offenders = {p.name: bad for p in html_pages(site)
                 if (bad := images_without_alt_text(p.read_text(encoding="utf-8")))}
    assert offenders == {}, f"images without alt text (add :alt: to the glue:figure): {offenders}"


# What sphinx-sitemap leaves out (docs/conf.py's sitemap_excludes): no content of their own.
NOT_IN_SITEMAP = {"search.html", "genindex.html", "404.html"}


def test_sitemap_lists_every_page_under_the_base_url(site):
    import xml.etree.ElementTree as ET

    ns = {"s": "http://www.sitemaps.org/schemas/sitemap/0.9"}
    locs = [e.text for e in ET.parse(site / "sitemap.xml").getroot().findall("s:url/s:loc", ns)]
    pages = [p.relative_to(site).as_posix() for p in html_pages(site)]
    assert locs == sorted(base_url() + p for p in pages if p not in NOT_IN_SITEMAP), (
        f"sitemap.xml must list every page under {base_url()}, sorted, once: {locs}")
    assert len(locs) >= len(executed_pages()) + 1
    # The same setting names each page's canonical address.
    html = (site / "index.html").read_text(encoding="utf-8")
    assert f'<link rel="canonical" href="{base_url()}index.html" />' in html


def test_notfound_page_links_back_to_the_index_from_any_depth(site):
    page = site / "404.html"
    assert page.is_file(), "no 404.html: sphinx-notfound-page did not run"
    links = parse(page)
    prefix = base_path()
    assert prefix.startswith("/") and prefix.endswith("/")
    html = page.read_text(encoding="utf-8")
    article = html[html.index("<article"):html.index("</article>")]
    assert "<h1>Page not found</h1>" in article and f'href="{prefix}index.html"' in article, (
        f"the 404 page's text does not say so and link to {prefix}index.html")
    # GitHub Pages serves it at any missing address, at any depth: every local link and asset
    # must be absolute under the base path, and name a file of the site.
    local = [u for u in [*links.hrefs, *(u for _, u in links.resources)]
             if not urlparse(u).scheme and not u.startswith(("#", "//", "mailto:"))]
    relative = [u for u in local if not u.startswith(prefix)]
    assert relative == [], f"404.html has links that break below the site's root: {relative}"
    files = {u: site / unquote(urlparse(u).path[len(prefix):]) for u in local}
    missing = [u for u, f in files.items() if not (f.is_file() or (f / "index.html").is_file())]
    assert missing == [], f"404.html links to files the site does not have: {missing}"
    assert len(local) > 10, "404.html has the theme's assets and navigation"
