"""Simulated DeviceMesh worlds: run real DTensor code for N ranks in one process.

PyTorch ships two pieces that together let one CPU process play every rank of
an SPMD program:

* the ``"fake"`` process-group backend, which gives ``torch.distributed`` a
  world size without any peers, and
* ``torch.distributed._local_tensor.LocalTensorMode(N)``, a dispatch mode under
  which every op runs once per simulated rank and collectives become local math.

Both are *global* state.  :func:`simulated_world` and :func:`simulated_mesh`
open them together and always close them together, so a page or a test can open
another simulated world afterwards, or a real process group.

Both rely on private PyTorch APIs (``_local_tensor``), checked on torch 2.14.1 and 2.15.0
(:data:`explainers.releases.SUPPORTED`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from explainers.checks import is_int

__all__ = [
    "RankState",
    "Step",
    "from_local",
    "make_mesh",
    "merge_steps",
    "per_rank_int",
    "rank_local",
    "rank_listing",
    "rank_states",
    "redistribute",
    "redistribute_log",
    "render_step",
    "simulated_mesh",
    "simulated_world",
    "snapshot",
    "describe_step",
    "walkthrough",
]


def _check_world_size(world_size: object) -> int:
    # bool is an int subclass; `simulated_world(True)` is a bug, not a world of 1.
    if not is_int(world_size):
        raise TypeError(f"world_size must be an int, got {type(world_size).__name__}")
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    return world_size


def _refuse_if_busy() -> None:
    import torch.distributed as dist
    from torch.distributed._local_tensor import local_tensor_mode

    if dist.is_available() and dist.is_initialized():
        raise RuntimeError(
            "a process group is already initialized (backend "
            f"{dist.get_backend()!r}, world size {dist.get_world_size()}); "
            "simulated_world() will not replace it. Close the enclosing "
            "simulated_world()/simulated_mesh(), or call "
            "torch.distributed.destroy_process_group(), first."
        )
    if local_tensor_mode() is not None:
        raise RuntimeError("a LocalTensorMode is already active; simulated worlds cannot be nested")


@contextmanager
def simulated_world(world_size: int) -> Iterator[Any]:
    """Simulate a ``world_size``-rank world in this process.

    Initializes the ``"fake"`` process group (rank 0 of ``world_size``) and
    enters ``LocalTensorMode(world_size)``; yields the mode.  On exit, normal or
    by exception, it leaves the mode and destroys the process group, so
    ``torch.distributed.is_initialized()`` is ``False`` again.

    Raises ``RuntimeError`` if a process group is already initialized or a
    ``LocalTensorMode`` is active (this includes nesting two simulated worlds).

    >>> import torch, torch.distributed as dist
    >>> with simulated_world(4) as mode:
    ...     x = torch.ones(2)                     # runs once per simulated rank
    ...     sorted(x._local_tensors), dist.get_world_size()
    ([0, 1, 2, 3], 4)
    >>> dist.is_initialized()
    False
    >>> with simulated_world(2):
    ...     with simulated_world(2):
    ...         pass
    Traceback (most recent call last):
    ...
    RuntimeError: a process group is already initialized (backend 'fake', world size 2); ...
    """
    world_size = _check_world_size(world_size)
    import torch.distributed as dist
    from torch.distributed._local_tensor import LocalTensorMode

    _refuse_if_busy()
    dist.init_process_group("fake", rank=0, world_size=world_size)
    try:
        with LocalTensorMode(world_size) as mode:
            yield mode
    finally:
        # Always tear down, even when the body raised: the process group is
        # global and would make every later simulated_world() refuse to start.
        if dist.is_initialized():
            dist.destroy_process_group()


def _check_shape_names(shape: object, names: object) -> tuple[tuple[int, ...], tuple[str, ...]]:
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, Sequence) or isinstance(shape, str):
        raise TypeError(f"mesh shape must be a tuple of ints, got {shape!r}")
    shape = tuple(shape)
    if not shape:
        raise ValueError("mesh shape must have at least one dimension")
    for s in shape:
        if not is_int(s):
            raise TypeError(f"mesh shape must be a tuple of ints, got {shape!r}")
        if s < 1:
            raise ValueError(f"mesh dimension sizes must be at least 1, got {shape!r}")
    if isinstance(names, str):
        # ("m") is just "m": a common slip for a 1-tuple.
        names = (names,)
    if not isinstance(names, Sequence):
        raise TypeError(f"mesh dim names must be a tuple of str, got {names!r}")
    names = tuple(names)
    for n in names:
        if not isinstance(n, str) or not n:
            raise TypeError(f"mesh dim names must be non-empty strings, got {names!r}")
    if len(names) != len(shape):
        raise ValueError(
            f"mesh shape {shape} has {len(shape)} dims but {len(names)} names were given: {names}"
        )
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"mesh dim names must be unique; repeated: {', '.join(dupes)}")
    return shape, names


def make_mesh(shape: Sequence[int], names: Sequence[str], device_type: str = "cpu") -> Any:
    """``init_device_mesh(device_type, shape, mesh_dim_names=names)``, with checks.

    Works in any initialized process group: a simulated one or a real one (the
    ``torchrun`` entry point uses it too).  The product of ``shape`` must equal
    the world size, and names must be unique, one per mesh dim.

    >>> with simulated_world(4):
    ...     make_mesh((2, 2), ("dp", "tp")).mesh_dim_names
    ('dp', 'tp')
    >>> with simulated_world(4):
    ...     make_mesh((2, 3), ("dp", "tp"))
    Traceback (most recent call last):
    ...
    ValueError: mesh shape (2, 3) has 6 ranks but the world size is 4
    """
    shape, names = _check_shape_names(shape, names)
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    if not dist.is_initialized():
        raise RuntimeError(
            "make_mesh() needs an initialized process group; use simulated_mesh() "
            "or torch.distributed.init_process_group() first"
        )
    world = dist.get_world_size()
    if math.prod(shape) != world:
        raise ValueError(
            f"mesh shape {shape} has {math.prod(shape)} ranks but the world size is {world}"
        )
    return init_device_mesh(device_type, shape, mesh_dim_names=names)


@contextmanager
def simulated_mesh(
    shape: Sequence[int], names: Sequence[str], world_size: int | None = None
) -> Iterator[Any]:
    """A named ``DeviceMesh`` of ``shape`` over a :func:`simulated_world`.

    ``world_size`` defaults to the product of ``shape``; if given, it must
    match.  Argument errors are raised before any global state is touched.

    >>> with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
    ...     mesh.shape, mesh.mesh_dim_names, mesh["m", "k"].shape
    ((2, 2, 2), ('m', 'n', 'k'), (2, 2))
    >>> with simulated_mesh((2, 2), ("m", "m")):
    ...     pass
    Traceback (most recent call last):
    ...
    ValueError: mesh dim names must be unique; repeated: m
    """
    shape, names = _check_shape_names(shape, names)
    if world_size is None:
        world_size = math.prod(shape)
    world_size = _check_world_size(world_size)
    if math.prod(shape) != world_size:
        raise ValueError(
            f"mesh shape {shape} has {math.prod(shape)} ranks but the world size is {world_size}"
        )
    with simulated_world(world_size):
        yield make_mesh(shape, names)


# -- uneven-safe from_local and redistribute ----------------------------------------


def _placements(mesh: Any, placements: Sequence[Any] | None) -> tuple[Any, ...]:
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.placement_types import Placement

    if placements is None:
        return (Replicate(),) * mesh.ndim
    placements = tuple(placements)
    if len(placements) != mesh.ndim:
        raise ValueError(
            f"{len(placements)} placements given for a {mesh.ndim}-D mesh "
            f"{mesh.mesh_dim_names}: one placement per mesh dim, read left to right"
        )
    for p in placements:
        if not isinstance(p, Placement):
            raise TypeError(
                f"placements must be Shard(d)/Replicate()/Partial() objects, got {p!r}"
                + (" (write Shard(0), not Shard)" if isinstance(p, type) else "")
            )
    return placements


def _check_shardable(shape: Sequence[int], placements: Sequence[Any], names: Any) -> None:
    for i, p in enumerate(placements):
        if p.is_shard() and not -len(shape) <= p.dim < len(shape):
            name = names[i] if names else i
            raise ValueError(
                f"placement {p} on mesh dim {name!r} shards tensor dim {p.dim}, but the "
                f"tensor has {len(shape)} dim(s) (shape {tuple(shape)})"
            )


def from_local(local: Any, mesh: Any, placements: Sequence[Any] | None = None) -> Any:
    """``DTensor.from_local`` that also works for uneven (``torch.chunk``-style) shards.

    ``DTensor.from_local`` assumes even shards: its global size along a sharded
    dim is local size x mesh size.  With 15 elements on 2 ranks the locals are 8
    and 7, so ranks disagree on the global shape and a later all-gather fails
    (simulated: ``Expected cond to be True`` in ``Shard._maybe_unpad_tensor``;
    real gloo: gloo's size check aborts the process of a rank that receives
    more than it expected).  Here the global shape comes from
    the real local sizes, all-gathered by PyTorch's
    ``compute_global_tensor_shape`` one sharded mesh dim at a time (it supports
    only a 1-D mesh and one placement in torch 2.14.1 and 2.15.0), innermost mesh dim
    first, and is passed to ``from_local`` with a contiguous stride.

    ``placements`` defaults to all-Replicate, which on a submesh "forgets" the
    mesh dims left out: each slice becomes its own SPMD program.

    >>> import torch
    >>> from torch.distributed.tensor import Shard
    >>> with simulated_mesh((2,), ("k",)) as mesh:
    ...     x = from_local(rank_local([[0, 1, 2], [3, 4]]), mesh, [Shard(0)])
    ...     x.shape, x.full_tensor().tolist() == [0, 1, 2, 3, 4]
    (torch.Size([5]), True)
    """
    import torch
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._utils import compute_global_tensor_shape

    if not isinstance(local, torch.Tensor):
        raise TypeError(
            f"from_local expects a torch.Tensor local shard, got {type(local).__name__}"
        )
    placements = _placements(mesh, placements)
    names = mesh.mesh_dim_names
    _check_shardable(local.shape, placements, names)
    shape = local.shape
    if any(p.is_shard() for p in placements):
        if names is None:
            raise ValueError("from_local needs a mesh with mesh_dim_names to slice 1-D submeshes")
        # Innermost mesh dim first: with [S(0), S(0)] the last mesh dim splits
        # the chunks that the first one made, so its sizes are summed first.
        for i in reversed(range(mesh.ndim)):
            if placements[i].is_shard():
                sub = mesh[names[i]] if mesh.ndim > 1 else mesh
                shape = compute_global_tensor_shape(shape, sub, [placements[i]])
    stride, acc = [], 1
    for size in reversed(shape):
        stride.append(acc)
        acc = acc * size
    with _per_rank_sizes():
        return DTensor.from_local(
            local, mesh, placements, shape=torch.Size(shape), stride=tuple(reversed(stride))
        )


@contextmanager
def _per_rank_sizes() -> Iterator[None]:
    """Let DTensor handle sizes that differ per simulated rank, for one call.

    Under ``LocalTensorMode`` a size that differs between ranks (after a
    ``from_local`` that forgot a mesh dim over uneven shards: 8 on k=0, 7 on
    k=1) is a ``SymInt`` backed by ``LocalIntNode``.  In torch 2.14.1 and 2.15.0 the
    redistribute planner and transform-info caches hash the ``DTensorSpec``
    holding it and fail with ``TypeError: unhashable type: non-nested SymInt``.
    ``_redistribute._are_we_tracing() -> True`` selects their uncached paths
    (its one other use there also requires ``compile_on_one_rank``).  Under a
    real process group sizes are plain ints, so nothing is patched.
    """
    from torch.distributed._local_tensor import local_tensor_mode

    if local_tensor_mode() is None:
        yield
        return
    import torch.distributed.tensor._redistribute as _redistribute

    saved = _redistribute._are_we_tracing
    _redistribute._are_we_tracing = lambda: True
    try:
        yield
    finally:
        _redistribute._are_we_tracing = saved


def redistribute(x: Any, placements: Sequence[Any], log: list | None = None) -> Any:
    """``x.redistribute(placements=placements)``, safe for per-rank sizes.

    If ``log`` is a list, a :class:`Redistribution` is appended to it: the mesh
    it ran on, the mesh dims whose placement changed, and the collectives that
    ran (counted by ``CommDebugMode``).

    >>> from torch.distributed.tensor import Replicate, Shard
    >>> with simulated_mesh((2,), ("k",)) as mesh:
    ...     x = from_local(rank_local([[0, 1, 2], [3, 4]]), mesh, [Shard(0)])
    ...     log = []
    ...     y = redistribute(x, [Replicate()], log)
    ...     y.to_local()._local_tensors[1].tolist(), log[0].comms, log[0].changed
    ([0, 1, 2, 3, 4], {'all_gather_into_tensor': 1}, ('k',))
    """
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.debug import CommDebugMode

    if not isinstance(x, DTensor):
        raise TypeError(f"redistribute expects a DTensor, got {type(x).__name__}")
    placements = _placements(x.device_mesh, placements)
    _check_shardable(x.shape, placements, x.device_mesh.mesh_dim_names)
    with _per_rank_sizes(), CommDebugMode() as mode:
        out = x.redistribute(placements=placements)
    if log is not None:
        names = x.device_mesh.mesh_dim_names or tuple(str(i) for i in range(x.device_mesh.ndim))
        comms: Counter = Counter()
        for op, n in mode.get_comm_counts().items():
            comms[str(op).rsplit(".", 1)[-1]] += n
        log.append(
            Redistribution(
                mesh_dims=tuple(names),
                changed=tuple(
                    n for n, a, b in zip(names, x.placements, placements, strict=True) if a != b
                ),
                src=tuple(_placement_str(p) for p in x.placements),
                dst=tuple(_placement_str(p) for p in placements),
                comms=dict(sorted(comms.items())),
            )
        )
    return out


@dataclass(frozen=True)
class Redistribution:
    """One ``redistribute``: on which mesh, which mesh dims changed, what collectives ran."""

    mesh_dims: tuple[str, ...]
    changed: tuple[str, ...]
    src: tuple[str, ...]
    dst: tuple[str, ...]
    comms: dict[str, int]

    def sentence(self) -> str:
        """A sentence saying which collective ran on which submesh.

        >>> Redistribution(("n", "k"), ("k",), ("R", "S(0)"), ("R", "R"),
        ...                {"all_gather_into_tensor": 1}).sentence()
        'all_gather_into_tensor ×1 over mesh dim k of mesh["n", "k"] ([R, S(0)] → [R, R]).'
        """
        mesh = "mesh[" + ", ".join(f'"{n}"' for n in self.mesh_dims) + "]"
        move = f"[{', '.join(self.src)}] → [{', '.join(self.dst)}]"
        dims = ", ".join(self.changed) or "none"
        if not self.comms:
            return (
                f"No collective: over mesh dim {dims} of {mesh} each rank keeps its own "
                f"chunk of what it already holds ({move})."
            )
        ops = ", ".join(f"{op} ×{n}" for op, n in self.comms.items())
        dim_word = "dims" if len(self.changed) > 1 else "dim"
        return f"{ops} over mesh {dim_word} {dims} of {mesh} ({move})."


@contextmanager
def redistribute_log() -> Iterator[list[str]]:
    """Collect what DTensor's redistribute logs, instead of printing it to stderr.

    In torch 2.14.1 and 2.15.0 ``torch.distributed.tensor._redistribute`` logs a warning
    (once per mesh and dims) when a multi-dim change runs as several
    sequential collectives.  Inside this block those messages are appended to
    the yielded list and do not propagate to torch's stderr handler.

    >>> import logging
    >>> with redistribute_log() as messages:
    ...     logging.getLogger("torch.distributed.tensor._redistribute").warning("hi %d", 1)
    >>> messages
    ['hi 1']
    """
    import logging

    logger = logging.getLogger("torch.distributed.tensor._redistribute")
    messages: list[str] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    handler, propagate = _Keep(logging.INFO), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def rank_local(values_per_rank: Sequence[Sequence[Any]]) -> Any:
    """A local tensor holding ``values_per_rank[r]`` on rank ``r``.

    Under a simulated world this is a ``LocalTensor`` (one tensor per rank);
    under a real process group it is this rank's tensor.

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


