"""Several mesh dims in one ``redistribute``: the all-gathers DTensor plans and merges, and
where a merged all-gather of uneven pieces goes wrong.

:func:`gather_probes` redistributes four 3-D shardings to all-``Replicate``;
:func:`uneven_gather_sweep` repeats the merged gather for a range of sizes;
:func:`padded_gather` is the padding arithmetic in plain Python; :func:`planned_mesh_dims`
asks the planner for its steps before merging; :func:`full_tensor_probe` runs
``DTensor.full_tensor()`` with and without the merge.  Everything here runs unchanged in a
simulated world and under a real process group (:mod:`explainers.mesh.torchrun`), so the
page can compare the two.  Private PyTorch APIs used are named where they are used; they
are checked on torch 2.14.1 and 2.15.0 (:data:`explainers.releases.SUPPORTED`).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from typing import Any

from explainers.mesh.steps import RankState, rank_states
from explainers.mesh.uneven import _placement_str, redistribute
from explainers.mesh.walkthrough import _check_mnk_2x2x2, _check_numel

__all__ = [
    "FLAT",
    "FULL_TENSOR_CASES",
    "GatherProbe",
    "SweepPoint",
    "full_tensor_probe",
    "gather_probes",
    "merge_probes",
    "padded_gather",
    "planned_mesh_dims",
    "uneven_gather_sweep",
]


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

    >>> from explainers.mesh.simulated import simulated_mesh
    >>> with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
    ...     probes = gather_probes(mesh)
    >>> probes[2].label, probes[2].src
    ('right to left, flattened mesh', ('_S(0, sf=4)', '_S(0, sf=2)', 'S(0)'))
    """
    import torch.distributed.tensor._redistribute as rd
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.placement_types import _StridedShard

    from explainers.mesh.uneven import redistribute_log
    from explainers.render import arange_nd

    _check_mnk_2x2x2(mesh, "gather_probes")
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

    >>> from explainers.mesh.simulated import simulated_mesh
    >>> with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
    ...     [(p.numel, p.sizes, p.correct) for p in uneven_gather_sweep(mesh, [15, 13])]
    [(15, (2, 2, 2, 2, 2, 2, 2, 1), True), (13, (2, 2, 2, 1, 2, 1, 2, 1), False)]
    """
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    from explainers.mesh.uneven import redistribute_log
    from explainers.render import arange_nd

    _check_mnk_2x2x2(mesh, "uneven_gather_sweep")
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
    >>> from explainers.mesh.simulated import simulated_mesh
    >>> from explainers.render import arange_nd
    >>> with simulated_mesh((2, 2), ("a", "b")) as mesh:
    ...     x = distribute_tensor(arange_nd(4), mesh, [Shard(0), Shard(0)], src_data_rank=None)
    ...     planned_mesh_dims(x, [Replicate(), Replicate()])
    (1, 0)
    """
    import torch.distributed.tensor._redistribute as rd
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._dtensor_spec import DTensorSpec

    from explainers.mesh.uneven import _placements

    if not isinstance(x, DTensor):
        raise TypeError(f"planned_mesh_dims expects a DTensor, got {type(x).__name__}")
    target = DTensorSpec(
        x._spec.mesh, _placements(x.device_mesh, placements), tensor_meta=x._spec.tensor_meta
    )
    return tuple(info.mesh_dim for info in rd._gen_transform_infos_non_cached(x._spec, target))


def merge_probes(per_rank_runs: Sequence[Sequence[GatherProbe]]) -> list[GatherProbe]:
    """Combine the probes recorded by each real process into probes holding all ranks.

    Every process must have run the same probes with the same counts and warnings.

    >>> one = lambda r: [GatherProbe("p", 1, ("S(0)",), False, {}, (),
    ...                              (RankState(r, (r,), ("R",), (1,), [0]),))]
    >>> [r.rank for r in merge_probes([one(1), one(0)])[0].ranks]
    [0, 1]
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



#: The cases of :func:`full_tensor_probe`: whether the mesh is flattened, and whether
#: DTensor's merging of collectives is switched off.
FULL_TENSOR_CASES = ("flattened mesh", "flattened mesh, merge disabled", "no flattened mesh")


def full_tensor_probe(numel: int, op: str = "full_tensor") -> dict[str, dict]:
    """``x.full_tensor()`` of ``arange(numel)`` placed ``[S(0), S(0), S(0)]`` on a simulated 2x2x2 mesh.

    With ``op="cumsum"``, ``torch.cumsum(x, 0)`` instead: an ordinary op whose sharding
    rule gathers tensor dim 0 first (the result is ``Replicate`` on every mesh dim), compared
    with ``arange(numel).cumsum(0)``.

    One JSON-able entry per case of :data:`FULL_TENSOR_CASES`: ``all_gathers`` (counted
    by ``CommDebugMode``), ``rank0`` (rank 0's result) and ``right`` (every rank holds
    ``0 .. numel-1``).  "merge disabled" runs inside
    ``torch.distributed.tensor._redistribute.disable_redistribute_transform_optimization()``
    (private; torch 2.14.1 and 2.15.0), which turns off ``_optimize_transform_infos``.
    Opens its own simulated meshes, so it can run under another release.

    >>> got = full_tensor_probe(16)
    >>> [(got[c]["all_gathers"], got[c]["right"]) for c in FULL_TENSOR_CASES]
    [(1, True), (3, True), (3, True)]
    >>> got = full_tensor_probe(13, op="cumsum")
    >>> [(got[c]["all_gathers"], got[c]["right"]) for c in FULL_TENSOR_CASES]
    [(1, False), (3, True), (3, True)]
    """
    import torch
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.distributed.tensor._redistribute import disable_redistribute_transform_optimization
    from torch.distributed.tensor.debug import CommDebugMode

    from explainers.mesh.simulated import simulated_mesh
    from explainers.mesh.uneven import redistribute_log

    _check_numel(numel)
    if op not in ("full_tensor", "cumsum"):
        raise ValueError(f"op must be 'full_tensor' or 'cumsum', got {op!r}")
    want = (torch.arange(numel) if op == "full_tensor" else torch.arange(numel).cumsum(0)).tolist()
    out = {}
    for case in FULL_TENSOR_CASES:
        with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
            if case != "no flattened mesh":
                mesh["m", "n", "k"]._flatten(FLAT)
            x = distribute_tensor(torch.arange(numel), mesh, [Shard(0)] * 3, src_data_rank=None)
            # redistribute_log: DTensor's "suboptimal" warning is kept off stderr.
            with redistribute_log(), CommDebugMode() as comms, (
                    disable_redistribute_transform_optimization() if "disabled" in case else nullcontext()):
                full = x.full_tensor() if op == "full_tensor" else torch.cumsum(x, 0).to_local()
            held = {r: t.tolist() for r, t in full._local_tensors.items()}
        out[case] = {"all_gathers": sum(comms.get_comm_counts().values()), "rank0": held[0],
                     "right": all(v == want for v in held.values())}
    return out
