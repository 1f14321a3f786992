"""Compare the two top-k routers of :mod:`.topk_router` in floating point: errors, roundings, ties, k = 1.

:mod:`explainers.precision.topk_router` holds the two formulas (A:
``topk_softmax``; B: ``full_softmax_then_renorm``); here they run in low
precision against an fp64 reference (:func:`compare_routers`) and their k = 1
gradients are compared (:func:`k1_router_gradients`);
:mod:`.router_roundings` rebuilds them rounding by rounding.

>>> import torch
>>> idx, w = topk_softmax(torch.tensor([[1.0, 3.0, 2.0, 0.0]]), 2)
>>> dense_weights(idx, w, 4)[0, 0].item(), idx.tolist()   # expert 0 not chosen: weight 0
(0.0, [[1, 2]])
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from explainers.page.tables import md_table
from explainers.precision.topk_router import full_softmax_then_renorm, topk_softmax

__all__ = [
    "topk_softmax",
    "full_softmax_then_renorm",
    "dense_weights",
    "RouterComparison",
    "compare_routers",
    "find_tied_row",
    "k1_router_gradients",
    "renorm_backward_forms",
    "router_table",
    "topk_tie_note",
]


def dense_weights(idx: torch.Tensor, w: torch.Tensor, n_experts: int) -> torch.Tensor:
    """Scatter ``(idx, w)`` into a dense ``(..., n_experts)`` float64 matrix.

    Comparing dense matrices compares routers that chose different experts
    fairly: an expert one router chose and the other did not counts with its
    full weight.

    >>> import torch
    >>> dense_weights(torch.tensor([[2, 0]]), torch.tensor([[0.75, 0.25]]), 3).tolist()
    [[0.25, 0.0, 0.75]]
    """
    out = torch.zeros(*idx.shape[:-1], n_experts, dtype=torch.float64)
    return out.scatter(-1, idx, w.double())


@dataclass(frozen=True)
class RouterComparison:
    """The low-precision router table's figures for one dtype.

    A is :func:`topk_softmax`, B is :func:`full_softmax_then_renorm` computed in
    ``dtype``, B32 is ``full_softmax_then_renorm`` with the softmax, top-k and
    division in at least fp32 and one cast to ``dtype`` at the end.
    """

    dtype: torch.dtype
    tokens: int
    #: tokens whose A and B chose different expert sets
    rows_different_set: int
    #: tokens whose expert set differs from the fp64 reference's, for A, B and B32
    rows_a_not_reference: int
    rows_b_not_reference: int
    rows_b32_not_reference: int
    #: largest weight difference between A and B, over the tokens where they agree on the set
    max_abs_a_minus_b: float
    #: largest error against the fp64 reference, over the tokens where that router chose the
    #: reference's set
    max_err_a: float
    max_err_b: float
    max_err_b32: float
    #: largest ``|sum(weights) - 1|`` (the sum taken exactly, in fp64)
    max_sum_drift_a: float
    max_sum_drift_b: float
    max_sum_drift_b32: float
    #: largest error against fp64 in ulps of ``dtype`` at each reference weight (same tokens
    #: as ``max_err_*``)
    max_ulps_a: float
    max_ulps_b: float
    max_ulps_b32: float
    #: tokens whose k-th and (k+1)-th largest logits are equal
    rows_tied_at_k: int
    #: tokens whose k-th and (k+1)-th largest probabilities (the softmax in ``dtype``) are equal
    rows_tied_probs_at_k: int
    #: tokens tied at k in the logits but not in the probabilities
    rows_tied_logits_not_probs: int
    #: tokens with different expert sets that are not tied at k in both logits and probabilities
    rows_different_without_tie: int
    #: tokens where A, or B32, or both keep other experts than the reference (the union)
    rows_a_or_b32_not_reference: int


def _router_logits(tokens: int, n_experts: int, scale: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(tokens, n_experts, generator=g, dtype=torch.float64) * scale


def compare_routers(
    dtype: torch.dtype,
    *,
    tokens: int = 4096,
    n_experts: int = 256,
    k: int = 8,
    scale: float = 2.0,
    seed: int = 0,
) -> RouterComparison:
    """Run A and B entirely in ``dtype``, and B32, and compare them to each other and to fp64.

    The logits are N(0, scale^2), rounded to ``dtype``; the reference is the
    fp64 math on those same rounded logits, so only the routers' own rounding
    is measured.  Each router's weight errors are taken over the tokens whose
    expert set matches the reference's (a swapped expert is a tie-break,
    counted in ``rows_*_not_reference``, not a rounding error of the weights).
    B32 (see :class:`RouterComparison`) computes in
    ``torch.promote_types(dtype, torch.float32)``.

    >>> import torch
    >>> c = compare_routers(torch.float64, tokens=64, n_experts=16, k=4)
    >>> c.rows_different_set, c.rows_b32_not_reference, c.max_abs_a_minus_b < 1e-15
    (0, 0, True)
    """
    logits = _router_logits(tokens, n_experts, scale, seed).to(dtype)
    ia, wa = topk_softmax(logits, k)
    ib, wb = full_softmax_then_renorm(logits, k)
    # B32: HF Mixtral's casts; promote_types keeps fp64 logits in fp64
    ic, wc = full_softmax_then_renorm(
        logits, k, softmax_dtype=torch.promote_types(dtype, torch.float32))
    ir, wr = topk_softmax(logits.double(), k)
    da, db, dc = (dense_weights(i, w, n_experts) for i, w in ((ia, wa), (ib, wb), (ic, wc)))
    dr = dense_weights(ir, wr, n_experts)
    sa, sb, sc, sr = (i.sort(dim=-1).values for i in (ia, ib, ic, ir))
    differ = (sa != sb).any(dim=-1)
    ranked = logits.sort(dim=-1, descending=True).values
    tied = ranked[:, k - 1] == ranked[:, k]
    ranked_p = F.softmax(logits, dim=-1).sort(dim=-1, descending=True).values
    tied_p = ranked_p[:, k - 1] == ranked_p[:, k]
    ulp = _ulp(dr, dtype)

    def max_over(rows: torch.Tensor, diff: torch.Tensor) -> float:
        d = diff.abs()[rows]
        return float(d.max()) if d.numel() else 0.0

    def max_ulps(rows: torch.Tensor, dense: torch.Tensor) -> float:
        chosen = rows[:, None] & (dr != 0)
        d = ((dense - dr).abs() / ulp)[chosen]
        return float(d.max()) if d.numel() else 0.0

    same_a, same_b, same_c = ((s == sr).all(dim=-1) for s in (sa, sb, sc))
    return RouterComparison(
        dtype=dtype,
        tokens=tokens,
        rows_different_set=int(differ.sum()),
        rows_a_not_reference=int((~same_a).sum()),
        rows_b_not_reference=int((~same_b).sum()),
        rows_b32_not_reference=int((~same_c).sum()),
        max_abs_a_minus_b=max_over(~differ, da - db),
        max_err_a=max_over(same_a, da - dr),
        max_err_b=max_over(same_b, db - dr),
        max_err_b32=max_over(same_c, dc - dr),
        max_sum_drift_a=float((wa.double().sum(-1) - 1).abs().max()),
        max_sum_drift_b=float((wb.double().sum(-1) - 1).abs().max()),
        max_sum_drift_b32=float((wc.double().sum(-1) - 1).abs().max()),
        max_ulps_a=max_ulps(same_a, da),
        max_ulps_b=max_ulps(same_b, db),
        max_ulps_b32=max_ulps(same_c, dc),
        rows_tied_at_k=int(tied.sum()),
        rows_tied_probs_at_k=int(tied_p.sum()),
        rows_tied_logits_not_probs=int((tied & ~tied_p).sum()),
        rows_different_without_tie=int((differ & ~(tied & tied_p)).sum()),
        rows_a_or_b32_not_reference=int((~same_a | ~same_c).sum()),
    )


def router_table(comparisons: Iterable[RouterComparison]) -> str:
    """The Markdown table of :func:`compare_routers` results: one row per dtype and router.

    Routers A, B and B′ (B32), except B′ in fp32, where it is B; floats to two
    significant digits.

    >>> import torch
    >>> c = compare_routers(torch.float32, tokens=64, n_experts=16, k=4)
    >>> print(router_table([c]).splitlines()[0])
    | dtype | router | tokens whose expert set differs from the reference's | max error, ulps | max abs(sum - 1) |
    >>> [row.split(" | ")[:2] for row in router_table([c]).splitlines()[2:]]
    [['| float32', 'A'], ['| float32', 'B']]
    """
    rows = []
    for c in comparisons:
        for name, differ, ulps, drift in (
            ("A", c.rows_a_not_reference, c.max_ulps_a, c.max_sum_drift_a),
            ("B", c.rows_b_not_reference, c.max_ulps_b, c.max_sum_drift_b),
            ("B′", c.rows_b32_not_reference, c.max_ulps_b32, c.max_sum_drift_b32),
        ):
            if name == "B′" and c.dtype == torch.float32:
                continue  # in fp32, B′ is B
            rows.append({
                "dtype": str(c.dtype).removeprefix("torch."), "router": name,
                "tokens whose expert set differs from the reference's": differ,
                "max error, ulps": ulps, "max abs(sum - 1)": drift,
            })
    return md_table(rows, fmt=".2g")


def topk_tie_note(doc: str | None = None) -> str:
    """The note on ties in ``torch.topk``'s documentation (``doc``: the installed one's), one line.

    >>> topk_tie_note("Returns k. .. note:: Sorted. .. note:: When tied, any. Args: input")
    'When tied, any.'
    >>> topk_tie_note("Returns k.")
    Traceback (most recent call last):
    ...
    ValueError: the documentation has no note about ties
    """
    doc = torch.topk.__doc__ if doc is None else doc
    notes = [note.strip() for note in " ".join(doc.split()).split(".. note::")[1:] if "tied" in note]
    if not notes:
        raise ValueError("the documentation has no note about ties")
    return notes[0].split(" Args:")[0]


def _ulp(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Spacing of ``dtype`` at ``|x|`` (gap to the next value away from zero), as float64.

    >>> import torch
    >>> _ulp(torch.tensor([1.0, 0.1], dtype=torch.float64), torch.float32).tolist() == [2**-23, 2**-27]
    True
    """
    r = x.to(dtype).abs()
    return (torch.nextafter(r, torch.full_like(r, float("inf"))) - r).double()


