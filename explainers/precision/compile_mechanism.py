"""Where #163449's eager and compiled values part on CPU, each cause switched off on its own.

Two ablations for :mod:`explainers.precision.compile_issue`:

* ``var``: eager CPU ``var`` of fp32 accumulates in double
  (``CPU_ACC_TYPE(float, double)`` in ``ATen/AccumulateType.h``) and rounds
  once; Inductor's C++ kernel runs an fp32 Welford recurrence.
  :func:`double_var` and :func:`fp32_welford_var` compute each of the two
  explicitly, so a page can show that each explains its side bit for bit.
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
    "fp32_welford_var",
    "double_var",
    "convert_cache_off",
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
    """``x.var(dim)`` computed in double and rounded once to ``x``'s dtype.

    >>> double_var(torch.tensor([[0.1], [0.2], [0.7]])).item()
    0.10333333164453506
    """
    return x.double().var(dim=dim).to(x.dtype)


@contextlib.contextmanager
def convert_cache_off() -> Iterator[None]:
    """Switch off the C++ backend's dtype-convert cache, and nothing else, until exit.

    ``CppOverrides.to_dtype`` (``torch/_inductor/codegen/cpp.py``, torch
    2.14.1 and 2.15.0) calls ``CppKernel.cache_dtype_convert`` after an
    fp32 -> bf16/fp16 conversion unless ``emulate_precision_casts`` is set:
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


def compile_without_convert_cache(fn: Callable, settings: Callable[[], contextlib.AbstractContextManager],
                                  inputs: list[list[torch.Tensor]],
                                  code: list[str] | None = None) -> list[torch.Tensor]:
    """``torch.compile(fn, fullgraph=True, dynamic=True)`` under ``settings()`` with the convert cache off.

    Returns the detached outputs for each argument list in ``inputs``; if
    ``code`` is a list, the generated code of the first call is appended
    (``torch._inductor.utils.run_and_get_code``, private in torch 2.14.1
    and 2.15.0).

    >>> out = compile_without_convert_cache(torch.neg, contextlib.nullcontext, [[torch.ones(2)]])
    >>> out[0].tolist()
    [-1.0, -1.0]
    """
    import torch._dynamo
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    outs = []
    with convert_cache_off(), settings():
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
