"""Why formula B of :mod:`.topk_router` keeps other experts than A in low precision: a sweep and an ablation.

:func:`tie_sweep` runs :func:`~.router.compare_routers`' setting over several
logit scales and counts, per scale, the ties and the tokens where A and B
keep different experts.  :func:`merge_ablation` isolates the cause on one
scale: CPU ``torch.topk`` chooses among equal values by a selection
algorithm whose path depends only on how the row's values compare (ties
included); B's low-precision probabilities merge logits that differ into
equal values, so ``topk`` sees another pattern of comparisons than A does.

>>> import torch
>>> dense_rank(torch.tensor([[3.0, 1.0, 3.0, 2.0]])).tolist()
[[2, 0, 2, 1]]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from explainers.precision.router import _router_logits, compare_routers
from explainers.precision.topk_router import full_softmax_then_renorm, topk_softmax

__all__ = ["dense_rank", "cpu_topk_path", "expert_sets", "TieSweepRow", "tie_sweep", "MergeAblation", "merge_ablation", "RankKMerges",
           "rank_k_merges", "Fp32Merges",
           "fp32_softmax_merges", "round_significand", "underflow_ablation", "power_of_two_scales"]


def dense_rank(x: torch.Tensor) -> torch.Tensor:
    """Each value's rank among the distinct values of its row (last dim), from 0; equal values share a rank.

    An order-preserving relabelling: ``x[i] < x[j]`` exactly when
    ``rank[i] < rank[j]``, and equal values stay equal.

    >>> dense_rank(torch.tensor([[0.5, 0.5, -1.0]])).tolist()
    [[1, 1, 0]]
    """
    s, order = x.sort(dim=-1)
    step = torch.zeros_like(s, dtype=torch.int64)
    step[..., 1:] = (s[..., 1:] != s[..., :-1]).long()
    return torch.empty_like(step).scatter_(-1, order, step.cumsum(-1))


def _sets(idx: torch.Tensor) -> torch.Tensor:
    return idx.sort(dim=-1).values


@dataclass(frozen=True)
class TieSweepRow:
    """One logit scale of :func:`tie_sweep`."""

    scale: float
    #: tokens whose k-th and (k+1)-th largest logits are equal
    tied_logits: int
    #: tokens whose k-th and (k+1)-th largest probabilities (softmax in the dtype) are equal
    tied_probs: int
    #: tokens where A and B keep different experts
    a_ne_b: int
    #: of those, tokens without a tie at rank k in the logits
    differ_without_logit_tie: int
    #: tokens where B keeps an expert whose logit is below the k-th largest logit
    b_not_top_k: int
    #: tokens where A, or B′ (softmax in fp32), keep other experts than the fp64 reference
    a_or_b32_not_reference: int
    #: tokens whose k-th largest probability (softmax in the dtype) is subnormal or zero
    kth_prob_subnormal: int
    #: tokens where B keeps a non-top-k expert although the k-th largest probability is normal
    b_not_top_k_kth_normal: int


def tie_sweep(dtype: torch.dtype, scales: tuple[float, ...], *, tokens: int = 4096, n_experts: int = 256,
              k: int = 8, seed: int = 0) -> list[TieSweepRow]:
    """:func:`~.router.compare_routers` at each logit scale (logits ~ N(0, scale²), rounded to ``dtype``).

    >>> rows = tie_sweep(torch.bfloat16, (2.0,), tokens=64, n_experts=16, k=4)
    >>> rows[0].scale, rows[0].a_ne_b <= rows[0].tied_probs
    (2.0, True)
    """
    rows = []
    for scale in scales:
        c = compare_routers(dtype, tokens=tokens, n_experts=n_experts, k=k, scale=scale, seed=seed)
        logits = _router_logits(tokens, n_experts, scale, seed).to(dtype)
        ib, _ = full_softmax_then_renorm(logits, k)
        kth = logits.topk(k, dim=-1).values[:, -1:]
        kth_p = F.softmax(logits, dim=-1).topk(k, dim=-1).values[:, -1]
        not_top_k = (logits.gather(-1, ib) < kth).any(dim=-1)
        subnormal = kth_p < torch.finfo(dtype).tiny
        rows.append(TieSweepRow(
            scale=scale,
            tied_logits=c.rows_tied_at_k,
            tied_probs=c.rows_tied_probs_at_k,
            a_ne_b=c.rows_different_set,
            differ_without_logit_tie=c.rows_different_set - _differ_and_tied(logits, k),
            b_not_top_k=int(not_top_k.sum()),
            a_or_b32_not_reference=c.rows_a_or_b32_not_reference,
            kth_prob_subnormal=int(subnormal.sum()),
            b_not_top_k_kth_normal=int((not_top_k & ~subnormal).sum()),
        ))
    return rows


def _differ_and_tied(logits: torch.Tensor, k: int) -> int:
    """Tokens where A and B differ and the logits tie at rank k."""
    ia, _ = topk_softmax(logits, k)
    ib, _ = full_softmax_then_renorm(logits, k)
    ranked = logits.sort(dim=-1, descending=True).values
    tied = ranked[:, k - 1] == ranked[:, k]
    return int(((_sets(ia) != _sets(ib)).any(dim=-1) & tied).sum())


def _router_ranks(dtype: torch.dtype, tokens: int, n_experts: int, k: int, scale: float, seed: int):
    """The logits in ``dtype``, A's and B's experts, B's probabilities, and both dense ranks."""
    logits = _router_logits(tokens, n_experts, scale, seed).to(dtype)
    ia, _ = topk_softmax(logits, k)
    ib, _ = full_softmax_then_renorm(logits, k)
    probs = F.softmax(logits, dim=-1)
    return logits, ia, ib, probs, dense_rank(probs), dense_rank(logits)


