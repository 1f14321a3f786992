"""FSDP2 over tensor parallelism: where ``fully_shard`` after ``ColwiseParallel`` puts a
weight's rows, and with which placements.

:func:`fsdp_tp_layout` runs unchanged in a simulated world and under a real process group;
in a simulated world its rows are wrong (see its docstring), which the page shows.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from explainers.mesh.uneven import _placement_str

__all__ = ["FsdpLayout", "fsdp_tp_layout"]


@dataclass(frozen=True)
class FsdpLayout:
    """The weight of a ``ColwiseParallel`` Linear after ``fully_shard``: placements, and the
    weight rows (by index) each rank holds."""

    placements: tuple[str, ...]
    rows: dict[int, list[int]]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> FsdpLayout:
        return cls(tuple(d["placements"]), {int(r): v for r, v in d["rows"].items()})


def fsdp_tp_layout(mesh: Any, rows: int = 16) -> FsdpLayout:
    """Shard a ``Linear(2, rows)`` with tensor parallelism on ``mesh["tp"]``, then FSDP2 on
    ``mesh["dp"]``, and report where its weight rows went.

    ``mesh`` is a 2-D mesh named ``("dp", "tp")``.  Row ``i`` of the weight holds the
    value ``i``.  Under a real process group the result holds this rank's rows.  In a
    simulated world it holds every rank's rows, and they are wrong: FSDP2 takes a rank's
    shard index from ``ProcessGroup.rank()``, which the ``fake`` backend answers with one
    plain ``0`` for every simulated rank (torch 2.14.1 and 2.15.0), so every ``dp`` rank keeps the
    chunk of ``dp = 0``.

    >>> from explainers.mesh.simulated import simulated_mesh
    >>> with simulated_mesh((4, 2), ("dp", "tp")) as mesh:
    ...     fsdp_tp_layout(mesh).placements
    ('_S(0, sf=2)', 'S(0)')
    """
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    if tuple(mesh.mesh_dim_names or ()) != ("dp", "tp"):
        raise ValueError(f'fsdp_tp_layout needs a mesh named ("dp", "tp"), got {mesh.mesh_dim_names}')
    lin = nn.Linear(2, rows, bias=False, device=mesh.device_type)
    with torch.no_grad():
        lin.weight.copy_(torch.arange(rows, dtype=lin.weight.dtype).unsqueeze(1).expand(rows, 2))
    parallelize_module(lin, mesh["tp"], ColwiseParallel())
    fully_shard(lin, mesh=mesh["dp"])
    from torch.distributed._local_tensor import LocalTensor

    with torch.no_grad():
        local = lin.weight.to_local()
    per_rank = (
        dict(sorted(local._local_tensors.items()))
        if isinstance(local, LocalTensor)
        else {dist.get_rank(): local}
    )
    return FsdpLayout(
        placements=tuple(_placement_str(p) for p in lin.weight.placements),
        rows={int(r): [int(v) for v in t[:, 0].tolist()] for r, t in per_rank.items()},
    )
