"""Probes for the mesh page: what the simulation emulates, the fragment verbatim, and
what DTensor does when one ``redistribute`` changes several mesh dims.

Everything here runs unchanged in a simulated world (:func:`explainers.mesh.simulated_mesh`)
and under a real process group (``explainers.mesh_run`` under ``torchrun``), so the page
can compare the two.  Private PyTorch APIs used are named where they are used; they are
checked on torch 2.14.1 and 2.15.0 (:data:`explainers.releases.SUPPORTED`).
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from explainers.checks import is_int
from explainers.mesh import FRAGMENT, RankState, _placement_str, rank_states, redistribute

__all__ = [
    "FsdpLayout",
    "GatherProbe",
    "SimulationTrace",
    "SweepPoint",
    "broadcast_probe",
    "fragment_code",
    "fsdp_tp_layout",
    "gather_probes",
    "merge_probes",
    "padded_gather",
    "planned_mesh_dims",
    "release_observations",
    "replaced_functions",
    "replay_broadcast",
    "run_fragment",
    "scatter_probe",
    "simulation_trace",
    "uneven_gather_sweep",
]


# -- what the simulation emulates -----------------------------------------------------


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
    >>> from explainers.mesh import simulated_mesh
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

    >>> from explainers.mesh import simulated_world
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


# -- the fragment, verbatim ----------------------------------------------------------------


def fragment_code(numel: int = 15) -> str:
    """The fragment's lines, as :func:`run_fragment` executes them.

    >>> print(fragment_code(16).splitlines()[0])
    x = DTensor.from_local(arange_nd(16), mesh["m", "n", "k"], [R, R, R])  # start
    """
    _check_numel(numel)
    return "\n".join(
        f"{code.replace('arange_nd(15)', f'arange_nd({numel})')}  # {label}"
        for _, label, code in FRAGMENT
    )


def _check_numel(numel: object) -> int:
    if not is_int(numel) or numel < 1:
        raise ValueError(f"numel must be a positive int, got {numel!r}")
    return numel


def run_fragment(mesh: Any, numel: int, on_line: Callable[[int], None] | None = None) -> Any:
    """Execute the fragment exactly as written, with plain ``DTensor.from_local`` and
    ``x.redistribute``, on ``mesh`` (dims named ``m``, ``n``, ``k``).

    The lines are :data:`explainers.mesh.FRAGMENT`, executed one at a time so that
    ``on_line(i)`` can record which line (index into ``FRAGMENT``) a rank started last:
    a real rank may die inside a collective without a Python exception.  Returns the
    final ``x`` (a local tensor).

    >>> from explainers.mesh import simulated_mesh
    >>> with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
    ...     out = run_fragment(mesh, 16)
    >>> out._local_tensors[7].tolist()
    [14, 15]
    """
    from torch.distributed.tensor import DTensor, Replicate, Shard

    from explainers.render import arange_nd

    _check_numel(numel)
    if tuple(mesh.mesh_dim_names or ()) != ("m", "n", "k"):
        raise ValueError(
            f'the fragment needs a 3-D mesh named ("m", "n", "k"), got {mesh.mesh_dim_names}'
        )
    # The names the fragment's lines use, and nothing else.
    names = {"DTensor": DTensor, "R": Replicate(), "S": Shard, "mesh": mesh,
             "arange_nd": arange_nd}  # fmt: skip
    for i, (_, _, code) in enumerate(FRAGMENT):
        if on_line is not None:
            on_line(i)
        exec(code.replace("arange_nd(15)", f"arange_nd({numel})"), names)  # noqa: S102
    return names["x"]


# -- several mesh dims in one redistribute ---------------------------------------------


@dataclass(frozen=True)
class GatherProbe:
    """One ``redistribute`` to all-``Replicate`` of ``arange_nd(numel)`` placed ``src``."""

    label: str
    numel: int
    src: tuple[str, ...]
    flattened: bool  # whether mesh["m", "n", "k"]._flatten() had been called
    comms: dict[str, int]  # CommDebugMode's counts
    warnings: tuple[str, ...]  # what _redistribute logged
    ranks: tuple[RankState, ...] = ()

    @property
    def correct(self) -> bool:
        """Every rank holds the whole tensor, ``0 .. numel-1`` in order."""
        return bool(self.ranks) and all(r.values == list(range(self.numel)) for r in self.ranks)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> GatherProbe:
        d = dict(d)
        d["src"], d["warnings"] = tuple(d["src"]), tuple(d["warnings"])
        d["ranks"] = tuple(RankState.from_dict(r) for r in d["ranks"])
        return cls(**d)


#: Name of the flattened mesh dim that gather_probes() creates.
FLAT = "mnk"


def gather_probes(mesh: Any) -> list[GatherProbe]:
    """Redistribute four 3-D shardings to ``[R, R, R]`` on ``mesh`` (a 2x2x2 ``m, n, k`` mesh).

    In this order: ``[S(0), S(0), S(0)]`` of 16 elements; the same after
    ``mesh["m", "n", "k"]._flatten("mnk")``; the fragment's right-to-left state
    ``[_S(0, 4), _S(0, 2), S(0)]`` of 16 elements; ``[S(0), S(0), S(0)]`` of 13 elements.
    The flattened dim stays on ``mesh`` afterwards.

    DTensor logs its "sequential operations" warning once per process for each
    (mesh, mesh dims, reason) (torch 2.14.1 and 2.15.0: the set
    ``_redistribute._warned_flatten_issues``);
    each probe empties that set first, so that it records the warning whatever ran before.
    """
    import torch.distributed.tensor._redistribute as rd
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.placement_types import _StridedShard

    from explainers.mesh import redistribute_log
    from explainers.render import arange_nd

    if tuple(mesh.mesh_dim_names or ()) != ("m", "n", "k") or tuple(mesh.shape) != (2, 2, 2):
        raise ValueError(
            "gather_probes needs a 2x2x2 mesh named (\"m\", \"n\", \"k\"), got "
            f"{tuple(mesh.shape)} {mesh.mesh_dim_names}"
        )
    S, R = Shard, Replicate()
    left_to_right = [S(0), S(0), S(0)]
    right_to_left = [_StridedShard(0, split_factor=4), _StridedShard(0, split_factor=2), S(0)]
    cases = [
        ("left to right, no flattened mesh", 16, left_to_right, False),
        ("left to right, flattened mesh", 16, left_to_right, True),
        ("right to left, flattened mesh", 16, right_to_left, True),
        ("left to right, flattened mesh, 13 elements", 13, left_to_right, True),
    ]
    probes = []
    for label, numel, src, flatten in cases:
        if flatten and FLAT not in (mesh._flatten_mapping or {}):
            mesh["m", "n", "k"]._flatten(FLAT)
        rd._warned_flatten_issues.clear()
        with redistribute_log() as messages:
            # src_data_rank=None: every rank cuts its own chunk, no scatter.
            x = distribute_tensor(arange_nd(numel), mesh, src, src_data_rank=None)
            log: list = []
            y = redistribute(x, [R, R, R], log)
        probes.append(
            GatherProbe(
                label=label,
                numel=numel,
                src=tuple(_placement_str(p) for p in src),
                flattened=flatten,
                comms=log[0].comms,
                warnings=tuple(messages),
                ranks=rank_states(y, mesh),
            )
        )
    return probes


def padded_gather(sizes: Sequence[int], numel: int) -> list[int]:
    """What one all-gather of ``arange(numel)`` cut into pieces of ``sizes`` returns, done
    the way ``Shard._to_replicate_tensor`` does it over a (flattened) mesh of
    ``len(sizes)`` ranks: each piece padded with zeros to ``ceil(numel / len(sizes))``,
    the pieces concatenated in rank order, and the tail cut to ``numel`` elements.

    Right only when every short piece comes after all the full ones:

    >>> padded_gather([2, 2, 2, 1], 7)      # torch.chunk(7, 4): right
    [0, 1, 2, 3, 4, 5, 6]
    >>> padded_gather([2, 1, 2, 2], 7)      # a short piece in the middle: a zero stays
    [0, 1, 2, 0, 3, 4, 5]
    """
    sizes = [int(n) for n in sizes]
    if not sizes or any(n < 0 for n in sizes) or sum(sizes) != numel:
        raise ValueError(f"piece sizes {sizes} must be non-negative and add up to {numel}")
    full = -(-numel // len(sizes))
    if max(sizes) > full:
        raise ValueError(f"piece sizes {sizes}: none may exceed ceil({numel} / {len(sizes)})")
    out, start = [], 0
    for n in sizes:
        out += list(range(start, start + n)) + [0] * (full - n)
        start += n
    return out[:numel]


@dataclass(frozen=True)
class SweepPoint:
    """``[S(0), S(0), S(0)]`` of ``numel`` elements gathered to ``[R, R, R]`` on a flattened
    mesh: each rank's piece before, the collectives, and what every rank held after."""

    numel: int
    sizes: tuple[int, ...]  # local sizes before the gather, by rank
    comms: dict[str, int]
    held: tuple[tuple[int, ...], ...]  # by rank, after

    @property
    def correct(self) -> bool:
        """Every rank holds ``0 .. numel-1`` in order."""
        return all(list(h) == list(range(self.numel)) for h in self.held)


