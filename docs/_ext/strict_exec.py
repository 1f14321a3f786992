"""Fail the build when any page's code failed, after listing every such page.

``nb_execution_raise_on_error = True`` would stop Sphinx at the first failing
page, so a build with three broken pages reported one.  conf.py turns that off:
MyST-NB 1.4 then logs each failure as a warning on its page, with the cell and
the traceback, and execution of the other pages goes on.  Under ``-W
--keep-going`` (every build ``nox`` runs) those warnings already fail the
build; this extension makes sure a failed cell fails *any* build, ``-W`` or
not (``docs-live``, a bare ``sphinx-build``), and ends it with one list: the
page, the exception and the first line of the cell.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from myst_nb.sphinx_ import NbMetadataCollector
from sphinx.util import logging

from explainers.build import cell_failure

logger = logging.getLogger(__name__)


def failures(env) -> dict[str, str]:
    """docname -> what failed, for every page whose last execution did not succeed."""
    out = {}
    for docname in sorted(NbMetadataCollector.get_doc_data(env)):
        data = NbMetadataCollector.get_exec_data(env, docname)
        if data and not data.get("succeeded", True):
            out[docname] = cell_failure(data.get("traceback") or "", data.get("error"))
    return out


def _record(app, failed: dict[str, str]) -> None:
    """Where nox asks for one (a build on a release other than the published one), write
    which torch executed which pages and whether each held: the Versions page reports it."""
    path = os.environ.get("TORCH_EXPLAINERS_RECORD")
    if not path:
        return
    from importlib.metadata import version

    pages = {d: d not in failed for d in sorted(NbMetadataCollector.get_doc_data(app.env))
             if NbMetadataCollector.get_exec_data(app.env, d)}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({"torch": version("torch"), "pages": pages}, indent=1) + "\n")


def _check(app, exception) -> None:
    if exception is not None:
        return  # Sphinx is already failing: do not hide its error behind ours
    failed = failures(app.env)
    _record(app, failed)
    if failed:
        lines = "\n".join(f"  {app.env.doc2path(d, False)}: {why}" for d, why in failed.items())
        # An error, not an exception: Sphinx would print a traceback of this hook
        # under -T.  The status code fails the build with or without -W.
        logger.error(f"{len(failed)} page(s) failed to execute; each one's cell and traceback "
                     f"are in the warnings above:\n{lines}")
        app.statuscode = 1


def setup(app):
    app.connect("build-finished", _check)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
