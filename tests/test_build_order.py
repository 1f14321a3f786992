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
    nb = json.loads((site / "_sources" / "stamped.ipynb").read_text())
    texts = [v for c in nb["cells"] if c["cell_type"] == "code" for o in c["outputs"]
             if o.get("metadata", {}).get("scrapbook", {}).get("name") == "page_stamp"
             for k, v in o["data"].items() if k.endswith("text/markdown")]
    assert texts, "the downloadable notebook has no stamp output"
    return re.findall(r"\d+\.\d+\.\d+", texts[0].split("`")[1])


def test_docs_then_tests_then_docs_restamps_every_page(tmp_path):
    assert len(SUPPORTED) > 1, "needs a second release to tell the two builds apart"
    docs = make_tree(tmp_path / "checkout", {"stamped": STAMPED})
    site = docs / "_build" / "html"
    for releases in ((PRIMARY,), SUPPORTED, (PRIMARY,)):
        result = build(docs, extra_env=_verified(releases))
        assert result.ok, result.output[-3000:]
        assert "stamped" in executed_pages(result.output), (
            f"the build verifying {releases} served the page from another build's execution")
        assert _stamp(site) == list(releases), f"stamp {_stamp(site)} after a build verifying {releases}"
        assert _notebook_stamp(site) == list(releases), (
            f"the download's stamp {_notebook_stamp(site)} after a build verifying {releases}")
    # Back to the all-releases build: its execution is cached, so nothing runs, and the stamp is right.
    again = build(docs, extra_env=_verified(SUPPORTED))
    assert again.ok and executed_pages(again.output) == set(), again.output[-3000:]
    assert _stamp(site) == list(SUPPORTED)
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


def test_a_notebook_without_outputs_fails_the_build(tmp_path):
    # The control for the download check: the executed notebook a cached page is served
    # from is replaced by one without outputs; the build must refuse to offer it.
    docs = make_tree(tmp_path, {"stamped": STAMPED})
    assert build(docs, extra_env=_verified((PRIMARY,))).ok
    site = docs / "_build" / "html"
    before = tree_digest(site)
    executed = docs / "_build" / "jupyter_execute" / "stamped.ipynb"
    nb = json.loads(executed.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"] = []
    executed.write_text(json.dumps(nb))
    (docs / "index.md").write_text((docs / "index.md").read_text() + "\nEdited.\n")  # not the page
    result = build(docs, extra_env=_verified((PRIMARY,)))
    assert not result.ok and "has no outputs" in result.output, result.output[-3000:]
    assert tree_digest(site) == before, "a failed build replaced the site"
