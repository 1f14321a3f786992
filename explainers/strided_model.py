"""Plain-Python models of the two layouts DTensor gives ``[_StridedShard(0, 2), Shard(0)]`` on a 4×2 mesh.

The mesh page runs ``distribute_tensor`` and ``redistribute`` (from ``[R, R]``) with
these placements on a simulated ``(dp, tp) = (4, 2)`` mesh; for some sizes they put
different elements on the ranks.  Two models, written with ``torch.chunk``'s rule
alone (pieces of ``ceil(n / parts)``, empty pieces at the end), describe each
layout; the page compares them with DTensor over a range of sizes.  They are
models: they say which sequence of cuts gives DTensor's layout, not which line of
DTensor makes the cuts.

>>> [distribute_model(9)[r] for r in (6, 7)], [nested_model(9)[r] for r in (6, 7)]
([[8], []], [[], [8]])
"""

from __future__ import annotations

# torch.chunk's rule on a list, empty pieces appended (the mesh page's own uneven-size table uses it too)
from explainers.mesh.strided import _chunks

__all__ = ["distribute_model", "nested_model"]


def distribute_model(numel: int, dp: int = 4, tp: int = 2) -> dict[int, list[int]]:
    """Rank ``dp_index * tp + tp_index`` of ``distribute_tensor``'s layout, as two cuts in placement order.

    First the ``_StridedShard(0, split_factor=tp)`` over ``dp``: ``range(numel)`` is cut
    into ``tp`` parts, each part into ``dp`` pieces, and ``dp`` index ``d`` holds piece
    ``d`` of every part, joined.  Then ``Shard(0)`` over ``tp`` cuts that joined piece
    into ``tp`` pieces.

    >>> distribute_model(9)
    {0: [0, 1], 1: [5], 2: [2, 3], 3: [6], 4: [4], 5: [7], 6: [8], 7: []}
    """
    out = {}
    for d in range(dp):
        joined = [v for part in _chunks(list(range(numel)), tp) for v in _chunks(part, dp)[d]]
        for t, piece in enumerate(_chunks(joined, tp)):
            out[d * tp + t] = piece
    return out


def nested_model(numel: int, dp: int = 4, tp: int = 2) -> dict[int, list[int]]:
    """Rank ``dp_index * tp + tp_index`` of the nested layout: ``tp``'s part first, then ``dp``'s piece of it.

    >>> nested_model(9)
    {0: [0, 1], 1: [5], 2: [2, 3], 3: [6], 4: [4], 5: [7], 6: [], 7: [8]}
    """
    parts = _chunks(list(range(numel)), tp)
    return {d * tp + t: _chunks(parts[t], dp)[d] for d in range(dp) for t in range(tp)}
