"""Re-read the Versions and Verification pages on every build.

Versions reports the other releases' build records, Verification the environment
of the build that made the site.  Their sources never change when those do, so an
incremental build would keep the old pages; ``env-get-outdated`` names them
outdated on each build, and their frontmatter executes them every time
(``mystnb: execution_mode: force``).  Both are cheap.
"""

from __future__ import annotations

PAGES = ("versions", "verification")


def _outdated(app, env, added, changed, removed) -> list[str]:
    return [page for page in PAGES if page in env.found_docs]


def setup(app):
    app.connect("env-get-outdated", _outdated)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
