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
