"""What each file action does to the staged build's gate and Sphinx's re-read, run on a one-page site.

The Verification page runs :func:`copied_page_experiment`: the real
``sitebuild.build_site`` (the staged build ``nox -s docs`` runs), on a one-page
reStructuredText site in a temporary folder, built into two build folders the way
``nox -s docs -- --all-releases`` builds them (another release's folder under
``_build/releases/<release>/`` first, then the primary's ``_build/``), each with
its own gate.  No notebook executes, so it takes seconds.

This is site machinery, not part of the ``explainers`` package.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sitebuild  # noqa: E402  (the staged build, imported from beside this file)

sys.path.pop(0)

__all__ = ["ACTIONS", "copied_page_experiment", "shown_version"]

# The actions, in the order they are run, each with what it does to the folder.
ACTIONS = (
    "first build",
    "cp -p a new version with an older time",
    "touch the page",
    "delete _build/html-inputs.sha256, touch the page",
    "delete _build/releases/*/html-inputs.sha256 too, touch the page",
)


def shown_version(html: Path) -> str:
    """Which version of the page a built HTML file shows: ``ONE``, ``TWO`` or ``none``.

    >>> import tempfile
    >>> f = Path(tempfile.mkdtemp()) / "index.html"
    >>> _ = f.write_text("<p>VERSION-TWO</p>")
    >>> shown_version(f), shown_version(f.with_name("missing.html"))
    ('TWO', 'none')
    """
    if not html.is_file():
        return "none"
    text = html.read_text()
    return "TWO" if "VERSION-TWO" in text else "ONE" if "VERSION-ONE" in text else "none"


def _build(docs: Path, python: str, build: Path | None, identity: str) -> dict[str, object]:
    result = sitebuild.build_site(docs, python, ["-j", "1", "-q"], capture=True,
                                  skip_unchanged=identity, build=build)
    folder = build if build is not None else docs / "_build"
    return {"ok": result.ok, "sphinx ran": not result.message.startswith(sitebuild.UP_TO_DATE),
            "shows": shown_version(folder / "html" / "index.html")}


def copied_page_experiment(folder: Path, python: str | os.PathLike = sys.executable,
                           release: str = "other") -> list[dict[str, object]]:
    """Run :data:`ACTIONS` on a one-page site in ``folder``; one row per action.

    Each row names the action and, for each build folder (``release``'s, built
    first, then the primary's), whether the build succeeded, whether Sphinx ran
    (``False``: the gate found the digest unchanged and said "up to date") and
    which version of the page its HTML shows.  ``python`` runs Sphinx.
    (tests/test_rebuild_rules.py runs it; a doctest would add seconds to every
    doctest run.)
    """
    docs = Path(folder) / "docs"
    docs.mkdir(parents=True)
    (docs / "conf.py").write_text('project = "mini"\nexclude_patterns = ["_build"]\n')
    page = docs / "index.rst"
    other = docs / "_build" / "releases" / release
    python = str(python)

    def both(action: str) -> dict[str, object]:
        row: dict[str, object] = {"action": action}
        row[release] = _build(docs, python, other, f"environment of {release}")
        row["primary"] = _build(docs, python, None, "environment of the primary")
        return row

    page.write_text("Mini\n====\n\nVERSION-ONE\n")
    rows = [both(ACTIONS[0])]
    copied = Path(folder) / "copied.rst"
    copied.write_text("Mini\n====\n\nVERSION-TWO\n")
    os.utime(copied, (1577836800, 1577836800))  # 2020-01-01: older than any read of the page
    shutil.copy2(copied, page)  # cp -p: new bytes, the old time
    rows.append(both(ACTIONS[1]))
    os.utime(page)
    rows.append(both(ACTIONS[2]))
    (docs / "_build" / sitebuild.INPUTS_FILE).unlink()
    os.utime(page)
    rows.append(both(ACTIONS[3]))
    for digest in (docs / "_build" / "releases").glob(f"*/{sitebuild.INPUTS_FILE}"):
        digest.unlink()
    os.utime(page)
    rows.append(both(ACTIONS[4]))
    return rows
