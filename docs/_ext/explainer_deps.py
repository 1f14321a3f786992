"""Dependency-aware execution cache for MyST-NB pages.

MyST-NB's ``cache`` mode keys a page on its code cells only, so editing an
imported ``explainers`` module leaves stale outputs (MyST-NB #299, open).
This extension closes the gap in two steps, both at ``source-read``:

1. It finds the ``explainers`` modules a page imports, follows their own
   imports transitively, and registers every file of those modules (for a
   subpackage, every file in its folder, so a C++ harness counts too) plus
   torch's ``version.py`` as Sphinx dependencies.  Sphinx then re-reads the
   page, and only that page, when one of them changes.
2. It appends a hidden cell holding a hash of those files and the torch
   version, so jupyter-cache's key changes and the page is re-executed.

The logic lives in :mod:`explainers.deps` so that it is tested like the rest.
"""

from __future__ import annotations

from pathlib import Path

from explainers.deps import dependency_cell, page_dependencies

ROOT = Path(__file__).resolve().parents[2]


def _on_source_read(app, docname: str, source: list[str]) -> None:
    text = source[0]
    if "file_format: mystnb" not in text:
        return
    files, digest = page_dependencies(text, ROOT)
    for path in files:
        app.env.note_dependency(str(path))
    source[0] = text.rstrip("\n") + "\n\n" + dependency_cell(digest)


def setup(app):
    app.connect("source-read", _on_source_read)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