# -- per-rank view of a step ----------------------------------------------------------


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


def _placement_str(p: Any) -> str:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.placement_types import _StridedShard

    if isinstance(p, _StridedShard):
        return f"_S({p.dim}, sf={p.split_factor})"
    if isinstance(p, Shard):
        return f"S({p.dim})"
    if isinstance(p, Replicate):
        return "R"
    return str(p)


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


# -- showing a step -------------------------------------------------------------------

#: The cell that pads a rank's local data when ranks hold different sizes.
PAD = "·"


def stacked_locals(step: Step, pad: str = PAD) -> Any:
    """The per-rank locals as one array: mesh coordinate dims, then local dims.

    Ranks with fewer elements are padded with ``pad`` (an object array is
    returned then; an int array otherwise).
    """
    import numpy as np

    expected = math.prod(step.mesh_shape)
    if len(step.ranks) != expected:
        raise ValueError(
            f"step {step.label!r} holds {len(step.ranks)} of {expected} ranks; "
            "merge the per-process runs with merge_steps() first"
        )
    ndims = {len(r.shape) for r in step.ranks}
    if len(ndims) != 1:
        raise ValueError(f"step {step.label!r}: ranks hold locals of different ndim")
    full = tuple(max(r.shape[d] for r in step.ranks) for d in range(ndims.pop()))
    even = all(r.shape == full for r in step.ranks)
    out = np.full(step.mesh_shape + full, pad, dtype=object)
    for r in step.ranks:
        out[r.coordinate + tuple(slice(0, n) for n in r.shape)] = np.array(
            r.values, dtype=object
        ).reshape(r.shape)
    return out.astype(np.int64) if even and out.size else out


