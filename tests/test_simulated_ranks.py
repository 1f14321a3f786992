"""Rank-dependent control flow under a simulated mesh: what explainers.simulated_ranks reports."""

from __future__ import annotations

import pytest

from explainers.simulated_ranks import COMPARISONS, rank_control_flow


@pytest.mark.parametrize("shape", [(2,), (2, 2), (2, 2, 2)])
def test_per_rank_arithmetic_no_eq_branch_and_disagreeing_comparisons_raise(shape):
    seen = rank_control_flow(shape)
    world = len(seen["rank"])
    assert seen["rank"] == {str(r): r for r in range(world)}
    assert seen["per_rank_op"] == {str(r): [r + 1.0] * 2 for r in range(world)}
    assert (seen["eq_0"], seen["ne_0"]) == (False, True)
    assert set(map(tuple, seen["if_eq_0"].values())) == {(1.0, 1.0)}  # rank 0 took no branch either
    for op in COMPARISONS:
        assert seen["compare"][f"{op} half"] == "AssertionError"
    assert [seen["compare"][f"{op} world"] for op in COMPARISONS] == [True, False, True, False]


def test_a_one_rank_world_is_a_plain_program():
    # The control: with one rank nothing disagrees, so rank == 0 is True and the branch runs.
    seen = rank_control_flow((1,))
    assert (seen["eq_0"], seen["ne_0"], seen["if_eq_0"]) == (True, False, {"0": [2.0, 2.0]})
    assert seen["compare"]["< half"] is False  # 0 < 0: every rank agrees, nothing raises
