"""What a simulated mesh does with rank-dependent Python control flow.

Under :func:`explainers.mesh.simulated.simulated_mesh` one process plays every
rank, so ``torch.distributed.get_rank()`` cannot return one int: under
``LocalTensorMode`` (the private ``torch.distributed._local_tensor``, torch
2.14.1 and 2.15.0) it returns a ``SymInt`` whose node, a ``LocalIntNode``,
holds one value per rank.  Arithmetic with it runs per rank.  A Python ``if``
needs one ``bool`` for all ranks: ``LocalIntNode.eq`` answers ``True`` only
when every rank's comparison is true, ``ne`` when any rank's is, and
``lt``/``le``/``gt``/``ge`` raise ``AssertionError`` when the ranks disagree.
``bool(rank)`` is ``True`` when any rank's value is nonzero, and ``int(rank)``
raises ``AttributeError``.  The module's ``maybe_run_for_local_tensor`` runs a
function once per rank with that rank's int.  Each rank's value is read with the
private ``_int_on_rank`` of that module.

>>> seen = rank_control_flow()
>>> seen["rank"], seen["eq_0"], seen["ne_0"]
({'0': 0, '1': 1, '2': 2, '3': 3}, False, True)
"""

from __future__ import annotations

from typing import Any

from explainers.mesh.simulated import simulated_mesh

__all__ = ["COMPARISONS", "rank_control_flow", "sweep"]

#: The ordering comparisons, each tried against ``world // 2`` (the ranks disagree) and
#: ``world`` (every rank is below it: they agree).
COMPARISONS = ("<", ">", "<=", ">=")


def _per_rank(x: Any) -> dict[str, Any]:
    # JSON-able (run_under returns JSON): rank -> that rank's value.
    return {str(r): (t.tolist() if hasattr(t, "tolist") else t) for r, t in sorted(x.items())}


def _outcome(fn: Any) -> Any:
    try:
        return fn()
    except (AssertionError, AttributeError) as exc:
        return type(exc).__name__


def _compare(rank: Any, op: str, other: int) -> Any:
    try:
        return {"<": rank < other, ">": rank > other, "<=": rank <= other, ">=": rank >= other}[op]
    except AssertionError:
        return "AssertionError"


def rank_control_flow(shape: tuple[int, ...] = (2, 2)) -> dict[str, Any]:
    """Rank-dependent code run under ``simulated_mesh(shape)``: what each rank got.

    ``per_rank_op`` is ``torch.ones(2) * (rank + 1)`` per rank; ``if_eq_0`` is
    ``torch.ones(2)`` per rank after ``if rank == 0: y.add_(1)``, and ``if_ne_0`` after
    ``if rank != 0: y.add_(1)``; ``compare`` maps ``"< half"``, ``"< world"`` etc. (``half``
    is ``world // 2``) to the result, or to ``"AssertionError"`` when it raised; ``bool``
    and ``int`` are ``bool(rank)`` and ``int(rank)`` (or the exception's name); ``helper``
    is ``torch.ones(2) + 1`` on rank 0 and ``torch.ones(2)`` elsewhere, per rank, computed
    by a function decorated with ``maybe_run_for_local_tensor``.

    >>> seen = rank_control_flow()
    >>> seen["per_rank_op"]["3"], seen["if_eq_0"]["0"], seen["compare"]["< half"], seen["compare"]["< world"]
    ([4.0, 4.0], [1.0, 1.0], 'AssertionError', True)
    >>> seen["if_ne_0"]["0"], seen["bool"], seen["int"], seen["helper"]["0"], seen["helper"]["1"]
    ([2.0, 2.0], True, 'AttributeError', [2.0, 2.0], [1.0, 1.0])
    """
    import torch
    import torch.distributed as dist
    from torch.distributed._local_tensor import _int_on_rank, maybe_run_for_local_tensor

    @maybe_run_for_local_tensor  # called once per rank, with that rank's int
    def bump_rank_0(r: int, t: Any) -> Any:
        return t + 1 if r == 0 else t

    shape = tuple(shape)
    names = tuple(f"d{i}" for i in range(len(shape)))
    with simulated_mesh(shape, names):
        world = dist.get_world_size()
        rank = dist.get_rank()
        y = torch.ones(2)
        if rank == 0:
            y.add_(1)
        z = torch.ones(2)
        if rank != 0:
            z.add_(1)
        return {
            # One value per rank; with one rank torch folds it into a ConstantIntNode.
            "rank": _per_rank({r: _int_on_rank(getattr(rank, "node", rank), r) for r in range(world)}),
            "per_rank_op": _per_rank((torch.ones(2) * (rank + 1))._local_tensors),
            "eq_0": rank == 0,
            "ne_0": rank != 0,
            "if_eq_0": _per_rank(y._local_tensors),
            "if_ne_0": _per_rank(getattr(z, "_local_tensors", {0: z})),
            "bool": _outcome(lambda: bool(rank)),
            "int": _outcome(lambda: int(rank)),
            "helper": _per_rank(bump_rank_0(rank, torch.ones(2))._local_tensors),
            "compare": {f"{op} {name}": _compare(rank, op, other) for op in COMPARISONS
                        for name, other in (("half", world // 2), ("world", world))},
        }


def sweep(shapes: list[list[int]]) -> dict[str, dict[str, Any]]:
    """:func:`rank_control_flow` for each mesh shape, keyed by the shape as text.

    >>> sorted(sweep([[2], [2, 2]]))
    ['(2, 2)', '(2,)']
    """
    return {str(tuple(s)): rank_control_flow(tuple(s)) for s in shapes}
