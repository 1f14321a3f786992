"""Run the build on UTC, so the execution table's *Modified* column is UTC for every page.

MyST-NB 1.4 records a page's execution time in two ways.  A page it executes
gets ``datetime.now().timestamp()`` (a true instant).  A page it serves from the
execution cache gets ``cache_record.created.timestamp()``: jupyter-cache 1.0
stores ``created`` as a UTC wall-clock time, and SQLite hands it back without a
time zone, so ``.timestamp()`` reads it as *local* time.  The table then formats
both with ``datetime.fromtimestamp`` (local time).  On a machine whose zone is
not UTC a cached page therefore shows its UTC wall clock and an executed page
its local one: in New York the cached row is five hours ahead.

With the process on UTC, reading the naive UTC value as local is right and
formatting in local time is formatting in UTC, so every row is UTC.  Kernels
inherit ``TZ``; nothing a page prints depends on the local zone (its stamps say
UTC explicitly).  ``docs/verification.md`` runs the two paths in a non-UTC
zone with this switched off and on.
"""

from __future__ import annotations

import os
import time


def use_utc() -> None:
    """Make this process (and the processes it starts) keep time in UTC."""
    os.environ["TZ"] = "UTC"
    time.tzset()


def table_offsets(switch_on: bool) -> dict[str, float]:
    """Hours between the *Modified* MyST-NB shows and the true UTC time, for a page
    served from the cache and a page executed now, in this process's time zone.

    It runs MyST-NB's own code paths: a notebook is cached with jupyter-cache and
    matched back as the cache client matches it, ``created.timestamp()`` for the
    cached page and ``datetime.now().timestamp()`` for the executed one, each
    formatted by the table's own formatter.  ``switch_on`` first calls
    :func:`use_utc`.  The shown times have minutes only, so each offset is rounded
    to the nearest quarter hour.
    """
    import tempfile
    from datetime import UTC, datetime

    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn
    from myst_nb.ext.execution_tables import _key2transform  # MyST-NB 1.4's formatter

    if switch_on:
        use_utc()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    with tempfile.TemporaryDirectory() as folder:
        cache = get_cache(folder)
        cache.cache_notebook_bundle(CacheBundleIn(nb, "page.ipynb"), check_validity=False)
        record = cache.match_cache_notebook(nb)  # as myst_nb/core/execute/cache.py does
        truth = datetime.now(UTC)
        stamps = {"cached": record.created.timestamp(), "executed": datetime.now().timestamp()}
    shown = {name: datetime.strptime(_key2transform["mtime"](ts), "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
             for name, ts in stamps.items()}
    return {name: round((when - truth).total_seconds() / 900) / 4 for name, when in shown.items()}


def setup(app):
    use_utc()
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
