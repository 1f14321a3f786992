"""Uneven sizes against DTensor's encodings of a right-to-left sharding, on a 2x2x2 mesh.

The fragment of the mesh page shards one tensor dim right to left: over ``k``, then
``n``, then ``m``.  DTensor can describe that state three ways: ``_StridedShard``
placements made by ``distribute_tensor``, the same placements reached by
``redistribute`` from ``[R, R, R]``, and plain ``[S(0), S(0), S(0)]`` with the
shard order ``k, n, m`` (``DTensorSpec.shard_order``; no public API sets it, so
:func:`layout_table` builds it with ``redistribute_local_tensor``).
:func:`layout_table` lays ``arange(numel)`` out each way, compares it with the
nested chunking (:func:`nested_layout`), and redistributes it back to
``[R, R, R]``.  :func:`padded_strided_split` and :func:`nested_first_split` are the
two ablations of the page: each changes one thing in ``_StridedShard._split_tensor``.

Private PyTorch APIs used (``_StridedShard``, ``DTensorSpec``, ``ShardOrderEntry``,
``redistribute_local_tensor``, ``pad_tensor``, ``Shard._custom_chunk``) are checked on
torch 2.14.1 and 2.15.0.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

__all__ = [
    "ENCODINGS",
    "format_table",
    "gather_inputs",
    "layout_table",
    "layout_tables",
    "nested_first_split",
    "nested_layout",
    "outcome",
    "padded_strided_split",
]

MESH_SHAPE = (2, 2, 2)
MESH_DIMS = ("m", "n", "k")
# The three DTensor encodings of the right-to-left state that layout_table builds.
ENCODINGS = ("distribute", "redistribute", "shard_order")


def _chunks(values: list, n: int) -> list[list]:
    """``torch.chunk`` of a list into ``n`` pieces, with empty pieces appended (as DTensor does)."""
    size = -(-len(values) // n) if values else 0
    pieces = [values[i:i + size] for i in range(0, len(values), size)] if size else []
    return pieces + [[] for _ in range(n - len(pieces))]


def nested_layout(numel: int) -> dict[int, list[int]]:
    """What rank 4m + 2n + k holds when ``range(numel)`` is cut right to left.

    ``torch.chunk`` in two over ``k``, each half in two over ``n``, each quarter in
    two over ``m``: the state the mesh page's fragment reaches after "shard M".

    >>> nested_layout(14)
    {0: [0, 1], 1: [7, 8], 2: [4, 5], 3: [11, 12], 4: [2, 3], 5: [9, 10], 6: [6], 7: [13]}
    """
    out = {}
    for m in range(2):
        for n in range(2):
            for k in range(2):
                piece = _chunks(_chunks(_chunks(list(range(numel)), 2)[k], 2)[n], 2)[m]
                out[4 * m + 2 * n + k] = piece
    return out


def outcome(held: dict[int, list[int]] | str, numel: int) -> str:
    """``right``, ``wrong`` or the error, for what every rank holds after a gather of ``numel``.

    >>> outcome({0: [0, 1, 2], 1: [0, 1, 2]}, 3), outcome({0: [0, 2, 1]}, 3), outcome("E: x", 3)
    ('right', 'wrong', 'E: x')
    """
    if isinstance(held, str):
        return held
    return "right" if all(v == list(range(numel)) for v in held.values()) else "wrong"


def _pad_applied(original: Any) -> Any:
    def split(self, tensor, num_chunks, *, with_padding=True, contiguous=True):
        from torch.distributed.tensor._collective_utils import pad_tensor

        shards, pads = original(self, tensor, num_chunks, with_padding=with_padding,
                                contiguous=contiguous)
        if with_padding:
            shards = [pad_tensor(s, self.dim, p) if p else s for s, p in zip(shards, pads, strict=True)]
        return shards, pads

    return split


@contextmanager
def padded_strided_split() -> Iterator[None]:
    """Within the block, ``_StridedShard._split_tensor(..., with_padding=True)`` pads its pieces.

    In torch 2.14.1 and 2.15.0 it computes the pad sizes but returns the pieces unpadded,
    so ``_StridedShard._shard_tensor`` (the scatter path of ``distribute_tensor``) fails
    its equal-shape check for every uneven split.  This patch applies the pads it computed.

    >>> import torch
    >>> from torch.distributed.tensor.placement_types import _StridedShard
    >>> split = lambda: _StridedShard(0, split_factor=4)._split_tensor(torch.arange(15), 2)
    >>> [len(s) for s in split()[0]], split()[1]
    ([8, 7], [0, 1])
    >>> with padded_strided_split():
    ...     [len(s) for s in split()[0]], split()[1]
    ([8, 8], [0, 1])
    """
    from torch.distributed.tensor.placement_types import _StridedShard

    saved = _StridedShard.__dict__["_split_tensor"]
    _StridedShard._split_tensor = _pad_applied(saved)
    try:
        yield
    finally:
        _StridedShard._split_tensor = saved


def _nested_chunk(tensor: Any, factors: Sequence[int], dim: int) -> list[Any]:
    from torch.distributed.tensor.placement_types import Shard

    if not factors:
        return [tensor]
    return [leaf for piece in Shard._custom_chunk(tensor, factors[0], dim=dim)
            for leaf in _nested_chunk(piece, factors[1:], dim)]


@contextmanager
def nested_first_split() -> Iterator[None]:
    """Within the block, ``_StridedShard`` cuts its ``split_factor`` pieces in nested halves.

    In torch 2.14.1 and 2.15.0 ``_StridedShard._split_tensor`` makes the ``split_factor``
    pieces with one ``torch.chunk(tensor, split_factor)``.  Here a power-of-two split factor
    is made by ``torch.chunk`` in two, then each piece in two, and so on: the split of
    the mesh dims to the right on a mesh of 2s.  The rest of ``_split_tensor`` is unchanged.

    >>> import torch
    >>> from torch.distributed.tensor.placement_types import _StridedShard
    >>> split = lambda: _StridedShard(0, split_factor=4)._split_tensor(torch.arange(14), 2)[0]
    >>> [s.tolist() for s in split()]
    [[0, 1, 4, 5, 8, 9, 12], [2, 3, 6, 7, 10, 11, 13]]
    >>> with nested_first_split():
    ...     [s.tolist() for s in split()]
    [[0, 1, 4, 5, 7, 8, 11, 12], [2, 3, 6, 9, 10, 13]]
    """
    import torch
    from torch.distributed.tensor.placement_types import Shard, _StridedShard

    saved = _StridedShard.__dict__["_split_tensor"]

    def split(self, tensor, num_chunks, *, with_padding=True, contiguous=True):
        sf = self._split_factor_int()
        if sf & (sf - 1):
            raise ValueError(f"nested_first_split handles power-of-two split factors, got {sf}")
        first = _nested_chunk(tensor, [2] * (sf.bit_length() - 1), self.dim)
        second = [Shard._custom_chunk(s, num_chunks, dim=self.dim) for s in first]
        shards = [torch.cat([second[j][i] for j in range(sf)], dim=self.dim)
                  for i in range(num_chunks)]
        if contiguous:
            shards = [s.contiguous() for s in shards]
        pads = []
        if with_padding:
            top = max(s.size(self.dim) for s in shards)
            pads = [top - s.size(self.dim) for s in shards]
        return shards, pads

    _StridedShard._split_tensor = split
    try:
        yield
    finally:
        _StridedShard._split_tensor = saved


@contextmanager
def gather_inputs() -> Iterator[list[list[int]]]:
    """Within the block, record the input sizes of each group of every emulated all-gather.

    Under ``LocalTensorMode`` (torch 2.14.1 and 2.15.0) the functional all-gather is
    ``torch.distributed._local_tensor._c10d._local_functional_all_gather_into_tensor``, a
    ``torch.cat`` of the group's tensors that checks no sizes; a real backend needs one size
    from every rank.  Yields a list that gets, per group of each call, the dim-0 sizes of
    its ranks' inputs, in group order.

    >>> import torch
    >>> from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    >>> from explainers.mesh.simulated import simulated_mesh
    >>> with simulated_mesh((2,), ("m",)) as mesh, gather_inputs() as seen:
    ...     _ = distribute_tensor(torch.arange(3), mesh, [Shard(0)]).redistribute(mesh, [Replicate()])
    >>> seen
    [[2, 2]]
    """
    from torch.distributed._local_tensor import _c10d

    saved = _c10d.__dict__["_local_functional_all_gather_into_tensor"]
    seen: list[list[int]] = []

    def gather(tensor, group_size, group_name):
        # 2.14.1 returns (ranks, offsets, first rank), 2.15.0 (ranks, offsets): the groups
        # are formed as the emulation forms them.
        ranks, offsets = _c10d._prepare_collective_groups(_c10d._resolve_pg_or_name(group_name))[:2]
        for offset in offsets:
            group = [offset + r for r in ranks]
            if all(r in tensor._local_tensors for r in group):
                seen.append([int(tensor._local_tensors[r].shape[0]) for r in group])
        return saved(tensor, group_size, group_name)

    _c10d._local_functional_all_gather_into_tensor = gather
    try:
        yield seen
    finally:
        _c10d._local_functional_all_gather_into_tensor = saved


def _held(x: Any, mesh: Any) -> dict[int, list[int]]:
    from explainers.mesh.steps import snapshot

    return {r: list(v) for r, v in snapshot(x, mesh).locals().items()}


def _back(x: Any, mesh: Any, numel: int) -> dict:
    """Redistribute ``x`` to ``[R, R, R]``: rank 0's values and the outcome."""
    from torch.distributed.tensor import Replicate

    from explainers.mesh.uneven import redistribute, redistribute_log

    # Groups whose all-gather inputs differ in size: a real backend needs one size from all.
    with gather_inputs() as seen:
        try:
            with redistribute_log():
                held = _held(redistribute(x, [Replicate()] * 3), mesh)
        except (RuntimeError, AssertionError) as e:
            return {"rank0": None, "outcome": f"{type(e).__name__}: {str(e).splitlines()[0][:60]}",
                    "unequal": [g for g in seen if len(set(g)) > 1]}
    return {"rank0": held[0], "outcome": outcome(held, numel), "unequal": [g for g in seen if len(set(g)) > 1]}


