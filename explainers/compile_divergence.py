"""Eager against ``torch.compile`` on CPU: per-op rounding, and pytorch/pytorch#163449 run as filed.

Eager PyTorch runs one op at a time.  A bf16 op computes in fp32 (its opmath
type) and stores a bf16 result, so the output of every op is rounded to bf16.
Inductor fuses ops into one kernel and keeps the intermediates in fp32, so it
rounds once, where the kernel stores, unless
``torch._inductor.config.emulate_precision_casts`` puts back the roundings
eager does (:func:`measure_per_op_rounding` shows both, bit for bit, and the
line of generated C++ that the flag adds).

#163449 is a torch.compile fuzzer report of an "8+% numerical difference
between eager and compile" on CUDA, with ``emulate_precision_casts = True``
already set.  :func:`run_issue_163449` runs its graph on CPU with its settings,
compares eager and compiled against fp64, and finds the first intermediate
that differs; it also runs it with emulation off.

Everything here runs on CPU with Inductor's C++ backend (needs a C++ compiler).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from explainers.page.tables import md_table

__all__ = [
    "ISSUES",
    "ISSUES_STATE_AS_OF",
    "silence_cuda_home_warning",
    "inductor_config_comment",
    "emulate_precision_casts_comment",
    "welford_statements",
    "mul_add",
    "PerOpRounding",
    "measure_per_op_rounding",
    "issue_163449",
    "issue_163449_steps",
    "STEP_NAMES",
    "issue_163449_inputs",
    "issue_163449_settings",
    "SeedRun",
    "run_issue_163449",
    "IssueSummary",
    "summarize_issue_runs",
    "issue_runs_table",
    "t10_rest_max",
]

#: When :data:`ISSUES`' states were read on GitHub.
ISSUES_STATE_AS_OF = "December 2026"

#: Three torch.compile fuzzer reports, by number: title, state (as of
#: :data:`ISSUES_STATE_AS_OF`) and what each reports.
ISSUES: dict[int, dict[str, str]] = {
    163449: {
        "title": "[Fuzzer][Eager/Compile Divergence] 8+% numerical difference between eager and compile",
        "status": "closed",
        "what": "CUDA, with `emulate_precision_casts = True` set. A bf16 `addmm` (5×1024 by "
        "1024×4), its `norm()` (a bf16 scalar `t4`), then `pow(pow(t4, t7), t7 + t4 + relu(s))`, "
        "where `t7 = var(var(x, dim=0))` comes from an independent fp32 input `x`. "
        "The only numerics report of the three.",
    },
    163457: {
        "title": "[Fuzzer][Eager/Compile Divergence] unsupported operand type(s) for divmod(): "
        "'SymInt' and 'int'",
        "status": "closed",
        "what": "Dynamo fails on a dynamic-shape (`SymInt`) `divmod`: a compile failure, "
        "not a numerics report.",
    },
    163420: {
        "title": "[Fuzzer][Eager/Compile Divergence] Inductor fails on "
        "`t2.fill_diagonal_(t1.item())` call",
        "status": "closed",
        "what": "Inductor fails to compile `fill_diagonal_` with a value from `.item()`: a "
        "compile failure, not a numerics report.",
    },
}


class _DropNoCudaRuntime(logging.Filter):
    """Drops exactly one message: the CUDA wheel on a CPU-only machine finding CUDA_HOME without a GPU."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("No CUDA runtime is found")


_FILTER = _DropNoCudaRuntime()


