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
from collections.abc import Iterator

import torch

from explainers.checks import is_int

__all__ = ["LAYOUTS", "num_threads", "layout_data", "thread_partials", "bf16_sum_thread_partials"]

#: How the reduced values are laid out in memory.
LAYOUTS = ("contiguous", "strided")

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
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if n < _COLS or n % _COLS:
        raise ValueError(f"n must be a positive multiple of {_COLS}, got {n}")
    g = torch.Generator().manual_seed(seed)
    if layout == "contiguous":
        return torch.rand(n, generator=g, dtype=torch.float64).to(dtype)
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
            f = x.float().flatten()  # memory order for both layouts: the view's rows in order
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