def _encodings(mesh: Any, numel: int) -> dict[str, Any]:
    import torch
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
    from torch.distributed.tensor._dtensor_spec import DTensorSpec, ShardOrderEntry
    from torch.distributed.tensor._redistribute import redistribute_local_tensor
    from torch.distributed.tensor.placement_types import _StridedShard

    from explainers.mesh.uneven import _per_rank_sizes, redistribute, redistribute_log

    strided = [_StridedShard(0, split_factor=4), _StridedShard(0, split_factor=2), Shard(0)]
    full = DTensor.from_local(torch.arange(numel), mesh, [Replicate()] * 3)
    order = DTensorSpec(mesh, (Shard(0),) * 3, tensor_meta=full._spec.tensor_meta,
                        shard_order=(ShardOrderEntry(tensor_dim=0, mesh_dims=(2, 1, 0)),))
    with _per_rank_sizes(), redistribute_log():
        ordered = redistribute_local_tensor(full._local_tensor, full._spec, order)
        via_redistribute = redistribute(full, strided)
    return {
        "distribute": distribute_tensor(torch.arange(numel), mesh, strided, src_data_rank=None),
        "redistribute": via_redistribute,
        "shard_order": DTensor(ordered, order, requires_grad=False),
    }


def _scatter(mesh: Any, numel: int) -> str:
    """``distribute_tensor``'s default path (a scatter from rank 0): ``same`` or the error."""
    import torch
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.distributed.tensor.placement_types import _StridedShard

    strided = [_StridedShard(0, split_factor=4), _StridedShard(0, split_factor=2), Shard(0)]
    try:
        got = _held(distribute_tensor(torch.arange(numel), mesh, strided), mesh)
    except AssertionError as e:
        return f"AssertionError{': ' + str(e) if str(e) else ''}"
    cut = _held(distribute_tensor(torch.arange(numel), mesh, strided, src_data_rank=None), mesh)
    return "same" if got == cut else "different"


