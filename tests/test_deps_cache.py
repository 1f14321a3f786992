"""The dependency-aware execution cache (docs/_ext/explainer_deps.py, MyST-NB #299).

A copy of the site with three tiny pages: `uses_alpha` imports
`explainers.alpha`, `uses_beta` imports `explainers.beta` (which imports
`explainers.gamma`), `plain` imports nothing from `explainers`.  After each
change the staged build must re-execute exactly the pages that depend on the
changed file, and serve the others from the cache.  A fake `torch` package
(first on the build's path, with a `version.py`) stands in for a torch upgrade.
"""

from __future__ import annotations

import pytest
from gate_figures import record
from minisite import build, executed_pages, make_tree, page

pytestmark = pytest.mark.slow

PAGES = {
    "uses_alpha": page("Alpha", "from explainers.alpha import VALUE\nprint(VALUE)"),
    "uses_beta": page("Beta", "from explainers import beta\nprint(beta.twice())"),
    "plain": page("Plain", "print(sum(range(4)))"),
}


def test_a_module_change_reexecutes_exactly_the_pages_that_import_it(tmp_path):
    root = tmp_path
    docs = make_tree(root, PAGES)
    pkg = root / "explainers"
    (pkg / "alpha.py").write_text('"""Test module."""\nVALUE = 1\n')
    (pkg / "beta.py").write_text('"""Test module."""\nfrom .gamma import BASE\n\n\ndef twice():\n    return 2 * BASE\n')
    (pkg / "gamma.py").write_text('"""Test module."""\nBASE = 21\n')
    fake = root / "fake-site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "version.py").write_text("__version__ = '2.14.1'\n")
    env = {"PYTHONPATH": f"{root / 'fake-site'}:{root}"}

    def step(change=None) -> set[str]:
        if change:
            change()
        result = build(docs, extra_env=env)
        assert result.ok, result.output[-3000:]
        return executed_pages(result.output)

    seen = {}
    seen["cold"] = step()
    seen["unchanged"] = step()
    seen["alpha.py"] = step(lambda: (pkg / "alpha.py").write_text('"""Test module."""\nVALUE = 2\n'))
    # beta imports gamma: a change two imports away still reaches uses_beta.
    seen["gamma.py"] = step(lambda: (pkg / "gamma.py").write_text('"""Test module."""\nBASE = 22\n'))
    seen["torch version"] = step(lambda: (fake / "version.py").write_text("__version__ = '2.14.2'\n"))

    expected = {
        "cold": set(PAGES),
        "unchanged": set(),
        "alpha.py": {"uses_alpha"},
        "gamma.py": {"uses_beta"},
        "torch version": set(PAGES),
    }
    record("deps", "cache", result="re-executed exactly the dependent pages in "
           f"{sum(seen[k] == expected[k] for k in expected)} of {len(expected)} steps")
    assert seen == expected
    # The re-executed page shows the new value: the output really is fresh.
    html = (docs / "_build" / "html" / "uses_beta.html").read_text(encoding="utf-8")
    assert "44" in html
