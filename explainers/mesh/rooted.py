"""Broadcast and scatter from a source rank: what ``distribute_tensor`` with
``src_data_rank`` leaves on each rank, and a replay of the emulated broadcast's loop.

:func:`broadcast_probe` and :func:`scatter_probe` run unchanged in a simulated world and
under a real process group; :func:`replay_broadcast` replays, in plain Python, the loop of
``torch.distributed._local_tensor._c10d._local_broadcast_`` under each release's rule for
the source rank (torch 2.14.1 and 2.15.0).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from explainers.checks import is_int
from explainers.mesh.steps import rank_local, rank_states
from explainers.mesh.walkthrough import _check_mnk_2x2x2

__all__ = ["BROADCAST_MESHES", "broadcast_probe", "replay_broadcast", "scatter_probe"]

#: The meshes :func:`broadcast_probe` broadcasts over, by their dims' names.
BROADCAST_MESHES: tuple[tuple[str, ...], ...] = (("m",), ("n",), ("k",), ("m", "n", "k"))


def _check_group_rank(src_data_rank: object) -> None:
    # A group of the 2x2x2 mesh along one mesh dim has two ranks.
    if not is_int(src_data_rank) or src_data_rank not in (0, 1):
        raise ValueError(f"src_data_rank must be a group rank, 0 or 1, got {src_data_rank!r}")


def broadcast_probe(mesh: Any, src_data_rank: int = 1) -> dict[str, dict[int, int]]:
    """Whose tensor every rank holds after ``distribute_tensor(t, sub, [R, ...],
    src_data_rank=src_data_rank)``, where each rank's ``t`` holds its own rank number.

    ``sub`` is, in turn, ``mesh["m"]``, ``mesh["n"]``, ``mesh["k"]`` and ``mesh["m", "n",
    "k"]`` of a 2x2x2 mesh.  DTensor broadcasts a ``Replicate`` mesh dim with
    ``mesh_broadcast(..., group_src=src_data_rank)``: the source is group rank
    ``src_data_rank`` of every group along that mesh dim.  Returns ``{"m": {rank: held},
    ...}`` with the keys ``"m"``, ``"n"``, ``"k"``, ``"m,n,k"``: every rank simulated, or
    this rank under a real process group.

    >>> from explainers.mesh.simulated import simulated_mesh
    >>> with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
    ...     broadcast_probe(mesh)["k"]
    {0: 1, 1: 1, 2: 3, 3: 3, 4: 5, 5: 5, 6: 7, 7: 7}
    """
    from torch.distributed.tensor import Replicate, distribute_tensor

    _check_mnk_2x2x2(mesh, "broadcast_probe")
    _check_group_rank(src_data_rank)
    out = {}
    for dims in BROADCAST_MESHES:
        sub = mesh[dims] if len(dims) > 1 else mesh[dims[0]]
        mine = rank_local([[r, r] for r in range(8)])  # rank r holds [r, r]
        x = distribute_tensor(mine, sub, [Replicate()] * len(dims), src_data_rank=src_data_rank)
        out[",".join(dims)] = {s.rank: s.values[0] for s in rank_states(x, mesh)}
    return out


def replay_broadcast(calls: Sequence[dict], lookup: bool, in_place: bool = True,
                     world: int = 8) -> list[int]:
    """Replay the loop of ``torch.distributed._local_tensor._c10d._local_broadcast_`` in plain
    Python, for ``world`` ranks where rank r starts with the value r; return what each rank
    holds after ``calls`` (as :attr:`SimulationTrace.rooted` records them: ``ranks`` of the
    process-group handle, ``root``, ``group_offsets``).

    For every group offset ``g`` in turn, the group is ``g`` plus the handle's ranks less
    their first one, ``offset``.  Its source is ``group[root]`` with ``lookup`` (torch
    2.15.0), else ``g + root - offset`` (torch 2.14.1).  Every other rank of the group
    then takes the source's value: read when the group's turn comes (``in_place``, as the
    emulation copies into the per-rank tensors), or before the call's first group.

    Over ``m`` of a 2x2x2 mesh (rank 4m + 2n + k) the handle is ``[0, 4]`` and the groups
    start at 0, 1, 2, 3.  From group rank 1, 2.14.1's rule takes ranks 1, 2, 3, 4 as the
    sources; in place, group {3, 7} reads rank 4 after rank 4 took rank 1's value:

    >>> over_m = [{"ranks": [0, 4], "root": 1, "group_offsets": [0, 1, 2, 3]}]
    >>> replay_broadcast(over_m, lookup=False)
    [1, 2, 3, 1, 1, 2, 3, 1]
    >>> replay_broadcast(over_m, lookup=False, in_place=False)
    [1, 2, 3, 4, 1, 2, 3, 4]
    >>> replay_broadcast(over_m, lookup=True)
    [4, 5, 6, 7, 4, 5, 6, 7]
    """
    held = list(range(world))
    for call in calls:
        ranks, root, offsets = list(call["ranks"]), int(call["root"]), list(call["group_offsets"])
        if not ranks or not 0 <= root < len(ranks):
            raise ValueError(f"root {root} is not a group rank of a group of {len(ranks)}: {call}")
        relative = [r - ranks[0] for r in ranks]
        before = list(held)
        for g in offsets:
            group = [g + r for r in relative]
            source = group[root] if lookup else g + root - ranks[0]
            if not all(0 <= r < world for r in [*group, source]):
                raise ValueError(f"group {group} or source {source} is outside {world} ranks")
            value = (held if in_place else before)[source]
            for r in group:
                if r != source:
                    held[r] = value
    return held


def scatter_probe(mesh: Any, src_data_rank: int) -> dict:
    """``distribute_tensor(t, mesh["m"], [Shard(0)], src_data_rank=src_data_rank)`` on a
    2x2x2 ``m, n, k`` mesh, where rank r's ``t`` is ``[10r, 10r + 1, 10r + 2, 10r + 3]``.

    Returns ``{"held": values by rank, "error": None}``, or ``{"held": None, "error":
    "<exception type> in <innermost function>"}`` when it raises.  A scatter from group
    rank 0 gives rank (m, n, k) chunk m of the tensor of rank (0, n, k):

    >>> from explainers.mesh.simulated import simulated_mesh
    >>> with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
    ...     scatter_probe(mesh, 0)["held"][1::4]
    [[10, 11], [12, 13]]
    """
    import traceback

    from torch.distributed.tensor import Shard, distribute_tensor


    _check_mnk_2x2x2(mesh, "scatter_probe")
    _check_group_rank(src_data_rank)
    mine = rank_local([[10 * r + i for i in range(4)] for r in range(8)])
    try:
        x = distribute_tensor(mine, mesh["m"], [Shard(0)], src_data_rank=src_data_rank)
    except Exception as e:  # noqa: BLE001  the failure is the observation
        innermost = traceback.extract_tb(e.__traceback__)[-1].name
        return {"held": None, "error": f"{type(e).__name__} in {innermost}"}
    return {"held": [s.values for s in rank_states(x, mesh)], "error": None}

