"""Tests of explainers.precision.compile_mechanism (the compiling test is slow)."""

import contextlib

import pytest
import torch

from explainers.precision.compile_mechanism import (
    compile_without_convert_cache,
    convert_cache_off,
    double_var,
    fp32_welford_var,
    t4_kernel_lines,
)


def test_double_var_is_eager_cpu_var():
    x = torch.rand(3, 40, generator=torch.Generator().manual_seed(3))
    assert torch.equal(x.var(dim=0), double_var(x))


def test_double_var_does_not_call_eagers_kernel():
    # In double, eager's Welford and the two-pass model differ in the last bits; rounded to fp32 they agree.
    x = torch.rand(3, 40, generator=torch.Generator().manual_seed(3)) * 1e-2 + 1e5
    assert not torch.equal(x.double().var(dim=0), double_var(x.double()))
    assert torch.equal(x.var(dim=0), double_var(x))


def test_welford_matches_a_float64_reference_to_fp32_accuracy_but_rounds_differently():
    x = torch.rand(3, 4000, generator=torch.Generator().manual_seed(0))
    w, d = fp32_welford_var(x), double_var(x)
    assert torch.allclose(w, d, rtol=1e-5, atol=0)
    assert not torch.equal(w, d)  # fp32 steps round differently from double and one rounding


def test_welford_along_other_dim():
    x = torch.rand(5, 3, generator=torch.Generator().manual_seed(1))
    assert torch.equal(fp32_welford_var(x, dim=1), fp32_welford_var(x.T, dim=0))


def test_convert_cache_off_restores_on_error():
    from torch._inductor.codegen.cpp import CppKernel

    before = CppKernel.cache_dtype_convert
    with pytest.raises(KeyError), convert_cache_off():
        raise KeyError("boom")
    assert CppKernel.cache_dtype_convert is before


def test_t4_kernel_lines_needs_a_sqrt():
    with pytest.raises(ValueError, match="no std::sqrt"):
        t4_kernel_lines(["auto x = std::pow(a, b);"])


@pytest.mark.slow
def test_cache_off_gives_eager_for_a_bf16_round_trip():
    import torch._inductor.config as ic

    from explainers.precision.compile_mechanism import compile_outputs

    def f(a, b):
        # a bf16 value stored and read again by later fp32 math; the product is
        # correctly rounded in eager and in the generated C++ alike (a pow here
        # would add libm's own last-bit differences)
        t = (a.float() * 3).sqrt().bfloat16()
        return t.float() * b

    g = torch.Generator().manual_seed(0)
    inputs = [[torch.rand(64, dtype=torch.bfloat16, generator=g) + 1, torch.rand(64, generator=g) + 2]
              for _ in range(20)]
    eager = [f(*args) for args in inputs]
    settings = lambda: ic.patch(emulate_precision_casts=False)  # noqa: E731
    off = compile_without_convert_cache(f, settings, inputs)
    on = compile_outputs(f, settings, inputs)
    assert all(torch.equal(o, e) for o, e in zip(off, eager, strict=True)), "cache off: equal to eager"
    assert not any(torch.equal(o, e) for o, e in zip(on, eager, strict=True)), \
        "cache on: the bf16 rounding is skipped in every input set"


def test_full_reduction_var_is_eager_cpu_var_at_an_offset_where_fp64_rounding_is_not():
    from explainers.precision.compile_mechanism import full_reduction_var

    x = torch.rand(40, generator=torch.Generator().manual_seed(0)) * 1e-2 + 1e5
    assert torch.equal(x.var(), full_reduction_var(x))
    assert not torch.equal(x.var(), x.double().var().float())  # the fp32 mean's rounding shows


def test_full_reduction_var_keeps_fp64_to_rounding():
    from explainers.precision.compile_mechanism import full_reduction_var

    x = torch.rand(17, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    assert full_reduction_var(x).dtype == torch.float64
    # the order of the double additions may differ from the kernel's: equal to rounding only
    assert torch.allclose(full_reduction_var(x), x.var(), rtol=1e-14, atol=0)


def test_var_path_sweep_counts_per_offset():
    from explainers.precision.compile_mechanism import var_path_sweep

    rows = var_path_sweep((1.0, 1e5), range(5))
    assert [r["offset"] for r in rows] == [1.0, 1e5]
    assert all(r["all_is_model"] == r["dim_is_double_var"] == 5 for r in rows)
    assert rows[0]["all_is_fp64_rounded"] == 5 and rows[1]["all_is_fp64_rounded"] < 5
    # var_mean's one-output path is not var()'s: far from zero it leaves the fp32 mean out
    assert rows[1]["var_mean_is_var"] < 5 and rows[1]["var_mean_is_fp64_rounded"] > rows[1]["all_is_fp64_rounded"]


def test_compile_outputs_runs_each_input_and_keeps_code():
    from explainers.precision.compile_mechanism import compile_outputs

    code = []
    inputs = [[torch.ones(2)], [torch.ones(3)]]
    outs = compile_outputs(torch.neg, contextlib.nullcontext, inputs, code=code)
    assert [o.tolist() for o in outs] == [[-1.0, -1.0], [-1.0, -1.0, -1.0]]
    assert code and "def call" in "".join(code)