def uneven_gather_sweep(mesh: Any, sizes: Sequence[int]) -> list[SweepPoint]:
    """For each ``numel`` in ``sizes``, redistribute ``[S(0), S(0), S(0)]`` to ``[R, R, R]``
    on ``mesh`` (2x2x2, dims ``m``, ``n``, ``k``) once ``mesh["m", "n", "k"]`` has a
    flattened mesh, so that DTensor may merge the three all-gathers into one.

    Creates the flattened dim ``"mnk"`` if it is missing; it stays on ``mesh``.

    >>> from explainers.mesh import simulated_mesh
    >>> with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
    ...     [(p.numel, p.sizes, p.correct) for p in uneven_gather_sweep(mesh, [15, 13])]
    [(15, (2, 2, 2, 2, 2, 2, 2, 1), True), (13, (2, 2, 2, 1, 2, 1, 2, 1), False)]
    """
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    from explainers.mesh import redistribute_log
    from explainers.render import arange_nd

    if tuple(mesh.mesh_dim_names or ()) != ("m", "n", "k") or tuple(mesh.shape) != (2, 2, 2):
        raise ValueError(
            "uneven_gather_sweep needs a 2x2x2 mesh named (\"m\", \"n\", \"k\"), got "
            f"{tuple(mesh.shape)} {mesh.mesh_dim_names}"
        )
    if FLAT not in (mesh._flatten_mapping or {}):
        mesh["m", "n", "k"]._flatten(FLAT)
    points = []
    for numel in sizes:
        _check_numel(numel)
        # redistribute_log: keep whatever DTensor logs off stderr; the merged gather logs nothing.
        with redistribute_log():
            x = distribute_tensor(arange_nd(numel), mesh, [Shard(0)] * 3, src_data_rank=None)
            before = rank_states(x, mesh)
            log: list = []
            after = rank_states(redistribute(x, [Replicate()] * 3, log), mesh)
        points.append(
            SweepPoint(
                numel=numel,
                sizes=tuple(r.shape[0] for r in before),
                comms=log[0].comms,
                held=tuple(tuple(r.values) for r in after),
            )
        )
    return points