def render_step(step: Step, pad: str = PAD) -> str:
    """The matrix-of-matrices drawing of every rank's local data after ``step``.

    The outer (block) dims are the root mesh dims, the inner dims the local
    data: on a 2x2x2 ("m", "n", "k") mesh with 1-D locals, each row is one
    rank's local tensor, rows go along k, side-by-side blocks along n and
    stacked blocks along m.
    """
    from explainers.render import render

    return render(stacked_locals(step, pad), summarize=False)


def rank_listing(step: Step) -> str:
    """One line per rank: rank, mesh coordinate, placements, local shape and values."""
    lines = []
    for r in step.ranks:
        coord = ", ".join(f"{n}={c}" for n, c in zip(step.mesh_dims, r.coordinate, strict=True))
        placements = "local tensor" if r.placements is None else "[" + ", ".join(r.placements) + "]"
        values = " ".join(str(v) for v in _flatten(r.values))
        lines.append(f"rank {r.rank}  ({coord})  {placements:<13} {str(r.shape):<6} {values}")
    return "\n".join(lines)


def describe_step(step: Step) -> str:
    """The step's line of the fragment, the collective it ran, and the drawing."""
    parts = [step.code]
    if step.redistribution is not None:
        parts.append(step.redistribution.sentence())
    parts.append(render_step(step))
    return "\n\n".join(parts)


