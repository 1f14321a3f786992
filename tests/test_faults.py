"""Faults injected into a copy of the docs fail the build, name the page, and leave the site alone.

Each case copies a tiny site that built cleanly (real conf.py, real
extensions, real staged build from `tools/sitebuild.py`), breaks one page, and
builds again.  The build must fail, its output must name the broken page and
the kind of fault, and the last good site must be byte for byte unchanged.
"""

from __future__ import annotations

import shutil

import pytest
from gate_figures import record
from minisite import build, make_tree, page

from tools.sitebuild import tree_digest

pytestmark = pytest.mark.slow

GOOD = {
    "victim": page("Victim", "values = [1, 2, 3]\nassert sum(values) == 6\nprint(values)"),
}

# name -> (the broken victim page, text the build output must contain, cell timeout)
FAULTS = {
    "failing-assert": (page("Victim", "values = [1, 2, 3]\nassert sum(values) == 7, 'the claim no longer holds'"),
                       "AssertionError", 60),
    "syntax-error": (page("Victim", "def broken(:\n    pass"), "SyntaxError", 60),
    "missing-import": (page("Victim", "from explainers.render import no_such_function"), "ImportError", 60),
    "hanging-cell": (page("Victim", "import time\ntime.sleep(600)"), "CellTimeoutError", 3),
    "broken-xref": (page("Victim", "values = [1, 2, 3]\nassert sum(values) == 6\nprint(values)",
                         prose="See {doc}`no-such-page` for more."), "unknown document", 60),
}


@pytest.fixture(scope="module")
def good_site(tmp_path_factory):
    root = tmp_path_factory.mktemp("good")
    docs = make_tree(root, GOOD)
    result = build(docs)
    assert result.ok, result.output[-3000:]
    return root


@pytest.mark.parametrize("fault", list(FAULTS))
def test_fault_fails_the_build_names_the_page_and_keeps_the_site(good_site, tmp_path, fault):
    broken, symptom, cell_timeout = FAULTS[fault]
    root = tmp_path / "case"
    shutil.copytree(good_site, root, symlinks=True)
    docs = root / "docs"
    site = docs / "_build" / "html"
    before = tree_digest(site)
    (docs / "victim.md").write_text(broken)
    result = build(docs, timeout_cell=cell_timeout, timeout=240)
    named = "victim.md" in result.output
    intact = tree_digest(site) == before
    caught = (not result.ok) and named and symptom in result.output and intact
    record("faults", fault, caught=caught, failed=not result.ok, named=named, intact=intact)
    assert not result.ok, f"{fault}: the build succeeded"
    assert named, f"{fault}: the output does not name victim.md:\n{result.output[-3000:]}"
    assert symptom in result.output, f"{fault}: no {symptom!r} in the output:\n{result.output[-3000:]}"
    assert "The last good site is unchanged" in result.message
    # ...and the verdict, the build's last line, names it too.
    assert "victim.md: " in result.message, f"{fault}: the verdict does not name victim.md: {result.message}"
    assert intact, f"{fault}: the last good site changed"


def test_the_good_copy_rebuilds_cleanly_without_executing(good_site, tmp_path):
    # The control: the untouched copy builds and serves every page from the cache,
    # so a failure above is the fault's doing, not the copy's.
    root = tmp_path / "case"
    shutil.copytree(good_site, root, symlinks=True)
    result = build(root / "docs")
    assert result.ok, result.output[-3000:]
    assert "Executed notebook" not in result.output


def test_one_build_names_every_failing_page_and_its_exception(tmp_path):
    docs = make_tree(tmp_path, {
        "fine": page("Fine", "print('ok')"),
        "claim": page("Claim", "x = 1", "assert x == 2, 'the claim no longer holds'"),
        "gone": page("Gone", "from explainers.render import no_such_function"),
    })
    result = build(docs)
    assert not result.ok
    assert "claim.md: AssertionError: the claim no longer holds, in the cell `assert x == 2" in result.message
    assert "gone.md: ImportError: cannot import name 'no_such_function'" in result.message
    assert "fine.md" not in result.message


def test_a_failed_cell_fails_even_a_build_without_W(tmp_path):
    # docs-live and a bare sphinx-build do not pass -W; docs/_ext/strict_exec.py fails them.
    import os
    import subprocess
    import sys

    docs = make_tree(tmp_path, {"claim": page("Claim", "assert 1 == 2, 'the claim no longer holds'")})
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "NB_EXECUTION_MODE": "cache"}
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", str(docs), str(tmp_path / "out")],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "1 page(s) failed to execute" in proc.stderr and "claim.md: AssertionError" in proc.stderr
