r"""Dtypes and ``ReduceOp``\ s as plain data, so FSDP2 ranks under any release report comparable JSON.

>>> import torch
>>> dtype_name(torch.bfloat16), parse_dtype("torch.bfloat16"), parse_dtype(None)
('torch.bfloat16', torch.bfloat16, None)
>>> from torch.distributed import ReduceOp
>>> op_name(ReduceOp.AVG), op_name(ReduceOp.PREMUL_SUM(0.5))
('AVG', 'PREMUL_SUM(0.5)')
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = [
    "dtype_name",
    "parse_dtype",
    "op_name",
]


def dtype_name(dtype: torch.dtype | None) -> str | None:
    """``str(dtype)`` (``"torch.float32"``), or ``None``: the plain-data form of a dtype.

    >>> dtype_name(torch.float32), dtype_name(None)
    ('torch.float32', None)
    """
    if dtype is None:
        return None
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"expected a torch.dtype or None, got {type(dtype).__name__} {dtype!r}")
    return str(dtype)


def parse_dtype(name: str | None) -> torch.dtype | None:
    """Inverse of :func:`dtype_name`: ``"torch.bfloat16"`` (or ``"bfloat16"``) to the dtype.

    >>> parse_dtype("float16")
    torch.float16
    >>> parse_dtype("torch.nonsense")
    Traceback (most recent call last):
    ...
    ValueError: not a torch dtype name: 'torch.nonsense'
    """
    if name is None:
        return None
    attr = name.removeprefix("torch.")
    dtype = getattr(torch, attr, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"not a torch dtype name: {name!r}")
    return dtype


def op_name(op: Any) -> str:
    """A ``ReduceOp`` as plain text: ``"AVG"``, ``"SUM"``, ``"PREMUL_SUM(0.5)"``.

    FSDP2 passes either a bare ``ReduceOp.RedOpType`` (``ReduceOp.AVG``) or, for a
    custom gradient divide factor, a ``ReduceOp`` object from
    ``ReduceOp.PREMUL_SUM(factor)`` whose ``.op`` and ``.factor`` say what it is.

    >>> from torch.distributed import ReduceOp
    >>> op_name(ReduceOp.SUM), op_name(ReduceOp(ReduceOp.AVG))
    ('SUM', 'AVG')
    """
    inner = getattr(op, "op", None)  # a ReduceOp object wraps a RedOpType
    if inner is not None and hasattr(inner, "name"):
        if inner.name == "PREMUL_SUM":
            return f"PREMUL_SUM({op.factor:g})"
        return inner.name
    if hasattr(op, "name"):  # a bare RedOpType enum member
        return op.name
    raise TypeError(f"not a torch.distributed.ReduceOp: {op!r}")


def _check_dtype(arg: str, dtype: object) -> torch.dtype | None:
    if dtype is None:
        return None
    if not isinstance(dtype, torch.dtype):
        raise TypeError(
            f"{arg} must be a torch.dtype or None, got {type(dtype).__name__} {dtype!r}"
        )
    if not dtype.is_floating_point:
        raise ValueError(f"{arg} must be a floating-point dtype, got {dtype}")
    return dtype