def find_tied_row(
    dtype: torch.dtype,
    *,
    tokens: int = 4096,
    n_experts: int = 256,
    k: int = 8,
    scale: float = 2.0,
    seed: int = 0,
) -> dict | None:
    """The first token whose two routers chose different experts, with the logits at ranks k and k+1.

    Same data as :func:`compare_routers`.  Returns ``None`` when every row agrees.

    >>> import torch
    >>> find_tied_row(torch.float64, tokens=64, n_experts=16, k=4) is None
    True
    """
    logits = _router_logits(tokens, n_experts, scale, seed).to(dtype)
    ia, _ = topk_softmax(logits, k)
    ib, _ = full_softmax_then_renorm(logits, k)
    differ = (ia.sort(dim=-1).values != ib.sort(dim=-1).values).any(dim=-1)
    rows = differ.nonzero().flatten()
    if rows.numel() == 0:
        return None
    row = int(rows[0])
    ranked = torch.sort(logits[row].double(), descending=True).values
    probs = F.softmax(logits[row], dim=-1)
    only_a = sorted(set(ia[row].tolist()) - set(ib[row].tolist()))
    only_b = sorted(set(ib[row].tolist()) - set(ia[row].tolist()))
    return {
        "row": row,
        "logit_rank_k": float(ranked[k - 1]),
        "logit_rank_k_plus_1": float(ranked[k]),
        "only_in_a": only_a,
        "only_in_b": only_b,
        "logits_of_swapped": [float(logits[row, e]) for e in only_a + only_b],
        "probs_of_swapped": [float(probs[e]) for e in only_a + only_b],
    }


