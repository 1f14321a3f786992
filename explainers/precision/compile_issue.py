"""pytorch/pytorch#163449, an eager/compile divergence report, run on CPU as filed and against fp64.

#163449 is a torch.compile fuzzer report of an "8+% numerical difference
between eager and compile" on CUDA, with ``emulate_precision_casts = True``
already set.  :func:`run_issue_163449` runs its graph on CPU with its settings,
compares eager and compiled against fp64, and finds the intermediates that
differ (all of them returned by :func:`issue_163449_steps`); it also runs it
with emulation off.

Everything here runs on CPU with Inductor's C++ backend (needs a C++ compiler).

>>> sorted(ISSUES)
[163420, 163449, 163457]
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from explainers.page.tables import md_table
from explainers.precision.compile_mechanism import fp32_welford_var
from explainers.precision.compile_rounding import silence_cuda_home_warning

__all__ = [
    "ISSUES",
    "ISSUES_STATE_AS_OF",
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
        "what": "CUDA, `emulate_precision_casts = True`: `pow(pow(t4, t7), t7 + t4 + relu(arg4))` of a "
        "bf16 `norm()` `t4` and an fp32 `t7 = var(var(x, dim=0))`; the only one of these three about numerics.",
    },
    163457: {
        "title": "[Fuzzer][Eager/Compile Divergence] unsupported operand type(s) for divmod(): "
        "'SymInt' and 'int'",
        "status": "closed",
        "what": "Dynamo fails on a dynamic-shape (`SymInt`) `divmod`: a compile failure.",
    },
    163420: {
        "title": "[Fuzzer][Eager/Compile Divergence] Inductor fails on "
        "`t2.fill_diagonal_(t1.item())` call",
        "status": "closed",
        "what": "Inductor fails to compile `fill_diagonal_` with an `.item()` value: a compile failure.",
    },
}


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
STEP_NAMES = ("t3 = addmm", "t4 = t3.norm()", "t6 = t5.var(dim=0)", "t7 = t6.var()",
              "t10 = t7 + t4 + t9", "pow(t4, t7)", "t11")


def issue_163449_steps(arg0, arg1, arg2, arg3, arg4):
    """:func:`issue_163449`, returning its intermediates (:data:`STEP_NAMES`) as well.

    >>> import torch
    >>> args = issue_163449_inputs(0, requires_grad=False)
    >>> torch.equal(issue_163449_steps(*args)[-1], issue_163449(*args))
    True
    """
    t3 = torch.addmm(arg0, arg1, arg2)
    t4 = t3.norm()
    t6 = arg3.var(dim=0)
    t7 = t6.var()
    t9 = torch.nn.functional.relu(arg4)
    t10 = t7 + t4 + t9
    p = torch.pow(t4, t7)
    return t3, t4, t6, t7, t10, p, torch.pow(p, t10)


def issue_163449_inputs(seed: int, requires_grad: bool = True) -> list[torch.Tensor]:
    """The issue's five inputs, of its graph's shapes and dtypes: ``torch.rand`` from ``seed`` on CPU.

    The fuzzer's template draws unseeded ``torch.rand(..., device='cuda',
    requires_grad=True)``; here a CPU generator makes each seed reproducible.

    >>> [(tuple(t.shape), t.dtype) for t in issue_163449_inputs(0)][:2]
    [((5, 4), torch.bfloat16), ((5, 1024), torch.bfloat16)]
    """
    g, bf, f = torch.Generator().manual_seed(seed), torch.bfloat16, torch.float32
    spec = [((5, 4), bf), ((5, 1024), bf), ((1024, 4), bf), ((3, 4, 5, 2), f), ((), f)]
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


def _tail(t4, t7, t9):  # the graph after t4, t7 and t9
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
    #: the compiled ``t6`` equals :func:`~.compile_mechanism.fp32_welford_var` of ``arg3`` bit for bit
    t6_is_fp32_welford: bool

    @staticmethod
    def rel(value: float, ref: float) -> float:
        """``|value - ref| / |ref|``."""
        return abs(value - ref) / abs(ref)


def run_issue_163449(seeds: range | list[int], *, steps_code: list[str] | None = None,
                     plain_code: list[str] | None = None) -> list[SeedRun]:
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
    helper in torch 2.14.1 and 2.15.0); ``plain_code`` likewise receives the
    code of the compile without emulation.
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
                code = {id(steps): steps_code, id(plain): plain_code}.get(id(store))
                if s == seeds[0] and code is not None:
                    # run_and_get_code resets Dynamo, then compiles on this first call
                    r, codes = run_and_get_code(cfn, *args)
                    code.extend(codes)
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
            t7_e, t7_c = eager_steps[3], steps[s][3]
            t7_ulp = torch.nextafter(t7_e, torch.tensor(float("inf"))) - t7_e
            p_e, p_c = eager_steps[5], steps[s][5]
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
                t6_is_fp32_welford=torch.equal(steps[s][2], fp32_welford_var(args[3])),
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
    #: for each intermediate, the seeds where it is the first in graph order to differ
    first_differs: dict[str, int]
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
    #: seeds where the compiled ``t6`` is the fp32 Welford recurrence bit for bit
    t6_fp32_welford: int


def summarize_issue_runs(runs: list[SeedRun]) -> IssueSummary:
    """Reduce :func:`run_issue_163449`'s per-seed results to the figures a reader needs.

    >>> r = SeedRun(0, 1144.0, 2.0, 2.0, 2.2, 2.1, 2.0, 2.2, ("t7 = t6.var()",), 1.0, True, 0.3,
    ...             0.0, True, True, True)
    >>> s = summarize_issue_runs([r])
    >>> s.compiled_equal, s.step_differs["t7 = t6.var()"], s.output_differs_only_with_inner_pow
    (1, 1, True)
    >>> s.pow_ulps_range, s.eager_var_fp64_rounded, s.first_differs["t7 = t6.var()"]
    ((0.0, 0.0), 1, 1)
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
        first_differs={n: sum(r.differing_steps[:1] == (n,) for r in runs) for n in STEP_NAMES},
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
        t6_fp32_welford=sum(r.t6_is_fp32_welford for r in runs),
    )


def issue_runs_table(runs: list[SeedRun]) -> str:
    """The Markdown table of ``runs``' outputs: eager, compiled (as filed, no emulation), fp64.

    >>> r = SeedRun(7, 1144.0, 2.0, 2.0, 2.2, 2.1, 2.0, 2.2, (), 0.0, True, 0.3, 0.0, True, True, True)
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

    >>> r = SeedRun(0, 1144.0, 2.0, 2.0, 2.2, 2.1, 2.0, 2.2, (), 0.0, True, 0.3, 0.0, True, True, True)
    >>> args = issue_163449_inputs(0, requires_grad=False)
    >>> t10_rest_max([r]) == (args[3].var(dim=0).var() + torch.relu(args[4])).item()
    True
    """
    return max((args[3].var(dim=0).var() + torch.relu(args[4])).item()
               for args in (issue_163449_inputs(r.seed, requires_grad=False) for r in runs))
