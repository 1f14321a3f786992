"""Two ways to compute MoE top-k router weights: top-k then softmax, or softmax, top-k, renormalise.

``topk_softmax`` picks the k largest logits and takes a softmax over those k
values (the order of Mistral's reference MoE).  ``full_softmax_then_renorm``
takes the softmax over all experts, picks the k largest probabilities and
divides by their sum (the order of HF Transformers' Mixtral).  In exact
arithmetic they are the same function: softmax is strictly monotone, so the
same experts are picked (up to how ``topk`` breaks ties between equal values),
and in ``p_i / sum_S p_j`` the partition function cancels.  In floating point
rounded probabilities can tie where the logits do not, so the two can pick
different experts, and what matters for the weights is where the casts sit: run on
bf16 logits, ``full_softmax_then_renorm`` rounds the probabilities, their sum
and the quotient; with ``softmax_dtype=torch.float32`` (HF's
``F.softmax(..., dtype=torch.float)`` and one cast at the end) it rounds once.

This file needs only torch: copy it and run ``python topk_router.py`` to see
both routers on one small batch of logits.

>>> import torch
>>> logits = torch.tensor([[1.0, 3.0, 2.0, 0.0]], dtype=torch.float64)
>>> idx_a, w_a = topk_softmax(logits, 2)
>>> idx_b, w_b = full_softmax_then_renorm(logits, 2)
>>> idx_a.tolist(), idx_b.tolist()
([[1, 2]], [[1, 2]])
>>> torch.allclose(w_a, w_b)
True
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["topk_softmax", "full_softmax_then_renorm"]


def _check_router_args(logits: torch.Tensor, k: int) -> None:
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"logits must be a torch.Tensor, got {type(logits).__name__}")
    if not logits.is_floating_point():
        raise TypeError(
            f"logits must be a floating-point tensor, got {logits.dtype}; "
            "softmax over integer logits is undefined, cast first (e.g. logits.float())"
        )
    if logits.dim() < 1:
        raise ValueError("logits must have at least one dim (the experts dim, last)")
    if isinstance(k, bool) or not isinstance(k, int):  # a bool is an int, not a count
        raise TypeError(f"k must be an int, got {type(k).__name__}")
    n_experts = logits.shape[-1]
    if k <= 0:
        raise ValueError(f"k must be >= 1 (experts chosen per token), got k={k}")
    if k > n_experts:
        raise ValueError(
            f"k={k} is larger than the number of experts ({n_experts}, the last dim of logits)"
        )


def topk_softmax(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k of the logits, then a softmax over the k chosen values.

    Returns ``(indices, weights)``, both of shape ``(..., k)``; the weights are
    in ``logits.dtype``.

    >>> import torch
    >>> idx, w = topk_softmax(torch.tensor([0.0, 2.0, 1.0]), 1)
    >>> idx.tolist(), w.tolist()
    ([1], [1.0])
    >>> topk_softmax(torch.tensor([1, 2, 3]), 1)
    Traceback (most recent call last):
    ...
    TypeError: logits must be a floating-point tensor, got torch.int64; softmax over integer logits is undefined, cast first (e.g. logits.float())
    """
    _check_router_args(logits, k)
    vals, idx = torch.topk(logits, k, dim=-1)
    return idx, F.softmax(vals, dim=-1)


def full_softmax_then_renorm(
    logits: torch.Tensor, k: int, *, softmax_dtype: torch.dtype | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax over all experts, top-k of the probabilities, divide by their sum.

    Returns ``(indices, weights)`` like :func:`topk_softmax`.  With
    ``softmax_dtype`` the softmax, top-k and division run in that dtype and
    the weights are cast to ``logits.dtype`` once, at the end (how HF
    Transformers' Mixtral routes, with ``softmax_dtype=torch.float32``);
    without it every step runs in ``logits.dtype``.

    >>> import torch
    >>> bf = torch.tensor([0.0, 2.0, 1.0], dtype=torch.bfloat16)
    >>> full_softmax_then_renorm(bf, 2, softmax_dtype=torch.float32)[1].dtype
    torch.bfloat16
    >>> full_softmax_then_renorm(bf, 2, softmax_dtype=torch.int32)
    Traceback (most recent call last):
    ...
    TypeError: softmax_dtype must be a floating-point dtype, got torch.int32

    >>> import torch
    >>> idx, w = full_softmax_then_renorm(torch.tensor([0.0, 2.0, 1.0]), 2)
    >>> idx.tolist(), round(w.sum().item(), 6)
    ([1, 2], 1.0)
    >>> full_softmax_then_renorm(torch.zeros(4), 5)
    Traceback (most recent call last):
    ...
    ValueError: k=5 is larger than the number of experts (4, the last dim of logits)
    >>> full_softmax_then_renorm(torch.zeros(4), 0)
    Traceback (most recent call last):
    ...
    ValueError: k must be >= 1 (experts chosen per token), got k=0
    """
    _check_router_args(logits, k)
    if softmax_dtype is None:
        probs = F.softmax(logits, dim=-1)
        w, idx = torch.topk(probs, k, dim=-1)
        return idx, w / w.sum(dim=-1, keepdim=True)
    if not isinstance(softmax_dtype, torch.dtype) or not softmax_dtype.is_floating_point:
        raise TypeError(f"softmax_dtype must be a floating-point dtype, got {softmax_dtype}")
    probs = F.softmax(logits, dim=-1, dtype=softmax_dtype)
    w, idx = torch.topk(probs, k, dim=-1)
    return idx, (w / w.sum(dim=-1, keepdim=True)).to(logits.dtype)


if __name__ == "__main__":
    # Two tokens, four experts, two experts per token.
    logits = torch.tensor([[0.5, 2.0, -1.0, 1.5], [3.0, 0.0, 1.0, -0.5]])
    idx_a, w_a = topk_softmax(logits, 2)
    idx_b, w_b = full_softmax_then_renorm(logits, 2)
    for name, idx, w in (("topk_softmax", idx_a, w_a), ("full_softmax_then_renorm", idx_b, w_b)):
        weights = [[f"{x:.4f}" for x in row] for row in w.tolist()]
        print(f"{name:25} experts {idx.tolist()}  weights {weights}")
    agree = torch.equal(idx_a, idx_b) and torch.allclose(w_a, w_b)
    print("same experts and weights:", agree)
