"""What a simulated world emulates: the collectives ``LocalTensorMode`` computes, the planner
DTensor ran, and the functions the mode replaces.

:func:`simulation_trace` wraps the emulations of ``torch.distributed._local_tensor._c10d``
for the length of a block; :func:`replaced_functions` names what the mode swaps in while
it is active.  Private PyTorch APIs used are named where they are used; they are checked
on torch 2.14.1 and 2.15.0 (:data:`explainers.releases.SUPPORTED`).
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SimulationTrace", "replaced_functions", "simulation_trace"]


@dataclass
class SimulationTrace:
    """What ran inside a :func:`simulation_trace` block."""

    backend: str = ""
    #: LocalTensorMode's collective emulations (``torch.distributed._local_tensor._c10d``)
    #: that ran, by function name.
    emulated: dict[str, int] = field(default_factory=dict)
    #: Lookups in the cached planner ``_redistribute._gen_transform_infos`` (hits + misses).
    cached_plans: int = 0
    #: Plans made by ``_gen_transform_infos_non_cached`` outside that cache.
    uncached_plans: int = 0
    #: Every emulated broadcast and scatter, in order: ``{"op": "broadcast" or "scatter",
    #: "ranks": global ranks of the process-group handle it received, "root": its
    #: ``root_rank``, "group_offsets": the first rank of every group it serves,
    #: "scatter_lists": how many lists of inputs a scatter received}``.
    rooted: list[dict] = field(default_factory=list)


@contextmanager
def simulation_trace() -> Iterator[SimulationTrace]:
    """Count, inside a simulated world, which collectives were emulated and which planner ran.

    Wraps (and restores on exit) every ``_local_*`` function of
    ``torch.distributed._local_tensor._c10d``, which ``LocalTensorMode`` calls through
    its module attribute to compute a collective from the per-rank tensors, and
    ``_redistribute._gen_transform_infos_non_cached``; the cached planner is observed
    through its ``functools.cache`` statistics.  For each broadcast and scatter it also
    records what the emulation received (:attr:`SimulationTrace.rooted`), before the
    emulation runs, so a call that then fails is recorded too.

    >>> from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    >>> from explainers.mesh.simulated import simulated_mesh
    >>> from explainers.mesh.uneven import redistribute
    >>> from explainers.render import arange_nd
    >>> with simulated_mesh((2,), ("k",)) as mesh, simulation_trace() as seen:
    ...     x = distribute_tensor(arange_nd(4), mesh, [Shard(0)], src_data_rank=None)
    ...     _ = redistribute(x, [Replicate()])
    >>> seen.backend, seen.emulated, seen.cached_plans, seen.uncached_plans
    ('fake', {'_local_functional_all_gather_into_tensor': 1}, 0, 1)
    """
    import torch.distributed as dist
    import torch.distributed.tensor._redistribute as rd
    from torch.distributed._local_tensor import _c10d as emulation
    from torch.distributed._local_tensor import local_tensor_mode

    if local_tensor_mode() is None or not dist.is_initialized():
        raise RuntimeError(
            "simulation_trace() observes a simulated world: open one with "
            "simulated_world() or simulated_mesh() first"
        )
    trace = SimulationTrace(backend=dist.get_backend())
    ran: Counter = Counter()
    plans = Counter()

    def counting(name: str, fn: Callable, counter: Counter) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counter[name] += 1
            if name in _ROOTED:
                trace.rooted.append(_rooted_call(name, fn, emulation, args, kwargs))
            return fn(*args, **kwargs)

        return wrapper

    saved = {
        name: fn
        for name, fn in vars(emulation).items()
        if name.startswith("_local_") and inspect.isfunction(fn)
    }
    for name, fn in saved.items():
        setattr(emulation, name, counting(name, fn, ran))
    non_cached = rd._gen_transform_infos_non_cached
    rd._gen_transform_infos_non_cached = counting("non_cached", non_cached, plans)
    before = rd._gen_transform_infos.cache_info()
    try:
        yield trace
    finally:
        rd._gen_transform_infos_non_cached = non_cached
        for name, fn in saved.items():
            setattr(emulation, name, fn)
        after = rd._gen_transform_infos.cache_info()
        trace.emulated = dict(sorted(ran.items()))
        trace.cached_plans = (after.hits - before.hits) + (after.misses - before.misses)
        # A cache miss calls _gen_transform_infos_non_cached too; count only the direct calls.
        trace.uncached_plans = plans["non_cached"] - (after.misses - before.misses)


#: The emulations whose arguments simulation_trace() records, and the op each one is.
_ROOTED = {"_local_broadcast_": "broadcast", "_local_scatter_": "scatter"}


def _rooted_call(name: str, fn: Callable, emulation: Any, args: tuple, kwargs: dict) -> dict:
    """What ``_c10d._local_broadcast_`` or ``_local_scatter_`` received (torch 2.14.1 and 2.15.0:
    ``(tensors..., process_group_so, root_rank, ...)``, the group as a boxed ``ProcessGroup``)."""
    import torch
    import torch.distributed as dist
    from torch.distributed import ProcessGroup

    call = inspect.signature(fn).bind(*args, **kwargs).arguments
    so = call["process_group_so"]
    group = ProcessGroup.unbox(so) if isinstance(so, torch.ScriptObject) else so
    out = {
        "op": _ROOTED[name],
        "ranks": list(dist.get_process_group_ranks(group)),
        "root": int(call["root_rank"]),
        # _prepare_collective_groups returns (relative ranks, group offsets[, offset]).
        "group_offsets": [int(g) for g in emulation._prepare_collective_groups(so)[1]],
    }
    if name == "_local_scatter_":
        out["scatter_lists"] = len(call["input_tensors"])
    return out


def replaced_functions() -> dict[str, str]:
    """What each function that ``LocalTensorMode`` replaces while active is right now:
    ``{"DeviceMesh.get_rank": "DeviceMesh.get_rank", ...}`` (name -> ``__qualname__``).

    The names are read from ``torch.distributed._local_tensor`` (torch 2.14.1 and 2.15.0:
    the private tuples ``_PATCHED_DEVICE_MESH_METHODS``, ``_PATCHED_DIST_FUNCTIONS`` and
    ``_PATCHED_RANDOM_FUNCTIONS``), so a torch that patches more shows more.  Inside a
    simulated world the values name the per-rank versions (``_LocalDeviceMesh...``).

    >>> from explainers.mesh.simulated import simulated_world
    >>> with simulated_world(2):
    ...     inside = replaced_functions()
    >>> inside["torch.distributed.get_rank"], replaced_functions()["torch.distributed.get_rank"]
    ('_LocalDist.get_rank', 'get_rank')
    """
    import importlib

    import torch.distributed as dist
    import torch.distributed._local_tensor as lt
    from torch.distributed.device_mesh import DeviceMesh

    out = {f"DeviceMesh.{n}": getattr(DeviceMesh, n).__qualname__
           for n in lt._PATCHED_DEVICE_MESH_METHODS}  # fmt: skip
    out.update({f"torch.distributed.{n}": getattr(dist, n).__qualname__
                for n in lt._PATCHED_DIST_FUNCTIONS})  # fmt: skip
    for name, _ in lt._PATCHED_RANDOM_FUNCTIONS:
        module, attr = name.rsplit(".", 1)
        out[name] = getattr(importlib.import_module(module), attr).__qualname__
    return out

