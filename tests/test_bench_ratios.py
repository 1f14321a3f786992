"""The stable ratios of the benchmark, as a regression check that `nox -s tests` runs.

Absolute times are left to `nox -s bench`: on a shared 2-core machine they are
noise.  What is stable is *which pages execute*: a warm rebuild executes none,
an edit to one page's code executes that page only, an edit to one
`explainers` module executes exactly the pages that import it, and a bare
`touch` executes nothing.  These run on a copy of the real `docs/conf.py` and
`_ext` with two tiny pages that do not import torch, so the check costs a few
kernel start-ups, not a site build.
"""

from __future__ import annotations

import doctest
import shutil
import textwrap
from pathlib import Path

import pytest

import bench.floor
import bench.report
import bench.stats
import bench.tree
from bench.tree import ROOT, Tree

# In-process builds surface the theme's Sphinx-API deprecation warnings; they are not ours.
pytestmark = pytest.mark.filterwarnings("ignore:::sphinx_book_theme")

FRONT = textwrap.dedent("""\
    ---
    jupytext:
      text_representation:
        extension: .md
        format_name: myst
        format_version: 0.13
    kernelspec:
      display_name: Python 3 (ipykernel)
      language: python
      name: python3
    file_format: mystnb
    ---
    """)


def _page(title: str, module: str) -> str:
    return FRONT + textwrap.dedent(f"""
        # {title}

        ```{{code-cell}} ipython3
        from explainers.{module} import VALUE
        print(VALUE)
        ```

        ```{{code-cell}} ipython3
        :tags: [remove-cell]
        assert VALUE
        ```
        """)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Tree:
    """A project with the real conf.py, _ext and noxfile, and two pages importing different modules."""
    src = tmp_path_factory.mktemp("tiny-src")
    docs = src / "docs"
    docs.mkdir()
    shutil.copy2(ROOT / "docs" / "conf.py", docs / "conf.py")
    for d in ("_ext", "_static"):
        shutil.copytree(ROOT / "docs" / d, docs / d, ignore=shutil.ignore_patterns("__pycache__"))
    (docs / "index.md").write_text("# Tiny\n\n```{toctree}\nalpha\nbeta\n```\n")
    (docs / "alpha.md").write_text(_page("Alpha", "alpha"))
    (docs / "beta.md").write_text(_page("Beta", "beta"))
    pkg = src / "explainers"
    pkg.mkdir()
    for name in ("__init__.py", "deps.py"):
        shutil.copy2(ROOT / "explainers" / name, pkg / name)
    (pkg / "alpha.py").write_text('"""Alpha."""\nVALUE = "alpha"\n')
    (pkg / "beta.py").write_text('"""Beta."""\nVALUE = "beta"\n')
    for name in ("noxfile.py", "pyproject.toml", "constraints.txt"):
        shutil.copy2(ROOT / name, src / name)
    return Tree(tmp_path_factory.mktemp("tiny") / "tree", source=src)


@pytest.fixture(scope="module")
def cold(tiny):
    return tiny.sphinx(in_process=True)


@pytest.mark.slow
def test_cold_build_executes_every_page(tiny, cold):
    assert set(cold.executed) == {"alpha", "beta"} == set(tiny.pages())


@pytest.mark.slow
def test_warm_rebuild_executes_nothing_and_is_faster(tiny, cold):
    warm = tiny.sphinx(in_process=True)
    assert warm.executed == {}
    # Two kernel start-ups fewer: faster even on a loaded machine.
    assert warm.seconds < cold.seconds


@pytest.mark.slow
def test_editing_one_page_executes_only_that_page_and_touch_executes_nothing(tiny, cold):
    tiny.touch_page("alpha")  # re-read, served from the cache
    tiny.edit_page("beta")  # a code change: executed again
    b = tiny.sphinx(in_process=True)
    assert set(b.executed) == {"beta"}
    assert "alpha.md: Using cached notebook" in b.log


@pytest.mark.slow
def test_editing_one_module_executes_only_its_importers(tiny, cold):
    assert tiny.importers("explainers/alpha.py") == {"alpha"}
    tiny.edit_module("explainers/alpha.py")
    assert set(tiny.sphinx(in_process=True).executed) == {"alpha"}
    # A module no page imports executes nothing.
    assert tiny.importers("explainers/deps.py") == set()


@pytest.mark.parametrize("module", [bench.floor, bench.report, bench.stats, bench.tree])
def test_bench_doctests(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_executed_pages_reads_only_executions_under_docs():
    log = ("/p/docs/a.md: Executed notebook in 1.50 seconds [mystnb]\n"
           "/p/docs/sub/b.md: Executed notebook in 2 seconds [mystnb]\n"
           "/p/docs/c.md: Using cached notebook: ID=3 [mystnb]\n"
           "/elsewhere/d.md: Executed notebook in 9.0 seconds [mystnb]\n")
    assert bench.tree.executed_pages(log, Path("/p/docs")) == {"a": 1.5, "sub/b": 2.0}


def test_floor_cells_keep_raises_exception_tags(tmp_path):
    page = tmp_path / "p.md"
    page.write_text(FRONT + "\n# P\n\n```{code-cell} ipython3\nx = 1\n```\n\n"
                    "```{code-cell} ipython3\n:tags: [raises-exception]\n1 / 0\n```\n")
    assert bench.floor.page_cells(page) == [("x = 1", False), ("1 / 0", True)]


# -- page weight, over the site that `nox -s tests` just built ----------------------------

#: What a browser fetches on top of the files a page names: the theme's icon webfont.
WEBFONT_ALLOWANCE = 250_000


@pytest.mark.site
def test_every_page_weighs_at_most_1_5_MB_cold(site):
    """HTML plus every local stylesheet, script and image it names (the browser figure is in bench/)."""
    import re

    heavy = {}
    for page in sorted(p for p in site.glob("*.html")):
        html = page.read_text(encoding="utf-8")
        total = len(html.encode())
        for ref in set(re.findall(r'(?:src|href)="([^"#?]+\.(?:css|js|png|svg|jpg|woff2?))[^"]*"', html)):
            path = (page.parent / ref).resolve()
            if path.is_file():
                total += path.stat().st_size
        if total + WEBFONT_ALLOWANCE > 1_500_000:
            heavy[page.name] = total
    assert heavy == {}, f"pages over 1.5 MB cold (bytes, before webfonts): {heavy}"
