"""Where the two top-k routers of :mod:`.topk_router` round to a low-precision dtype, rebuilt step by step.

:func:`router_roundings` rebuilds A (``topk_softmax``) and B
(``full_softmax_then_renorm`` in the dtype) from explicit fp32 steps with
explicit roundings on one sample and compares them bitwise;
:func:`rounding_sweep` repeats that over seeds and expert counts, together
with each router's error against fp64 (:func:`~.router.compare_routers`).

The rebuild of a softmax is ``F.softmax(x.float()).to(dtype)``: the fp32
kernel's output, rounded once.  The reduced-precision kernel does not always
round the same fp32 value: on CPU it can differ by one ulp of the dtype, which
is why the figures here are counts and largest gaps, not a yes/no.

>>> import torch
>>> r = router_roundings(torch.bfloat16, tokens=256, n_experts=32, k=4)
>>> r.a_weights_off, r.b_off_sum_and_quotient, r.weights
(0, 0, 1024)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from explainers.precision.router import _router_logits, _ulp, compare_routers
from explainers.precision.topk_router import full_softmax_then_renorm, topk_softmax
from explainers.softmax_tail import at_capability

__all__ = ["RouterRoundings", "router_roundings", "RoundingSweep", "rounding_sweep", "softmax_off_by_length"]


@dataclass(frozen=True)
class RouterRoundings:
    """Where each router rounds to ``dtype``, checked bitwise against explicit fp32 steps (one sample)."""

    dtype: torch.dtype
    #: weights where A differs from ``softmax(topk(logits).float()).to(dtype)`` (one rounding)
    a_weights_off: int
    #: the largest of those differences, in ulps of ``dtype``
    a_max_ulps_off: float
    #: at those weights, the largest distance of the fp32 softmax's value from the midpoint between
    #: the two ``dtype`` values (A's and the rebuild's), in fp32 ulps
    a_max_fp32_ulps_to_midpoint: float
    #: probabilities (the whole row's softmax in ``dtype``) that differ from the fp32 softmax
    #: rounded once, and the largest such difference in ulps of ``dtype``
    probs_off: int
    probs_max_ulps_off: float
    #: B's weights that differ from B's own top-k probabilities summed in fp32, the sum rounded to
    #: ``dtype``, then divided in fp32 and rounded again (B's second and third rounding)
    b_off_sum_and_quotient: int
    #: weights where B differs from the same steps without rounding the sum
    b_differs_without_sum_rounding: int
    #: weights in all (per router)
    weights: int
    #: probabilities in all
    probs: int


def _gap(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``|got - want|`` in ulps of ``dtype`` at ``want``, as float64."""
    return (got.double() - want.double()).abs() / _ulp(want.double(), dtype)


def _largest(x: torch.Tensor, where: torch.Tensor) -> float:
    return float(x[where].max()) if bool(where.any()) else 0.0


def _a_one_rounding(logits: torch.Tensor, k: int) -> tuple[int, float, float, int]:
    """A against its one-rounding rebuild: weights off, largest gap (ulps), fp32 ulps to the midpoint, weights."""
    dtype = logits.dtype
    _, wa = topk_softmax(logits, k)
    vals, _ = torch.topk(logits, k, dim=-1)
    a32 = F.softmax(vals.float(), dim=-1)
    one = a32.to(dtype)
    off = wa != one
    # the midpoint between A's value and the rebuild's: where rounding to dtype flips between them
    mid = (wa.double() + one.double()) / 2
    to_mid = (a32.double() - mid).abs() / _ulp(a32.double(), torch.float32)
    return int(off.sum()), _largest(_gap(wa, one, dtype), off), _largest(to_mid, off), wa.numel()


