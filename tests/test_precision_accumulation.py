"""Tests of explainers.precision.accumulation: running sums, ulps, the accumulator probe."""


import pytest
import torch

from explainers.precision.accumulation import (
    accumulator_table,
    cancellation_data,
    emulated_dot_error,
    header_acc_types,
    probe_accumulator,
    product_data,
    running_sum,
    ulp,
)


def test_running_sum_stalls_and_fp32_does_not():
    assert running_sum(torch.float32, 0.5, 8) == 4.0


@pytest.mark.parametrize("bad", [torch.int32, torch.bool, "float32"])
def test_running_sum_rejects_non_float(bad):
    with pytest.raises((TypeError, ValueError), match="dtype"):
        running_sum(bad, 0.1, 3)


def test_running_sum_rejects_negative_steps():
    with pytest.raises(ValueError, match="steps"):
        running_sum(torch.float32, 0.1, -1)


def test_ulp():
    assert ulp(1.0, torch.float32) == 2.0**-23
    assert ulp(-3.0, torch.bfloat16) == 2.0**-6


def test_cancellation_data_sums_small():
    x = cancellation_data(torch.float64, 1000, 1024.0)
    assert x[:500].min() >= 1024 and x[500:].max() < -1023
    assert 0 < x.sum().item() < 1000


def test_probe_distinguishes_accumulators():
    # cumsum on CPU accumulates fp32 in double; sum in fp32.
    assert probe_accumulator("cumsum[-1]", torch.float32).verdict == "wider"
    assert probe_accumulator("sum", torch.float32).verdict == "same"
    assert probe_accumulator("sum", torch.float16).verdict == "wider"
    # prod multiplies in the input dtype; cumprod does not.
    assert probe_accumulator("prod", torch.bfloat16).verdict == "same"
    assert probe_accumulator("cumprod[-1]", torch.bfloat16).verdict == "wider"


def test_product_data_stays_near_one():
    x = product_data(torch.float16, 2000)
    assert 0.1 < x.double().prod().item() < 10
    with pytest.raises(ValueError, match="n must be"):
        product_data(torch.float16, 0)


def test_probe_rejects_unknown():
    with pytest.raises(ValueError, match="unknown op"):
        probe_accumulator("median", torch.float32)
    with pytest.raises(ValueError, match="nothing wider"):
        probe_accumulator("sum", torch.float64)


def test_accumulator_table_rows():
    rows = accumulator_table(["sum", "cumsum[-1]"], [torch.float32])
    assert [(r["op"], r["agrees"]) for r in rows] == [("sum", False), ("cumsum[-1]", True)]


def test_emulated_dot_error():
    e = emulated_dot_error(k=512, size=4)
    assert e["bf16_accumulator"] > 10 * e["fp32_accumulator"]
    assert e["fp32_accumulator"] < e["exact, rounded to bf16"] <= e["fp32_accumulator, rounded to bf16"] + 1e-9
    with pytest.raises(ValueError, match="k and size"):
        emulated_dot_error(k=0)


def test_header_acc_types_reads_the_table_not_the_comment():
    cpu, cuda = header_acc_types("CPU"), header_acc_types("CUDA")
    assert cpu[torch.bfloat16] == cpu[torch.float16] == torch.float32
    assert cpu[torch.float32] == torch.float64 and cuda[torch.float32] == torch.float32
    with pytest.raises(ValueError, match="device"):
        header_acc_types("cpu")


def test_nanmean_is_nansum_divided_and_mean_is_not():
    from explainers.precision.nanmean import nanmean_against_nansum, overflow_ones

    got = nanmean_against_nansum(range(4), n=8_000, threads=(1,))
    assert got["nanmean_is_nansum_div"] == got["mean_rounded_once"] == got["cases"] == 16
    assert got["nanmean_rounded_once"] < got["cases"], "a second rounding shows on some input"
    assert overflow_ones(70_000) == {"mean": 1.0, "nanmean": float("inf")}
    assert overflow_ones(60_000) == {"mean": 1.0, "nanmean": 1.0}, "below fp16's max the sum fits"


def test_strided_bf16_nansum_stalls_and_sum_does_not():
    from explainers.nansum_stall import strided_ones_stall, strided_ones_sweep

    (one,) = strided_ones_stall(10_000, threads=(1,))
    assert one["exact"] == 320_000 and one["float_nansum"] == 320_000.0
    assert one["nansum"] == 8192.0, "the strided bf16 nansum stops growing at 8,192"
    assert one["sum"] == torch.tensor(320_000.0).bfloat16().item(), "sum has the fp32 buffer: one rounding"
    assert one["mean"] == 1.0 and one["nanmean"] < 0.03
    small = strided_ones_sweep(rows=(4,), threads=(1,))
    assert small[0]["rows"] == 4 and small[0]["nansum"] == small[0]["exact"] == 128, "below the stall it is exact"
