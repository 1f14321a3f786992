"""Tests of explainers.precision.router_ties: the logit-scale sweep and the merge ablation."""

import torch

from explainers.precision.router_ties import (
    cpu_topk_path,
    dense_rank,
    fp32_softmax_merges,
    merge_ablation,
    power_of_two_scales,
    rank_k_merges,
    round_significand,
    tie_sweep,
    underflow_ablation,
)


def test_dense_rank_keeps_order_and_ties():
    x = torch.tensor([[0.3, -1.0, 0.3, 2.0, -1.0]])
    r = dense_rank(x)
    assert r.tolist() == [[1, 0, 1, 2, 0]]
    # order-preserving in both directions, ties kept
    assert torch.equal(x[:, :, None] < x[:, None, :], r[:, :, None] < r[:, None, :])


def test_topk_depends_only_on_order_and_ties():
    m = merge_ablation(torch.bfloat16, tokens=256, n_experts=256, k=8, scale=0.1)
    assert m.b_is_topk_of_prob_ranks == m.a_is_topk_of_logit_ranks == m.unmerged_is_a == 256
    assert m.merged_rows > 0 and m.a_ne_b > 0


def test_sweep_small_scale_picks_non_top_k():
    small, big = tie_sweep(torch.bfloat16, (0.1, 2.0), tokens=512)
    assert small.b_not_top_k > 0 and small.tied_probs > small.tied_logits
    assert big.b_not_top_k == 0 and big.differ_without_logit_tie == 0
    assert small.a_or_b32_not_reference == big.a_or_b32_not_reference == 0


def test_fp16_underflow_switched_off():
    counts = underflow_ablation(torch.float16, 16.0, tokens=512)
    assert counts["softmax in the dtype"] == counts["fp32 softmax cast to the dtype"] > 0
    assert counts["fp32 softmax, the dtype's bits, fp32's range"] == 0


def test_round_significand_has_no_range_limit():
    x = torch.tensor([1e-30, 3.0, 1.0 + 2**-12])
    assert round_significand(x, 11)[0] != 0 and round_significand(x, 11)[1:].tolist() == [3.0, 1.0]


def test_power_of_two_scales_bf16_exact():
    counts = power_of_two_scales(torch.bfloat16, (0.1, 0.5, 8.0), tokens=128, n_experts=32)
    assert counts[0.5] == counts[8.0] == 0 < counts[0.1]


def test_fp32_never_differs():
    (row,) = tie_sweep(torch.float32, (0.1,), tokens=256)
    assert row.a_ne_b == row.tied_logits == row.b_not_top_k == 0


def test_fp16_large_scale_underflow_picks_non_top_k():
    (row,) = tie_sweep(torch.float16, (16.0,), tokens=256)
    assert row.kth_prob_subnormal > 0 and row.b_not_top_k > 0
    assert row.b_not_top_k_kth_normal == 0
    (bf,) = tie_sweep(torch.bfloat16, (16.0,), tokens=256)
    assert bf.kth_prob_subnormal == bf.b_not_top_k == 0


def test_fp32_softmax_merges_past_its_exp_range():
    small = fp32_softmax_merges(torch.bfloat16, 2.0, tokens=256)
    big = fp32_softmax_merges(torch.bfloat16, 24.0, tokens=256)
    assert small.merged_rows == small.b32_not_reference == 0
    assert big.merged_rows > 200 and big.b32_not_reference > 0


def test_rank_k_merges_splits_the_two_places():
    # at σ = 2 every difference is a logit tie decided elsewhere in the row, on both topk paths
    for n, k in ((256, 8), (1024, 16)):
        r = rank_k_merges(torch.bfloat16, tokens=4096, n_experts=n, k=k, scale=2.0)
        assert r.a_ne_b > 0
        assert r.a_ne_b == r.rank_k_group_is_logit_tie == r.unmerged_elsewhere_is_a == r.unmerged_at_k_is_b
    # at σ = 0.5 the rank-k probability tie also joins distinct logits
    half = rank_k_merges(torch.bfloat16, tokens=4096, scale=0.5)
    assert half.rank_k_group_is_logit_tie < half.a_ne_b and half.unmerged_elsewhere_is_a < half.a_ne_b


def test_cpu_topk_path_is_the_k_times_64_rule():
    assert [cpu_topk_path(n, k) for n, k in ((64, 1), (63, 1), (256, 4), (256, 5), (1024, 16), (1023, 16))] == [
        "partial_sort", "nth_element", "partial_sort", "nth_element", "partial_sort", "nth_element"]
