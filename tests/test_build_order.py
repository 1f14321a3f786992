"""The README's two commands in its order, `nox -s docs` then `nox -s tests`, on one checkout.

`nox -s docs` verifies the pages on the primary release only; `nox -s tests` on
every supported release.  The second build must not serve the first one's
executions from the cache: each page's stamp names the releases its build
verified, exactly, and the downloadable notebook is that execution.  This runs
the real staged build (`tools/sitebuild.py`) on a mini-site whose page carries
the real stamp, primary-only first, then all releases, then primary-only again,
and compares the second with a clean all-releases build.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest
from minisite import build, executed_pages, make_tree, page
from test_determinism import _normalized

from explainers.releases import PRIMARY, SUPPORTED
from tools.sitebuild import tree_digest

pytestmark = pytest.mark.slow

STAMPED = page(
    "Stamped",
    "from explainers.page.stamp import begin_page\nbegin_page()",
    "print(sum(range(10)))",
    "from explainers.page.stamp import end_page\nend_page()",
    prose="```{glue:md} page_stamp\n:format: myst\n```\n\nA page with the real stamp.",
)


def _verified(releases: tuple[str, ...]) -> dict[str, str]:
    return {"TORCH_EXPLAINERS_VERIFIED_ON": ",".join(releases)}


def _stamp(site) -> list[str]:
    html = (site / "stamped.html").read_text(encoding="utf-8")
    found = re.search(r"verified on ([^<]+)</span>", html)
    assert found, "no stamp on the page"
    return re.findall(r"\d+\.\d+\.\d+", found.group(1))


def _notebook_stamp(site) -> list[str]:
    """The releases named by the stamp that ``end_page()`` returned in the downloadable notebook."""
    nb = json.loads((site / "_sources" / "stamped.ipynb").read_text())
    texts = [str(v) for c in nb["cells"] if c["cell_type"] == "code" for o in c["outputs"]
             for v in o.get("data", {}).values()]
    stamps = [m for t in texts for m in re.findall(r"`verified on ([^`]+)`", t)]
    assert stamps, "the downloadable notebook has no stamp output"
    return re.findall(r"\d+\.\d+\.\d+", stamps[-1])


def test_docs_then_tests_then_docs_restamps_every_page(tmp_path):
    assert len(SUPPORTED) > 1, "needs a second release to tell the two builds apart"
    docs = make_tree(tmp_path / "checkout", {"stamped": STAMPED})
    site = docs / "_build" / "html"
    # docs (primary only), tests (every release), docs again, tests again.  The first two
    # execute; the last two verify what an earlier build executed, so the cache serves them,
    # and the stamp and the download must still be that execution's.
    for step, releases in enumerate(((PRIMARY,), SUPPORTED, (PRIMARY,), SUPPORTED)):
        result = build(docs, extra_env=_verified(releases))
        assert result.ok, result.output[-3000:]
        ran = "stamped" in executed_pages(result.output)
        assert ran == (step < 2), (
            f"step {step} ({releases}): executed {ran}; the cache key must hold the releases verified")
        assert _stamp(site) == list(releases), f"stamp {_stamp(site)} after a build verifying {releases}"
        assert _notebook_stamp(site) == list(releases), (
            f"the download's stamp {_notebook_stamp(site)} after a build verifying {releases}")
    sequential = tmp_path / "sequential"
    shutil.copytree(site, sequential)

    # The same checkout built once, clean, verifying every release: the same site.
    clean = make_tree(tmp_path / "clean", {"stamped": STAMPED})
    result = build(clean, extra_env=_verified(SUPPORTED))
    assert result.ok, result.output[-3000:]
    differ = []
    for path in sorted(p for p in sequential.rglob("*") if p.is_file()):
        rel = path.relative_to(sequential).as_posix()
        theirs = clean / "_build" / "html" / rel
        if not theirs.is_file():
            differ.append(f"{rel} (missing in the clean build)")
        elif (_normalized(path, rel, str(tmp_path / "checkout"))
              != _normalized(theirs, rel, str(tmp_path / "clean"))):
            differ.append(rel)
    assert differ == [], f"the docs-then-tests site differs from a clean build: {differ}"


def test_a_notebook_without_outputs_gets_them_from_the_cache_or_fails_the_build(tmp_path):
    # MyST-NB writes a page served from the execution cache without outputs; the download
    # takes them from the cache.  Strip them by hand: they come back.  Then remove the cache
    # as well: the build must refuse to offer an empty notebook, and keep the last good site.
    docs = make_tree(tmp_path, {"stamped": STAMPED})
    assert build(docs, extra_env=_verified((PRIMARY,))).ok
    site = docs / "_build" / "html"
    executed = docs / "_build" / "jupyter_execute" / "stamped.ipynb"

    def strip_outputs() -> None:
        nb = json.loads(executed.read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] == "code":
                cell["outputs"] = []
        executed.write_text(json.dumps(nb))

    strip_outputs()
    (docs / "index.md").write_text((docs / "index.md").read_text() + "\nEdited.\n")  # not the page
    result = build(docs, extra_env=_verified((PRIMARY,)))
    assert result.ok, result.output[-3000:]
    assert _notebook_stamp(site) == [PRIMARY], "the download did not get its outputs from the cache"

    strip_outputs()
    shutil.rmtree(docs / "_build" / ".jupyter_cache")
    before = tree_digest(site)
    (docs / "index.md").write_text((docs / "index.md").read_text() + "\nEdited again.\n")
    result = build(docs, extra_env=_verified((PRIMARY,)))
    assert not result.ok and "notebook" in result.output and "has no outputs" in result.output, (
        result.output[-3000:])
    assert tree_digest(site) == before, "a failed build replaced the site"
