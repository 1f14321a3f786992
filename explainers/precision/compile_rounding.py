"""Eager rounds after every op, a fused Inductor kernel once: ``a * b + c`` four ways, and the generated C++.

Eager PyTorch runs one op at a time.  A bf16 op computes in fp32 (its opmath
type) and stores a bf16 result, so the output of every op is rounded to bf16.
Inductor fuses ops into one kernel and keeps the intermediates in fp32, so it
rounds once, where the kernel stores, unless
``torch._inductor.config.emulate_precision_casts`` puts back the roundings
eager does (:func:`measure_per_op_rounding` shows both, bit for bit, and the
line of generated C++ that the flag adds).

Everything here runs on CPU with Inductor's C++ backend (needs a C++ compiler).

>>> import torch
>>> mul_add(torch.tensor([2.0]), torch.tensor([3.0]), torch.tensor([1.0])).tolist()
[7.0]
"""

from __future__ import annotations

import inspect
import logging
import re
from dataclasses import dataclass

import torch

__all__ = [
    "silence_cuda_home_warning",
    "inductor_config_comment",
    "emulate_precision_casts_comment",
    "mul_add",
    "PerOpRounding",
    "measure_per_op_rounding",
    "welford_statements",
]


class _DropNoCudaRuntime(logging.Filter):
    """Drops exactly one message: the CUDA wheel on a CPU-only machine finding CUDA_HOME without a GPU."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("No CUDA runtime is found")


_FILTER = _DropNoCudaRuntime()


def silence_cuda_home_warning() -> None:
    """Filter the one stderr line ``torch/utils/cpp_extension.py`` logs when Inductor builds C++.

    A CUDA wheel of torch on a machine without a GPU logs
    ``No CUDA runtime is found, using CUDA_HOME=...`` at warning level when
    Inductor's C++ build imports ``torch.utils.cpp_extension``.  Only that
    message is dropped; every other record of that logger still passes.
    Idempotent.

    >>> import logging
    >>> silence_cuda_home_warning()
    >>> log = logging.getLogger("torch.utils.cpp_extension")
    >>> rec = log.makeRecord(log.name, logging.WARNING, __file__, 1, "No CUDA runtime is found, using CUDA_HOME='%s'", ("/x",), None)
    >>> log.filter(rec)
    False
    >>> bool(log.filter(log.makeRecord(log.name, logging.WARNING, __file__, 1, "other", (), None)))
    True
    """
    logger = logging.getLogger("torch.utils.cpp_extension")
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)


def inductor_config_comment(name: str) -> tuple[str, int]:
    """The comment above the top-level setting ``name`` in the installed ``torch/_inductor/config.py``.

    Returns ``(text, line)``: the comment without its ``#`` marks, and the
    1-based line number of its first line.  Raises ``LookupError`` if the
    installed torch has no such setting or no comment above it.

    >>> text, line = inductor_config_comment("emulate_precision_casts_on_saved_tensors")
    >>> "saved" in text and line > 1
    True
    >>> inductor_config_comment("no_such_setting")
    Traceback (most recent call last):
    ...
    LookupError: torch/_inductor/config.py defines no top-level setting no_such_setting
    """
    import torch._inductor.config as inductor_config

    lines = inspect.getsource(inductor_config).splitlines()
    try:
        at = next(i for i, s in enumerate(lines) if s.startswith(f"{name}:"))
    except StopIteration:
        raise LookupError(f"torch/_inductor/config.py defines no top-level setting {name}") from None
    first = at
    while first > 0 and lines[first - 1].lstrip().startswith("#"):
        first -= 1
    if first == at:
        raise LookupError(f"no comment above {name} in torch/_inductor/config.py")
    text = " ".join(s.strip().lstrip("#").strip() for s in lines[first:at])
    return text, first + 1


def emulate_precision_casts_comment() -> tuple[str, int]:
    """:func:`inductor_config_comment` of ``emulate_precision_casts``.

    >>> text, line = emulate_precision_casts_comment()
    >>> "emulate" in text and line > 1
    True
    """
    return inductor_config_comment("emulate_precision_casts")


# -- per-op rounding: one pointwise chain, four ways ---------------------------------------


def mul_add(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``a * b + c``: two ops in eager, one fused kernel under Inductor.

    >>> import torch
    >>> mul_add(torch.tensor(2.0), torch.tensor(3.0), torch.tensor(1.0)).item()
    7.0
    """
    return a * b + c


@dataclass(frozen=True)
class PerOpRounding:
    """:func:`mul_add` on bf16 vectors, evaluated four ways and compared bit for bit.

    ``two_roundings`` is ``round(round(a*b) + c)`` (each op rounded to bf16),
    ``one_rounding`` is ``round(a*b + c)`` with the intermediate kept in fp32.
    """

    size: int
    #: eager ``a * b + c`` equals ``two_roundings`` in every element
    eager_is_two_roundings: bool
    #: eager ``torch.addcmul(c, a, b)``, one op, equals ``one_rounding`` in every element
    addcmul_is_one_rounding: bool
    #: Inductor's fused kernel equals ``one_rounding`` in every element
    compiled_is_one_rounding: bool
    #: with ``emulate_precision_casts=True`` the kernel equals eager in every element
    emulated_is_eager: bool
    #: elements where one and two roundings give different bf16 values
    elements_differ: int
    #: of those, elements where the compiled value is closer to fp64 than eager's
    compiled_closer: int
    #: of those, elements where eager is closer to fp64
    eager_closer: int
    #: largest error of the compiled value against fp64, in ulps of bf16 at the fp64 value
    compiled_max_err_ulps: float
    #: name of the fused kernel Inductor generated (the same in both compiles)
    kernel_name: str
    #: the statements of its vectorized loop body, without and with ``emulate_precision_casts``
    kernel_body: tuple[str, ...]
    kernel_body_emulated: tuple[str, ...]


