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
    """A project with the real conf.py, _ext, noxfile and build script, and two pages importing
    different modules."""
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
    for name in ("__init__.py", "releases.py"):  # the noxfile reads the releases
        shutil.copy2(ROOT / "explainers" / name, pkg / name)
    shutil.copytree(ROOT / "tools", src / "tools", ignore=shutil.ignore_patterns("__pycache__"))
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
    assert tiny.importers("explainers/releases.py") == set()


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


# -- simulated mesh against 8 real gloo processes ---------------------------------------------


@pytest.mark.slow
def test_simulated_mesh_walkthrough_is_far_cheaper_than_8_gloo_processes():
    """The simulated walkthrough against the real 8-process run (torchrun, gloo), in CPU time.

    The real run is launched by this test, and the simulated side is run right
    after it, as the page runs it (torch imported, then open the world, walk,
    close it).  Wall times depend on other jobs' load (the 8 processes and the one
    simulation get different shares of a busy machine), so the test compares CPU
    time: the simulation's against the real run's spread over the machine's 2
    cores, the figure `nox -s bench` reports as the idle-machine estimate (0.089
    there).  The bound allows about 2x: it catches a simulation that became slow,
    not noise.
    """
    import resource
    import time

    import torch  # noqa: F401 - the page's kernel has it imported

    from explainers.mesh.launch import launch_walkthrough
    from explainers.mesh.simulated import simulated_mesh
    from explainers.mesh.walkthrough import walkthrough

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    real = launch_walkthrough(15)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    real_cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    start = time.process_time()
    with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
        steps = walkthrough(mesh, 15)
    sim_cpu = time.process_time() - start
    assert steps == real.steps
    assert sim_cpu / (real_cpu / 2) <= 0.2, (
        f"simulated {sim_cpu:.2f} s CPU vs 8 gloo processes {real_cpu:.1f} s CPU on 2 cores")


@pytest.mark.slow
def test_an_unexecuted_build_beside_the_site_leaves_its_executed_notebooks_alone(tiny, cold):
    """The floor figure builds with execution off into `_build/floor`; the site's executed
    notebooks (`_build/jupyter_execute`, the next build's starting point) keep their outputs."""
    import json

    site_nb = tiny.docs / "_build" / "jupyter_execute" / "alpha.ipynb"
    outputs = lambda: sum(len(c.get("outputs", [])) for c in json.loads(site_nb.read_text())["cells"])  # noqa: E731
    before = outputs()
    assert before > 0, "the executed notebook has outputs to lose"
    tiny.sphinx(in_process=True, env={"NB_EXECUTION_MODE": "off"}, strict=False, out="floor")
    assert (tiny.docs / "_build" / "floor" / "jupyter_execute" / "alpha.ipynb").is_file()
    assert outputs() == before
