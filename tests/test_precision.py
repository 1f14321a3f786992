"""Tests of the accumulator / output-dtype probes and the knob helpers."""

from pathlib import Path

import pytest
import torch

from explainers.page.tables import md_table
from explainers.page.torchsource import installed_source, quote_installed
from explainers.precision import (
    REFUSALS,
    accumulator_table,
    addmm_roundings,
    bf16_sum_thread_partials,
    cancellation_data,
    capture_error,
    emulated_dot_error,
    header_acc_types,
    output_dtype,
    probe_accumulator,
    refusal_cases,
    refusal_report,
    refusal_table,
    running_sum,
    ulp,
)
from explainers.precision_knobs import (
    DEFAULT,
    OneDNNCall,
    _parse_verbose,
    arithmetic_verdict,
    cuda_matmul_knobs_effect,
    fp32_precision_stored,
    fp32_precision_tree,
    fresh_python,
    knobs_restored,
    legacy_getter_matrix,
    legacy_matmul_precision,
    library_message,
    mkldnn_fp32_matmul_errors,
    python_name,
    sdpa_math_reduction_effect,
)
from explainers.releases import release_of

REPO = Path(__file__).resolve().parents[1]


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
    # 2.15.0 refuses an integer mean with NotImplementedError, a RuntimeError subclass; 2.14.1 with RuntimeError
    refusal = {"2.14.1": "RuntimeError", "2.15.0": "NotImplementedError"}[release_of(torch.__version__)]
    assert output_dtype(lambda x: x.mean(), torch.int8) == f"error: {refusal}"
    assert output_dtype(lambda x: x - x, torch.bool) == "error: NotImplementedError"
    assert capture_error(lambda: int("x"))[0] == "ValueError"


def test_refusal_report():
    release = release_of(torch.__version__)
    report = refusal_report()
    assert report["release"] == release and [[c["op"], c["dtype"]] for c in report["cases"]] == [
        list(c) for c in REFUSALS]
    by = {c["op"]: c for c in report["cases"]}
    cls = {"2.14.1": "RuntimeError", "2.15.0": "NotImplementedError"}[release]
    assert all(c["cpu"]["raises"] == cls and c["cpu"]["frames"] == [] for c in report["cases"])
    # mean and var_mean refuse meta and fake tensors in torch._refs.mean, with RuntimeError on both
    for op in ("mean", "var_mean"):
        for where in ("meta", "fake"):
            assert by[op][where]["raises"] == "RuntimeError"
            assert "_refs/__init__.py:mean" in by[op][where]["frames"]
    assert by["nanmean"]["meta"]["raises"] == by["nanmean"]["fake"]["raises"] == cls
    assert by["std"]["meta"] == {"returns": "int32"} and by["argmax"]["fake"] == {"returns": "int64"}
    with pytest.raises(ValueError, match="not a function"):
        refusal_report([["no_such_op", "int32"]])
    with pytest.raises(TypeError, match="pair"):
        refusal_report(["mean"])


def _refusal_case(op, dtype, cpu, meta):
    return {"op": op, "dtype": dtype, "cpu": {"raises": cpu, "message": "m", "frames": []},
            "meta": meta, "fake": meta}


