"""Tests of explainers.precision.threads: thread-count dependence of bf16/fp16 reductions."""

import pytest
import torch

from explainers.precision.threads import bf16_sum_thread_partials, layout_data, thread_partials


def test_bf16_sum_rounds_per_thread_partials():
    before = torch.get_num_threads()
    r2 = bf16_sum_thread_partials(2, trials=20)
    assert torch.get_num_threads() == before
    assert r2["partials_rounded"] == 20 > r2["rounded_once"]
    assert bf16_sum_thread_partials(1, trials=5)["rounded_once"] == 5
    with pytest.raises(ValueError, match="thread count"):
        bf16_sum_thread_partials(0)


def test_strided_sum_and_mean_round_once():
    assert thread_partials(2, torch.float16, "strided", trials=10)["rounded_once"] == 10
    assert thread_partials(2, torch.bfloat16, "contiguous", "mean", trials=10)["rounded_once"] == 10


def test_layout_data_rejects_bad_input():
    with pytest.raises(ValueError, match="layout"):
        layout_data(64, torch.float16, "sparse", 0)
    with pytest.raises(ValueError, match="multiple of 32"):
        layout_data(33, torch.float16, "strided", 0)


def test_layout_sweep_nansum_strided_rounds_in_the_input_dtype():
    from explainers.precision.threads import layout_sweep

    rows = layout_sweep(["sum", "nansum"], [torch.float16], sizes=(8000,), threads=(1,), seeds=range(2))
    by = {(r["op"], r["layout"]): r["max_ulps"] for r in rows}
    assert by[("sum", "strided")] < 1 and by[("sum", "contiguous")] < 1
    assert by[("nansum", "strided")] > 2, "nansum has no fp32 buffer for inputs that do not coalesce"


def test_probe_layout_rejects_bad_input():
    from explainers.precision.threads import probe_layout

    with pytest.raises(ValueError, match="multiple of 32"):
        probe_layout("sum", torch.bfloat16, "strided", 100, 1)
    with pytest.raises(ValueError, match="dtype must be"):
        probe_layout("sum", torch.float32, "strided", 8000, 1)
    with pytest.raises(ValueError, match="unknown op"):
        probe_layout("max", torch.bfloat16, "strided", 8000, 1)
