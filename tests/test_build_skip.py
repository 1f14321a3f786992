"""`nox -s docs` with no changed input does not start Sphinx; any changed input builds.

The staged build (`explainers.build.build_site`) records the digest of its
inputs next to the site it publishes.  These run the real build on a tiny
site (real conf.py and extensions; the page does not import torch).
"""

from __future__ import annotations

import os
import shutil
import time

import pytest
from minisite import build, make_tree, page

from explainers.build import INPUTS_FILE, tree_digest

pytestmark = pytest.mark.slow

ENV = "python 3.11 | torch 2.14.1"  # stands for the noxfile's environment identity


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("skip")
    docs = make_tree(root, {"one": page("One", "print(6 * 7)")})
    result = build(docs, skip_unchanged=ENV)
    assert result.ok and "Executed notebook" in result.output, result.output[-3000:]
    assert (docs / "_build" / INPUTS_FILE).is_file()
    return root


def _copy(built, tmp_path):
    root = tmp_path / "case"
    shutil.copytree(built, root, symlinks=True)
    return root / "docs"


def test_no_changed_input_builds_nothing_and_leaves_the_site(built, tmp_path):
    docs = _copy(built, tmp_path)
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
def test_any_changed_input_builds(built, tmp_path, change):
    docs = _copy(built, tmp_path)
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


def test_a_failed_build_keeps_the_record_of_the_site_it_left(built, tmp_path):
    docs = _copy(built, tmp_path)
    good = (docs / "one.md").read_text()
    (docs / "one.md").write_text(page("One", "assert 6 * 7 == 43, 'broken'"))
    assert not build(docs, skip_unchanged=ENV).ok
    (docs / "one.md").write_text(good)  # reverted: the published site matches these inputs
    result = build(docs, skip_unchanged=ENV)
    assert "up to date" in result.message


def test_without_the_option_it_always_builds(built, tmp_path):
    # The fault-injection and determinism checks rely on a real build every time.
    docs = _copy(built, tmp_path)
    result = build(docs)
    assert "Site built" in result.message and "Using cached notebook" in result.output
