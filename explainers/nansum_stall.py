"""A bf16 ``nansum`` over an input that does not coalesce to one dimension stalls; ``sum`` and ``mean`` do not.

``sum_out`` in ``aten/src/ATen/native/ReduceOps.cpp`` (torch 2.14.1 and 2.15.0) sums an
input that does not coalesce to one dimension into an fp32 buffer; ``nansum_out`` has no
such buffer, and ``nanmean`` is ``nansum`` divided.  On ones the difference is plain.

>>> strided_ones_stall(rows=8, threads=(1,))[0]["nansum"]
256.0
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from explainers.precision.threads import num_threads

__all__ = ["strided_ones_stall", "strided_ones_sweep"]


def strided_ones_stall(rows: int = 100_000, threads: Sequence[int] = (1, 2)) -> list[dict[str, float]]:
    """``nansum``, ``sum``, ``nanmean`` and ``mean`` of ``rows * 32`` bf16 ones that are not contiguous.

    The input is ``torch.ones(rows, 64, dtype=torch.bfloat16)[:, :32]``; one row per
    entry of ``threads``, with the thread count, the exact sum (``rows * 32``) and
    ``float_nansum``, the ``nansum`` of the input converted to fp32.  Values are Python
    numbers, so the result crosses :func:`explainers.releases.run_under`.

    >>> strided_ones_stall(rows=8, threads=(1,))
    [{'threads': 1, 'exact': 256, 'nansum': 256.0, 'sum': 256.0, 'nanmean': 1.0, 'mean': 1.0, 'float_nansum': 256.0}]
    """
    x = torch.ones(rows, 64, dtype=torch.bfloat16)[:, :32]
    out = []
    for t in threads:
        with num_threads(t):
            out.append({"threads": t, "exact": rows * 32, "nansum": x.nansum().item(), "sum": x.sum().item(),
                        "nanmean": x.nanmean().item(), "mean": x.mean().item(),
                        "float_nansum": x.float().nansum().item()})
    return out


def strided_ones_sweep(rows: Sequence[int] = (1_000, 10_000, 100_000),
                       threads: Sequence[int] = (1, 2)) -> list[dict[str, float]]:
    """:func:`strided_ones_stall` for each entry of ``rows``, each result with its ``rows``.

    >>> [(r["rows"], r["threads"], r["nansum"]) for r in strided_ones_sweep(rows=(8, 16), threads=(1,))]
    [(8, 1, 256.0), (16, 1, 512.0)]
    """
    return [dict(r, rows=n) for n in rows for r in strided_ones_stall(n, threads)]
