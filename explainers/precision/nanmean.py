"""``nanmean`` on CPU is ``nansum`` divided: it has ``nansum``'s roundings, not ``mean``'s fp32 buffer.

``nanmean`` in ``aten/src/ATen/native/ReduceOps.cpp`` (torch 2.14.1 and 2.15.0) computes
``at::nansum(self, ...).div(factor)``: a sum in the input dtype's kernel, rounded to the
input dtype, then a division rounded again; ``mean`` sums into an fp32 result and rounds
once.  :func:`nanmean_against_nansum` checks the identity bit for bit over seeds, dtypes,
layouts and thread counts, and counts how often each op differs from the fp32 mean
rounded once.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from explainers.precision.threads import layout_data, num_threads

__all__ = ["nanmean_against_nansum", "overflow_ones"]


def nanmean_against_nansum(seeds: Sequence[int] = range(10), n: int = 8_000,
                           threads: tuple[int, ...] = (1, 2)) -> dict[str, int]:
    """Counts over bf16/fp16 x contiguous/strided x ``threads`` x ``seeds`` inputs of ``n`` values.

    ``cases``: inputs tried; ``nanmean_is_nansum_div``: those where ``x.nanmean()`` equals
    ``x.nansum() / x.numel()`` bit for bit; ``mean_rounded_once`` / ``nanmean_rounded_once``:
    those where ``x.mean()`` / ``x.nanmean()`` equals ``x.float().mean()`` rounded once.

    >>> got = nanmean_against_nansum(range(2), n=1024, threads=(1,))
    >>> got["cases"], got["nanmean_is_nansum_div"] == got["cases"], got["mean_rounded_once"] == got["cases"]
    (8, True, True)
    """
    out = {"cases": 0, "nanmean_is_nansum_div": 0, "mean_rounded_once": 0, "nanmean_rounded_once": 0}
    for dtype in (torch.bfloat16, torch.float16):
        for layout in ("contiguous", "strided"):
            for t in threads:
                with num_threads(t):
                    for seed in seeds:
                        x = layout_data(n, dtype, layout, seed)
                        once = x.float().mean().to(dtype)
                        out["cases"] += 1
                        out["nanmean_is_nansum_div"] += bool(torch.equal(x.nanmean(), x.nansum() / x.numel()))
                        out["mean_rounded_once"] += bool(torch.equal(x.mean(), once))
                        out["nanmean_rounded_once"] += bool(torch.equal(x.nanmean(), once))
    return out


def overflow_ones(n: int = 100_000) -> dict[str, float]:
    """``mean`` and ``nanmean`` of ``n`` fp16 ones: the fp16 ``nansum`` overflows first.

    >>> overflow_ones()
    {'mean': 1.0, 'nanmean': inf}
    """
    x = torch.ones(n, dtype=torch.float16)
    return {"mean": x.mean().item(), "nanmean": x.nanmean().item()}