_ABLATIONS = {None: None, "padded": padded_strided_split, "nested": nested_first_split}


def layout_table(sizes: Sequence[int], ablation: str | None = None) -> list[dict]:
    """One JSON-able row per size: each encoding's layout and what ``[R, R, R]`` gives back.

    Opens its own simulated 2x2x2 mesh (``m``, ``n``, ``k``).  Each row has ``numel``,
    ``nested`` (:func:`nested_layout`), ``scatter`` (``distribute_tensor`` from rank 0,
    against the split without scatter) and, for ``distribute``, ``redistribute`` and
    ``shard_order``: ``layout`` (rank -> values), ``is_nested`` and ``back`` (rank 0's
    values, the :func:`outcome`, and ``unequal``: the input sizes of each all-gather group
    whose ranks sent different sizes, from :func:`gather_inputs`).  ``ablation`` is ``None``, ``"padded"``
    (:func:`padded_strided_split`) or ``"nested"`` (:func:`nested_first_split`).

    >>> row = layout_table([14])[0]
    >>> row["distribute"]["is_nested"], row["distribute"]["back"]["outcome"], row["scatter"]
    (False, 'wrong', 'AssertionError')
    >>> row["distribute"]["back"]["rank0"]
    [0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 0, 13]
    >>> [row[e]["back"]["outcome"] for e in ("redistribute", "shard_order")]
    ['right', 'right']
    >>> layout_table([14], ablation="nested")[0]["distribute"]["back"]["outcome"]
    'right'
    """
    from explainers.mesh.simulated import simulated_mesh

    if ablation not in _ABLATIONS:
        raise ValueError(f"ablation must be one of {sorted(map(str, _ABLATIONS))}, got {ablation!r}")
    rows = []
    with simulated_mesh(MESH_SHAPE, MESH_DIMS) as mesh:
        patch = _ABLATIONS[ablation]
        with patch() if patch else _nothing():
            for numel in sizes:
                nested = nested_layout(numel)
                row: dict[str, Any] = {"numel": numel, "nested": nested, "scatter": _scatter(mesh, numel)}
                for name, x in _encodings(mesh, numel).items():
                    layout = _held(x, mesh)
                    row[name] = {"layout": layout, "is_nested": layout == nested,
                                 "back": _back(x, mesh, numel)}
                rows.append(row)
    # JSON turns int keys into strings; do it here too, so both releases compare equal.
    return [_json_keys(r) for r in rows]


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def _json_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_keys(v) for v in value]
    return value


