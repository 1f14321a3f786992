"""The mesh page's simulated observations as JSON data, to compare torch releases.

:func:`release_observations` runs the walkthrough and every probe in simulated worlds
under the installed torch; :func:`explainers.releases.run_under` runs it under another
release.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from explainers.mesh.fsdp import fsdp_tp_layout
from explainers.mesh.gathers import gather_probes, uneven_gather_sweep
from explainers.mesh.rooted import BROADCAST_MESHES, broadcast_probe, scatter_probe
from explainers.mesh.trace import simulation_trace
from explainers.mesh.walkthrough import FRAGMENT, run_fragment

__all__ = ["release_observations"]


def release_observations() -> dict:
    """What this page observes in a simulated world under the installed torch, as JSON
    data, so that :func:`explainers.releases.run_under` can compare releases.

    Keys: ``torch`` (the version), ``walkthrough`` (every step of ``walkthrough(mesh,
    15)``: label, collectives, every rank's values), ``shard_order`` (of ``[S(0), S(0),
    S(0)]``), ``strided`` (the fragment's ``_StridedShard`` state: stored ``shard_order``,
    the mesh dims DTensor decodes, and how its scatter from group rank 0 fails on 15
    elements), ``global_shape_2d`` (the error of ``compute_global_tensor_shape`` on a 2-D
    mesh), ``get_rank`` (``dist.get_rank()`` by rank, and whether ``== 0`` holds),
    ``probes`` (:func:`gather_probes`: collectives, messages, right or not),
    ``sweep_right`` (the sizes of 4..20 that :func:`uneven_gather_sweep` gets right),
    ``fragment15`` (the fragment as written on 15 elements: the line it stops in and the
    error), ``broadcast`` (:func:`broadcast_probe` with ``src_data_rank=1``, values by
    rank), ``broadcast_calls`` (what the emulated broadcast received for each of its
    meshes, :attr:`SimulationTrace.rooted`), ``scatter`` (:func:`scatter_probe` from group
    rank ``"0"`` and ``"1"``, with the ``calls`` the emulated scatter received), ``fsdp``
    (:func:`fsdp_tp_layout` on a 4x2 mesh, with the ``calls`` the emulated scatter
    received) and ``emulated`` (how often each collective
    emulation ran for all of the above).
    """
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.distributed.tensor._dtensor_spec import DTensorSpec
    from torch.distributed.tensor._utils import compute_global_tensor_shape
    from torch.distributed.tensor.placement_types import _StridedShard

    from explainers.mesh.simulated import simulated_mesh
    from explainers.mesh.steps import per_rank_int
    from explainers.mesh.walkthrough import walkthrough
    from explainers.render import arange_nd

    emulated: Counter = Counter()

    def failure(fn: Callable[[], Any]) -> str | None:
        import traceback

        try:
            fn()
        except Exception as e:  # noqa: BLE001  the error is the observation
            return f"{type(e).__name__} in {traceback.extract_tb(e.__traceback__)[-1].name}"
        return None

    with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
        with simulation_trace() as seen:
            steps = walkthrough(mesh, 15)
            x = distribute_tensor(arange_nd(16), mesh, [Shard(0)] * 3, src_data_rank=None)
            order = [[e.tensor_dim, list(e.mesh_dims)] for e in x._spec.shard_order]
            strided = [_StridedShard(0, split_factor=4), _StridedShard(0, split_factor=2), Shard(0)]
            y = distribute_tensor(arange_nd(16), mesh, strided, src_data_rank=None)
            _, decoded = DTensorSpec._normalize_placements_into_shard_order(tuple(strided), mesh)
            strided_scatter = failure(lambda: distribute_tensor(arange_nd(15), mesh, strided))
            shape_2d = failure(lambda: compute_global_tensor_shape(
                torch.Size([1]), mesh["n", "k"], [Shard(0), Shard(0)]))
            rank = dist.get_rank()
            get_rank = {"by_rank": [per_rank_int(rank)[r] for r in range(8)], "eq0": rank == 0}
            started: list[int] = []
            try:
                run_fragment(mesh, 15, started.append)
                fragment = "no error"
            except Exception as e:  # noqa: BLE001  the error is the observation
                fragment = f"{type(e).__name__}: {e}"
        emulated.update(seen.emulated)
        with simulation_trace() as seen:
            broadcast = broadcast_probe(mesh)
        emulated.update(seen.emulated)
        calls, broadcast_calls = list(seen.rooted), {}
        for dims in BROADCAST_MESHES:  # one broadcast per Replicate mesh dim, in order
            broadcast_calls[",".join(dims)] = calls[: len(dims)]
            calls = calls[len(dims):]
        if calls or any(c["op"] != "broadcast" for cs in broadcast_calls.values() for c in cs):
            raise RuntimeError(f"broadcast_probe ran other collectives than expected: {seen.rooted}")
        scatter = {}
        for src in (0, 1):
            with simulation_trace() as seen:
                scatter[str(src)] = scatter_probe(mesh, src)
            emulated.update(seen.emulated)
            scatter[str(src)]["calls"] = seen.rooted
    with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh, simulation_trace() as seen:
        probes = gather_probes(mesh)
    emulated.update(seen.emulated)
    with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh, simulation_trace() as seen:
        sweep = uneven_gather_sweep(mesh, range(4, 21))
    emulated.update(seen.emulated)
    with simulated_mesh((4, 2), ("dp", "tp")) as mesh42, simulation_trace() as seen:
        fsdp = fsdp_tp_layout(mesh42)
    emulated.update(seen.emulated)
    fsdp_calls = seen.rooted
    return {
        "torch": torch.__version__,
        "walkthrough": [
            {
                "label": s.label,
                "comms": s.redistribution.comms if s.redistribution else {},
                "values": [r.values for r in s.ranks],
            }
            for s in steps
        ],
        "shard_order": order,
        "strided": {
            "stored": None if y._spec.shard_order is None else str(y._spec.shard_order),
            "decoded": [[e.tensor_dim, list(e.mesh_dims)] for e in decoded],
            "scatter15": strided_scatter,
        },
        "global_shape_2d": shape_2d,
        "get_rank": get_rank,
        "probes": [
            {"label": p.label, "comms": p.comms, "warnings": list(p.warnings), "correct": p.correct}
            for p in probes
        ],
        "sweep_right": [p.numel for p in sweep if p.correct],
        "fragment15": {"line": FRAGMENT[started[-1]][1] if started else None, "error": fragment},
        "broadcast": {k: [v[r] for r in range(8)] for k, v in broadcast.items()},
        "broadcast_calls": broadcast_calls,
        "scatter": scatter,
        "fsdp": {"placements": list(fsdp.placements),
                 "rows": [fsdp.rows[r] for r in range(8)], "calls": fsdp_calls},
        "emulated": dict(sorted(emulated.items())),
    }

