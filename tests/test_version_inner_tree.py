"""The INNER_TREE eligibility grid: torch's own check, called on fake CUDA inputs under each release."""

from __future__ import annotations

import pytest

from explainers.releases import SUPPORTED, run_under
from explainers.version_inner_tree import LAYOUTS, OTHER_CASES, stated_rule


@pytest.mark.parametrize("release", SUPPORTED)
def test_the_check_agrees_with_the_stated_rule_on_every_layout(release):
    got = run_under(release, "explainers.version_inner_tree:eligibility_grid")
    assert set(got) == set(LAYOUTS) | set(OTHER_CASES)
    assert {name: got[name] for name in LAYOUTS} == {name: stated_rule(*v) for name, v in LAYOUTS.items()}
    # both outcomes occur, so the grid separates layouts
    assert {got[name] for name in LAYOUTS} == {True, False}


@pytest.mark.parametrize("release", SUPPORTED)
def test_with_the_installed_triton_nothing_qualifies(release):
    got = run_under(release, "explainers.version_inner_tree:eligibility_grid", patch_triton=False)
    assert set(got.values()) == {False}


def test_stated_rule_on_a_size_one_reduced_dimension():
    assert stated_rule((1, 8), (8, 1), 0)  # reduced stride 8, but one element
    assert not stated_rule((4, 1), (8, 1), 1)  # the other dimension's stride is 8, not 1
    assert stated_rule((8, 1), (1, 1), 0)  # the size-1 other dimension is ignored
    assert not stated_rule((4, 4), (8, 2), 1)  # reduced stride 2
