"""Where FSDP2 decides: its ``ReduceOp`` and divisions, the source that picks the reduce dtype, ``grad_dtype``.

These need no processes: :func:`gradient_divide_factors` calls FSDP2's own
private helper, :func:`reduce_dtype_source` reads the installed files, and
:func:`leaf_grad_dtype` and :func:`cleared_grad_dtype_outcomes` ask autograd.

>>> import torch
>>> gradient_divide_factors(torch.float32, 2)["reduce_scatter"]
'AVG'
"""

from __future__ import annotations

from typing import Any

import torch

from explainers.checks import is_int
from explainers.precision.fsdp_data import _check_dtype, op_name

__all__ = [
    "gradient_divide_factors",
    "reduce_dtype_source",
    "leaf_grad_dtype",
    "cleared_grad_dtype_outcomes",
]


class _SizedGroup:
    # _get_gradient_divide_factors (torch 2.14.1, 2.15.0) only calls .size() on the groups it is
    # given, so a stand-in with that method lets it run without a process group.
    def __init__(self, size: int) -> None:
        self._size = size

    def size(self) -> int:
        return self._size


def gradient_divide_factors(
    reduce_dtype: torch.dtype,
    data_parallel_size: int,
    *,
    force_sum_reduction_for_comms: bool = False,
    device_type: str = "",
    factor: float | None = None,
) -> dict[str, Any]:
    """FSDP2's choice of ``ReduceOp`` and divisions for one gradient reduce-scatter.

    Calls the installed FSDP2's private ``_get_gradient_divide_factors``
    (``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``, torch 2.14.1 and 2.15.0)
    for a reduce-scatter group of ``data_parallel_size`` ranks, no HSDP
    all-reduce group and the custom divide ``factor`` (``None``: none), and returns what it picks:
    the division before the collective (``"pre"``), after it (``"post"``) and
    the reduce-scatter's op.  ``foreach_reduce`` skips a division by ``None``
    or 1 (``_div_if_needed``).

    >>> import torch
    >>> gradient_divide_factors(torch.float16, 16)
    {'pre': 4, 'post': 4.0, 'reduce_scatter': 'SUM'}
    >>> gradient_divide_factors(torch.bfloat16, 16)
    {'pre': None, 'post': None, 'reduce_scatter': 'AVG'}
    >>> gradient_divide_factors(torch.bfloat16, 16, factor=4.0)["reduce_scatter"]
    'PREMUL_SUM(0.25)'
    >>> gradient_divide_factors(torch.int32, 2)
    Traceback (most recent call last):
    ...
    ValueError: reduce_dtype must be a floating-point dtype, got torch.int32
    """
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import _get_gradient_divide_factors

    _check_dtype("reduce_dtype", reduce_dtype)
    if not is_int(data_parallel_size):
        raise TypeError(f"data_parallel_size must be an int, got {type(data_parallel_size).__name__}")
    if data_parallel_size < 1:
        raise ValueError(f"data_parallel_size must be >= 1, got {data_parallel_size}")
    if factor is not None and not (isinstance(factor, (int, float)) and factor > 0):
        raise ValueError(f"factor must be a positive number or None, got {factor!r}")
    pre, post, rs_op, _ = _get_gradient_divide_factors(
        _SizedGroup(data_parallel_size), None, reduce_dtype, device_type,
        factor, force_sum_reduction_for_comms,
    )
    return {"pre": pre, "post": post, "reduce_scatter": op_name(rs_op)}


def predivide_rule(world_size: int) -> int:
    """The division before FSDP2's SUM reduce-scatter over ``world_size`` ranks, in closed form.

    ``_get_gradient_divide_factors`` doubles a power of two while it divides
    the world size and its square stays below it.  So the result is the
    smallest power of two whose square is at least ``world_size``, capped at
    twice the largest power of two that divides ``world_size``: 2 for any odd
    world size above 1.

    >>> [predivide_rule(n) for n in (2, 4, 8, 9, 16, 24, 25, 96)]
    [2, 2, 4, 2, 4, 8, 2, 16]
    """
    if not is_int(world_size) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
    p = 1
    while p * p < world_size:
        p *= 2
    return min(p, 2 * (world_size & -world_size))