def _bf16_ulp(x: torch.Tensor) -> torch.Tensor:
    """Spacing of bf16 at ``|x|`` (the gap to the next bf16 away from zero), in float64."""
    r = x.to(torch.bfloat16).abs()
    return (torch.nextafter(r, torch.full_like(r, float("inf"))) - r).double()


def _kernel_sources(codes: list[str]) -> dict[str, str]:
    """The C++ kernels in Inductor's generated wrapper modules, by name.

    Works around a private detail (torch 2.14.1 and 2.15.0): a CPU kernel is emitted as
    ``name = async_compile.cpp_pybinding([...], r'''<C++>''')``.
    """
    found = {}
    for code in codes:
        for m in re.finditer(r"^(\w+) = async_compile\.cpp_pybinding\(.*?r'''(.*?)'''", code, re.S | re.M):
            found[m.group(1)] = m.group(2)
    return found


def _loop_body(source: str) -> tuple[str, ...]:
    """The first run of ``auto tmpN = ...`` statements and its store, ``static_cast<int64_t>`` elided."""
    body: list[str] = []
    for line in source.splitlines():
        stmt = line.strip()
        if stmt.startswith("auto tmp") or (body and ".store(" in stmt):
            body.append(re.sub(r"static_cast<int64_t>\((\w+)\)", r"\1", stmt))
            if ".store(" in stmt:
                break
        elif body:
            break
    return tuple(body)


def measure_per_op_rounding(size: int = 4096, seed: int = 0) -> PerOpRounding:
    """Evaluate :func:`mul_add` on bf16 N(0, 1) vectors: eager, compiled, compiled with emulation.

    Compiles twice (after ``torch._dynamo.reset()``), keeping the generated
    code of each compile (``torch._inductor.utils.run_and_get_code``, a
    private helper in torch 2.14.1 and 2.15.0), and restores ``emulate_precision_casts``
    afterwards.
    """
    import torch._dynamo
    import torch._inductor.config as inductor_config
    from torch._inductor.utils import run_and_get_code

    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    silence_cuda_home_warning()
    g = torch.Generator().manual_seed(seed)
    a, b, c = (torch.randn(size, generator=g).bfloat16() for _ in range(3))
    eager = mul_add(a, b, c)
    two = ((a.float() * b.float()).bfloat16().float() + c.float()).bfloat16()
    one = (a.float() * b.float() + c.float()).bfloat16()
    ref = a.double() * b.double() + c.double()
    out, kernels = {}, {}
    for emulate in (False, True):
        torch._dynamo.reset()
        with inductor_config.patch(emulate_precision_casts=emulate):
            out[emulate], codes = run_and_get_code(torch.compile(mul_add, backend="inductor"), a, b, c)
        kernels[emulate] = _kernel_sources(codes)
    torch._dynamo.reset()
    if len(kernels[False]) != 1 or kernels[False].keys() != kernels[True].keys():
        raise RuntimeError(f"expected one fused kernel per compile, got {kernels}")
    (name,) = kernels[False]
    differ = one != two
    err_c = (out[False].double() - ref).abs()
    err_e = (eager.double() - ref).abs()
    return PerOpRounding(
        size=size,
        eager_is_two_roundings=torch.equal(eager, two),
        addcmul_is_one_rounding=torch.equal(torch.addcmul(c, a, b), one),
        compiled_is_one_rounding=torch.equal(out[False], one),
        emulated_is_eager=torch.equal(out[True], eager),
        elements_differ=int(differ.sum()),
        compiled_closer=int((differ & (err_c < err_e)).sum()),
        eager_closer=int((differ & (err_e < err_c)).sum()),
        compiled_max_err_ulps=float((err_c / _bf16_ulp(ref)).max()),
        kernel_name=name,
        kernel_body=_loop_body(kernels[False][name]),
        kernel_body_emulated=_loop_body(kernels[True][name]),
    )


def welford_statements(codes: list[str]) -> tuple[str, ...]:
    """The statements of Inductor's C++ code that declare a Welford accumulator or combine vector lanes.

    One of each distinct statement, in order of appearance; ``static_cast<int64_t>`` is elided.

    >>> welford_statements(["  Welford<float> tmp_acc0 = Welford<float>();", "  x = 1;"])
    ('Welford<float> tmp_acc0 = Welford<float>();',)
    """
    seen: list[str] = []
    for code in codes:
        for line in code.splitlines():
            stmt = re.sub(r"static_cast<int64_t>\((\w+)\)", r"\1", line.strip())
            if (stmt.startswith("Welford<") or "welford_vec_reduce_all" in stmt) and stmt not in seen:
                seen.append(stmt)
    return tuple(seen)
