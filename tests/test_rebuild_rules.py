"""The copied-page experiment the Verification page runs: the real staged build on a one-page site."""

from __future__ import annotations

import sys

import pytest

from tools.rebuild_rules import ACTIONS, copied_page_experiment

pytestmark = pytest.mark.slow


def test_each_action_does_what_the_page_says(tmp_path):
    rows = copied_page_experiment(tmp_path, sys.executable, release="2.14.1")
    assert [r["action"] for r in rows] == list(ACTIONS)
    seen = [(r["2.14.1"]["sphinx ran"], r["2.14.1"]["shows"], r["primary"]["sphinx ran"], r["primary"]["shows"])
            for r in rows]
    assert seen == [
        (True, "ONE", True, "ONE"),    # first build: both gates open
        (True, "ONE", True, "ONE"),    # cp -p: both gates open, Sphinx keeps the old page
        (False, "ONE", False, "ONE"),  # touch: both digests were recorded by the copy's build
        (False, "ONE", True, "TWO"),   # the primary's digest only: the other release stays stale
        (True, "TWO", False, "TWO"),   # every digest: the other release reads the page too
    ]
    assert all(r[k]["ok"] for r in rows for k in ("2.14.1", "primary"))