_FSDP2 = "distributed/fsdp/_fully_shard/"
# Where each release decides the dtype of the gradient reduce-scatter when
# MixedPrecisionPolicy.reduce_dtype is None, and casts the reduced shard back:
# (file under torch/, the first line's text, how many lines (None: the whole
# block), and a line to find first (None: from the top)).
_REDUCE_DTYPE_SOURCE: dict[str, tuple[tuple[str, str, int | None, str | None], ...]] = {
    "2.14.1": (
        # A reduce_dtype equal to param_dtype counts as unset.
        (_FSDP2 + "_fsdp_param.py", "if reduce_dtype == param_dtype:", 2, "def init_dtype_attrs"),
        # foreach_reduce falls back to the dtype of the gradients it was handed.
        (_FSDP2 + "_fsdp_collectives.py", "grad_dtype = unsharded_grads[0].dtype", 2, None),
        # ... and casts the reduced shard to the parameters' original dtype.
        (_FSDP2 + "_fsdp_collectives.py", "_to_dtype_if_needed(reduce_output, orig_dtype)", 1, None),
        # With gradient sync off, post_backward reshards and moves each gradient
        # to an accumulator in reduce_dtype, only if one is set.
        (_FSDP2 + "_fsdp_param_group.py", "if not self.reduce_grads:", 6, "def post_backward"),
        (_FSDP2 + "_fsdp_param.py", "def to_accumulated_grad_if_needed", None, None),
    ),
    "2.15.0": (
        # Whether a grad_dtype was set on the parameter (autograd's _has_grad_dtype_override,
        # new in 2.15.0): only then does FSDP2 take it, None included, for the sharded .grad.
        (_FSDP2 + "_fsdp_param.py", "self._has_sharded_grad_dtype_override = param._has_grad_dtype_override", 2,
         None),
        # Each parameter's gradient dtype: reduce_dtype, else its grad_dtype, else its own dtype.
        (_FSDP2 + "_fsdp_param.py", "def unsharded_grad_dtype(self)", None, None),
        # The unsharded parameter's grad_dtype is set to it, so autograd casts to it ...
        (_FSDP2 + "_fsdp_param.py", "self._unsharded_param.grad_dtype = self.unsharded_grad_dtype", 1, None),
        # ... except where it is wider than the compute dtype (more bytes) ...
        (_FSDP2 + "_fsdp_param_group.py", "self._fsdp_params_with_wider_grad_dtype = [", 9,
         "def _init_mp_dtypes"),
        # ... whose cast pre_backward defers, by clearing grad_dtype, in a backward
        # that reduces or onto an existing gradient (a new gradient is then cast at
        # the copy-in; AccumulateGrad adds into an existing wider one in place); with
        # gradient sync off and no gradient yet, grad_dtype stays and autograd casts to it.
        (_FSDP2 + "_fsdp_param_group.py", "self._set_unsharded_grad_dtypes(defer_upcast=True)", 1,
         "def pre_backward"),
        (_FSDP2 + "_fsdp_param_group.py", "def _set_unsharded_grad_dtypes", None, None),
        # The reduce dtype: the promotion of those dtypes (without the partial-HSDP case).
        (_FSDP2 + "_fsdp_param_group.py", "def _get_reduce_dtype(", 11, None),
        (_FSDP2 + "_fsdp_param_group.py", "return functools.reduce(torch.promote_types, dtypes)", 1,
         "def _get_reduce_dtype("),
        # The reduced shard is cast to each parameter's sharded gradient dtype,
        # not at all where that is None (a grad_dtype=None set on the parameter).
        (_FSDP2 + "_fsdp_collectives.py", "key=lambda param_and_size: param_and_size[0].sharded_grad_dtype", 1,
         None),
        (_FSDP2 + "_fsdp_collectives.py", "new_output = _to_dtype_if_needed(group_output, grad_dtype)", 1, None),
        (_FSDP2 + "_fsdp_common.py", "def _to_dtype_if_needed(", None, None),
        # What the release's MixedPrecisionPolicy docstring says changed.
        (_FSDP2 + "_fsdp_api.py", ".. versionchanged:: 2.15", 7, None),
    ),
}


