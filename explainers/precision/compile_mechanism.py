"""Where #163449's eager and compiled values part on CPU, each cause switched off on its own.

Two ablations for :mod:`explainers.precision.compile_issue`:

* ``var``: eager CPU ``var`` of fp32 has two paths, neither of them through
  ``at::acc_type``.  Along a dim it is ``std_var_kernel_impl``
  (``aten/src/ATen/native/cpu/ReduceOpsKernel.cpp``), a Welford recurrence
  in double rounded once to fp32, which :func:`double_var` (a two-pass
  variance in double, independent of that kernel) matches in fp32; a full
  reduction to one number is ``std_var_all_cpu``
  (``aten/src/ATen/native/ReduceOps.cpp``): an fp32 ``mean()`` read as a
  double, then a sum of squared deviations in double, which
  :func:`full_reduction_var` writes out.  Inductor's C++ kernel runs an
  fp32 Welford recurrence, :func:`fp32_welford_var`.
* ``t4``'s bf16 rounding: :func:`compile_without_convert_cache` compiles with
  ``emulate_precision_casts=False`` but with the C++ backend's dtype-convert
  cache switched off, and nothing else changed.

>>> import torch
>>> x = torch.tensor([[1.0], [2.0], [4.0]])
>>> fp32_welford_var(x).tolist(), double_var(x).tolist(), x.var(dim=0).tolist()
([2.3333330154418945], [2.3333332538604736], [2.3333332538604736])
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

__all__ = [
    "var_under_numerics",
    "fp32_welford_var",
    "double_var",
    "full_reduction_var",
    "var_path_sweep",
    "convert_cache_off",
    "compile_outputs",
    "compile_without_convert_cache",
    "t4_kernel_lines",
]


def fp32_welford_var(x: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """``x.var(dim)`` (correction 1) by the recurrence of Inductor's C++ ``welford_combine``, in fp32.

    One value at a time along ``dim``: ``delta = x - mean``,
    ``mean += delta * recip(n)``, ``m2 += delta * (x - mean)``, then
    ``m2 / (n - 1)``.  ``recip(n)`` is ``1/n`` computed in double and stored
    as fp32, as the ``weight_recps`` table of ``cpp_prefix.h`` does (torch
    2.14.1 and 2.15.0).  Every step is one fp32 torch op, so each rounds to
    fp32 as the generated C++ does (Inductor compiles with
    ``-ffp-contract=off`` by default: no fused multiply-add).

    >>> fp32_welford_var(torch.tensor([[0.1], [0.2], [0.7]])).item()
    0.10333332419395447
    """
    x = x.movedim(dim, 0).float()
    mean = torch.zeros_like(x[0])
    m2 = torch.zeros_like(x[0])
    for i in range(x.shape[0]):
        delta = x[i] - mean
        mean = mean + delta * torch.tensor(1.0 / (i + 1), dtype=torch.float32)
        m2 = m2 + delta * (x[i] - mean)
    return m2 / (x.shape[0] - 1)


def double_var(x: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """``x``'s variance along ``dim`` computed two-pass in double, rounded once to ``x``'s dtype.

    Eager CPU ``var`` along a dim runs a Welford recurrence in double
    (``WelfordOps<scalar_t, double, ...>`` in ``std_var_kernel_impl``,
    ``aten/src/ATen/native/cpu/ReduceOpsKernel.cpp``, torch 2.14.1 and
    2.15.0) and rounds once.  This model does not call that kernel: it
    widens ``x`` to double (exactly), takes the mean, sums the squared
    deviations and divides by ``n - 1``, all in double.  Its double result
    and the kernel's can differ in the last bits; rounded to fp32 they agree
    wherever both double results round to the same fp32 value.

    >>> double_var(torch.tensor([[0.1], [0.2], [0.7]])).item()
    0.10333333164453506
    """
    x64 = x.double()
    dev = x64 - x64.mean(dim=dim, keepdim=True)
    return ((dev * dev).sum(dim=dim) / (x.shape[dim] - 1)).to(x.dtype)


def full_reduction_var(x: torch.Tensor) -> torch.Tensor:
    """``x.var()`` (correction 1, all elements) of fp32 ``x`` as eager CPU computes it.

    ``std_var_all_cpu`` (``aten/src/ATen/native/ReduceOps.cpp``, torch 2.14.1
    and 2.15.0) takes ``self.mean()`` in ``x``'s dtype, reads it as a double,
    sums ``(double(x) - mean) ** 2`` in double and divides by ``n - 1``; the
    result is rounded once to ``x``'s dtype.  The double sum here is
    ``torch.sum``'s, whose order of additions need not be the kernel's: for
    fp32 the final rounding hides that, for fp64 input it may not.  The mean's fp32 rounding stays
    in: where the values sit on a large offset it is visible against the
    fp64 variance rounded once (see :func:`var_path_sweep`).

    >>> full_reduction_var(torch.tensor([0.1, 0.2, 0.7])).item()
    0.10333333164453506
    """
    mean = x.mean().item()  # the mean in x's dtype, as a Python float (a double)
    dev = x.double() - mean
    return ((dev * dev).sum() / (x.numel() - 1)).to(x.dtype)


def var_path_sweep(offsets: tuple[float, ...], seeds: range, n: int = 40) -> list[dict]:
    """Eager CPU fp32 ``var`` on ``rand * 1e-2 + offset`` against the two explicit models, per offset.

    For each offset and seed, ``x = torch.rand(3, n) * 1e-2 + offset`` (a CPU
    generator seeded with the seed): counts, over the seeds, where eager
    ``x[0].var()`` (the full-reduction path) equals :func:`full_reduction_var`
    and where it equals the fp64 variance rounded once, and where eager
    ``x.var(dim=0)`` (the along-a-dim path) equals :func:`double_var`; and
    where the variance of eager ``torch.var_mean(x[0])`` (one output too)
    equals ``x[0].var()`` and the fp64 variance rounded once.

    >>> var_path_sweep((0.0,), range(2), n=8)  # doctest: +NORMALIZE_WHITESPACE
    [{'offset': 0.0, 'seeds': 2, 'all_is_model': 2, 'all_is_fp64_rounded': 2, 'dim_is_double_var': 2,
      'var_mean_is_var': 2, 'var_mean_is_fp64_rounded': 2}]
    """
    rows = []
    for offset in offsets:
        row = {"offset": offset, "seeds": len(seeds), "all_is_model": 0, "all_is_fp64_rounded": 0,
               "dim_is_double_var": 0, "var_mean_is_var": 0, "var_mean_is_fp64_rounded": 0}
        for s in seeds:
            x = torch.rand(3, n, generator=torch.Generator().manual_seed(s)) * 1e-2 + offset
            full = x[0].var()
            row["all_is_model"] += torch.equal(full, full_reduction_var(x[0]))
            row["all_is_fp64_rounded"] += torch.equal(full, x[0].double().var().float())
            row["dim_is_double_var"] += torch.equal(x.var(dim=0), double_var(x))
            var_of_mean = torch.var_mean(x[0])[0]
            row["var_mean_is_var"] += torch.equal(var_of_mean, full)
            row["var_mean_is_fp64_rounded"] += torch.equal(var_of_mean, x[0].double().var().float())
        rows.append(row)
    return rows


@contextlib.contextmanager
def convert_cache_off() -> Iterator[None]:
    """Switch off the C++ backend's dtype-convert cache, and nothing else, until exit.

    ``CppOverrides.to_dtype`` (``torch/_inductor/codegen/cpp.py``, torch
    2.14.1 and 2.15.0) calls ``CppKernel.cache_dtype_convert`` after an
    fp32 -> bf16/fp16 conversion made with ``use_compute_types`` true
    (``round_to_int`` does too), unless ``emulate_precision_casts`` is set:
    it records the reverse conversion as already computed, the fp32 value
    before rounding, so a later upcast of the stored low-precision value
    reads the unrounded value.  This replaces that method with one that records
    nothing (a private API; restored on exit).  The FX graph cache is
    switched off too, so the next compile generates code instead of reusing
    code generated with the cache on.

    >>> from torch._inductor.codegen.cpp import CppKernel
    >>> before = CppKernel.cache_dtype_convert
    >>> with convert_cache_off():
    ...     CppKernel.cache_dtype_convert is before
    False
    >>> CppKernel.cache_dtype_convert is before
    True
    """
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    from torch._inductor.codegen.cpp import CppKernel

    original = CppKernel.cache_dtype_convert
    CppKernel.cache_dtype_convert = lambda self, dst, dst_dtype, src, src_dtype: None
    try:
        with inductor_config.patch(fx_graph_cache=False), \
                functorch_config.patch(enable_autograd_cache=False):
            yield
    finally:
        CppKernel.cache_dtype_convert = original


def compile_outputs(fn: Callable, settings: Callable[[], contextlib.AbstractContextManager],
                    inputs: list[list[torch.Tensor]], code: list[str] | None = None) -> list[torch.Tensor]:
    """``torch.compile(fn, fullgraph=True, dynamic=True)`` under ``settings()``, run on each input list.

    Returns the detached outputs for each argument list in ``inputs``; if
    ``code`` is a list, the generated code of the first call is appended
    (``torch._inductor.utils.run_and_get_code``, private in torch 2.14.1
    and 2.15.0).  Dynamo is reset before and after.

    >>> compile_outputs(torch.neg, contextlib.nullcontext, [[torch.ones(2)]])[0].tolist()
    [-1.0, -1.0]
    """
    import torch._dynamo
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    outs = []
    with settings():
        cfn = torch.compile(fn, fullgraph=True, dynamic=True)
        for i, args in enumerate(inputs):
            if i == 0 and code is not None:
                r, codes = run_and_get_code(cfn, *args)
                code.extend(codes)
            else:
                r = cfn(*args)
            outs.append(r.detach())
    torch._dynamo.reset()
    return outs


def compile_without_convert_cache(fn: Callable, settings: Callable[[], contextlib.AbstractContextManager],
                                  inputs: list[list[torch.Tensor]],
                                  code: list[str] | None = None) -> list[torch.Tensor]:
    """:func:`compile_outputs` with the convert cache off (:func:`convert_cache_off`).

    >>> out = compile_without_convert_cache(torch.neg, contextlib.nullcontext, [[torch.ones(2)]])
    >>> out[0].tolist()
    [-1.0, -1.0]
    """
    with convert_cache_off():
        return compile_outputs(fn, settings, inputs, code=code)


def var_under_numerics(modes: list[str], seeds: list[int]) -> dict[str, dict[str, int]]:
    """Per Inductor ``numerics`` mode, in how many seeds #163449's compiled ``var(dim=0)`` equals eager, and the model.

    Compiles ``t5.var(dim=0)`` alone (``dynamic=True``, as the issue) under
    ``torch._inductor.config.patch(numerics=mode)`` and counts, over the
    issue's inputs from each seed, the outputs equal to eager's and to
    :func:`fp32_welford_var`.  The modes a release knows differ (2.14.1:
    ``"default"`` and ``"strict"``; 2.15.0 adds ``"strict_pointwise"`` and
    ``"strict_reduction"``).

    >>> var_under_numerics(["default"], [0, 1])
    {'default': {'eager': 0, 'fp32_welford_var': 2}}
    """
    import torch._inductor.config as inductor_config

    from explainers.precision.compile_issue import issue_163449_inputs

    out = {}
    for mode in modes:
        torch._dynamo.reset()
        with inductor_config.patch({"numerics": mode, "fx_graph_cache": False}):
            fn = torch.compile(lambda a: a.var(dim=0), dynamic=True, fullgraph=True)
            counts = {"eager": 0, "fp32_welford_var": 0}
            for seed in seeds:
                t5 = issue_163449_inputs(seed, requires_grad=False)[3]
                got = fn(t5)
                counts["eager"] += torch.equal(got, t5.var(dim=0))
                counts["fp32_welford_var"] += torch.equal(got, fp32_welford_var(t5))
        out[mode] = counts
    torch._dynamo.reset()
    return out


def t4_kernel_lines(code: list[str]) -> list[str]:
    """The generated C++ from ``t4 = sqrt(...)`` through the second ``std::pow``, stripped.

    ``t4`` is the graph's only ``std::sqrt`` (the end of the norm); the lines
    that follow store it as bf16 and raise it to the powers.  Raises
    ``ValueError`` if ``code`` has no ``std::sqrt``.

    >>> t4_kernel_lines(["a;", "  auto tmp1 = std::sqrt(tmp0);", "  auto t2 = std::pow(tmp1, x);",
    ...                  "  auto t3 = std::pow(t2, y);", "  out = t3;"])
    ['auto tmp1 = std::sqrt(tmp0);', 'auto t2 = std::pow(tmp1, x);', 'auto t3 = std::pow(t2, y);']
    """
    lines = [line.strip() for src in code for line in src.splitlines()]
    start = next((i for i, line in enumerate(lines) if "std::sqrt(" in line), None)
    if start is None:
        raise ValueError("no std::sqrt in the generated code: t4's kernel was not found")
    kept, pows = [], 0
    for line in lines[start:]:
        kept.append(line)
        pows += "std::pow(" in line
        if pows == 2:
            break
    return kept