def silence_cuda_home_warning() -> None:
    """Filter the one stderr line ``torch/utils/cpp_extension.py`` logs when Inductor builds C++.

    A CUDA wheel (here torch 2.14.1+cu130) on a machine without a GPU logs
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

    Works around a private detail (torch 2.14.1): a CPU kernel is emitted as
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
    private helper in torch 2.14.1), and restores ``emulate_precision_casts``
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


# -- pytorch/pytorch#163449, as filed ------------------------------------------------------


def issue_163449(arg0, arg1, arg2, arg3, arg4):
    """The graph of pytorch/pytorch#163449, op for op (its ``foo``).

    >>> import torch
    >>> args = issue_163449_inputs(0, requires_grad=False)
    >>> issue_163449(*args).dtype
    torch.float32
    """
    t0 = arg0
    t1 = arg1
    t2 = arg2
    t3 = torch.addmm(t0, t1, t2)
    t4 = t3.norm()
    t5 = arg3
    t6 = t5.var(dim=0)
    t7 = t6.var()
    t8 = arg4
    t9 = torch.nn.functional.relu(t8)
    t10 = t7 + t4 + t9
    t11 = torch.pow(torch.pow(t4, t7), t10)
    return t11


#: The intermediates :func:`issue_163449_steps` returns, in graph order.
STEP_NAMES = ("t3 = addmm", "t4 = t3.norm()", "t7 = t6.var()", "t10 = t7 + t4 + t9",
              "pow(t4, t7)", "t11")


def issue_163449_steps(arg0, arg1, arg2, arg3, arg4):
    """:func:`issue_163449`, returning its intermediates (:data:`STEP_NAMES`) as well.

    >>> import torch
    >>> args = issue_163449_inputs(0, requires_grad=False)
    >>> torch.equal(issue_163449_steps(*args)[-1], issue_163449(*args))
    True
    """
    t3 = torch.addmm(arg0, arg1, arg2)
    t4 = t3.norm()
    t7 = arg3.var(dim=0).var()
    t9 = torch.nn.functional.relu(arg4)
    t10 = t7 + t4 + t9
    p = torch.pow(t4, t7)
    return t3, t4, t7, t10, p, torch.pow(p, t10)


def issue_163449_inputs(seed: int, requires_grad: bool = True) -> list[torch.Tensor]:
    """The issue's five inputs, of its graph's shapes and dtypes: ``torch.rand`` from ``seed`` on CPU.

    The fuzzer's template of the time draws inputs with unseeded
    ``torch.rand(..., device='cuda', requires_grad=True)``; here a CPU
    generator makes each seed reproducible.

    >>> [(tuple(t.shape), t.dtype) for t in issue_163449_inputs(0)][:2]
    [((5, 4), torch.bfloat16), ((5, 1024), torch.bfloat16)]
    """
    g = torch.Generator().manual_seed(seed)
    spec = [((5, 4), torch.bfloat16), ((5, 1024), torch.bfloat16), ((1024, 4), torch.bfloat16),
            ((3, 4, 5, 2), torch.float32), ((), torch.float32)]
    return [torch.rand(s, generator=g, dtype=dt).requires_grad_(requires_grad) for s, dt in spec]


@contextlib.contextmanager
def issue_163449_settings(emulate_precision_casts: bool = True) -> Iterator[None]:
    """The issue's configuration, restored on exit.

    ``capture_scalar_outputs`` and ``capture_dynamic_output_shape_ops`` (Dynamo)
    and ``emulate_precision_casts`` (Inductor; ``True`` in the issue).

    >>> import torch._inductor.config as ic
    >>> before = ic.emulate_precision_casts
    >>> with issue_163449_settings(True):
    ...     ic.emulate_precision_casts
    True
    >>> ic.emulate_precision_casts == before
    True
    """
    import torch._dynamo.config as dynamo_config
    import torch._inductor.config as inductor_config

    with dynamo_config.patch(capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True), \
            inductor_config.patch(emulate_precision_casts=emulate_precision_casts):
        yield


def _tail(t4, t7, t9):
    return torch.pow(torch.pow(t4, t7), t7 + t4 + t9)


@dataclass(frozen=True)
class SeedRun:
    """The issue's graph on one seed's inputs, evaluated several ways."""

    seed: int
    #: eager ``t4``, the bf16 norm of the ``addmm`` result
    t4: float
    #: eager, inputs as drawn (bf16 and fp32)
    eager: float
    #: ``torch.compile(fullgraph=True, dynamic=True)`` with the issue's settings
    compiled: float
    #: the same with ``emulate_precision_casts=False``
    compiled_no_emulation: float
    #: the graph in fp64 on the same inputs
    fp64: float
    #: the fp64 graph, except that ``t4`` is eager's bf16 value
    fp64_on_eager_t4: float
    #: eager, except that ``t4`` is computed and kept in fp32
    eager_t4_fp32: float
    #: those of :data:`STEP_NAMES` whose compiled value differs from eager's (issue's settings)
    differing_steps: tuple[str, ...]
    #: ``|compiled t7 - eager t7|`` in ulps of fp32 at eager's ``t7``
    t7_diff_ulps: float
    #: the compiled intermediates graph gave the same ``t11`` as the compiled issue graph
    steps_final_matches: bool
    #: relative change of the eager output when ``t4`` moves up by one bf16 ulp
    t4_ulp_effect: float
    #: ``|compiled pow(t4, t7) - eager pow(t4, t7)|`` in ulps of fp32 at eager's value
    pow_diff_ulps: float
    #: eager ``pow(t4, compiled t7)`` equals the compiled ``pow(t4, t7)`` bit for bit
    pow_follows_compiled_t7: bool
    #: eager ``t6`` and ``t7`` each equal the fp64 variance of their fp32 input, rounded to fp32
    eager_var_is_fp64_rounded: bool

    @staticmethod
    def rel(value: float, ref: float) -> float:
        """``|value - ref| / |ref|``."""
        return abs(value - ref) / abs(ref)


def run_issue_163449(seeds: range | list[int], *,
                     steps_code: list[str] | None = None) -> list[SeedRun]:
    """Run #163449's graph on CPU for each seed: eager, compiled as filed, without emulation, fp64.

    Three compiles, each after ``torch._dynamo.reset()`` (one compiled function
    serves every seed: the shapes do not change): the issue's graph with its
    settings, :func:`issue_163449_steps` with the same settings (to find the
    intermediates that differ from eager; its inputs do not require grad),
    and the issue's graph with ``emulate_precision_casts=False`` (Inductor's
    other settings, ``emulate_precision_casts_on_saved_tensors`` among them,
    stay as they are).  The issue graph's inputs require grad, as in the
    fuzzer's template; only forward values are compared.  If ``steps_code`` is
    a list, the code Inductor generated for :func:`issue_163449_steps` is
    appended to it (``torch._inductor.utils.run_and_get_code``, a private
    helper in torch 2.14.1).
    """
    import torch._dynamo
    from torch._inductor.utils import run_and_get_code

    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    silence_cuda_home_warning()
    inputs = {s: issue_163449_inputs(s) for s in seeds}
    compiled, steps, plain = {}, {}, {}
    # The intermediates graph is a diagnostic: its inputs do not require grad, which spares
    # compiling a backward graph; steps_final_matches checks it ends where the issue graph does.
    for emulate, fn, store, grad in ((True, issue_163449, compiled, True),
                                     (True, issue_163449_steps, steps, False),
                                     (False, issue_163449, plain, True)):
        torch._dynamo.reset()
        with issue_163449_settings(emulate):
            cfn = torch.compile(fn, fullgraph=True, dynamic=True)
            for s in seeds:
                args = [t.detach().requires_grad_(grad) for t in inputs[s]]
                if store is steps and s == seeds[0] and steps_code is not None:
                    # run_and_get_code resets Dynamo, then compiles on this first call
                    r, codes = run_and_get_code(cfn, *args)
                    steps_code.extend(codes)
                else:
                    r = cfn(*args)
                store[s] = tuple(t.detach() for t in r) if isinstance(r, tuple) else r.detach()
    torch._dynamo.reset()

    runs = []
    for s in seeds:
        args = [t.detach() for t in inputs[s]]
        with torch.no_grad():
            eager_steps = issue_163449_steps(*args)
            eager = issue_163449(*args)
            differing = tuple(n for n, e, c in zip(STEP_NAMES, eager_steps, steps[s], strict=True)
                              if not torch.equal(e, c))
            t7_e, t7_c = eager_steps[2], steps[s][2]
            t7_ulp = torch.nextafter(t7_e, torch.tensor(float("inf"))) - t7_e
            p_e, p_c = eager_steps[4], steps[s][4]
            p_ulp = torch.nextafter(p_e, torch.tensor(float("inf"))) - p_e
            t6_e = args[3].var(dim=0)
            var_rounded = (torch.equal(t6_e, args[3].double().var(dim=0).float())
                           and torch.equal(t7_e, t6_e.double().var().float()))
            d = [t.double() for t in args]
            t4_64 = torch.addmm(d[0], d[1], d[2]).norm()
            t7_64, t9_64 = d[3].var(dim=0).var(), torch.relu(d[4])
            t3 = torch.addmm(args[0], args[1], args[2])
            t4, t7, t9 = t3.norm(), args[3].var(dim=0).var(), torch.relu(args[4])
            up = torch.nextafter(t4, torch.tensor(float("inf"), dtype=t4.dtype))
            runs.append(SeedRun(
                seed=s,
                t4=t4.item(),
                eager=eager.item(),
                compiled=compiled[s].item(),
                compiled_no_emulation=plain[s].item(),
                fp64=_tail(t4_64, t7_64, t9_64).item(),
                fp64_on_eager_t4=_tail(t4.double(), t7_64, t9_64).item(),
                eager_t4_fp32=_tail(t3.float().norm(), t7, t9).item(),
                differing_steps=differing,
                t7_diff_ulps=((t7_c - t7_e).abs() / t7_ulp).item(),
                steps_final_matches=torch.equal(steps[s][-1], compiled[s]),
                t4_ulp_effect=_tail(up, t7, t9).item() / eager.item() - 1,
                pow_diff_ulps=((p_c - p_e).abs() / p_ulp).item(),
                pow_follows_compiled_t7=torch.equal(torch.pow(eager_steps[1], t7_c), p_c),
                eager_var_is_fp64_rounded=var_rounded,
            ))
    return runs


@dataclass(frozen=True)
class IssueSummary:
    """What :func:`run_issue_163449` found, over all its seeds."""

    seeds: int
    #: seeds where the compiled output (issue's settings) is bitwise equal to eager's
    compiled_equal: int
    #: largest ``|compiled - eager| / |eager|`` (issue's settings)
    compiled_max_rel: float
    #: seeds where the compiled value of each intermediate differs from eager's
    step_differs: dict[str, int]
    #: largest distance between compiled and eager ``t7``, in fp32 ulps
    t7_max_ulps: float
    #: in every seed whose output differs, ``pow(t4, t7)`` differs too
    output_differs_only_with_inner_pow: bool
    #: the compiled intermediates graph ended in the compiled issue graph's output, every seed
    steps_final_matches: bool
    #: smallest and largest ``|compiled - eager| / |eager|`` with ``emulate_precision_casts=False``
    no_emulation_rel: tuple[float, float]
    #: seeds where, without emulation, compiled equals "eager with t4 kept in fp32" bitwise
    no_emulation_equal_t4_fp32: int
    #: largest relative gap between the compile without emulation and "eager with t4 in fp32"
    no_emulation_vs_t4_fp32: float
    #: seeds where the compile without emulation is closer to fp64 than eager
    no_emulation_closer: int
    #: smallest and largest relative error of eager against fp64
    eager_err: tuple[float, float]
    #: largest relative gap between eager and the fp64 graph evaluated on eager's bf16 ``t4``
    eager_vs_fp64_on_eager_t4: float
    #: smallest and largest output change for one bf16 ulp of ``t4``
    t4_ulp_effect: tuple[float, float]
    #: smallest and largest eager ``t4``
    t4_range: tuple[float, float]
    #: smallest and largest ``pow(t4, t7)`` difference in fp32 ulps, over the seeds where it differs
    #: (``(0.0, 0.0)`` if none)
    pow_ulps_range: tuple[float, float]
    #: in every seed, eager ``pow(t4, compiled t7)`` is the compiled ``pow(t4, t7)``
    pow_follows_compiled_t7: bool
    #: seeds where eager's two ``var`` are the fp64 variance rounded to fp32
    eager_var_fp64_rounded: int


def summarize_issue_runs(runs: list[SeedRun]) -> IssueSummary:
    """Reduce :func:`run_issue_163449`'s per-seed results to the figures a reader needs.

    >>> r = SeedRun(0, 1144.0, 2.0, 2.0, 2.2, 2.1, 2.0, 2.2, ("t7 = t6.var()",), 1.0, True, 0.3,
    ...             0.0, True, True)
    >>> s = summarize_issue_runs([r])
    >>> s.compiled_equal, s.step_differs["t7 = t6.var()"], s.output_differs_only_with_inner_pow
    (1, 1, True)
    >>> s.pow_ulps_range, s.eager_var_fp64_rounded
    ((0.0, 0.0), 1)
    """
    if not runs:
        raise ValueError("runs is empty: run_issue_163449 needs at least one seed")
    rel = SeedRun.rel
    no_emu = [rel(r.compiled_no_emulation, r.eager) for r in runs]
    eager_err = [rel(r.eager, r.fp64) for r in runs]
    effect = [r.t4_ulp_effect for r in runs]
    pow_ulps = [r.pow_diff_ulps for r in runs if "pow(t4, t7)" in r.differing_steps]
    return IssueSummary(
        seeds=len(runs),
        compiled_equal=sum(r.compiled == r.eager for r in runs),
        compiled_max_rel=max(rel(r.compiled, r.eager) for r in runs),
        step_differs={n: sum(n in r.differing_steps for r in runs) for n in STEP_NAMES},
        t7_max_ulps=max(r.t7_diff_ulps for r in runs),
        output_differs_only_with_inner_pow=all(
            "pow(t4, t7)" in r.differing_steps for r in runs if r.compiled != r.eager),
        steps_final_matches=all(r.steps_final_matches for r in runs),
        no_emulation_rel=(min(no_emu), max(no_emu)),
        no_emulation_equal_t4_fp32=sum(r.compiled_no_emulation == r.eager_t4_fp32 for r in runs),
        no_emulation_vs_t4_fp32=max(rel(r.compiled_no_emulation, r.eager_t4_fp32) for r in runs),
        no_emulation_closer=sum(rel(r.compiled_no_emulation, r.fp64) < rel(r.eager, r.fp64)
                                for r in runs),
        eager_err=(min(eager_err), max(eager_err)),
        eager_vs_fp64_on_eager_t4=max(rel(r.eager, r.fp64_on_eager_t4) for r in runs),
        t4_ulp_effect=(min(effect), max(effect)),
        t4_range=(min(r.t4 for r in runs), max(r.t4 for r in runs)),
        pow_ulps_range=(min(pow_ulps, default=0.0), max(pow_ulps, default=0.0)),
        pow_follows_compiled_t7=all(r.pow_follows_compiled_t7 for r in runs),
        eager_var_fp64_rounded=sum(r.eager_var_is_fp64_rounded for r in runs),
    )


def issue_runs_table(runs: list[SeedRun]) -> str:
    """The Markdown table of ``runs``' outputs: eager, compiled (as filed, no emulation), fp64.

    >>> r = SeedRun(7, 1144.0, 2.0, 2.0, 2.2, 2.1, 2.0, 2.2, (), 0.0, True, 0.3, 0.0, True, True)
    >>> print(issue_runs_table([r]))
    | seed | eager | compiled, as filed | compiled, no emulation | fp64 |
    |---|---|---|---|---|
    | 7 | 2 | 2 | 2.2 | 2.1 |
    """
    return md_table([{
        "seed": r.seed, "eager": r.eager, "compiled, as filed": r.compiled,
        "compiled, no emulation": r.compiled_no_emulation, "fp64": r.fp64,
    } for r in runs], fmt=".6g")


def t10_rest_max(runs: list[SeedRun]) -> float:
    """The largest ``t10 - t4 = t7 + relu(arg4)`` over ``runs``' seeds, eager, in fp32.

    The rest of the outer exponent ``t10 = t7 + t4 + t9``: ``t7`` is
    ``arg3.var(dim=0).var()`` and ``t9`` is ``relu(arg4)``, both from the
    seed's fp32 inputs (:func:`issue_163449_inputs`).

    >>> r = SeedRun(0, 1144.0, 2.0, 2.0, 2.2, 2.1, 2.0, 2.2, (), 0.0, True, 0.3, 0.0, True, True)
    >>> args = issue_163449_inputs(0, requires_grad=False)
    >>> t10_rest_max([r]) == (args[3].var(dim=0).var() + torch.relu(args[4])).item()
    True
    """
    return max((args[3].var(dim=0).var() + torch.relu(args[4])).item()
               for args in (issue_163449_inputs(r.seed, requires_grad=False) for r in runs))
