"""Tests of the accumulator / output-dtype probes and the knob helpers."""

import pytest
import torch

from explainers.precision import (
    accumulator_table,
    bf16_sum_thread_partials,
    cancellation_data,
    capture_error,
    emulated_dot_error,
    md_table,
    output_dtype,
    probe_accumulator,
    running_sum,
    ulp,
)
from explainers.precision_knobs import (
    fp32_precision_tree,
    knobs_restored,
    legacy_matmul_precision,
    matmul_reduction_flags_effect,
    mkldnn_fp32_matmul_error,
    sdpa_math_reduction_effect,
)


def test_running_sum_stalls_and_fp32_does_not():
    assert running_sum(torch.bfloat16, 0.1, 5000) == 32.0
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


def test_probe_rejects_unknown():
    with pytest.raises(ValueError, match="unknown op"):
        probe_accumulator("median", torch.float32)
    with pytest.raises(ValueError, match="nothing wider"):
        probe_accumulator("sum", torch.float64)


def test_accumulator_table_rows():
    rows = accumulator_table(["sum", "cumsum[-1]"], [torch.float32])
    assert [(r["op"], r["agrees"]) for r in rows] == [("sum", False), ("cumsum[-1]", True)]


def test_output_dtype_and_errors():
    assert output_dtype(lambda x: x.sum(), torch.bool) == "int64"
    assert output_dtype(lambda x: x.sum(), torch.bfloat16) == "bfloat16"
    assert output_dtype(lambda x: x.mean(), torch.int8) == "error: RuntimeError"
    assert capture_error(lambda: int("x"))[0] == "ValueError"


def test_mm_out_dtype_not_on_cpu():
    a = torch.ones(2, 2, dtype=torch.bfloat16)
    err = capture_error(lambda: torch.mm(a, a, out_dtype=torch.float32))
    assert err is not None and err[0] == "NotImplementedError"


def test_emulated_dot_error():
    e = emulated_dot_error(k=512, size=4)
    assert e["bf16_accumulator"] > 10 * e["fp32_accumulator"]
    with pytest.raises(ValueError, match="k and size"):
        emulated_dot_error(k=0)


def test_md_table_escapes_and_formats():
    assert md_table([{"a|b": 0.5}]).splitlines() == ["| a\\|b |", "|---|", "| 0.5 |"]


# -- knobs --------------------------------------------------------------------------


def test_knobs_restored_puts_everything_back_after_error():
    before = fp32_precision_tree()
    mm = torch.backends.cuda.matmul
    with pytest.raises(RuntimeError, match="boom"), knobs_restored():
        torch.backends.fp32_precision = "tf32"
        torch.backends.mkldnn.matmul.fp32_precision = "bf16"
        torch.set_float32_matmul_precision("medium")
        mm.allow_bf16_reduced_precision_reduction = False
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)
        raise RuntimeError("boom")
    assert fp32_precision_tree() == before
    assert legacy_matmul_precision() == "highest"
    assert mm.allow_bf16_reduced_precision_reduction is True
    assert torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed() is False


def test_knobs_restored_keeps_inheritance():
    # After restoring, a child left at "none" must still follow its parent.
    with knobs_restored():
        torch.backends.fp32_precision = "ieee"
    with knobs_restored():
        torch.backends.fp32_precision = "tf32"
        assert fp32_precision_tree()["mkldnn.conv"] == "tf32"


def test_mkldnn_setter_writes_generic_root():
    # torch 2.14.1: torch.backends.mkldnn.fp32_precision's setter writes ("generic", "all").
    with knobs_restored():
        torch.backends.mkldnn.fp32_precision = "tf32"
        assert fp32_precision_tree()["cuda.matmul"] == "tf32"


def test_flag_effects():
    assert all(matmul_reduction_flags_effect(size=8, k=512).values())
    e = sdpa_math_reduction_effect(shape=(1, 2, 128, 32))
    assert e[True] > e[False]
    with pytest.raises(ValueError, match="float16 and bfloat16"):
        sdpa_math_reduction_effect(torch.float32)
    assert mkldnn_fp32_matmul_error("ieee", m=8, k=64, n=8) < 1e-4


def test_bf16_sum_rounds_per_thread_partials():
    import torch as _t

    before = _t.get_num_threads()
    r2 = bf16_sum_thread_partials(2, trials=20)
    assert _t.get_num_threads() == before
    assert r2["partials_rounded"] == 20 > r2["rounded_once"]
    assert bf16_sum_thread_partials(1, trials=5)["rounded_once"] == 5
    with pytest.raises(ValueError, match="thread count"):
        bf16_sum_thread_partials(0)