def expert_sets(dtype: torch.dtype, *, tokens: int = 4096, n_experts: int = 256, k: int = 8, scale: float = 2.0,
                seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The experts A and B keep for each token (sorted, so equal sets compare equal), on the page's logits.

    >>> a, b = expert_sets(torch.bfloat16, tokens=4, n_experts=16, k=2)
    >>> a.shape, torch.equal(a, b)
    (torch.Size([4, 2]), True)
    """
    _, ia, ib, *_ = _router_ranks(dtype, tokens, n_experts, k, scale, seed)
    return _sets(ia), _sets(ib)


def cpu_topk_path(n: int, k: int) -> str:
    """The selection algorithm CPU ``torch.topk`` uses for a row of ``n`` values and this ``k``.

    The rule of ``TopKImpl.h`` (``use_partial_sort = k * 64 <= n``) in torch
    2.14.1 and 2.15.0; the router page quotes the installed line.

    >>> cpu_topk_path(256, 8), cpu_topk_path(256, 2), cpu_topk_path(1024, 16)
    ('nth_element', 'partial_sort', 'partial_sort')
    """
    return "partial_sort" if k * 64 <= n else "nth_element"


@dataclass(frozen=True)
class MergeAblation:
    """What decides B's experts, one change at a time (tokens out of ``tokens``)."""

    tokens: int
    #: tokens whose probabilities (softmax in the dtype) have fewer distinct values than their logits
    merged_rows: int
    #: ``topk`` of the probabilities' dense ranks keeps B's experts (the values do not matter, only
    #: their order and ties)
    b_is_topk_of_prob_ranks: int
    #: ``topk`` of the logits' dense ranks keeps A's experts
    a_is_topk_of_logit_ranks: int
    #: probabilities un-merged (equal probabilities ordered by their logits): ``topk`` keeps A's experts
    unmerged_is_a: int
    #: tokens where the un-merged probabilities' dense ranks equal the logits' dense ranks (softmax is
    #: monotone, so un-merging can only give back the logits' order: this is the tautology behind
    #: ``unmerged_is_a``)
    unmerged_is_logit_ranks: int
    #: tokens where A and B keep different experts
    a_ne_b: int


def merge_ablation(dtype: torch.dtype, *, tokens: int = 4096, n_experts: int = 256, k: int = 8,
                   scale: float = 2.0, seed: int = 0) -> MergeAblation:
    """Switch the merging of B's probabilities off, keep everything else, and compare the experts kept.

    ``topk`` runs on float64 dense ranks here; the counts show that this keeps
    each formula's experts, so ``topk``'s choice depends only on the order and
    ties of its input row.

    >>> m = merge_ablation(torch.bfloat16, tokens=64, n_experts=16, k=4)
    >>> m.b_is_topk_of_prob_ranks == m.a_is_topk_of_logit_ranks == m.unmerged_is_a == 64
    True
    """
    _, ia, ib, _, rank_p, rank_l = _router_ranks(dtype, tokens, n_experts, k, scale, seed)
    # lexicographic (probability, logit): the probabilities' order, with merged values split again
    unmerged = dense_rank(rank_p * n_experts + rank_l)

    def same(idx: torch.Tensor, ranks: torch.Tensor) -> int:
        return int((_sets(idx) == _sets(ranks.double().topk(k, dim=-1).indices)).all(dim=-1).sum())

    return MergeAblation(
        tokens=tokens,
        merged_rows=int((rank_p.amax(-1) < rank_l.amax(-1)).sum()),
        b_is_topk_of_prob_ranks=same(ib, rank_p),
        a_is_topk_of_logit_ranks=same(ia, rank_l),
        unmerged_is_a=same(ia, unmerged),
        unmerged_is_logit_ranks=int((unmerged == rank_l).all(dim=-1).sum()),
        a_ne_b=int((_sets(ia) != _sets(ib)).any(dim=-1).sum()),
    )


@dataclass(frozen=True)
class RankKMerges:
    """Which merges decide B's experts: those tied at rank k, or those elsewhere in the row (one scale).

    Every count is of tokens where A and B keep different experts.  The rank-k
    group is the set of experts whose probability (softmax in the dtype)
    equals the k-th largest one.
    """

    #: tokens where A and B keep different experts
    a_ne_b: int
    #: of those, tokens whose rank-k probability group is exactly the logits' tie group at rank k (the
    #: probabilities merge no distinct logits there)
    rank_k_group_is_logit_tie: int
    #: of those, tokens where un-merging every merged value except the rank-k group gives A's experts
    unmerged_elsewhere_is_a: int
    #: of those, tokens where un-merging only the rank-k group still gives B's experts
    unmerged_at_k_is_b: int


def rank_k_merges(dtype: torch.dtype, *, tokens: int = 4096, n_experts: int = 256, k: int = 8,
                  scale: float = 2.0, seed: int = 0) -> RankKMerges:
    """Split B's merged probabilities by their logits everywhere but at rank k, or only at rank k.

    :func:`merge_ablation` un-merges every merged value at once; this splits
    the two places apart.  ``topk`` runs on dense ranks, as there.

    >>> rank_k_merges(torch.bfloat16, tokens=1024, n_experts=256, k=8, scale=1.0)  # doctest: +NORMALIZE_WHITESPACE
    RankKMerges(a_ne_b=6, rank_k_group_is_logit_tie=6, unmerged_elsewhere_is_a=6, unmerged_at_k_is_b=6)
    """
    logits, ia, ib, probs, rank_p, rank_l = _router_ranks(dtype, tokens, n_experts, k, scale, seed)
    at_k = probs == probs.topk(k, dim=-1).values[:, -1:]
    logit_tie_at_k = logits == logits.topk(k, dim=-1).values[:, -1:]
    # lexicographic (probability, logit) keys, with the logit left out where a merge is to be kept
    elsewhere = rank_p * n_experts + torch.where(at_k, 0, rank_l)
    only_at_k = rank_p * n_experts + torch.where(at_k, rank_l, 0)
    differ = (_sets(ia) != _sets(ib)).any(dim=-1)

    def keeps(ranks: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return (_sets(dense_rank(ranks).double().topk(k, dim=-1).indices) == _sets(idx)).all(dim=-1)

    return RankKMerges(
        a_ne_b=int(differ.sum()),
        rank_k_group_is_logit_tie=int((differ & (at_k == logit_tie_at_k).all(dim=-1)).sum()),
        unmerged_elsewhere_is_a=int((differ & keeps(elsewhere, ia)).sum()),
        unmerged_at_k_is_b=int((differ & keeps(only_at_k, ib)).sum()),
    )


@dataclass(frozen=True)
class Fp32Merges:
    """Whether an fp32 softmax of low-precision logits merges what the logits keep apart (one scale)."""

    scale: float
    tokens: int
    #: tokens whose fp32 probabilities have fewer distinct values than their logits
    merged_rows: int
    #: tokens where B′ (softmax in fp32, then renormalise) keeps other experts than the fp64 reference
    b32_not_reference: int
    #: of those, tokens whose k-th and (k+1)-th largest logits are equal (another choice among ties)
    b32_misses_tied_at_k: int
    #: tokens where B′ keeps an expert whose logit is below the k-th largest logit
    b32_not_top_k: int
    #: tokens whose logits span more than -ln(fp32's smallest normal): some exp of a gap is subnormal
    rows_past_normal: int = 0
    #: the smallest span (largest logit minus smallest) among the merged rows; None when none merged
    min_merged_span: float | None = None


def fp32_softmax_merges(dtype: torch.dtype, scale: float, *, tokens: int = 2048, n_experts: int = 256,
                        k: int = 8, seed: int = 0) -> Fp32Merges:
    """Count rows where ``softmax(logits, dtype=float32)`` merges distinct logits, and B′'s misses.

    Once a row's logits span more than about 87.3 (-ln of fp32's smallest
    normal), fp32 ``exp`` of the largest gap is subnormal, with fewer
    significant bits the larger the gap, and past about 104.0 it is zero; the
    result reports how many rows span that far and the smallest span of a
    merged row.

    >>> fp32_softmax_merges(torch.bfloat16, 1.0, tokens=64, n_experts=16, k=4)  # doctest: +NORMALIZE_WHITESPACE
    Fp32Merges(scale=1.0, tokens=64, merged_rows=0, b32_not_reference=0, b32_misses_tied_at_k=0, b32_not_top_k=0,
               rows_past_normal=0, min_merged_span=None)
    """
    logits = _router_logits(tokens, n_experts, scale, seed).to(dtype)
    probs = F.softmax(logits, dim=-1, dtype=torch.float32)
    merged = dense_rank(probs).amax(-1) < dense_rank(logits).amax(-1)
    ic, _ = full_softmax_then_renorm(logits, k, softmax_dtype=torch.float32)
    ir, _ = topk_softmax(logits.double(), k)
    miss = (_sets(ic) != _sets(ir)).any(dim=-1)
    ranked = logits.sort(dim=-1, descending=True).values
    tied = ranked[:, k - 1] == ranked[:, k]
    span = (ranked[:, 0] - ranked[:, -1]).double()
    return Fp32Merges(scale=scale, tokens=tokens, merged_rows=int(merged.sum()),
                      b32_not_reference=int(miss.sum()), b32_misses_tied_at_k=int((miss & tied).sum()),
                      b32_not_top_k=int((logits.gather(-1, ic) < ranked[:, k - 1:k]).any(dim=-1).sum()),
                      rows_past_normal=int((span > -math.log(torch.finfo(torch.float32).tiny)).sum()),
                      min_merged_span=float(span[merged].min()) if merged.any() else None)


def round_significand(x: torch.Tensor, bits: int) -> torch.Tensor:
    """``x`` rounded to ``bits`` significant bits (to nearest, ties to even), with no exponent limit.

    In float64: a dtype's rounding of the significand without its range, so
    no subnormals and no flush to zero where that dtype would have them.

    >>> round_significand(torch.tensor([1.0 + 2**-11, 1.0 + 3 * 2**-11, 1e-9]), 11).tolist()
    [1.0, 1.001953125, 1.000444171950221e-09]
    """
    m, e = torch.frexp(x.double())
    return torch.ldexp(torch.round(torch.ldexp(m, torch.tensor(bits))), e - bits)


def _non_top_k(logits: torch.Tensor, probs: torch.Tensor, k: int) -> int:
    """Tokens where ``topk`` of ``probs`` keeps an expert whose logit is below the k-th largest logit."""
    kth = logits.topk(k, dim=-1).values[:, -1:]
    return int((logits.gather(-1, probs.topk(k, dim=-1).indices) < kth).any(dim=-1).sum())


def underflow_ablation(dtype: torch.dtype, scale: float, *, tokens: int = 4096, n_experts: int = 256,
                       k: int = 8, seed: int = 0) -> dict[str, int]:
    """Tokens where B's ``topk`` keeps a non-top-k expert, with the dtype's range switched on and off.

    B's ``topk`` runs on three versions of the probabilities: the softmax in
    ``dtype``; the fp32 softmax cast to ``dtype`` (its significand and its
    range: subnormals, zero); the fp32 softmax rounded to ``dtype``'s
    significant bits only (:func:`round_significand`), with fp32's range.

    >>> underflow_ablation(torch.float16, 1.0, tokens=64, n_experts=16, k=4)
    {'softmax in the dtype': 0, 'fp32 softmax cast to the dtype': 0, "fp32 softmax, the dtype's bits, fp32's range": 0}
    """
    logits = _router_logits(tokens, n_experts, scale, seed).to(dtype)
    p32 = F.softmax(logits.float(), dim=-1)
    bits = 1 - int(torch.log2(torch.tensor(torch.finfo(dtype).eps)))  # stored bits + the implicit one
    return {
        "softmax in the dtype": _non_top_k(logits, F.softmax(logits, dim=-1), k),
        "fp32 softmax cast to the dtype": _non_top_k(logits, p32.to(dtype), k),
        "fp32 softmax, the dtype's bits, fp32's range": _non_top_k(logits, round_significand(p32, bits), k),
    }


def power_of_two_scales(dtype: torch.dtype, scales: tuple[float, ...], *, ref: float = 2.0, tokens: int = 4096,
                        n_experts: int = 256, seed: int = 0) -> dict[float, int]:
    """For each scale, how many logits, rounded to ``dtype``, are not those at ``ref`` times scale/ref.

    The sweep draws the same N(0, 1) values and multiplies by the scale
    before rounding; where scale/ref is a power of two and nothing over- or
    underflows, rounding commutes with the scaling (0 logits differ).

    >>> power_of_two_scales(torch.bfloat16, (0.1, 1.0, 4.0), tokens=64, n_experts=16)
    {0.1: 283, 1.0: 0, 4.0: 0}
    """
    base = _router_logits(tokens, n_experts, ref, seed).to(dtype)
    return {s: int((_router_logits(tokens, n_experts, s, seed).to(dtype) != base * (s / ref)).sum())
            for s in scales}
