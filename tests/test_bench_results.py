"""`bench/results.md` describes the code that is here: every module, file and page it names exists.

`nox -s bench` writes the file; a refactor that moves modules leaves it naming
files that are gone.  This fails until the benchmark is run again.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results.md"


def named_paths(text: str) -> set[str]:
    """Backticked repository paths in ``text`` (``explainers/...``, ``docs/...``, ``tools/...``).

    >>> sorted(named_paths("edit `explainers/render.py` and `docs/render.md`; `nox -s docs`"))
    ['docs/render.md', 'explainers/render.py']
    """
    return set(re.findall(r"`((?:explainers|docs|tools|tests|bench)/[\w./-]+)`", text))


#: Pages Sphinx writes itself (no ``docs/<name>.md``), which the page-weight figures also weigh.
GENERATED = {"404", "search", "genindex"}


def named_pages(text: str) -> set[str]:
    """Pages listed after ``executed:``, in the per-page table's first column, and in the page-weight figures.

    >>> sorted(named_pages("<sub>executed: render, mesh (as expected)</sub>\\n| render | 3.4 s |"))
    ['mesh', 'render']
    >>> sorted(named_pages("| page weight, cold: `404`<br> | x |\\n| page weight, cold: `mesh`<br> | x |"))
    ['mesh']
    """
    pages: set[str] = set(re.findall(r"page weight, cold: `(\w+)`", text)) - GENERATED
    for listed in re.findall(r"executed: ([\w, ]+?)(?: \(|</sub>| ·)", text):
        pages |= {p.strip() for p in listed.split(",") if p.strip() and p.strip() != "none"}
    section = text.split("## Per page", 1)[1].split("\n## ", 1)[0] if "## Per page" in text else ""
    pages |= set(re.findall(r"^\| (\w+) \| [\d.]", section, re.M))
    return pages


def test_every_path_the_results_name_exists():
    missing = sorted(p for p in named_paths(RESULTS.read_text()) if not (ROOT / p).exists())
    assert missing == [], f"bench/results.md names files that no longer exist (re-run nox -s bench): {missing}"


def test_every_page_the_results_name_exists():
    pages = named_pages(RESULTS.read_text())
    assert pages, "no page found in bench/results.md: the parser no longer matches the report"
    missing = sorted(p for p in pages if not (ROOT / "docs" / f"{p}.md").is_file())
    assert missing == [], f"bench/results.md names pages that no longer exist: {missing}"


def test_the_commit_measured_is_in_this_history():
    found = re.search(r"\*\*commit measured\*\*: `([0-9a-f]{7,40})`", RESULTS.read_text())
    assert found, "bench/results.md does not name the commit it measured"
    res = subprocess.run(["git", "merge-base", "--is-ancestor", found.group(1), "HEAD"], cwd=ROOT,
                         capture_output=True, text=True)
    assert res.returncode == 0, f"the commit measured, {found.group(1)}, is not in this branch's history"


def test_the_releases_group_is_reported():
    text = RESULTS.read_text()
    assert "all releases ÷ primary only" in text and "(`nox -s docs -- --all-releases`)" in text, (
        "bench/results.md has no figure from the releases group (what verifying every release costs)")


def test_the_benchmark_copy_holds_every_file_a_page_reads():
    """`nox -s bench` builds a copy of the checkout (`bench.tree.COPIED`); a page that reads a file
    outside that copy fails there and nowhere else."""
    from bench.tree import COPIED

    read = set()
    for page in (ROOT / "docs").glob("*.md"):
        read |= {p.split("/")[1] for p in re.findall(r"[\"'](\.\./[^\"'\s]+)[\"']", page.read_text())}
    assert read, "no page reads a file outside docs/: the pattern no longer matches the pages"
    assert read <= set(COPIED), f"pages read {sorted(read - set(COPIED))}, which the benchmark's copy leaves out"
