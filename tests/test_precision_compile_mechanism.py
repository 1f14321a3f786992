"""Tests of explainers.precision.compile_mechanism (the compiling test is slow)."""

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
    import contextlib

    import torch._inductor.config as ic

    def f(a, b):
        # a bf16 value stored and read again by later fp32 math
        t = (a.float() * 3).sqrt().bfloat16()
        return t, torch.pow(t.float(), b)

    args = [torch.rand(8, dtype=torch.bfloat16) + 1, torch.rand(8) + 2]
    eager = f(*args)[1]
    settings = lambda: ic.patch(emulate_precision_casts=False)  # noqa: E731
    out = compile_without_convert_cache(lambda a, b: f(a, b)[1], settings, [args])
    assert torch.equal(out[0], eager)
    assert contextlib  # the settings factory is a context manager
