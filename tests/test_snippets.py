"""Every copyable block is run or says why not; no page hard-codes a figure it computes.

A copyable block (a MyST-NB code cell, a ``{code-block}``, a fenced block, a
``{literalinclude}``) in ``docs/`` or the README must be one of:

- an executed code cell (the page is a MyST notebook, the cell is not tagged
  ``skip-execution`` and the page is not in ``nb_execution_excludepatterns``);
- a block of ``>>>`` examples, collected by ``nox -s doctest``;
- a ``{literalinclude}`` of a file in ``explainers/`` that the tests exercise;
- preceded by ``<!-- snippet: not-run — reason -->``.
"""

from __future__ import annotations

import doctest
import json
import re
import runpy
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest
import sourceblocks
from sourceblocks import copyable_blocks, glue_roles, hard_coded_figures

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
EXPLAINERS = ROOT / "explainers"


def sources() -> list[Path]:
    pages = [p for p in DOCS.rglob("*.md") if not {"_build", "jupyter_execute"} & set(p.parts)]
    return [ROOT / "README.md", *sorted(pages)]


def _exclude_patterns() -> list[str]:
    return list(runpy.run_path(str(DOCS / "conf.py")).get("nb_execution_excludepatterns", []))


def _tested_by_the_suite(target: Path) -> bool:
    """A file in explainers/ that a test or a doctested module names."""
    if target.suffix == ".py":
        module = ".".join(target.relative_to(ROOT).with_suffix("").parts)
        needles = [module, f"from {module.rpartition('.')[0]} import {target.stem}"]
    else:
        needles = [target.name]
    haystack = [p.read_text(encoding="utf-8") for p in (ROOT / "tests").glob("test_*.py")]
    haystack += [p.read_text(encoding="utf-8") for p in EXPLAINERS.rglob("*.py") if p != target]
    return any(n in text for n in needles for text in haystack)


def problems(path: Path, text: str, exclude: list[str]) -> list[str]:
    """Why each block in ``text`` is neither run nor marked (empty when all are fine)."""
    notebook = "file_format: mystnb" in text
    if path.is_relative_to(DOCS):
        docname = path.relative_to(DOCS).as_posix()
        excluded = any(fnmatch(docname, pat) or fnmatch(str(path), pat) for pat in exclude)
    else:
        excluded = False
    found = []
    for block in copyable_blocks(text):
        where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{block.line}"
        if block.marker is not None:
            if len(block.marker.split()) < 3:
                found.append(f"{where}: the not-run marker needs a reason of a few words")
            continue
        if block.kind == "code-cell":
            if not notebook:
                found.append(f"{where}: a code-cell on a page that is not a MyST notebook never runs")
            elif excluded:
                found.append(f"{where}: the page is in nb_execution_excludepatterns; mark the cell")
            elif "skip-execution" in block.tags:
                found.append(f"{where}: tagged skip-execution; mark it with a reason")
            continue
        if block.kind == "literalinclude":
            target = (path.parent / block.lang).resolve()
            if not target.is_file():
                found.append(f"{where}: literalinclude of a missing file {block.lang}")
            elif not target.is_relative_to(EXPLAINERS):
                found.append(f"{where}: literalinclude of {block.lang}, outside explainers/ (not tested)")
            elif not _tested_by_the_suite(target):
                found.append(f"{where}: no test or doctested module uses {target.name}")
            continue
        if block.doctest:
            continue
        found.append(
            f"{where}: a {block.kind} block ({block.lang or 'no language'}) that is neither executed "
            "nor a doctest; run it, or put `<!-- snippet: not-run — reason -->` on the line before it"
        )
    return found


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_copyable_block_is_run_or_marked(path):
    assert problems(path, path.read_text(encoding="utf-8"), _exclude_patterns()) == []


def test_the_walker_catches_unmarked_unrun_and_unreasoned_blocks(tmp_path):
    page = tmp_path / "page.md"
    text = "\n".join([
        "```bash", "rm -rf build", "```",                                    # unmarked
        "<!-- snippet: not-run -- ok -->", "```bash", "make", "```",         # reason too short
        "```{code-cell} ipython3", "1", "```",                               # not a notebook
        "```{literalinclude} /etc/hostname", "```",                          # outside explainers/
        "<!-- snippet: not-run — needs a GPU to run -->", "```python", "x", "```",  # fine
        "```python", ">>> 1 + 1", "2", "```",                                # doctest, fine
    ])
    found = problems(page, text, [])
    assert len(found) == 4, found
    assert [f.split(":")[1] for f in found] == ["1", "5", "8", "11"]


def test_the_walker_knows_excluded_pages_and_skipped_cells():
    head = "---\nfile_format: mystnb\n---\n"
    cell = "```{code-cell} ipython3\n:tags: [skip-execution]\n1\n```\n"
    assert len(problems(DOCS / "x.md", head + cell, [])) == 1
    assert len(problems(DOCS / "x.md", head + cell.replace("skip-execution", "hide-input"), ["x.md"])) == 1
    assert problems(DOCS / "x.md", head + cell.replace("skip-execution", "hide-input"), []) == []


def test_the_walker_examples_hold():
    assert doctest.testmod(sourceblocks, optionflags=doctest.ELLIPSIS).failed == 0