def planned_mesh_dims(x: Any, placements: Sequence[Any]) -> tuple[int, ...]:
    """The mesh dims of the steps DTensor's planner makes for ``x -> placements``, in order,
    before ``_optimize_transform_infos`` merges any of them.

    Calls the planner as ``redistribute_local_tensor`` does (torch 2.14.1 and 2.15.0:
    ``_redistribute._gen_transform_infos_non_cached`` on the two ``DTensorSpec`` objects).

    >>> from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    >>> from explainers.mesh import simulated_mesh
    >>> from explainers.render import arange_nd
    >>> with simulated_mesh((2, 2), ("a", "b")) as mesh:
    ...     x = distribute_tensor(arange_nd(4), mesh, [Shard(0), Shard(0)], src_data_rank=None)
    ...     planned_mesh_dims(x, [Replicate(), Replicate()])
    (1, 0)
    """
    import torch.distributed.tensor._redistribute as rd
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._dtensor_spec import DTensorSpec

    from explainers.mesh import _placements

    if not isinstance(x, DTensor):
        raise TypeError(f"planned_mesh_dims expects a DTensor, got {type(x).__name__}")
    target = DTensorSpec(
        x._spec.mesh, _placements(x.device_mesh, placements), tensor_meta=x._spec.tensor_meta
    )
    return tuple(info.mesh_dim for info in rd._gen_transform_infos_non_cached(x._spec, target))