def test_refusal_cases_and_table():
    old = {"release": "2.14.1", "cases": [_refusal_case("mean", "int32", "RuntimeError", {"raises": "RuntimeError"}),
                                          _refusal_case("argmax", "bool", "RuntimeError", {"returns": "int64"})]}
    new = {"release": "2.15.0", "cases": [_refusal_case("mean", "int32", "NotImplementedError", {"raises": "RuntimeError"}),
                                          _refusal_case("argmax", "bool", "NotImplementedError", {"returns": "int64"})]}
    reports = {"2.14.1": old, "2.15.0": new}
    by = refusal_cases(reports)
    assert list(by) == ["2.14.1", "2.15.0"] and list(by["2.15.0"]) == [("mean", "int32"), ("argmax", "bool")]
    assert by["2.14.1"]["argmax", "bool"] is old["cases"][1]
    # rows: case by case, and each case's releases in the reports' order
    assert refusal_table(reports).splitlines() == [
        "| op | torch | CPU tensor | meta tensor | `FakeTensorMode` |",
        "|---|---|---|---|---|",
        "| `mean` of `int32` | 2.14.1 | RuntimeError | RuntimeError | RuntimeError |",
        "| `mean` of `int32` | 2.15.0 | NotImplementedError | RuntimeError | RuntimeError |",
        "| `argmax` of `bool` | 2.14.1 | RuntimeError | returns int64 | returns int64 |",
        "| `argmax` of `bool` | 2.15.0 | NotImplementedError | returns int64 | returns int64 |",
    ]
    # a live report renders: one row per refusal
    live = refusal_report([["mean", "int32"], ["std", "int32"]])
    assert len(refusal_table({live["release"]: live}).splitlines()) == 2 + 2
    with pytest.raises(ValueError, match="at least one row"):
        refusal_table({})


def test_mm_out_dtype_not_on_cpu():
    a = torch.ones(2, 2, dtype=torch.bfloat16)
    err = capture_error(lambda: torch.mm(a, a, out_dtype=torch.float32))
    assert err is not None and err[0] == "NotImplementedError"


def test_emulated_dot_error():
    e = emulated_dot_error(k=512, size=4)
    assert e["bf16_accumulator"] > 10 * e["fp32_accumulator"]
    assert e["fp32_accumulator"] < e["exact, rounded to bf16"] <= e["fp32_accumulator, rounded to bf16"] + 1e-9
    with pytest.raises(ValueError, match="k and size"):
        emulated_dot_error(k=0)


def test_md_table_escapes_and_formats():
    assert md_table([{"a|b": 0.5}]).splitlines() == ["| a\\|b |", "|---|", "| 0.5 |"]


# -- knobs --------------------------------------------------------------------------


def _in_fresh_python(body: str) -> str:
    # The cuDNN leaves' internal default cannot be set again once replaced, so tests that
    # replace it (or need it untouched) run in a process of their own.
    return fresh_python("import torch\n" + body, env={"PYTHONPATH": str(REPO)})


def test_knobs_restored_puts_everything_back_after_error():
    before_tree, before_stored = fp32_precision_tree(), fp32_precision_stored()
    mm = torch.backends.cuda.matmul
    with pytest.raises(RuntimeError, match="boom"), knobs_restored():
        torch.backends.fp32_precision = "tf32"
        torch.backends.mkldnn.matmul.fp32_precision = "bf16"
        torch.set_float32_matmul_precision("medium")
        mm.allow_bf16_reduced_precision_reduction = False
        mm.allow_fp16_accumulation = True
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)
        raise RuntimeError("boom")
    assert fp32_precision_tree() == before_tree and fp32_precision_stored() == before_stored
    assert legacy_matmul_precision() == "highest"
    assert mm.allow_bf16_reduced_precision_reduction is True
    assert mm.allow_fp16_accumulation is False
    assert torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed() is False


def test_root_still_reaches_cudnn_leaves_after_a_restore():
    out = _in_fresh_python(
        "from explainers.precision_knobs import knobs_restored\n"
        "with knobs_restored():\n"
        "    torch.backends.fp32_precision = 'tf32'\n"
        "torch.backends.fp32_precision = 'ieee'\n"
        "print(torch.backends.cudnn.conv.fp32_precision, torch.backends.cudnn.rnn.fp32_precision)\n"
    )
    assert out.split() == ["ieee", "ieee"]


def test_knobs_restored_says_when_the_internal_default_is_lost():
    out = _in_fresh_python(
        "from explainers.precision_knobs import knobs_restored, KnobsNotRestorableError\n"
        "try:\n"
        "    with knobs_restored():\n"
        "        torch.backends.cudnn.allow_tf32 = False\n"
        "except KnobsNotRestorableError as e:\n"
        "    print('raised', 'cudnn.conv' in str(e) and 'cudnn.rnn' in str(e))\n"
        "print(torch.backends.fp32_precision, torch.get_float32_matmul_precision())\n"
    )
    assert out.split() == ["raised", "True", "none", "highest"]