def k1_router_gradients(n_experts: int = 8, seed: int = 0, *, tokens: int = 4,
                        dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """Gradients of ``sum(weight * upstream)`` w.r.t. ``dtype`` logits for k=1.

    With k=1 both renormalizing routers return weight 1.0, a constant, so in
    exact arithmetic the router gets no gradient.  ``topk_softmax``'s gradient
    is exactly zero (softmax of one value: ``y * (g - sum(g * y))`` with ``y == 1``);
    ``full_softmax_then_renorm`` divides ``w`` by itself, and autograd's
    division backward evaluates ``g / w - g * ((w / w) / w)``, which is
    ``g / w - g * fl(1 / w)`` since ``w / w`` is exactly 1: two roundings of the same
    quotient, in ``dtype``, tiny but non-zero.  ``full_softmax_then_renorm (fp32 softmax)``
    is B′: the same with the softmax, top-k and division in fp32 and one
    cast.  Softmax then top-1 *without* renormalization (Switch-style) keeps a
    real gradient.  The logits are N(0, 1) drawn in fp32 (``tokens`` rows),
    then cast to ``dtype``; the upstream gradient likewise.

    >>> g = k1_router_gradients()
    >>> bool((g["topk_softmax"] == 0).all())
    True
    >>> float(g["full_softmax_then_renorm"].abs().max()) < 1e-6
    True
    >>> float(g["softmax_top1_no_renorm"].abs().max()) > 1e-3
    True
    >>> gb = k1_router_gradients(dtype=torch.bfloat16, tokens=64)
    >>> gb["full_softmax_then_renorm"].dtype, float(gb["full_softmax_then_renorm"].abs().max()) > 1e-4
    (torch.bfloat16, True)
    """
    gen = torch.Generator().manual_seed(seed)
    base = torch.randn(tokens, n_experts, generator=gen).to(dtype)
    upstream = torch.randn(tokens, 1, generator=gen).to(dtype)
    weights = {  # the k = 1 routing weight of each router, from the logits
        "topk_softmax": lambda x: topk_softmax(x, 1)[1],
        "full_softmax_then_renorm": lambda x: full_softmax_then_renorm(x, 1)[1],
        "full_softmax_then_renorm (fp32 softmax)":
            lambda x: full_softmax_then_renorm(x, 1, softmax_dtype=torch.float32)[1],
        "softmax_top1_no_renorm": lambda x: torch.topk(F.softmax(x, dim=-1), 1, dim=-1).values,
    }
    out = {}
    for name, weight in weights.items():
        logits = base.clone().requires_grad_(True)
        (weight(logits) * upstream).sum().backward()
        out[name] = logits.grad.detach()
    return out


def renorm_backward_forms(w: torch.Tensor, g: torch.Tensor) -> dict[str, bool]:
    """Which fp32 expression autograd's gradient of ``w / w.sum(-1)`` (one weight per row) equals, bitwise.

    With one weight per row the sum is ``w`` itself.  Autograd adds the
    numerator's term ``g / w`` and the denominator's ``-g * ((w / w) / w)``
    (the order of torch's division backward); the derivative written out,
    ``g * (1/w - w/w**2)``, is another expression with other roundings.

    >>> import torch
    >>> w = torch.rand(1000, 1, generator=torch.Generator().manual_seed(0)) + 0.01
    >>> renorm_backward_forms(w, torch.randn(1000, 1, generator=torch.Generator().manual_seed(1)))
    {'g / w - g * ((w / w) / w)': True, 'g * (1/w - w/w**2)': False}
    """
    leaf = w.detach().clone().requires_grad_(True)
    ((leaf / leaf.sum(dim=-1, keepdim=True)) * g).sum().backward()
    w = w.detach()
    return {
        "g / w - g * ((w / w) / w)": torch.equal(leaf.grad, g / w - g * ((w / w) / w)),
        "g * (1/w - w/w**2)": torch.equal(leaf.grad, g * (1 / w - w / w**2)),
    }