def _nox_sessions() -> set[str]:
    """The sessions nox finds in the noxfile, as `nox --list --json` reports them.  A keyword
    expression that every name satisfies lifts the default selection, so the sessions that
    are not run by default (docs, bench, ...) are listed too."""
    out = subprocess.run([sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "--list", "--json",
                          "-k", "not __no_such_session__"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return {s["name"] for s in json.loads(out.stdout)}


def _commands_of(session: str) -> list[list[str]]:
    """The commands `nox -s <session>` runs, from the noxfile's own session function called with
    a session that records them instead of running them (and an environment that is current)."""
    import importlib.util
    import types

    import nox.registry

    nox.registry.reset()  # loading the noxfile registers its sessions again
    spec = importlib.util.spec_from_file_location("_snippets_noxfile", ROOT / "noxfile.py")
    noxfile = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(noxfile)
    noxfile.ensure_env = lambda *args, **kwargs: None
    ran: list[list[str]] = []
    recorder = types.SimpleNamespace(posargs=[], run=lambda *args, **kwargs: ran.append(list(args)))
    nox.registry.get()[session](recorder)
    nox.registry.reset()
    return ran


def test_the_doctest_session_collects_the_markdown():
    # `>>>` blocks count as tested only because `nox -s doctest` globs them.
    [pytest_run] = [cmd for cmd in _commands_of("doctest") if "pytest" in cmd]
    for arg in ("--doctest-glob=*.md", "README.md", "docs", "--doctest-modules"):
        assert arg in pytest_run, arg


def test_every_nox_session_the_docs_name_exists():
    sessions = _nox_sessions()
    assert {"docs", "tests", "doctest"} <= sessions, sessions
    named = {(p, s) for p in sources() for s in re.findall(r"nox -s ([\w-]+)", p.read_text(encoding="utf-8"))}
    assert {(p.name, s) for p, s in named if s not in sessions} == set()


# -- claims: no hard-coded figures ------------------------------------------------------

# A number in prose that equals a glued figure by coincidence: (page, number) -> why it is not
# that figure.  Keep each reason specific; a restated result never belongs here.
CLAIM_WAIVERS = {
    ("precision", "256"): "shapes and the router's expert count (settings of the page); the fp16 "
                          "running sum (loop_fp16) also happens to stall at 256",
    ("precision", "10"): "TF32's 10 explicit mantissa bits, quoted from torch's docs; the count of "
                         "reductions found to accumulate wider also happens to be 10",
    ("precision", "100,000"): "input sizes the sweeps are run at (settings of the page, glued where "
                              "the thread section names its own)",
    ("precision", "10000"): "the values of the fp16 example [60000, 10000, -60000] and its sum, "
                            "written out beside the cell that prints them; the probe's size is glued",
    ("compile", "4096"): "the size of the fused a * b + c example (a setting of the page); the explicit "
                         "round trip's sample also has 4096 values (glued where that section states it)",
    ("mesh", "16"): "the walkthrough's other input size (15 against 16 elements, a setting of the "
                    "page); the merged gather of 13 elements also happens to move 16",
    ("collectives", "13"): "CUDA 13, the CUDA major version of the wheels' builds; the count of world "
                           "sizes where AVG is worse also happens to be 13",
    ("render", "10"): "the month in the cited post's address (blog.ezyang.com/2025/10/...); the sweep's "
                      "dtype count also happens to be 10",
    ("render", "1000"): "a threshold the sweep is run at (a setting); print's default threshold and the "
                        "sci-mode ratio also happen to be 1000",
    ("render", "1e8"): "numpy's rule as #12746's description quotes it; torch's sci-mode limit also "
                       "happens to be 1e8",
    ("router", "16"): "the logit scale σ = 16, a setting of the sweep; the row-length period also happens "
                      "to be 16",
    ("router", "0.5"): "the logit scale σ = 0.5, a setting of the sweep; the largest bf16 errors of A and "
                       "B' also happen to round to 0.5 ulp",
    ("router", "256"): "the expert count, a setting of the page (glued where the sweep reports it)",
    ("snippets", "20000"): "the size of each extra set of random rows, a setting; the page's own sample "
                           "also has 20000 rows",
}


# Glued measurements that are no claim: the page's own execution time, which any number in
# the prose can equal by chance (a router page run of 16 s against its scale 16).
_MEASURED = {"page_seconds"}


def _shown_values(page: str, text: str) -> dict[str, str]:
    """Glue key -> the text the page shows for it (with the role's format, if used)."""
    from myst_nb.core.variables import format_plain_text

    glue_file = DOCS / "_build" / "jupyter_execute" / f"{page}.glue.json"
    if not glue_file.is_file():
        pytest.fail(f"{glue_file} is missing: rebuild the site (nox -s docs) so the page is executed")
    data = json.loads(glue_file.read_text(encoding="utf-8"))
    shown = {}
    for key, value in data.items():
        plain = value.get("data", {}).get("text/plain")
        if plain is None or key in _MEASURED:
            continue
        shown[key] = format_plain_text(plain, "")
        for role_key, fmt in glue_roles(text):
            if role_key == key and fmt:
                shown[f"{key}:{fmt}"] = format_plain_text(plain, fmt)
    return shown


def _glued_pages() -> list[Path]:
    return [p for p in sources()[1:] if "file_format: mystnb" in p.read_text(encoding="utf-8")
            and "glue(" in p.read_text(encoding="utf-8")]


@pytest.mark.site
@pytest.mark.parametrize("path", _glued_pages(), ids=lambda p: p.stem)
def test_no_page_hard_codes_a_figure_its_cells_glue(site, path):
    text = path.read_text(encoding="utf-8")
    page = path.relative_to(DOCS).with_suffix("").as_posix()
    shown = _shown_values(page, text)
    assert shown, f"{page}: calls glue() but the build recorded no glued values"
    found = [(key, n) for key, n in hard_coded_figures(text, shown) if (page, n) not in CLAIM_WAIVERS]
    assert found == [], (
        f"{page}: prose repeats a glued figure; paste it with {{glue:text}}`key` instead"
    )