def merge_probes(per_rank_runs: Sequence[Sequence[GatherProbe]]) -> list[GatherProbe]:
    """Combine the probes recorded by each real process into probes holding all ranks.

    Every process must have run the same probes with the same counts and warnings.
    """
    if not per_rank_runs:
        raise ValueError("merge_probes needs at least one run")
    first = per_rank_runs[0]
    merged = []
    for i, probe in enumerate(first):
        others = [run[i] for run in per_rank_runs]
        for o in others:
            if (o.label, o.comms, o.warnings) != (probe.label, probe.comms, probe.warnings):
                raise ValueError(f"probe {probe.label!r}: processes disagree")
        ranks = sorted((r for o in others for r in o.ranks), key=lambda r: r.rank)
        if len({r.rank for r in ranks}) != len(ranks):
            raise ValueError(f"probe {probe.label!r}: the same rank appears in two runs")
        merged.append(GatherProbe(**{**probe.__dict__, "ranks": tuple(ranks)}))
    return merged


# -- broadcast from a source rank ------------------------------------------------------------

#: The meshes :func:`broadcast_probe` broadcasts over, by their dims' names.
BROADCAST_MESHES: tuple[tuple[str, ...], ...] = (("m",), ("n",), ("k",), ("m", "n", "k"))


def broadcast_probe(mesh: Any, src_data_rank: int = 1) -> dict[str, dict[int, int]]:
    """Whose tensor every rank holds after ``distribute_tensor(t, sub, [R, ...],
    src_data_rank=src_data_rank)``, where each rank's ``t`` holds its own rank number.

    ``sub`` is, in turn, ``mesh["m"]``, ``mesh["n"]``, ``mesh["k"]`` and ``mesh["m", "n",
    "k"]`` of a 2x2x2 mesh.  DTensor broadcasts a ``Replicate`` mesh dim with
    ``mesh_broadcast(..., group_src=src_data_rank)``: the source is group rank
    ``src_data_rank`` of every group along that mesh dim.  Returns ``{"m": {rank: held},
    ...}`` with the keys ``"m"``, ``"n"``, ``"k"``, ``"m,n,k"``: every rank simulated, or
    this rank under a real process group.

    >>> from explainers.mesh import simulated_mesh
    >>> with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
    ...     broadcast_probe(mesh)["k"]
    {0: 1, 1: 1, 2: 3, 3: 3, 4: 5, 5: 5, 6: 7, 7: 7}
    """
    from torch.distributed.tensor import Replicate, distribute_tensor

    from explainers.mesh import rank_local

    if tuple(mesh.mesh_dim_names or ()) != ("m", "n", "k") or tuple(mesh.shape) != (2, 2, 2):
        raise ValueError(
            "broadcast_probe needs a 2x2x2 mesh named (\"m\", \"n\", \"k\"), got "
            f"{tuple(mesh.shape)} {mesh.mesh_dim_names}"
        )
    if not is_int(src_data_rank) or not (
        0 <= src_data_rank < 2
    ):
        raise ValueError(f"src_data_rank must be a group rank, 0 or 1, got {src_data_rank!r}")
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

    >>> from explainers.mesh import simulated_mesh
    >>> with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
    ...     scatter_probe(mesh, 0)["held"][1::4]
    [[10, 11], [12, 13]]
    """
    import traceback

    from torch.distributed.tensor import Shard, distribute_tensor

    from explainers.mesh import rank_local

    if tuple(mesh.mesh_dim_names or ()) != ("m", "n", "k") or tuple(mesh.shape) != (2, 2, 2):
        raise ValueError(
            "scatter_probe needs a 2x2x2 mesh named (\"m\", \"n\", \"k\"), got "
            f"{tuple(mesh.shape)} {mesh.mesh_dim_names}"
        )
    if isinstance(src_data_rank, bool) or src_data_rank not in (0, 1):
        raise ValueError(f"src_data_rank must be a group rank, 0 or 1, got {src_data_rank!r}")
    mine = rank_local([[10 * r + i for i in range(4)] for r in range(8)])
    try:
        x = distribute_tensor(mine, mesh["m"], [Shard(0)], src_data_rank=src_data_rank)
    except Exception as e:  # noqa: BLE001  the failure is the observation
        innermost = traceback.extract_tb(e.__traceback__)[-1].name
        return {"held": None, "error": f"{type(e).__name__} in {innermost}"}
    return {"held": [s.values for s in rank_states(x, mesh)], "error": None}


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

    from explainers.mesh import per_rank_int, simulated_mesh, walkthrough
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


# -- FSDP2 over tensor parallelism --------------------------------------------------------


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


