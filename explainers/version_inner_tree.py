"""Inductor's INNER_TREE eligibility check, called on fake CUDA inputs without a GPU.

Under ``numerics="strict"``, Inductor's ``sum`` (and on 2.15.0 ``prod``) lowering asks
``torch._inductor.lowering._strict_reduction_layout_eligible`` (2.14.1:
``_strict_sum_layout_eligible``, sums only) whether a reduction may use Triton's
``ReductionOrdering.INNER_TREE``.  One of its conditions, after its tests of the node,
``numerics``, the target, ``dtype`` and the axis, is that the installed Triton has that ordering
(``has_triton_reduction_ordering``), false with the Triton installed with either release; it also needs a device whose scheduling backend is Triton (``is_triton``), which for
CUDA only reads ``config.cuda_backend`` (``"triton"`` by default) and so holds without a GPU.
:func:`eligibility_grid` patches the first (a private name in ``torch._inductor.lowering``,
torch 2.14.1 and 2.15.0) to True, leaves ``is_triton`` as torch wrote it (patching it to
False only for the "not Triton" case), builds each input as a fake CUDA tensor under
``FakeTensorMode`` (no GPU needed), points ``V.graph.current_node`` at an FX node of the
reduction, and calls the check: the layout conditions then run as torch wrote them.
:func:`stated_rule` is the layout rule the Versions page states; the page asserts that the two
agree on every layout of the grid.

>>> stated_rule((4, 8), (8, 1), 0), stated_rule((4, 8), (8, 1), 1), stated_rule((1, 8), (8, 1), 0)
(False, True, True)
"""

from __future__ import annotations

import itertools
from typing import Any

__all__ = ["LAYOUTS", "OTHER_CASES", "config_hash_changes", "eligibility_grid", "eligibility_report",
           "stated_rule"]

# name -> (sizes, strides, reduced dim): each a layout of a float32 input reduced by sum(dim)
LAYOUTS: dict[str, tuple[tuple[int, ...], tuple[int, ...], int]] = {
    "(4, 8) contiguous, sum(0)": ((4, 8), (8, 1), 0),
    "(4, 8) contiguous, sum(1)": ((4, 8), (8, 1), 1),
    "(4, 8) transposed, sum(0)": ((4, 8), (1, 4), 0),
    "(4, 8) transposed, sum(1)": ((4, 8), (1, 4), 1),
    "(4, 8) every 2nd column, sum(1)": ((4, 4), (8, 2), 1),
    "(1, 8) contiguous, sum(0)": ((1, 8), (8, 1), 0),
    "(1, 8) contiguous, sum(1)": ((1, 8), (8, 1), 1),
    "(8, 1) contiguous, sum(0)": ((8, 1), (1, 1), 0),
    "(8, 1) contiguous, sum(1)": ((8, 1), (1, 1), 1),
    "(4, 8)[:, :1], sum(1)": ((4, 1), (8, 1), 1),
    "(2, 3, 4) contiguous, sum(0)": ((2, 3, 4), (12, 4, 1), 0),
    "(2, 3, 4) contiguous, sum(2)": ((2, 3, 4), (12, 4, 1), 2),
    "(3, 2, 4) permuted, sum(2)": ((3, 2, 4), (4, 12, 1), 2),
    "(2, 1, 4) contiguous, sum(1)": ((2, 1, 4), (4, 4, 1), 1),
    "(2, 1, 4) permuted, sum(1)": ((4, 1, 2), (1, 4, 4), 1),
}

# name -> (dtype, reduction op, reduced dims, dtype= argument) on a contiguous (4, 8) input
OTHER_CASES: dict[str, tuple[str, str, list[int], str | None]] = {
    "float16 sum(1)": ("float16", "sum", [1], None),
    "bfloat16 sum(1)": ("bfloat16", "sum", [1], None),
    "float64 sum(1)": ("float64", "sum", [1], None),
    "int32 sum(1)": ("int32", "sum", [1], None),
    "float32 sum(1, dtype=float64)": ("float32", "sum", [1], "float64"),
    "float32 sum((0, 1))": ("float32", "sum", [0, 1], None),
    "float32 prod(1)": ("float32", "prod", [1], None),
}


def stated_rule(sizes: tuple[int, ...], strides: tuple[int, ...], dim: int) -> bool:
    """The layout rule as the Versions page states it, for a reduction over ``dim``.

    The other dimensions of a size other than 1 must collapse into one (each one's stride is the
    next one's stride times its size).  If the reduced dimension's size is not 1, it must have
    stride 1 and each of those other dimensions a stride above 1; if it is 1, the innermost of
    those others must have stride 1 (with none, every stride is 0 or 1 and the first is 1).

    >>> stated_rule((2, 3, 4), (12, 4, 1), 2), stated_rule((3, 2, 4), (4, 12, 1), 2)
    (True, False)
    """
    outer = [(n, s) for i, (n, s) in enumerate(zip(sizes, strides, strict=True))
             if i != dim and n != 1]
    collapsible = all(slow == fast * n for (_, slow), (n, fast) in itertools.pairwise(outer))
    if sizes[dim] == 1:
        if not outer:
            return strides[0] == 1 and all(s in (0, 1) for s in strides[1:])
        return collapsible and outer[-1][1] == 1
    return strides[dim] == 1 and all(s > 1 for _, s in outer) and collapsible


