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
from pathlib import Path

import pytest
from minisite import FRONT
from minisite import page as minipage

import bench.figures
import bench.floor
import bench.report
import bench.run
import bench.stats
import bench.tree
from bench.tree import ROOT, Tree

# In-process builds surface the theme's Sphinx-API deprecation warnings; they are not ours.
pytestmark = pytest.mark.filterwarnings("ignore:::sphinx_book_theme")

def _page(title: str, module: str) -> str:
    return minipage(
        title,
        f"from explainers.{module} import VALUE\nprint(VALUE)",
        ":tags: [remove-cell]\nassert VALUE",
    )


def _tiny_source(src: Path) -> Path:
    """A project with the real conf.py, _ext and noxfile, and two pages importing different modules."""
    docs = src / "docs"
    docs.mkdir(parents=True)
    shutil.copy2(ROOT / "docs" / "conf.py", docs / "conf.py")
    for d in ("_ext", "_static", "_templates"):
        shutil.copytree(ROOT / "docs" / d, docs / d, ignore=shutil.ignore_patterns("__pycache__"))
    (docs / "index.md").write_text("# Tiny\n\n```{toctree}\nalpha\nbeta\n```\n")
    (docs / "alpha.md").write_text(_page("Alpha", "alpha"))
    (docs / "beta.md").write_text(_page("Beta", "beta"))
    pkg = src / "explainers"
    pkg.mkdir()
    for name in ("__init__.py", "deps.py", "build.py", "releases.py"):  # what the noxfile imports
        shutil.copy2(ROOT / "explainers" / name, pkg / name)
    (pkg / "alpha.py").write_text('"""Alpha."""\nVALUE = "alpha"\n')
    (pkg / "beta.py").write_text('"""Beta."""\nVALUE = "beta"\n')
    for name in ("noxfile.py", "pyproject.toml", "constraints.txt"):
        shutil.copy2(ROOT / name, src / name)
    return src


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Tree:
    src = _tiny_source(tmp_path_factory.mktemp("tiny-src"))
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


@pytest.mark.slow
def test_parallel_cold_build_from_a_clean_cache_succeeds(tmp_path):
    """`-j 2`: workers share one new execution cache and start kernels at once (parallel_exec)."""
    tree = Tree(tmp_path / "tree", source=_tiny_source(tmp_path / "src"))
    b = tree.sphinx(["-j", "2"])  # a subprocess: Sphinx forks its workers
    assert set(b.executed) == {"alpha", "beta"}


def test_the_cache_database_exists_before_any_worker_reads(tmp_path, monkeypatch):
    """Without this, two workers on a clean cache race to CREATE TABLE (jupyter-cache 1.0.1)."""
    from types import SimpleNamespace

    monkeypatch.syspath_prepend(str(ROOT / "docs" / "_ext"))
    import parallel_exec

    cache = tmp_path / ".jupyter_cache"
    config = SimpleNamespace(nb_execution_mode="cache", nb_execution_cache_path=str(cache))
    parallel_exec._create_cache_db(SimpleNamespace(config=config))
    assert (cache / "global.db").is_file()


def test_each_process_claims_its_own_block_of_kernel_ports():
    import subprocess
    import sys

    code = "import parallel_exec as p; print(p.claim_block()); import sys; sys.stdout.flush(); input()"
    env = {"PYTHONPATH": str(ROOT / "docs" / "_ext")}
    procs = [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    try:
        starts = [int(p.stdout.readline()) for p in procs]  # both alive, both holding a block
    finally:
        for p in procs:
            p.communicate("\n", timeout=30)
    assert starts[0] != starts[1]
    assert all(20000 <= s < 32000 for s in starts)


@pytest.mark.parametrize("module", [bench.figures, bench.floor, bench.report, bench.run, bench.stats, bench.tree])
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


# -- simulated mesh against 8 real gloo processes ---------------------------------------------


@pytest.mark.site
def test_simulated_mesh_walkthrough_is_far_cheaper_than_8_gloo_processes():
    """The simulated walkthrough against the real 8-process run, without launching 8 more.

    A site check, so it runs after tests/test_mesh_gloo.py stored its verified
    real run and the mesh page read it: ``real_run`` returns that record.  The
    simulated side is timed as the page times it (torch imported, then open the
    world, walk, close it).  Issue 7's goal is a ratio of at most 0.1, judged by
    `nox -s bench`, which measures both sides run by run; here the real run is
    from earlier in the session, under whatever load it met then, and the ratio
    measured on a shared 2-core machine straddles 0.09-0.11, so the bound
    allows 2x: it catches a simulation that became slow, not noise.
    """
    import time

    import torch  # noqa: F401 - the page's kernel has it imported

    from explainers.mesh.launch import real_run
    from explainers.mesh.simulated import simulated_mesh
    from explainers.mesh.walkthrough import walkthrough

    real = real_run(15)
    start = time.perf_counter()
    with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
        steps = walkthrough(mesh, 15)
    sim_s = time.perf_counter() - start
    assert steps == real.steps
    assert sim_s / real.wall_s <= 0.2, f"simulated {sim_s:.2f} s vs 8 gloo processes {real.wall_s:.1f} s"
