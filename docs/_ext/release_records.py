"""Re-read the Versions page on every build: it reports the other releases' build records.

Its source never changes when a record does, so Sphinx would keep the old page;
``env-get-outdated`` names it outdated on each build, and its frontmatter executes
it every time (``mystnb: execution_mode: force``).  It only reads JSON: cheap.
"""

from __future__ import annotations

PAGE = "versions"


def _outdated(app, env, added, changed, removed) -> list[str]:
    return [PAGE] if PAGE in env.found_docs else []


def setup(app):
    app.connect("env-get-outdated", _outdated)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
