"""`nox -s docs` with no changed input does not start Sphinx; any changed input builds.

The staged build (`tools/sitebuild.py`) records the digest of its
inputs next to the site it publishes.  These run the real build on a tiny
site (real conf.py and extensions; the page does not import torch).
"""

from __future__ import annotations

import os
import time

import pytest
from minisite import build, make_tree, page

from tools.sitebuild import INPUTS_FILE, tree_digest

pytestmark = pytest.mark.slow

ENV = "python 3.11 | torch 2.14.1"  # stands for the noxfile's environment identity


@pytest.fixture
def docs(tmp_path):
    """A tiny site built once with the option.  Its own tree per test: the digest covers
    the build's command line, whose paths name the tree, so a copy would not be up to date."""
    docs = make_tree(tmp_path, {"one": page("One", "print(6 * 7)")})
    result = build(docs, skip_unchanged=ENV)
    assert result.ok and "Executed notebook" in result.output, result.output[-3000:]
    assert (docs / "_build" / INPUTS_FILE).is_file()
    return docs


def test_no_changed_input_builds_nothing_and_leaves_the_site(docs):
    site = docs / "_build" / "html"
    before = tree_digest(site)
    page_md = docs / "one.md"
    later = time.time() + 5
    os.utime(page_md, (later, later))  # a bare touch is not a change
    result = build(docs, skip_unchanged=ENV)
    assert result.ok and "up to date" in result.message
    assert result.output == ""  # Sphinx never started
    assert tree_digest(site) == before


@pytest.mark.parametrize("change", ["page", "module", "environment", "arguments"])
def test_any_changed_input_builds(docs, change):
    env, extra = ENV, ()
    if change == "page":
        (docs / "one.md").write_text(page("One", "print(6 * 9)"))
    elif change == "module":
        with (docs.parent / "explainers" / "render.py").open("a") as f:
            f.write("\n# an edit\n")
    elif change == "environment":
        env = ENV.replace("2.14.1", "2.15.0")
    else:
        extra = ("-j", "1")
    result = build(docs, skip_unchanged=env, extra=extra)
    assert result.ok, result.output[-3000:]
    assert "Site built" in result.message and result.output != ""
    # ...and the next build with the same inputs is a no-op again.
    again = build(docs, skip_unchanged=env, extra=extra)
    assert "up to date" in again.message and again.output == ""


def test_a_failed_build_keeps_the_record_of_the_site_it_left(docs):
    good = (docs / "one.md").read_text()
    (docs / "one.md").write_text(page("One", "assert 6 * 7 == 43, 'broken'"))
    assert not build(docs, skip_unchanged=ENV).ok
    (docs / "one.md").write_text(good)  # reverted: the published site matches these inputs
    result = build(docs, skip_unchanged=ENV)
    assert "up to date" in result.message


def test_without_the_option_it_always_builds(docs):
    # The fault-injection and determinism checks rely on a real build every time.
    result = build(docs)
    assert "Site built" in result.message and "Running Sphinx" in result.output