def eligibility_grid(numerics: str = "strict", patch_triton: bool = True,
                     triton_device: bool = True) -> dict[str, bool]:
    """Call the installed torch's INNER_TREE check on every layout of :data:`LAYOUTS` and every
    case of :data:`OTHER_CASES`, with ``config.numerics`` set to ``numerics``.

    With ``patch_triton`` (the default) Triton's ``ReductionOrdering`` reads present, and with
    ``triton_device=False`` ``is_triton(device)`` reads False; otherwise both are torch's own
    (``has_triton_reduction_ordering`` False with the installed Triton; ``is_triton`` True for
    CUDA under the default ``cuda_backend``, with or without a GPU).  Runs on the CPU.

    >>> case = "(4, 8) contiguous, sum(1)"
    >>> eligibility_grid()[case], eligibility_grid(patch_triton=False)[case]
    (True, False)
    >>> eligibility_grid(triton_device=False)[case]
    False
    """
    import types
    from unittest import mock

    import torch
    import torch.fx
    from torch._inductor import config, lowering
    from torch._inductor.sizevars import SizeVarAllocator
    from torch._inductor.virtualized import V
    from torch._subclasses import FakeTensorMode

    # renamed in 2.15.0, when it started accepting prod too
    check = (getattr(lowering, "_strict_reduction_layout_eligible", None)
             or lowering._strict_sum_layout_eligible)
    aten = torch.ops.aten
    inputs: dict[str, tuple[Any, Any, list[int], Any]] = {}
    with FakeTensorMode():
        for name, (sizes, strides, dim) in LAYOUTS.items():
            inputs[name] = (torch.empty_strided(sizes, strides, device="cuda"), "sum", [dim], None)
        for name, (dtype, op, dims, arg) in OTHER_CASES.items():
            inputs[name] = (torch.empty(4, 8, device="cuda", dtype=getattr(torch, dtype)), op, dims,
                            None if arg is None else getattr(torch, arg))
    graph = torch.fx.Graph()
    found: dict[str, bool] = {}
    patches = ([mock.patch.object(lowering, "has_triton_reduction_ordering", lambda: True)] if patch_triton else [])
    if not triton_device:
        patches.append(mock.patch.object(lowering, "is_triton", lambda device: False))
    for p in patches:
        p.start()
    try:
        for i, (name, (value, op, dims, dtype)) in enumerate(inputs.items()):
            node_in = graph.placeholder(f"x{i}")
            node_in.meta["val"] = value
            node = (graph.call_function(aten.sum.dim_IntList, (node_in, dims)) if op == "sum"
                    else graph.call_function(aten.prod.dim_int, (node_in, dims[0])))
            handler = types.SimpleNamespace(current_node=node, sizevars=SizeVarAllocator())
            with V.set_graph_handler(handler), config.patch(numerics=numerics):
                found[name] = bool(check(dims if op == "sum" else dims[0], dtype))
    finally:
        for p in patches:
            p.stop()
    return found


def eligibility_report() -> dict[str, dict[str, bool]]:
    """:func:`eligibility_grid` under each setting the Versions page reports, in one process.

    ``"strict"`` with Triton's ``ReductionOrdering`` patched to read present, the same with a
    device whose backend is not Triton, the other ``numerics`` values (patched too), and
    ``"strict"`` as installed.

    >>> report = eligibility_report()
    >>> sorted(report)
    ['default', 'not Triton', 'strict', 'strict as installed', 'strict_pointwise', 'strict_reduction']
    >>> {name: set(grid.values()) for name, grid in report.items() if name != "strict"}["default"]
    {False}
    """
    return {"strict": eligibility_grid(),
            "not Triton": eligibility_grid(triton_device=False),
            **{value: eligibility_grid(numerics=value)
               for value in ("default", "strict_pointwise", "strict_reduction")},
            "strict as installed": eligibility_grid(patch_triton=False)}


def config_hash_changes(value: str = "strict_reduction") -> dict[str, bool]:
    """Whether setting Inductor's ``numerics`` to ``value`` changes ``config.get_hash()``, the
    hash of Inductor's config that enters its FX-graph cache key, and whether ``numerics`` is
    among the portable config ``save_config_portable`` saves.

    >>> config_hash_changes()
    {'hash_changes': True, 'hash_stable': True, 'portable': True}
    """
    from torch._inductor import config

    before = config.get_hash()
    with config.patch(numerics=value):
        during = config.get_hash()
    return {"hash_changes": before != during, "hash_stable": before == config.get_hash(),
            "portable": "numerics" in config.save_config_portable()}
