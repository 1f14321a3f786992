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

__all__ = ["stall_by_width", "strided_ones_stall", "strided_ones_sweep"]


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


def stall_by_width(widths: Sequence[int] = (4, 8, 16, 32, 48, 64, 100), rows: int = 200_000) -> list[dict[str, float]]:
    """One-thread ``nansum`` of ``torch.ones(rows, 2 * width, dtype=torch.bfloat16)[:, :width]`` per width.

    Each entry has the ``width``, the ``exact`` sum, the ``nansum`` and ``pow2``, the
    smallest power of two at or above ``256 * width``: the first total at which bf16's
    spacing (8 significant bits) is at least twice the width, so that adding ``width``
    to it in bf16 gives it back.

    >>> [(r["width"], r["nansum"], r["pow2"]) for r in stall_by_width((4, 6), rows=2_000)]
    [(4, 1024.0, 1024), (6, 2048.0, 2048)]
    """
    out = []
    with num_threads(1):
        for w in widths:
            x = torch.ones(rows, 2 * w, dtype=torch.bfloat16)[:, :w]
            out.append({"width": w, "exact": rows * w, "nansum": x.nansum().item(),
                        "pow2": 1 << (256 * w - 1).bit_length()})
    return out