def test_stored_values_are_probed_without_side_effects():
    stored = fp32_precision_stored()
    assert stored["cuda.conv"] == stored["cuda.rnn"] == DEFAULT
    with knobs_restored():
        torch.backends.mkldnn.fp32_precision = "ieee"  # writes the generic root
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        inner = fp32_precision_stored()
        assert inner == fp32_precision_stored()
        assert (inner["generic.all"], inner["cuda.matmul"], inner["mkldnn.all"]) == ("ieee", "tf32", "none")
        assert inner["cuda.conv"] == DEFAULT and fp32_precision_tree()["cuda.conv"] == "ieee"
    assert fp32_precision_stored() == stored


def test_split_k_halves_are_restored():
    mm = torch.backends.cuda.matmul
    with knobs_restored():
        mm.allow_fp16_reduced_precision_reduction = (False, False)
        with knobs_restored():
            mm.allow_fp16_reduced_precision_reduction = False  # a bool resets split-K to True
            assert mm.allow_fp16_reduced_precision_reduction_split_k is True
        assert torch._C._get_cublas_allow_fp16_reduced_precision_reduction() == (False, False)
    assert torch._C._get_cublas_allow_fp16_reduced_precision_reduction() == (True, True)


def test_legacy_tf32_flags_and_unreadable_legacy_value_are_restored():
    with knobs_restored():
        torch.backends.cuda.matmul.allow_tf32 = True      # writes the legacy value and the tree
        assert legacy_matmul_precision() == "high"
    assert torch._C._get_cublas_allow_tf32() is False and legacy_matmul_precision() == "highest"
    with knobs_restored():
        torch.backends.cuda.matmul.fp32_precision = "tf32"  # the legacy getter now refuses
        assert legacy_matmul_precision().startswith("RuntimeError")
        stored = fp32_precision_stored()
        with knobs_restored():
            torch.set_float32_matmul_precision("medium")
        assert fp32_precision_stored() == stored
        assert legacy_matmul_precision().startswith("RuntimeError")
    assert legacy_matmul_precision() == "highest"


def test_knobs_restored_keeps_inheritance():
    # After restoring, a child left at "none" must still follow its parent.
    with knobs_restored():
        torch.backends.fp32_precision = "ieee"
    with knobs_restored():
        torch.backends.fp32_precision = "tf32"
        assert fp32_precision_tree()["mkldnn.conv"] == "tf32"
        assert fp32_precision_tree()["cuda.conv"] == "tf32"


def test_setters_that_reach_further():
    # torch 2.14.1: torch.backends.mkldnn.fp32_precision's setter writes ("generic", "all"),
    # and torch.backends.cudnn.fp32_precision is the ("cuda", "all") node.
    with knobs_restored():
        torch.backends.mkldnn.fp32_precision = "tf32"
        assert fp32_precision_tree()["cuda.matmul"] == "tf32"
    with knobs_restored():
        torch.backends.cudnn.fp32_precision = "tf32"
        tree = fp32_precision_tree()
        assert tree["cuda.matmul"] == "tf32" and tree["mkldnn.matmul"] == "none"


def test_python_name_rejects_unknown_nodes():
    assert python_name("cuda.all") == "torch.backends.cudnn.fp32_precision"
    with pytest.raises(ValueError, match="unknown fp32_precision node"):
        python_name("cuda.tf32")


def test_flag_effects():
    assert all(cuda_matmul_knobs_effect(size=8, k=512).values())
    e = sdpa_math_reduction_effect(shape=(1, 2, 128, 32))
    assert e[True] > e[False]
    with pytest.raises(ValueError, match="float16 and bfloat16"):
        sdpa_math_reduction_effect(torch.float32)
    errs = mkldnn_fp32_matmul_errors(m=16, k=256, n=16)
    assert errs["ieee"] < 1e-4 < errs["bf16 inputs"]
    assert torch.backends.mkldnn.matmul.fp32_precision == "none"