def layout_tables(sizes: Sequence[int]) -> dict[str, list[dict]]:
    """:func:`layout_table` as torch ships it (``"none"``) and under each ablation.

    One call, so that :func:`explainers.releases.run_under` starts one process per release.
    """
    return {str(a).lower(): layout_table(sizes, a) for a in _ABLATIONS}


def format_table(rows: Sequence[dict]) -> str:
    """The rows of :func:`layout_table` as text: per size, each encoding and its way back.

    ``=`` / ``≠``: the encoding puts the same / other elements on the ranks as the nested
    chunking; after it, what redistributing to ``[R, R, R]`` gives every rank.

    >>> row = {"numel": 5, "nested": {"0": [0], "1": [1, 2]}, "scatter": "same"}
    >>> row.update({e: {"is_nested": e != "distribute",
    ...                 "back": {"outcome": "wrong" if e == "distribute" else "right"}}
    ...             for e in ENCODINGS})
    >>> print(format_table([row]))
    numel  nested sizes by rank  distribute_tensor  redistribute  shard_order  scatter from 0
        5  1 2                   ≠ wrong            = right       = right      same
    """
    def cell(enc: dict) -> str:
        back = enc["back"]["outcome"]
        return ("=" if enc["is_nested"] else "≠") + " " + back.split(":")[0]

    lines = ["numel  nested sizes by rank  distribute_tensor  redistribute  shard_order  scatter from 0"]
    for r in rows:
        sizes = " ".join(str(len(v)) for v in r["nested"].values())
        lines.append(f"{r['numel']:>5}  {sizes:<20}  {cell(r['distribute']):<17}  "
                     f"{cell(r['redistribute']):<12}  {cell(r['shard_order']):<11}  {r['scatter']}")
    return "\n".join(lines)