def router_roundings(
    dtype: torch.dtype,
    *,
    tokens: int = 4096,
    n_experts: int = 256,
    k: int = 8,
    scale: float = 2.0,
    seed: int = 0,
) -> RouterRoundings:
    """Rebuild both routers from fp32 steps with explicit roundings to ``dtype`` and compare bitwise.

    Same data as :func:`~.router.compare_routers`.  A is one softmax (one
    rounding of its output); B is a softmax, a sum and a division, each
    rounded to ``dtype``.  B's sum and division are rebuilt from B's own
    probabilities, the softmax against the fp32 kernel rounded once.

    >>> import torch
    >>> r = router_roundings(torch.float16, tokens=256, n_experts=32, k=4)
    >>> r.b_off_sum_and_quotient, r.b_differs_without_sum_rounding > 0
    (0, True)
    >>> router_roundings(torch.float32)
    Traceback (most recent call last):
    ...
    ValueError: dtype must be bfloat16 or float16 (rounded from fp32), got torch.float32
    """
    if dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"dtype must be bfloat16 or float16 (rounded from fp32), got {dtype}")
    logits = _router_logits(tokens, n_experts, scale, seed).to(dtype)
    a_off, a_gap, a_mid, _ = _a_one_rounding(logits, k)
    _, wb = full_softmax_then_renorm(logits, k)
    probs = F.softmax(logits, dim=-1)
    probs_one = F.softmax(logits.float(), dim=-1).to(dtype)
    p_off = probs != probs_one
    pk, _ = torch.topk(probs, k, dim=-1)
    total = pk.float().sum(dim=-1, keepdim=True).to(dtype)
    three = (pk.float() / total.float()).to(dtype)
    unrounded_sum = (pk.float() / pk.float().sum(dim=-1, keepdim=True)).to(dtype)
    return RouterRoundings(
        dtype=dtype,
        a_weights_off=a_off,
        a_max_ulps_off=a_gap,
        a_max_fp32_ulps_to_midpoint=a_mid,
        probs_off=int(p_off.sum()),
        probs_max_ulps_off=_largest(_gap(probs, probs_one, dtype), p_off),
        b_off_sum_and_quotient=int((wb != three).sum()),
        b_differs_without_sum_rounding=int((wb != unrounded_sum).sum()),
        weights=wb.numel(),
        probs=probs.numel(),
    )


@dataclass(frozen=True)
class RoundingSweep:
    """:func:`router_roundings` and :func:`~.router.compare_routers` over seeds and expert counts.

    A's one-rounding rebuild is cheap (a softmax over k values) and runs over
    ``a_seeds``; everything else over ``seeds``.
    """

    dtype: torch.dtype
    seeds: tuple[int, ...]
    a_seeds: tuple[int, ...]
    n_experts: tuple[int, ...]
    #: (seed, n_experts) samples over ``seeds``, and B's weights over all of them
    samples: int
    weights: int
    #: (seed, n_experts) samples over ``a_seeds``, and A's weights over all of them
    a_samples: int
    a_weights: int
    #: A: weights off the one-rounding rebuild, samples with any, largest gap (ulps of ``dtype``),
    #: largest distance of the fp32 value from the rounding midpoint there (fp32 ulps)
    a_weights_off: int
    a_samples_off: int
    a_max_ulps_off: float
    a_max_fp32_ulps_to_midpoint: float
    #: the row softmax in ``dtype`` against the fp32 one rounded once: per expert count,
    #: (differing probabilities, probabilities), and the largest gap (ulps of ``dtype``)
    probs_off_by_n: dict[int, tuple[int, int]]
    probs_max_ulps_off: float
    #: B's weights off its sum-and-quotient rebuild (two roundings after the softmax), all samples
    b_off_sum_and_quotient: int
    #: the fewest weights the rounding of B's sum changes in one sample
    b_min_differs_without_sum_rounding: int
    #: largest error against fp64 (ulps of ``dtype``) of A, B and B′ over all samples
    max_ulps_a: float
    max_ulps_b: float
    max_ulps_b32: float
    #: samples where B's sums drift further from 1 than A's; where B′'s drift no further than A's
    samples_b_drifts_more: int
    samples_b32_drifts_no_more: int
    #: samples where A or B′ keep other experts than the fp64 reference
    samples_a_or_b32_not_reference: int


