"""explainers.mesh.strided: the nested layout, the two ablations, the uneven-size table."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.distributed.tensor.placement_types import _StridedShard

from explainers.mesh.strided import (
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
