"""Fail the build when any page's code failed, after listing every such page.

``nb_execution_raise_on_error = True`` would stop Sphinx at the first failing
page, so a build with three broken pages reported one.  conf.py turns that off:
MyST-NB 1.4 then logs each failure as a warning on its page, with the cell and
the traceback, and execution of the other pages goes on.  Under ``-W
--keep-going`` (every build ``nox`` runs) those warnings already fail the
build; this extension makes sure a failed cell fails *any* build, ``-W`` or
not (``docs-live``, a bare ``sphinx-build``), and ends it with one list: the
page, the exception and the first line of the cell.

It is the one place that says why a page failed: ``tools/sitebuild.py`` names
the failed pages in its verdict from the list this writes to the file in
``$TORCH_EXPLAINERS_FAILURES``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from myst_nb.sphinx_ import NbMetadataCollector
from sphinx.util import logging

logger = logging.getLogger(__name__)

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# The exception line of an IPython traceback: "AssertionError: the claim no longer holds".
_ENAME = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))\b(?::[ \t]*(.*))?$", re.M)
# nbclient's wrappers around the cell's own exception, never the answer.
_WRAPPERS = ("CellExecutionError", "CellTimeoutError", "DeadKernelError")


def cell_failure(traceback: str, error: str | None = None) -> str:
    """What went wrong in a failed cell, in a few words, from MyST-NB's traceback text.

    ``error`` is the class name MyST-NB records (``CellExecutionError`` for any
    exception a cell raised, ``CellTimeoutError``, ``DeadKernelError``).

    >>> tb = ("nbclient.exceptions.CellExecutionError: An error occurred while executing "
    ...       "the following cell:\\n------------------\\nassert x == 2, 'no longer holds'\\n"
    ...       "------------------\\n\\n\\x1b[31mAssertionError\\x1b[39m: no longer holds\\n")
    >>> cell_failure(tb, "CellExecutionError")
    "AssertionError: no longer holds, in the cell `assert x == 2, 'no longer holds'`"
    >>> cell_failure("...\\n-------------------\\ntime.sleep(60)\\n-------------------\\n", "CellTimeoutError")
    'a cell timed out (CellTimeoutError), in the cell `time.sleep(60)`'
    """
    text = _ANSI.sub("", traceback or "")
    cell = re.search(r"^-{18,}\n(.*?)\n", text, re.M | re.S)
    where = f", in the cell `{cell[1].strip()[:80]}`" if cell and cell[1].strip() else ""
    if error == "CellTimeoutError":
        return f"a cell timed out (CellTimeoutError){where}"
    if error == "DeadKernelError":
        return f"the kernel died (DeadKernelError){where}"
    raised = [m for m in _ENAME.finditer(text) if m[1].rsplit(".", 1)[-1] not in _WRAPPERS]
    if raised:
        name, message = raised[-1][1], (raised[-1][2] or "").strip()
        return f"{name}: {message[:120]}{where}" if message else f"{name}{where}"
    return f"a cell failed ({error or 'unknown error'}){where}"


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
    if os.environ.get("TORCH_EXPLAINERS_FAILURES"):  # the staged build's verdict reads it
        report = {app.env.doc2path(d, False).as_posix(): why for d, why in failed.items()}
        Path(os.environ["TORCH_EXPLAINERS_FAILURES"]).write_text(json.dumps(report) + "\n")
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
