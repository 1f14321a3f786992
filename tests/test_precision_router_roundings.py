"""Tests of explainers.precision.router_roundings: where each router rounds, on one sample and over a sweep."""

import pytest
import torch

from explainers.precision.router_roundings import (
    rounding_sweep,
    router_roundings,
    softmax_off_by_length,
)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_where_each_router_rounds(dtype):
    r = router_roundings(dtype, tokens=512, n_experts=64, k=4)
    assert r.b_off_sum_and_quotient == 0
    assert r.a_max_ulps_off <= 1 and r.probs_max_ulps_off <= 1
    assert 0 < r.b_differs_without_sum_rounding < r.weights == 512 * 4


def test_router_roundings_needs_a_low_precision_dtype():
    with pytest.raises(ValueError, match="bfloat16 or float16"):
        router_roundings(torch.float32)


def test_fp16_a_is_not_always_the_fp32_softmax_rounded_once():
    # seed 1 at sigma = 1 is one of the samples where the fp16 kernel rounds another fp32 value
    r = router_roundings(torch.float16, tokens=4096, n_experts=256, k=8, scale=1.0, seed=1)
    assert r.a_weights_off > 0 and r.a_max_ulps_off == 1.0
    assert 0 < r.a_max_fp32_ulps_to_midpoint <= 2


def test_sweep_aggregates_every_sample():
    s = rounding_sweep(torch.float16, range(3), (31, 32), tokens=256, k=4)
    assert s.samples == 6 and s.weights == 6 * 256 * 4
    assert set(s.probs_off_by_n) == {31, 32}
    assert s.probs_off_by_n[32][1] == 3 * 256 * 32
    assert s.b_off_sum_and_quotient == 0 and s.max_ulps_a < 0.501 < s.max_ulps_b


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_softmax_off_by_length_counts_every_value(dtype):
    r = softmax_off_by_length(dtype, (1, 7, 16, 1000), values=3000)
    assert list(r) == [1, 7, 16, 1000]
    # at least `values` values, and at least 256 rows
    assert [total for _, total, _ in r.values()] == [3000, 429 * 7, 256 * 16, 256 * 1000]
    # a one-value row's softmax is exactly 1 in every dtype
    assert r[1][0] == 0 and r[1][2] == 0.0
    assert all(0 <= off <= total and 0 <= gap <= 1 for off, total, gap in r.values())


def test_short_row_softmax_is_the_kernel_below_one_vector_and_needs_libm_expf():
    import torch

    from explainers.softmax_tail import fp32_lanes, short_row_softmax, short_rows_off

    for dtype in (torch.bfloat16, torch.float16):
        off = short_rows_off(dtype, range(1, fp32_lanes()), rows=2048)
        assert all(o == 0 for o, _ in off.values()), (dtype, off)
    # the fp32 kernel is the same steps with Sleef's vectorised exp; with the C library's expf they differ
    from explainers.softmax_tail import sleef_expf16

    off32 = short_rows_off(torch.float32, range(1, 16), rows=2048, exp=sleef_expf16)
    assert all(o == 0 for o, _ in off32.values()), off32
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2**14, 7, generator=g) * 2
    assert (short_row_softmax(x) != torch.softmax(x, dim=-1)).any()


def test_at_capability_runs_the_target_at_the_forced_capability():
    import pytest

    from explainers.softmax_tail import at_capability

    assert at_capability("avx2", "explainers.softmax_tail:fp32_lanes") == 8
    with pytest.raises(ValueError, match="explainers.<module>:<function>"):
        at_capability("avx2", "os.path:join")
