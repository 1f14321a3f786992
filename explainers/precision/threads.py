"""Does a bf16/fp16 reduction on CPU depend on the thread count? Per layout, per op, measured.

A full reduction of at least ``GRAIN_SIZE`` elements on more than one thread
is split between threads by ``two_pass_reduction`` (``TensorIteratorReduce.cpp``),
whose per-thread buffer has the *output's* dtype: each thread's fp32 partial
is rounded to bf16/fp16 before the partials are combined.  ``sum_out``
(``ReduceOps.cpp``) avoids that for inputs that do not coalesce to one
dimension (``should_use_acc_buffer``) by summing into an fp32 buffer, and
``mean`` always sums in fp32; this module measures which inputs show the
second rounding.

>>> import torch
>>> with num_threads(1):
...     torch.get_num_threads()
1
"""

import contextlib
import math
from collections.abc import Iterator

import torch

from explainers.checks import is_int
from explainers.precision.accumulation import (
    PROBE_OPS,
    PRODUCT_OPS,
    cancellation_data,
    product_data,
    ulp,
)

__all__ = [
    "COALESCING_VIEWS",
    "LAYOUTS",
    "num_threads",
    "layout_data",
    "thread_partials",
    "bf16_sum_thread_partials",
    "probe_layout",
    "layout_sweep",
]

#: How the reduced values are laid out in memory.
LAYOUTS = ("contiguous", "strided")

#: Non-contiguous views that still coalesce to one dimension (:func:`layout_data` only):
#: every second element of a 1-D tensor, and the transpose of a contiguous matrix.
COALESCING_VIEWS = ("every_second", "transposed")

# The strided layout: the first half of each row of a (rows, 2 * _COLS) tensor, so the
# input cannot be coalesced to one dimension.
_COLS = 32


