"""Offer each executed page as a notebook to download, outputs included, that says how to run it.

sphinx-book-theme 1.4's download button lists a page's ``.ipynb`` only when launch
buttons (Binder, Colab, ...) are configured: it copies MyST-NB's executed notebook
into ``_sources/`` while it builds those links.  This site has none, so this
extension copies the notebook itself, before the theme builds the button
(``html-page-context`` at priority 450; the theme's buttons are made at 501), and
the button then lists it beside the page's MyST source.

The copy differs from MyST-NB's in two ways.  A first markdown cell says how to
get what the cells import (the project, from a checkout, with ``pip install .``);
the HTML page does not show it.  Cell ids are numbered in order: MyST-NB gives
the cells of a text notebook random ids, and the download must be the same in
every build of the same page.

A page's executed notebook is written when Sphinx reads the page.  MyST-NB 1.4
writes it from the notebook it read: when the page was executed, that object
holds the outputs; when the page is served from the execution cache, the outputs
are merged into a copy (``myst_nb/core/execute/cache.py``) and the file is written
without them.  So a notebook without outputs gets them from the same cache here,
and a download that still has none is an error that names the page.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import nbformat
from docutils import nodes
from sphinx.util import logging

from explainers.page.pasted import needs

logger = logging.getLogger(__name__)

# What `pip install .` brings (the project and its dependencies), and what the cells
# may import beyond it, from the project's `docs` extra.
PROJECT = {"explainers", "torch", "numpy"}


def cell_imports(nb) -> set[str]:
    """What the notebook's code cells import beyond the standard library (cells that are not
    Python skipped)."""
    found: set[str] = set()
    for cell in nb.cells:
        if cell.cell_type == "code":
            try:
                found |= set(needs(cell.source))
            except SyntaxError:
                continue
    return found


def how_to_run(nb, title: str) -> str:
    """The first cell's markdown: what the cells import and how to install it."""
    imported = cell_imports(nb)
    named = ", ".join(f"`{m}`" for m in sorted(imported, key=str.lower))
    text = [
        "# How to run this notebook",
        "",
        f"This is the page *{title}* of torch-explainers as the site's build executed it, "
        f"outputs included. Its cells import {named}.",
        "",
        "`explainers` is the project's own package. In a checkout of the project, install it "
        "with torch and numpy:",
        "",
        "```bash",
        "pip install .",
        "```",
    ]
    others = sorted(imported - PROJECT, key=str.lower)
    if others:
        text += [
            "",
            "The other imports (" + ", ".join(f"`{m}`" for m in others) + ") come with the "
            "project's `docs` extra, which also brings Jupyter's kernel:",
            "",
            "```bash",
            "pip install '.[docs]'",
            "```",
        ]
    text += ["", "Then run every cell in order, from a folder of your choice."]
    return "\n".join(text)


def with_outputs(nb, cache_path: str | None):
    """``nb`` as it was executed: from the execution cache at ``cache_path`` when ``nb`` has no
    output at all (a page the cache served), else unchanged; unchanged too when the cache has
    no execution of exactly these cells."""
    if not cache_path or any(c.get("outputs") for c in nb.cells if c.cell_type == "code"):
        return nb
    from jupyter_cache import get_cache

    try:
        return get_cache(cache_path).merge_match_into_notebook(nb)[1]
    except KeyError:
        return nb


def downloadable(executed: Path, title: str, cache_path: str | None = None):
    """MyST-NB's executed notebook, with its outputs, the how-to-run cell first and ids numbered
    in order."""
    nb = with_outputs(nbformat.read(executed, as_version=4), cache_path)
    nb.cells.insert(0, nbformat.v4.new_markdown_cell(how_to_run(nb, title)))
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i}"
    return nb


def offer_notebook(app, pagename, templatename, context, doctree) -> None:
    executed = Path(app.outdir).parent / "jupyter_execute" / f"{pagename}.ipynb"
    if doctree is None or not executed.is_file():
        return
    target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    title = html.unescape(re.sub(r"<[^>]+>", "", context.get("title") or pagename))
    cache = app.config.nb_execution_cache_path if app.config.nb_execution_mode == "cache" else None
    nb = downloadable(executed, title, cache)
    shown = sum(1 for n in doctree.findall(nodes.container) if "cell_output" in n.get("classes", []))
    if shown and not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"):
        logger.warning(f"{pagename}: the page shows {shown} cell outputs, the executed notebook "
                       f"{executed} has no outputs; the download would not show what the page shows",
                       location=pagename, type="explainers", subtype="download")
        return
    nbformat.write(nb, target)
    context["ipynb_source"] = f"{pagename}.ipynb"


def setup(app):
    app.connect("html-page-context", offer_notebook, priority=450)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
