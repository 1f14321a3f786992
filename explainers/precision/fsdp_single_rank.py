"""FSDP2 on one data-parallel rank with a custom divide factor: how many times it divides.

With one rank in the reduce-scatter group, ``foreach_reduce``
(``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``) issues no
reduce-scatter: it copies its buffer into the output divided by the custom factor
(``reduce_output.copy_(reduce_scatter_input / gradient_divide_factor)``).  The
division before (``_div_if_needed(reduce_scatter_input, predivide_factor)``) and
the one after (``_div_if_needed(reduce_output, postdivide_factor)``) still run
around that copy.  So when ``_get_gradient_divide_factors`` also returns a division
before or after (an fp16 ``reduce_dtype``'s split, or ``force_sum_reduction_for_comms``
on fp32 and bf16), the gradient is divided by more than the factor.

:func:`single_rank_divisions` measures it: a world of one gloo rank in this
process (a ``HashStore``, no socket to another process), a tiny fp32 model under
``fully_shard`` next to an unsharded copy, one forward and backward on the same
input, and for each case the ratio of the copy's gradient to FSDP2's sharded
``.grad``: the total division applied.  The result is plain data, so
:func:`explainers.releases.run_under` can call it in either release's environment
(a fresh process, whose process group it leaves destroyed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from explainers.precision.fsdp_data import parse_dtype


def single_rank_divisions(cases: Sequence[Sequence[Any]], factor: float = 4.0) -> dict[str, float]:
    """For each case ``[name, reduce_dtype or None, force_sum]``, the total division FSDP2
    applies to the gradient on one rank with ``set_gradient_divide_factor(factor)``.

    ``reduce_dtype`` is a name such as ``"torch.float16"`` (the parameters stay fp32);
    ``force_sum`` is passed to ``set_force_sum_reduction_for_comms``.  The division is
    the median, over the gradient's elements, of the unsharded model's gradient over
    FSDP2's, rounded to 3 decimals (an fp16 ``reduce_dtype`` rounds each element).

    >>> single_rank_divisions([["fp32", None, False]], factor=0.0)
    Traceback (most recent call last):
    ...
    ValueError: factor must be a positive number, got 0.0
    """
    if not (isinstance(factor, (int, float)) and factor > 0):
        raise ValueError(f"factor must be a positive number, got {factor!r}")
    import copy

    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if dist.is_initialized():
        raise RuntimeError("single_rank_divisions forms its own one-rank world: call it in a fresh process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        out: dict[str, float] = {}
        for name, reduce_dtype, force_sum in cases:
            torch.manual_seed(0)
            ref = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
            model = copy.deepcopy(ref)
            fully_shard(model, mp_policy=MixedPrecisionPolicy(reduce_dtype=parse_dtype(reduce_dtype)))
            model.set_gradient_divide_factor(float(factor))
            model.set_force_sum_reduction_for_comms(bool(force_sum))
            x = torch.randn(16, 8)
            ref(x).square().sum().backward()
            model(x).square().sum().backward()
            ratios = torch.cat([(r.grad / p.grad.to_local().float()).flatten()
                                for r, p in zip(ref.parameters(), model.parameters(), strict=True)])
            ratios = ratios[ratios.isfinite()]
            out[str(name)] = round(ratios.median().item(), 3)
        return out
    finally:
        dist.destroy_process_group()
