"""Sphinx configuration for torch-explainers.

The build is strict on purpose: nitpicky cross-references, warnings as errors
(``-W --keep-going`` from ``nox -s docs``), and a failing cell fails the build.
Pages are MyST notebooks executed at build time; their outputs are never
committed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from urllib.parse import urlparse

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
# The book's code is the library: pages import `explainers` from the checkout.
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(DOCS / "_ext"))

project = "torch-explainers"
author = "the torch-explainers authors"
copyright = "2026, the torch-explainers authors"

extensions = [
    "myst_nb",
    "sphinx_design",
    "sphinx_copybutton",
    "sphinx.ext.graphviz",
    "explainer_deps",
    "parallel_exec",  # -j safe: cache database made before workers fork, per-process kernel ports
    "strict_exec",  # a failed cell fails the build, after every failing page is listed
    "release_records",  # the Versions page is re-read every build: it reports the other releases
    "exact_streams",  # printed output shown as written, not as the kernel's flushes happened to cut it
    "notebook_downloads",  # each executed page's notebook, to download, with how to run it first
    "utc_clock",  # the execution table's times are UTC for cached and executed pages alike
    "sphinx_sitemap",  # sitemap.xml: every page under html_baseurl, for search engines
    "notfound.extension",  # 404.html: what GitHub Pages serves for a missing address
]

exclude_patterns = [
    "_build",  # MyST-NB #129: never execute the build's own copies
    "jupyter_execute",
    "**.ipynb_checkpoints",
]

# -- strictness -------------------------------------------------------------------
nitpicky = True

# -- MyST ---------------------------------------------------------------------------
# No "dollarmath": MathJax would load from a CDN, and the site is offline.
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3

# -- execution ------------------------------------------------------------------------
# `cache`: an unchanged page is not executed again.  The `explainer_deps`
# extension adds the hash of every `explainers` module a page imports (and the
# torch version) to the page's code, so changing a module re-executes exactly
# the pages that import it (MyST-NB #299 is still open).
nb_execution_mode = os.environ.get("NB_EXECUTION_MODE", "cache")
# Outside the staging output folder, so a failed build keeps the cache intact.
nb_execution_cache_path = str(DOCS / "_build" / ".jupyter_cache")
if nb_execution_mode == "off":
    # Nothing executes, so glued values are missing: a quick prose/layout build, never published.
    suppress_warnings = ["mystnb.glue"]
# A failing cell is a warning on its page (cell and traceback included), so one build
# lists every failing page; `strict_exec` then fails the build, with or without -W.
nb_execution_raise_on_error = False
nb_execution_show_tb = True
nb_execution_timeout = int(os.environ.get("NB_EXECUTION_TIMEOUT", "300"))  # per cell
nb_merge_streams = True
# Anything a cell writes to stderr is a warning, and so (under -W) an error:
# warnings never leak onto a published page unnoticed.
nb_output_stderr = "warn"
# The page shape (README, "How to add a page"): a section's checks (asserts, `glue`, quoted
# torch source) run in cells tagged `hide-input`, folded under this label; they still run and
# fail the build.  MyST-NB 1.4 puts one label on every fold and replaces `{type}` with what it
# hides (source, output, outputs, content); a cell that folds something else (a `hide-output`
# cell) names its own fold in its metadata: `mystnb: {code_prompt_show: "Show ..."}`.
nb_code_prompt_show = "Checks behind this section"
nb_code_prompt_hide = "Hide the checks behind this section"
# No page is excluded from execution today.  Add entries as
# "pattern",  # one-line reason
nb_execution_excludepatterns: list[str] = []

# -- HTML ---------------------------------------------------------------------------
html_theme = "sphinx_book_theme"
html_title = "torch-explainers"
html_static_path = ["_static"]
# One template override: the theme's asset macros without fontawesome.js (1.56 MB
# of icons as JS, for custom icons this site does not use); see the file's header.
templates_path = ["_templates"]
html_css_files = ["explainers.css"]
html_last_updated_fmt = None
html_theme_options = {
    "show_toc_level": 2,
    # The executed notebook (docs/_ext/notebook_downloads.py) and the MyST source.
    "use_download_button": True,
    "use_fullscreen_button": False,
    "home_page_in_toc": True,
    # No right-hand column: drawings and outputs get its width; the page's contents
    # are listed in the left column, under the site's navigation.
    "secondary_sidebar_items": [],
}
html_sidebars = {
    "**": ["navbar-logo.html", "icon-links.html", "search-button-field.html",
           "sbt-sidebar-nav.html", "page-toc.html"],
}
html_copy_source = True
html_show_sourcelink = True

# Copy exactly the code: no prompts, no outputs, no line numbers.
copybutton_selector = "div:not(.output) > div.highlight pre"
copybutton_exclude = ".linenos, .gp, .go"

graphviz_output_format = "svg"

# -- publishing ---------------------------------------------------------------------
# Where the site is published: the one setting every absolute URL derives from
# (the canonical link of each page, sitemap.xml, the 404 page's links).  The deploy
# workflow (.github/workflows/docs.yml) sets it to the GitHub Pages address of the
# repository; a local build uses the default.  It must end with "/".
html_baseurl = os.environ.get("TORCH_EXPLAINERS_BASEURL",
                              "https://torch-explainers.github.io/torch-explainers/")
if not html_baseurl.endswith("/"):
    raise ValueError(f"TORCH_EXPLAINERS_BASEURL must end with '/': {html_baseurl!r}")
# Pages are at the site's root, one language and one version: no "{lang}{version}" in the URLs.
sitemap_url_scheme = "{link}"
sitemap_excludes = ["search.html", "genindex.html", "404.html"]
# GitHub Pages serves 404.html at whatever address was missing, at any depth, so its links
# and assets are absolute paths under the base path ("/torch-explainers/"), not relative.
notfound_urls_prefix = urlparse(html_baseurl).path
notfound_context = {
    "title": "Page not found",
    "body": ("<h1>Page not found</h1>\n<p>There is no page at this address. "
             f'Start again from <a href="{notfound_urls_prefix}index.html">the index of '
             "torch-explainers</a>, or search the site.</p>\n"),
}


def _sitemap_in_page_order(app, exception) -> None:
    """sphinx-sitemap 2.9 lists pages in the order the (parallel) writers reached them;
    sorted, sitemap.xml is the same on every build (tests/test_determinism.py)."""
    import queue

    links = getattr(app.env.app, "sitemap_links", None)
    if exception is not None or links is None:
        return
    found = []
    while True:
        try:
            found.append(links.get_nowait())
        except queue.Empty:
            break
    for item in sorted(found, key=lambda item: item[0]):
        links.put(item)


def setup(app):
    # Before sphinx-sitemap's own build-finished handler (priority 500) writes the file.
    app.connect("build-finished", _sitemap_in_page_order, priority=400)