def _flatten(values: Any) -> Iterator[Any]:
    if isinstance(values, list):
        for v in values:
            yield from _flatten(v)
    else:
        yield values


# -- the walkthrough ------------------------------------------------------------------

#: Edward Z. Yang's mesh-elimination fragment: (phase, label, line), verbatim but for the size.
FRAGMENT: tuple[tuple[str, str, str], ...] = (
    ("Start", "start", 'x = DTensor.from_local(arange_nd(15), mesh["m", "n", "k"], [R, R, R])'),
    (
        "Eliminate M",
        "shard K",
        'x = DTensor.from_local(x.redistribute(placements=[R, R, S(0)]).to_local(), mesh["m", "n"])',
    ),
    (
        "Eliminate M",
        "shard N",
        'x = DTensor.from_local(x.redistribute(placements=[R, S(0)]).to_local(), mesh["m"])',
    ),
    ("Eliminate M", "shard M", "x = x.redistribute(placements=[S(0)]).to_local()"),
    (
        "Eliminate M",
        "unshard N",
        'x = DTensor.from_local(x, mesh["n"], [S(0)]).redistribute(placements=[R])',
    ),
    (
        "Eliminate M",
        "unshard K",
        'x = DTensor.from_local(x.to_local(), mesh["n", "k"], [R, S(0)]).redistribute(placements=[R, R])',
    ),
    (
        "Eliminate N",
        "shard K",
        'x = DTensor.from_local(x.redistribute(placements=[R, S(0)]).to_local(), mesh["n"])',
    ),
    ("Eliminate N", "shard N", "x = x.redistribute(placements=[S(0)]).to_local()"),
)