def test_arithmetic_verdict():
    assert arithmetic_verdict(1e-4, 5e-5, 0.4) == "fp32"
    assert arithmetic_verdict(0.3, 5e-5, 0.4) == "bf16"
    with pytest.raises(ValueError, match="not within 10x"):
        arithmetic_verdict(0.004, 5e-5, 0.4)
    with pytest.raises(ValueError, match="too close"):
        arithmetic_verdict(0.01, 0.01, 0.1)


def test_onednn_log_lines_are_parsed():
    line = ("onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx512_core,undef,"
            "src:f32::blocked:ab::f0 wei:f32::blocked:ab::f0 dst:f32::blocked:ab::f0,"
            "attr-scratchpad:user attr-fpmath:bf16,,256x1024:1024x256,9.698")
    call = _parse_verbose(line)
    assert call == OneDNNCall("matmul", "brg_matmul:avx512_core", "src:f32 wei:f32 dst:f32",
                              "attr-scratchpad:user attr-fpmath:bf16")
    assert call.fpmath == "bf16"
    assert _parse_verbose("onednn_verbose,v1,info,cpu,runtime:OpenMP,nthr:2") is None


def test_library_message_and_fresh_python():
    assert "avx512bw, avx512vl and avx512dq" in library_message("mkldnn_matmul bf16 path needs")
    with pytest.raises(LookupError):
        library_message("certainly not in libtorch")
    with pytest.raises(RuntimeError, match="child Python failed"):
        fresh_python("import sys; sys.exit(3)")


def test_installed_source_excerpts():
    assert "acc_type" in installed_source("include/ATen/AccumulateType.h")
    text = quote_installed("include/ATen/native/ReduceOpsUtils.h", "inline ScalarType get_dtype_from_self(")
    assert text.splitlines()[-1].rstrip().endswith("}") and "promote_integers" in text
    py = quote_installed("backends/mkldnn/__init__.py", "fp32_precision = ContextProp(")
    assert len(py.splitlines()) == 4 and '"generic", "all"' in py
    with pytest.raises(FileNotFoundError):
        installed_source("include/not/there.h")


def test_addmm_rounds_once():
    r = addmm_roundings(m=16, k=256, n=16)
    assert r["max error, addmm"] < r["max error, mm + add"]
    assert r["addmm differs from rounded once"] < r["mm + add differs from rounded once"]
    with pytest.raises(ValueError, match="sizes"):
        addmm_roundings(m=0)


def test_bf16_sum_rounds_per_thread_partials():
    import torch as _t

    before = _t.get_num_threads()
    r2 = bf16_sum_thread_partials(2, trials=20)
    assert _t.get_num_threads() == before
    assert r2["partials_rounded"] == 20 > r2["rounded_once"]
    assert bf16_sum_thread_partials(1, trials=5)["rounded_once"] == 5
    with pytest.raises(ValueError, match="thread count"):
        bf16_sum_thread_partials(0)


def test_header_acc_types_reads_the_table_not_the_comment():
    cpu, cuda = header_acc_types("CPU"), header_acc_types("CUDA")
    assert cpu[torch.bfloat16] == cpu[torch.float16] == torch.float32
    assert cpu[torch.float32] == torch.float64 and cuda[torch.float32] == torch.float32
    with pytest.raises(ValueError, match="device"):
        header_acc_types("cpu")


def test_legacy_getter_raises_in_exactly_three_combinations():
    rows = legacy_getter_matrix()
    assert len(rows) == 18
    for r in rows:
        refuses = ((r["cuda.matmul"] == "tf32" and r["legacy"] == "highest")
                   or (r["mkldnn.matmul"] == "bf16" and r["legacy"] != "medium")
                   or (r["mkldnn.matmul"] == "tf32" and r["legacy"] != "high"))
        assert r["getter"].startswith("RuntimeError") == refuses, r
        if not refuses:
            assert r["getter"] == r["legacy"], r
    # knobs_restored put everything back
    assert legacy_matmul_precision() == "highest"
    assert torch.backends.cuda.matmul.fp32_precision == "none"