@contextlib.contextmanager
def num_threads(n: int) -> Iterator[None]:
    """Run the body with ``torch.set_num_threads(n)``; restore the previous count on exit.

    >>> import torch
    >>> before = torch.get_num_threads()
    >>> with num_threads(1):
    ...     torch.get_num_threads()
    1
    >>> torch.get_num_threads() == before
    True
    """
    if not is_int(n) or n < 1:
        raise ValueError(f"thread count must be a positive int, got {n!r}")
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def layout_data(n: int, dtype: torch.dtype, layout: str, seed: int) -> torch.Tensor:
    """``n`` uniform [0, 1) values in ``dtype``, contiguous or as a non-contiguous 2-D view.

    ``"strided"`` is ``base[:, :32]`` of a ``(n // 32, 64)`` tensor: the same kind
    of values, in a layout that does not coalesce to one dimension.

    >>> import torch
    >>> x = layout_data(64, torch.bfloat16, "strided", 0)
    >>> tuple(x.shape), x.is_contiguous(), x.dtype
    ((2, 32), False, torch.bfloat16)
    >>> layout_data(64, torch.bfloat16, "contiguous", 0).is_contiguous()
    True
    >>> [tuple(layout_data(64, torch.bfloat16, v, 0).stride()) for v in COALESCING_VIEWS]
    [(2,), (1, 2)]
    """
    if layout not in LAYOUTS + COALESCING_VIEWS:
        raise ValueError(f"layout must be one of {LAYOUTS + COALESCING_VIEWS}, got {layout!r}")
    if n < _COLS or n % _COLS:
        raise ValueError(f"n must be a positive multiple of {_COLS}, got {n}")
    g = torch.Generator().manual_seed(seed)
    if layout == "contiguous":
        return torch.rand(n, generator=g, dtype=torch.float64).to(dtype)
    if layout == "every_second":
        return torch.rand(2 * n, generator=g, dtype=torch.float64).to(dtype)[::2]
    if layout == "transposed":
        return torch.rand(_COLS, n // _COLS, generator=g, dtype=torch.float64).to(dtype).t()
    base = torch.rand(n // _COLS, 2 * _COLS, generator=g, dtype=torch.float64).to(dtype)
    return base[:, :_COLS]


def thread_partials(
    threads: int,
    dtype: torch.dtype = torch.bfloat16,
    layout: str = "contiguous",
    op: str = "sum",
    trials: int = 40,
    n: int = 100_000,
) -> dict[str, int]:
    """Compare a CPU ``op`` (``"sum"`` or ``"mean"``) on ``threads`` threads with two models, over ``trials`` inputs.

    * ``rounded_once``: the fp32 result (sum, or sum / n), rounded once to ``dtype``;
    * ``partials_rounded`` (``sum`` only): ``threads`` equal chunks of the
      values in memory order, each summed in fp32 and rounded to ``dtype``
      (the output dtype), then the partials added and rounded.

    Returns how many of the ``trials`` results each model reproduces bitwise
    (``partials_rounded`` is ``None`` for ``mean``).

    >>> import torch
    >>> thread_partials(1, op="mean", trials=2, n=1024)
    {'trials': 2, 'rounded_once': 2, 'partials_rounded': None}
    >>> thread_partials(1, torch.float16, "strided", trials=3, n=1024)
    {'trials': 3, 'rounded_once': 3, 'partials_rounded': 3}
    >>> thread_partials(2, op="max")
    Traceback (most recent call last):
    ...
    ValueError: op must be 'sum' or 'mean', got 'max'
    """
    if not is_int(threads) or threads < 1:
        raise ValueError(f"thread count must be a positive int, got {threads!r}")
    if op not in ("sum", "mean"):
        raise ValueError(f"op must be 'sum' or 'mean', got {op!r}")
    if trials < 1 or n < threads:
        raise ValueError(f"need trials >= 1 and n >= threads, got trials={trials}, n={n}")
    chunk = -(-n // threads)
    once = partials = 0
    with num_threads(threads):
        for seed in range(trials):
            x = layout_data(n, dtype, layout, seed)
            got = getattr(x, op)()
            # the values in memory order (a transposed view's memory order is its transpose's)
            f = (x.t() if layout == "transposed" else x).float().flatten()
            once += bool(got == (f.sum() if op == "sum" else f.sum() / n).to(dtype))
            parts = torch.stack([c.sum().to(dtype) for c in f.split(chunk)])
            partials += bool(got == parts.float().sum().to(dtype))
    return {"trials": trials, "rounded_once": once, "partials_rounded": partials if op == "sum" else None}


def bf16_sum_thread_partials(threads: int, trials: int = 40, n: int = 100_000) -> dict[str, int]:
    """:func:`thread_partials` for a contiguous bf16 ``sum``.

    >>> bf16_sum_thread_partials(1, trials=3, n=1024)
    {'trials': 3, 'rounded_once': 3, 'partials_rounded': 3}
    """
    return thread_partials(threads, torch.bfloat16, "contiguous", "sum", trials, n)


# Ops of PROBE_OPS that take a 1-D input: their "strided" layout is a stride-2 1-D view.
_ONE_D = frozenset({"cumsum[-1]", "cumprod[-1]", "dot", "mm"})


def _probe_input(op: str, dtype: torch.dtype, n: int, layout: str, seed: int) -> torch.Tensor:
    if op in PRODUCT_OPS:
        x = product_data(dtype, n, seed)
    else:
        x = cancellation_data(dtype, n, 16.0, seed)
        if dtype == torch.float16:
            # Scale by a power of two (exact) so that no partial sum, about n * 17 / 2,
            # overflows fp16: an overflow would hide the rounding the probe measures.
            x = x * 2.0 ** -max(0, math.ceil(math.log2(n * 17 / 2 / 60000)))
    if layout == "contiguous":
        return x
    if op in _ONE_D:
        base = torch.zeros(2 * n, dtype=dtype)
        base[::2] = x
        return base[::2]
    base = torch.zeros(n // _COLS, 2 * _COLS, dtype=dtype)
    base[:, :_COLS] = x.view(-1, _COLS)
    return base[:, :_COLS]


def probe_layout(op: str, dtype: torch.dtype, layout: str, n: int, threads: int, seed: int = 0) -> float:
    """The error, in ulps of ``dtype`` at the exact answer, of a probe op on ``threads`` threads.

    The data are :mod:`~explainers.precision.accumulation`'s probe data
    (values ``±16 + u``, or values near 1 for products; fp16 scaled by a power
    of two so no partial sum overflows), laid out contiguously or strided:
    ``base[:, :32]`` of a ``(n / 32, 64)`` tensor, or for the 1-D ops
    (``cumsum[-1]``, ``cumprod[-1]``, ``dot``, ``mm``) every second element.
    An op that accumulates wider and rounds once is off by at most about half
    an ulp; one that rounds partial results to ``dtype`` is off by more.

    >>> import torch
    >>> probe_layout("sum", torch.bfloat16, "strided", 8000, 1) < 0.5
    True
    >>> probe_layout("nansum", torch.bfloat16, "strided", 8000, 1) > 2
    True
    >>> probe_layout("sum", torch.bfloat16, "diagonal", 8000, 1)
    Traceback (most recent call last):
    ...
    ValueError: layout must be one of ('contiguous', 'strided'), got 'diagonal'
    """
    if op not in PROBE_OPS:
        raise ValueError(f"unknown op {op!r}; choose from {list(PROBE_OPS)}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"dtype must be torch.bfloat16 or torch.float16, got {dtype}")
    if not is_int(n) or n < 2 * _COLS or n % _COLS:
        raise ValueError(f"n must be a multiple of {_COLS}, at least {2 * _COLS}, got {n!r}")
    x = _probe_input(op, dtype, n, layout, seed)
    fn, exact_fn = PROBE_OPS[op]
    with num_threads(threads):
        result = float(fn(x))
    exact = float(exact_fn(x.double()))
    return abs(result - exact) / ulp(exact, dtype)


def layout_sweep(
    ops=None,
    dtypes=(torch.bfloat16, torch.float16),
    sizes=(8000, 100_000),
    threads=(1, 2),
    seeds=range(3),
) -> list[dict]:
    """:func:`probe_layout` over ops, dtypes, both layouts, sizes and thread counts; the worst error over ``seeds``.

    >>> import torch
    >>> rows = layout_sweep(["nansum"], [torch.bfloat16], sizes=(8000,), threads=(1,), seeds=range(1))
    >>> [(r["layout"], r["max_ulps"] > 2) for r in rows]
    [('contiguous', False), ('strided', True)]
    """
    rows = []
    for op in ops or list(PROBE_OPS):
        for dtype in dtypes:
            for layout in LAYOUTS:
                for n in sizes:
                    for t in threads:
                        errs = [probe_layout(op, dtype, layout, n, t, seed) for seed in seeds]
                        rows.append({"op": op, "dtype": str(dtype).removeprefix("torch."), "layout": layout,
                                     "n": n, "threads": t, "max_ulps": max(errs)})
    return rows