def rounding_sweep(
    dtype: torch.dtype,
    seeds: Iterable[int],
    n_experts: Iterable[int],
    *,
    a_seeds: Iterable[int] | None = None,
    tokens: int = 4096,
    k: int = 8,
    scale: float = 2.0,
) -> RoundingSweep:
    """Run :func:`router_roundings` and :func:`~.router.compare_routers` on every (seed, n_experts).

    A's one-rounding rebuild runs on every (seed, n_experts) of ``a_seeds``
    (default: ``seeds``).

    >>> import torch
    >>> s = rounding_sweep(torch.bfloat16, range(2), (31, 32), a_seeds=range(5), tokens=128, k=4)
    >>> s.samples, s.weights, s.a_samples, s.a_weights, s.b_off_sum_and_quotient
    (4, 2048, 10, 5120, 0)
    """
    seeds, n_experts = tuple(seeds), tuple(n_experts)
    a_seeds = seeds if a_seeds is None else tuple(a_seeds)
    a_runs = [_a_one_rounding(_router_logits(tokens, n, scale, seed).to(dtype), k)
              for n in n_experts for seed in a_seeds]
    rounds, comps = [], []
    probs_off_by_n = {}
    for n in n_experts:
        for seed in seeds:
            setup = {"tokens": tokens, "n_experts": n, "k": k, "scale": scale, "seed": seed}
            r = router_roundings(dtype, **setup)
            rounds.append(r)
            comps.append(compare_routers(dtype, **setup))
            off, total = probs_off_by_n.get(n, (0, 0))
            probs_off_by_n[n] = (off + r.probs_off, total + r.probs)
    return RoundingSweep(
        dtype=dtype,
        seeds=seeds,
        a_seeds=a_seeds,
        n_experts=n_experts,
        samples=len(rounds),
        weights=sum(r.weights for r in rounds),
        a_samples=len(a_runs),
        a_weights=sum(a[3] for a in a_runs),
        a_weights_off=sum(a[0] for a in a_runs),
        a_samples_off=sum(a[0] > 0 for a in a_runs),
        a_max_ulps_off=max(a[1] for a in a_runs),
        a_max_fp32_ulps_to_midpoint=max(a[2] for a in a_runs),
        probs_off_by_n=probs_off_by_n,
        probs_max_ulps_off=max(r.probs_max_ulps_off for r in rounds),
        b_off_sum_and_quotient=sum(r.b_off_sum_and_quotient for r in rounds),
        b_min_differs_without_sum_rounding=min(r.b_differs_without_sum_rounding for r in rounds),
        max_ulps_a=max(c.max_ulps_a for c in comps),
        max_ulps_b=max(c.max_ulps_b for c in comps),
        max_ulps_b32=max(c.max_ulps_b32 for c in comps),
        samples_b_drifts_more=sum(c.max_sum_drift_b > c.max_sum_drift_a for c in comps),
        samples_b32_drifts_no_more=sum(c.max_sum_drift_b32 <= c.max_sum_drift_a for c in comps),
        samples_a_or_b32_not_reference=sum(
            c.rows_a_not_reference + c.rows_b32_not_reference > 0 for c in comps),
    )


def softmax_off_by_length(
    dtype: torch.dtype,
    lengths: Iterable[int],
    *,
    values: int = 2**17,
    scale: float = 2.0,
    seed: int = 0,
) -> dict[int, tuple[int, int, float]]:
    """Per row length, where ``softmax(x)`` in ``dtype`` differs from ``softmax(x.float()).to(dtype)``.

    ``x`` holds at least ``values`` N(0, ``scale``²) draws rounded to
    ``dtype``, in rows of each length (at least 256 rows).  Returns
    ``{length: (differing values, values, largest difference in ulps of
    dtype)}``.  Which lengths differ depends on the CPU kernels torch runs
    (``torch.backends.cpu.get_cpu_capability()``), so the doctest shows only
    the totals.

    >>> import torch
    >>> {n: r[1] for n, r in softmax_off_by_length(torch.float16, (8, 16), values=4096).items()}
    {8: 4096, 16: 4096}
    """
    out = {}
    for n in lengths:
        x = _router_logits(max(256, -(-values // n)), n, scale, seed).to(dtype)
        got, want = F.softmax(x, dim=-1), F.softmax(x.float(), dim=-1).to(dtype)
        off = got != want
        out[n] = (int(off.sum()), off.numel(), _largest(_gap(got, want, dtype), off))
    return out


def _agreeing_here(dtype: str, lengths: list[int], values: int, scale: float, seed: int) -> list:
    r = softmax_off_by_length(getattr(torch, dtype), lengths, values=values, scale=scale, seed=seed)
    return [torch.backends.cpu.get_cpu_capability(), [n for n, v in r.items() if v[0] == 0]]


def agreeing_lengths_at(capability: str, dtype: str, lengths: Iterable[int], *, values: int = 2**16,
                        scale: float = 2.0, seed: int = 0) -> tuple[str, list[int]]:
    """:func:`softmax_off_by_length` in a fresh interpreter whose ATen kernels run at ``capability``.

    ``ATEN_CPU_CAPABILITY`` (``default``, ``avx2``, ``avx512``, ...) is read
    once per process (:func:`explainers.softmax_tail.at_capability`).
    Returns the capability torch reports there and the lengths at which the
    ``dtype`` softmax equals the fp32 one rounded once.

    >>> agreeing_lengths_at("default", "float16", (8, 16), values=4096)
    ('DEFAULT', [8, 16])
    """
    reported, agree = at_capability(capability, "explainers.precision.router_roundings:_agreeing_here", dtype=dtype,
                                    lengths=list(lengths), values=values, scale=scale, seed=seed)
    return reported, agree