def walkthrough(mesh: Any, numel: int = 15) -> list[Step]:
    """Run the mesh-elimination fragment (:data:`FRAGMENT`) on ``mesh``; record every step.

    ``mesh`` must have dims named ``("m", "n", "k")``; its world may be
    simulated (:func:`simulated_mesh`) or real (``torchrun``): the code is the
    same.  The fragment runs line for line, with ``DTensor.from_local`` and
    ``x.redistribute`` replaced by this module's :func:`from_local` and
    :func:`redistribute`, so uneven sizes such as 15 work too.

    >>> with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
    ...     steps = walkthrough(mesh, 15)
    >>> [s.label for s in steps]
    ['start', 'shard K', 'shard N', 'shard M', 'unshard N', 'unshard K', 'shard K', 'shard N']
    >>> steps[3].locals()[7], steps[-1].locals()[7]
    ([14], [14])
    """
    from torch.distributed.tensor import Replicate, Shard

    from explainers.render import arange_nd

    if not is_int(numel) or numel < 1:
        raise ValueError(f"numel must be a positive int, got {numel!r}")
    if tuple(mesh.mesh_dim_names or ()) != ("m", "n", "k"):
        raise ValueError(
            f'the walkthrough needs a 3-D mesh named ("m", "n", "k"), got {mesh.mesh_dim_names}'
        )
    R, S = Replicate(), Shard
    steps: list[Step] = []

    def record(x: Any, log: list) -> None:
        phase, label, code = FRAGMENT[len(steps)]
        steps.append(
            Step(
                label=label,
                phase=phase,
                code=code.replace("arange_nd(15)", f"arange_nd({numel})"),
                mesh_dims=tuple(mesh.mesh_dim_names),
                mesh_shape=tuple(mesh.shape),
                submesh=tuple(x.device_mesh.mesh_dim_names) if hasattr(x, "device_mesh") else None,
                redistribution=log[0] if log else None,
                ranks=rank_states(x, mesh),
            )
        )
        log.clear()

    log: list = []
    x = from_local(arange_nd(numel).to(mesh.device_type), mesh["m", "n", "k"], [R, R, R])
    record(x, log)
    # Eliminate M
    x = from_local(redistribute(x, [R, R, S(0)], log).to_local(), mesh["m", "n"])  # shard K
    record(x, log)
    x = from_local(redistribute(x, [R, S(0)], log).to_local(), mesh["m"])  # shard N
    record(x, log)
    x = redistribute(x, [S(0)], log).to_local()  # shard M
    record(x, log)
    x = redistribute(from_local(x, mesh["n"], [S(0)]), [R], log)  # unshard N
    record(x, log)
    x = redistribute(from_local(x.to_local(), mesh["n", "k"], [R, S(0)]), [R, R], log)  # unshard K
    record(x, log)
    # Eliminate N
    x = from_local(redistribute(x, [R, S(0)], log).to_local(), mesh["n"])  # shard K
    record(x, log)
    x = redistribute(x, [S(0)], log).to_local()  # shard N
    record(x, log)
    return steps