def reduce_dtype_source() -> list[dict[str, str]]:
    """The installed FSDP2's lines that choose the reduce-scatter dtype when ``reduce_dtype`` is None.

    Read from this torch's files (numbered as installed), one ``{"path", "text"}``
    per excerpt, ``path`` relative to the ``torch`` package.  The excerpts are
    listed per release, since the decision moved between files in 2.15.0.

    >>> any("reduce_dtype" in e["text"] for e in reduce_dtype_source())
    True
    """
    from explainers.page.torchsource import quote_installed
    from explainers.releases import release_of

    release = release_of(torch.__version__)
    if release not in _REDUCE_DTYPE_SOURCE:
        raise ValueError(f"no FSDP2 reduce-dtype excerpts for torch {release}: "
                         "add where it decides to _REDUCE_DTYPE_SOURCE")
    return [{"path": path, "text": quote_installed(path, needle, lines=lines, after=after)}
            for path, needle, lines, after in _REDUCE_DTYPE_SOURCE[release]]


def leaf_grad_dtype(param_dtype: torch.dtype, grad_dtype: torch.dtype) -> torch.dtype:
    """The dtype of ``.grad`` that autograd leaves on a ``param_dtype`` leaf whose ``grad_dtype`` is set.

    The leaf is used in ``param_dtype`` arithmetic, so its incoming gradient is
    ``param_dtype``; ``Tensor.grad_dtype`` asks autograd to store it in another
    dtype.  FSDP2 2.15.0 sets its unsharded parameters' ``grad_dtype`` to their
    ``unsharded_grad_dtype``, so their gradients arrive in that dtype when it is
    not wider than the compute dtype; a wider one it may clear
    (:func:`cleared_grad_dtype_outcomes`).

    >>> leaf_grad_dtype(torch.bfloat16, torch.float16)
    torch.float16
    """
    _check_dtype("param_dtype", param_dtype)
    _check_dtype("grad_dtype", grad_dtype)
    leaf = torch.zeros(4, dtype=param_dtype, requires_grad=True)
    leaf.grad_dtype = grad_dtype
    (leaf * 2).sum().backward()
    return leaf.grad.dtype


def cleared_grad_dtype_outcomes(param_dtype: torch.dtype, wide_dtype: torch.dtype) -> dict[str, Any]:
    """What autograd stores once a wider ``grad_dtype`` is cleared, with and without a gradient already there.

    FSDP2 2.15.0's ``_set_unsharded_grad_dtypes(defer_upcast=True)`` sets a
    parameter's ``grad_dtype`` to ``None``.  This replays that on a
    ``param_dtype`` leaf: a first backward with ``grad_dtype = wide_dtype``
    (``"first"``: the dtype stored), a second one after ``grad_dtype = None``
    (``"accumulated"``: the dtype then, and ``"in_place"``: whether
    ``.grad`` is still the same tensor; ``"values"``: its elements, each
    backward adding a gradient of 2), and a fresh leaf's backward with
    ``grad_dtype = None`` (``"fresh"``).

    >>> out = cleared_grad_dtype_outcomes(torch.bfloat16, torch.float32)
    >>> out["first"], out["accumulated"], out["in_place"], out["fresh"]
    (torch.float32, torch.float32, True, torch.bfloat16)
    >>> out["values"]
    [4.0, 4.0, 4.0, 4.0]
    >>> cleared_grad_dtype_outcomes(torch.bfloat16, None)
    Traceback (most recent call last):
    ...
    TypeError: wide_dtype must be a torch.dtype, got None
    """
    for arg, dtype in (("param_dtype", param_dtype), ("wide_dtype", wide_dtype)):
        if dtype is None:
            raise TypeError(f"{arg} must be a torch.dtype, got None")
        _check_dtype(arg, dtype)

    def backward(leaf: torch.Tensor) -> None:
        (leaf * 2).sum().backward()

    leaf = torch.zeros(4, dtype=param_dtype, requires_grad=True)
    leaf.grad_dtype = wide_dtype
    backward(leaf)
    first = leaf.grad
    first_dtype = first.dtype
    leaf.grad_dtype = None
    backward(leaf)
    fresh = torch.zeros(4, dtype=param_dtype, requires_grad=True)
    fresh.grad_dtype = None
    backward(fresh)
    return {"first": first_dtype, "accumulated": leaf.grad.dtype, "in_place": leaf.grad is first,
            "values": leaf.grad.tolist(), "fresh": fresh.grad.dtype}
