"""explainers.mesh.strided: the nested layout, the two ablations, the uneven-size table."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.distributed.tensor.placement_types import _StridedShard

from explainers.mesh.strided import (
    gather_inputs,
    layout_table,
    nested_first_split,
    nested_layout,
    outcome,
    padded_strided_split,
)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 64))
def test_nested_layout_is_torch_chunk_right_to_left(numel):
    def chunk(t, i):
        pieces = list(t.chunk(2))
        return (pieces + [t[:0]] * (2 - len(pieces)))[i]

    got = nested_layout(numel)
    for m in range(2):
        for n in range(2):
            for k in range(2):
                want = chunk(chunk(chunk(torch.arange(numel), k), n), m).tolist()
                assert got[4 * m + 2 * n + k] == want
    assert sorted(v for vs in got.values() for v in vs) == list(range(numel))


@pytest.mark.parametrize("patch", [padded_strided_split, nested_first_split])
def test_ablations_restore_split_tensor(patch):
    before = _StridedShard.__dict__["_split_tensor"]
    with pytest.raises(KeyError), patch():
        assert _StridedShard.__dict__["_split_tensor"] is not before
        raise KeyError("leave the block by an exception")
    assert _StridedShard.__dict__["_split_tensor"] is before


def test_padded_split_pads_only_what_it_computed():
    with padded_strided_split():
        shards, pads = _StridedShard(0, split_factor=4)._split_tensor(torch.arange(13), 2)
        unpadded, none = _StridedShard(0, split_factor=4)._split_tensor(
            torch.arange(13), 2, with_padding=False)
    assert [len(s) for s in shards] == [7, 7] and pads == [0, 1] and none == []
    assert [len(s) for s in unpadded] == [7, 6]


def test_nested_split_refuses_other_factors():
    with nested_first_split(), pytest.raises(ValueError, match="power-of-two"):
        _StridedShard(0, split_factor=3)._split_tensor(torch.arange(9), 2)


def test_outcome_and_bad_ablation():
    assert outcome({0: [0, 1]}, 2) == "right" and outcome({0: [1, 0]}, 2) == "wrong"
    with pytest.raises(ValueError, match="ablation"):
        layout_table([8], ablation="other")


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 40))
def test_gather_inputs_records_each_groups_sizes(numel):
    """One group per all-gather over a 1-D mesh; sizes are torch.chunk's, padded to one size."""
    from torch.distributed._local_tensor import _c10d
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    from explainers.mesh.simulated import simulated_mesh

    saved = _c10d._local_functional_all_gather_into_tensor
    with simulated_mesh((4,), ("m",)) as mesh, gather_inputs() as seen:
        x = distribute_tensor(torch.arange(numel), mesh, [Shard(0)], src_data_rank=None)
        assert x.redistribute(mesh, [Replicate()]).to_local()._local_tensors[3].tolist() == list(range(numel))
    assert seen == [[-(-numel // 4)] * 4]
    assert _c10d._local_functional_all_gather_into_tensor is saved


def test_gather_inputs_restores_on_error():
    from torch.distributed._local_tensor import _c10d

    saved = _c10d._local_functional_all_gather_into_tensor
    with pytest.raises(ValueError), gather_inputs():
        raise ValueError
    assert _c10d._local_functional_all_gather_into_tensor is saved


def test_unequal_inputs_exactly_where_the_way_back_raises():
    rows = layout_table([8, 9, 13])
    got = {r["numel"]: (r["distribute"]["back"]["outcome"].split(":")[0], r["distribute"]["back"]["unequal"])
           for r in rows}
    assert got == {8: ("right", []), 9: ("RuntimeError", [[2, 1], [1, 0]]), 13: ("wrong", [])}
    assert all(r[e]["back"]["unequal"] == [] for r in rows for e in ("redistribute", "shard_order"))


@pytest.mark.slow
def test_real_gloo_aborts_on_unequal_gather_and_keeps_going():
    """9 aborts the launch (unequal all-gather inputs); the next launch runs 14, silently wrong."""
    from explainers.mesh.strided_real import launch_strided

    rows = launch_strided([9, 14])
    assert [r["numel"] for r in rows] == [9, 14]
    assert rows[0]["aborted"] and any("doesn't match expected size" in g for g in rows[0]["aborted"]["gloo"])
    assert -6 in rows[0]["aborted"]["exitcodes"].values()
    assert rows[1]["aborted"] is None
    assert rows[1]["distribute"]["back"] == {
        "rank0": [0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 0, 13], "outcome": "wrong"}
    assert rows[1]["distribute"]["layout"]["1"] == [8, 9] and rows[1]["redistribute"]["layout"]["1"] == [7, 8]


@pytest.mark.slow
def test_gloo_accepts_a_shorter_message():
    from explainers.mesh.gloo_short import short_message

    assert short_message() == {"received_into_3": [7.0, -1.0, -1.0], "returncode": 0}
