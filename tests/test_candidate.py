"""`nox -s candidate`'s machinery (tools/candidate.py) on a mini-site, with an installed release
as the candidate.

The mini-site's copy of `explainers/releases.py` lists 2.15.0 alone, so 2.14.1 (whose
environment exists) plays a release not yet supported.  One page has a claim that compares
releases (through `on_each_release` and `check_each_release`) and a claim about the build's
own torch, both true on 2.15.0 alone and false once 2.14.1 is a candidate; the other page
holds.  The report must list each failing claim with its page, section, release and message,
list the page that holds, and leave the site built before it byte for byte unchanged.
"""

from __future__ import annotations

import os
import re
import sys

import pytest
from minisite import build, make_tree, page

from explainers.releases import cache_root
from tools.candidate import run_candidate
from tools.sitebuild import tree_digest

pytestmark = pytest.mark.slow

CANDIDATE, LISTED = "2.14.1", "2.15.0"

CLAIM = page(
    "Claim",
    "values = [1, 2, 3]\nassert sum(values) == 6, 'the sum of 1, 2 and 3 is 6'\nprint(values)",
    """\
import torch
from explainers.releases import check_each_release, on_each_release

seen = {rel: env["torch"].split()[0] for rel, env in on_each_release("explainers.page.stamp:environment").items()}
check_each_release("torch's minor version is 15 or newer", seen, lambda rel, v: int(v.split(".")[1]) >= 15)""",
    f"assert torch.__version__.startswith('{LISTED}'), f'this build runs torch {LISTED}, not {{torch.__version__}}'",
    "print('the last cell runs too')",
)
# The headings the cells sit under: the report names the nearest one above the failing cell.
CLAIM = CLAIM.replace("```{code-cell} ipython3\nvalues", "## Sizes\n\n```{code-cell} ipython3\nvalues")
CLAIM = CLAIM.replace("```{code-cell} ipython3\nimport torch", "## Versions\n\n```{code-cell} ipython3\nimport torch")
CLAIM = CLAIM.replace("```{code-cell} ipython3\nassert torch", "### This build\n\n```{code-cell} ipython3\nassert torch")
FINE = page("Fine", "values = [1, 2, 3]\nassert sum(values) == 6, 'the sum of 1, 2 and 3 is 6'\nprint(values)")


def _python(release: str) -> str:
    python = cache_root() / f"env-{release}" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"torch {release} has no environment here (nox creates it)")
    return str(python)


@pytest.fixture(scope="module")
def candidate_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("candidate")
    docs = make_tree(root, {"claim": CLAIM, "fine": FINE})
    releases = root / "explainers" / "releases.py"
    text, n = re.subn(r"SUPPORTED: tuple\[str, \.\.\.\] = \(\n.*?\n\)", f'SUPPORTED: tuple[str, ...] = ("{LISTED}",)',
                      releases.read_text(), count=1, flags=re.S)
    assert n == 1, "the copy's SUPPORTED tuple was not found"
    releases.write_text(text)
    # The site, built and verified as today: 2.15.0 only, every claim holds.
    built = build(docs, timeout=400)
    assert built.ok, built.output[-3000:]
    site = docs / "_build" / "html"
    before = tree_digest(site)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NB_EXECUTION")}
    env.update({"PYTHONPATH": str(root), "PYTHONHASHSEED": "0", "PYDEVD_DISABLE_FILE_VALIDATION": "1",
                "MPLBACKEND": "agg", "NB_EXECUTION_TIMEOUT": "120"})
    out = docs / "_build" / "candidate" / CANDIDATE
    result = run_candidate(docs, CANDIDATE, {CANDIDATE: _python(CANDIDATE), LISTED: sys.executable}, out,
                           env=env, capture=True, timeout=600)
    return result, site, before


def test_the_report_lists_each_failing_claim_with_page_section_release_and_message(candidate_run):
    result, _, _ = candidate_run
    report = result.report.read_text()
    rows = [line for line in report.splitlines() if line.startswith("| claim.md |")]
    # The comparison fails on the candidate, seen by both builds, with each release's value.
    compare = [r for r in rows if "torch's minor version is 15 or newer" in r]
    assert len(compare) == 1, report
    assert compare[0].startswith("| claim.md | Versions | torch 2.14.1 | 2.14.1, 2.15.0 | AssertionError: "), compare
    assert re.search(r"torch 2\.14\.1: '2\.14\.1[^']*'; torch 2\.15\.0: '2\.15\.0[^']*'", compare[0]) or re.search(
        r"torch 2\.15\.0: '2\.15\.0[^']*'; torch 2\.14\.1: '2\.14\.1[^']*'", compare[0]), compare[0]
    # The claim about the build's own torch fails only in the candidate's build: a later cell
    # of the same page, found because a failing cell does not stop its page.
    own = [r for r in rows if "this build runs torch 2.15.0" in r]
    assert len(own) == 1 and own[0].startswith("| claim.md | This build | torch 2.14.1 | 2.14.1 | AssertionError: "), rows
    assert len(rows) == 2, f"only the two false claims fail: {rows}"
    assert "**2 failing claims on 1 page; 1 page holds.**" in report


def test_the_pages_that_hold_are_listed(candidate_run):
    result, _, _ = candidate_run
    assert result.held == ["fine.md"]
    report = result.report.read_text()
    assert report.split("## Pages that hold on every build")[1].split() == ["-", "fine.md"]


def test_the_terminal_summary_names_each_failing_claim(candidate_run):
    result, _, _ = candidate_run
    first, *claims, last = result.summary.splitlines()
    assert first.startswith("candidate torch 2.14.1: 2 failing claim(s) on 1 page(s), 1 page(s) hold")
    assert any(c.startswith("  claim.md § Versions [fails on torch 2.14.1]: AssertionError: torch's minor")
               for c in claims), claims
    assert last == f"report: {result.report}"


def test_the_site_is_untouched(candidate_run):
    _, site, before = candidate_run
    assert tree_digest(site) == before, "the candidate's builds changed the published site"
