"""The per-rank view of a walkthrough: what every rank holds after each step.

:class:`Step` and :class:`RankState` are plain data (they survive a JSON round trip, so
that real processes can send them to the launcher); :func:`rank_states` and
:func:`snapshot` read them off a DTensor or a local tensor, every rank in a simulated
world, this rank under a real process group; :func:`merge_steps` joins the real
processes' records.  :func:`rank_local` and :func:`per_rank_int` make and read values
that differ per rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from explainers.checks import is_int
from explainers.mesh.uneven import Redistribution, _placement_str

__all__ = [
    "RankState",
    "Step",
    "merge_steps",
    "per_rank_int",
    "rank_local",
    "rank_states",
    "snapshot",
]


def rank_local(values_per_rank: Sequence[Sequence[Any]]) -> Any:
    """A local tensor holding ``values_per_rank[r]`` on rank ``r``.

    Under a simulated world this is a ``LocalTensor`` (one tensor per rank);
    under a real process group it is this rank's tensor.

    >>> from explainers.mesh.simulated import simulated_world
    >>> with simulated_world(2):
    ...     rank_local([[1, 2], [3]])._local_tensors
    {0: tensor([1, 2]), 1: tensor([3])}
    """
    import torch
    import torch.distributed as dist
    from torch.distributed._local_tensor import local_tensor_mode, rank_map

    if local_tensor_mode() is not None:
        return rank_map(lambda r: torch.tensor(values_per_rank[r]))
    return torch.tensor(values_per_rank[dist.get_rank()])


def per_rank_int(value: Any, world_size: int | None = None) -> dict[int, int]:
    """``{rank: int}`` for a size or rank that may differ per simulated rank.

    Under ``LocalTensorMode`` such values are ``SymInt`` backed by a
    ``LocalIntNode`` (torch 2.14.1 and 2.15.0); a plain int is the same on every rank.

    >>> import torch.distributed as dist
    >>> from explainers.mesh.simulated import simulated_world
    >>> with simulated_world(4):
    ...     per_rank_int(dist.get_rank()), per_rank_int(7)
    ({0: 0, 1: 1, 2: 2, 3: 3}, {0: 7, 1: 7, 2: 7, 3: 7})
    """
    import torch
    import torch.distributed as dist

    if isinstance(value, torch.SymInt):
        local_ints = getattr(value.node, "_local_ints", None)
        if local_ints is None:
            raise TypeError(f"{value!r} is a SymInt without per-rank values (not a LocalIntNode)")
        return {int(r): int(v) for r, v in sorted(local_ints.items())}
    if not is_int(value):
        raise TypeError(f"per_rank_int expects an int or a SymInt, got {type(value).__name__}")
    n = world_size if world_size is not None else dist.get_world_size()
    return dict.fromkeys(range(n), value)



@dataclass(frozen=True)
class RankState:
    """What one rank holds after a step.

    ``coordinate`` is the rank's position on the *root* mesh (all dims), so it
    says where the rank sits even after a step forgot some mesh dims;
    ``placements`` are those of the DTensor on its (sub)mesh, or ``None`` when
    the step ends with a plain local tensor.
    """

    rank: int
    coordinate: tuple[int, ...]
    placements: tuple[str, ...] | None
    shape: tuple[int, ...]
    values: list

    @classmethod
    def from_dict(cls, r: dict) -> RankState:
        """The inverse of ``dataclasses.asdict`` after a JSON round trip (lists back to tuples).

        >>> RankState.from_dict({"rank": 1, "coordinate": [1], "placements": ["S(0)"], "shape": [2],
        ...                      "values": [3, 4]})
        RankState(rank=1, coordinate=(1,), placements=('S(0)',), shape=(2,), values=[3, 4])
        """
        return cls(rank=r["rank"], coordinate=tuple(r["coordinate"]),
                   placements=None if r["placements"] is None else tuple(r["placements"]),
                   shape=tuple(r["shape"]), values=r["values"])


@dataclass(frozen=True)
class Step:
    """One labelled step of a walkthrough and the state every rank is in after it."""

    label: str
    phase: str
    code: str
    mesh_dims: tuple[str, ...]  # the names of the root mesh
    mesh_shape: tuple[int, ...]
    submesh: tuple[str, ...] | None  # mesh of the result, None for a plain tensor
    redistribution: Redistribution | None  # the step's one redistribute (None at the start)
    ranks: tuple[RankState, ...] = field(default=())

    def locals(self) -> dict[int, list]:
        """``{rank: values}`` for the ranks this process holds."""
        return {s.rank: s.values for s in self.ranks}

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Step:
        d = dict(d)
        d["ranks"] = tuple(RankState.from_dict(r) for r in d["ranks"])
        for key in ("mesh_dims", "mesh_shape"):
            d[key] = tuple(d[key])
        d["submesh"] = None if d["submesh"] is None else tuple(d["submesh"])
        red = d["redistribution"]
        if red is not None:
            d["redistribution"] = Redistribution(
                **{k: tuple(v) if isinstance(v, list) else v for k, v in red.items()}
            )
        return cls(**d)



def _root_coordinates(root: Any) -> dict[int, tuple[int, ...]]:
    from torch.distributed._local_tensor import LocalTensor

    ranks = root.mesh
    # Under LocalTensorMode the mesh tensor is itself a LocalTensor whose
    # per-rank copies are identical (the whole root mesh); take one.
    if isinstance(ranks, LocalTensor):
        ranks = next(iter(ranks._local_tensors.values()))
    coords = {}
    for idx in range(ranks.numel()):
        coord, rest = [], idx
        for size in reversed(ranks.shape):
            coord.append(rest % size)
            rest //= size
        coords[int(ranks.reshape(-1)[idx])] = tuple(reversed(coord))
    return coords


def rank_states(x: Any, root: Any) -> tuple[RankState, ...]:
    """The per-rank view of ``x`` (a DTensor or a local/LocalTensor) on mesh ``root``.

    Simulated, it lists every rank; under a real process group, this rank only.

    >>> from torch.distributed.tensor import Shard
    >>> from explainers.mesh.simulated import simulated_mesh
    >>> from explainers.mesh.uneven import from_local
    >>> with simulated_mesh((2,), ("k",)) as mesh:
    ...     x = from_local(rank_local([[0, 1, 2], [3, 4]]), mesh, [Shard(0)])
    ...     for s in rank_states(x, mesh): print(s)
    RankState(rank=0, coordinate=(0,), placements=('S(0)',), shape=(3,), values=[0, 1, 2])
    RankState(rank=1, coordinate=(1,), placements=('S(0)',), shape=(2,), values=[3, 4])
    """
    import torch
    import torch.distributed as dist
    from torch.distributed._local_tensor import LocalTensor
    from torch.distributed.tensor import DTensor

    placements = None
    if isinstance(x, DTensor):
        placements = tuple(_placement_str(p) for p in x.placements)
        x = x.to_local()
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"rank_states expects a DTensor or a tensor, got {type(x).__name__}")
    coords = _root_coordinates(root)
    if isinstance(x, LocalTensor):
        per_rank = dict(sorted(x._local_tensors.items()))
    else:
        per_rank = {dist.get_rank(): x}
    return tuple(
        RankState(
            rank=int(r),
            coordinate=coords[int(r)],
            placements=placements,
            shape=tuple(int(s) for s in t.shape),
            values=t.tolist(),
        )
        for r, t in per_rank.items()
    )


def snapshot(x: Any, mesh: Any, label: str = "") -> Step:
    """A :class:`Step` holding what every rank has of ``x`` now (no code, no collective).

    ``mesh`` is the root mesh, whose coordinates place the ranks in drawings.

    >>> from torch.distributed.tensor import Shard, distribute_tensor
    >>> from explainers.mesh.draw import render_step
    >>> from explainers.mesh.simulated import simulated_mesh
    >>> from explainers.render import arange_nd
    >>> with simulated_mesh((2, 2), ("a", "b")) as mesh:
    ...     snap = snapshot(distribute_tensor(arange_nd(8), mesh, [Shard(0), Shard(0)]), mesh)
    >>> print(render_step(snap))  # blocks along a, rows along b, each row one rank's local
    0  1    4  5
    2  3    6  7
    """
    from torch.distributed.tensor import DTensor

    return Step(
        label=label,
        phase="",
        code="",
        mesh_dims=tuple(mesh.mesh_dim_names or range(mesh.ndim)),
        mesh_shape=tuple(mesh.shape),
        submesh=tuple(x.device_mesh.mesh_dim_names) if isinstance(x, DTensor) else None,
        redistribution=None,
        ranks=rank_states(x, mesh),
    )


def merge_steps(per_rank_runs: Sequence[Sequence[Step]]) -> list[Step]:
    """Combine the steps recorded by each real process into steps holding all ranks.

    Every run must have the same step labels in the same order.

    >>> one = lambda r: [Step("start", "", "", ("k",), (2,), None, None,
    ...                       (RankState(r, (r,), None, (1,), [r]),))]
    >>> [s.rank for s in merge_steps([one(1), one(0)])[0].ranks]
    [0, 1]
    """
    if not per_rank_runs:
        raise ValueError("merge_steps needs at least one run")
    labels = [s.label for s in per_rank_runs[0]]
    for run in per_rank_runs:
        if [s.label for s in run] != labels:
            raise ValueError("runs disagree on the sequence of steps")
    merged = []
    for i, step in enumerate(per_rank_runs[0]):
        ranks = sorted((r for run in per_rank_runs for r in run[i].ranks), key=lambda r: r.rank)
        if len({r.rank for r in ranks}) != len(ranks):
            raise ValueError(f"step {step.label!r}: the same rank appears in two runs")
        merged.append(Step(**{**step.__dict__, "ranks": tuple(ranks)}))
    return merged

