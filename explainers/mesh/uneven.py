"""Uneven-safe ``from_local`` and ``redistribute``: DTensor ops for shards whose sizes differ.

:func:`from_local` passes the real global shape to ``DTensor.from_local`` (which otherwise
assumes even shards); :func:`redistribute` runs ``x.redistribute`` with the per-rank-size
workaround :func:`_per_rank_sizes` and records what it ran (:class:`Redistribution`).
Both work in a simulated world (:mod:`explainers.mesh.simulated`) and under a real
process group.  Private PyTorch APIs used are named where they are used; they are
checked on torch 2.14.1 and 2.15.0 (:data:`explainers.releases.SUPPORTED`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = ["Redistribution", "from_local", "redistribute", "redistribute_log"]


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

    >>> from torch.distributed.tensor import Shard
    >>> from explainers.mesh.simulated import simulated_mesh
    >>> from explainers.mesh.steps import rank_local
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
    >>> from explainers.mesh.simulated import simulated_mesh
    >>> from explainers.mesh.steps import rank_local
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
