"""Drawing a step: every rank's local data as a matrix of matrices, and one line per rank.

The outer (block) dims of a drawing are the root mesh dims, the inner dims the local
data (the layout of :mod:`explainers.render`); a rank holding fewer elements than its
neighbours is padded with :data:`PAD`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from explainers.mesh.steps import Step

__all__ = ["PAD", "describe_step", "rank_listing", "render_step", "stacked_locals"]

#: The cell that pads a rank's local data when ranks hold different sizes.
PAD = "·"


def stacked_locals(step: Step, pad: str = PAD) -> Any:
    """The per-rank locals as one array: mesh coordinate dims, then local dims.

    Ranks with fewer elements are padded with ``pad`` (an object array is
    returned then; an int array otherwise).

    >>> from explainers.mesh.steps import RankState, Step
    >>> step = Step("shard", "", "x = ...", ("k",), (2,), None, None,
    ...             (RankState(0, (0,), ("S(0)",), (2,), [0, 1]), RankState(1, (1,), ("S(0)",), (1,), [2])))
    >>> stacked_locals(step).tolist()
    [[0, 1], [2, '·']]
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

    >>> from explainers.mesh.steps import RankState, Step
    >>> step = Step("shard", "", "x = ...", ("k",), (2,), None, None,
    ...             (RankState(0, (0,), ("S(0)",), (2,), [0, 1]), RankState(1, (1,), ("S(0)",), (1,), [2])))
    >>> print(render_step(step))
    0  1
    2  ·
    """
    from explainers.render import render

    return render(stacked_locals(step, pad), summarize=False)


def rank_listing(step: Step) -> str:
    """One line per rank: rank, mesh coordinate, placements, local shape and values.

    >>> from explainers.mesh.steps import RankState, Step
    >>> step = Step("shard", "", "x = ...", ("k",), (2,), None, None,
    ...             (RankState(0, (0,), ("S(0)",), (2,), [0, 1]), RankState(1, (1,), ("S(0)",), (1,), [2])))
    >>> print(rank_listing(step))
    rank 0  (k=0)  [S(0)]        (2,)   0 1
    rank 1  (k=1)  [S(0)]        (1,)   2
    """
    lines = []
    for r in step.ranks:
        coord = ", ".join(f"{n}={c}" for n, c in zip(step.mesh_dims, r.coordinate, strict=True))
        placements = "local tensor" if r.placements is None else "[" + ", ".join(r.placements) + "]"
        values = " ".join(str(v) for v in _flatten(r.values))
        lines.append(f"rank {r.rank}  ({coord})  {placements:<13} {str(r.shape):<6} {values}")
    return "\n".join(lines)


def describe_step(step: Step) -> str:
    """The step's line of the fragment, the collective it ran, and the drawing.

    >>> from explainers.mesh.steps import RankState, Step
    >>> step = Step("shard", "", "x = ...", ("k",), (2,), None, None,
    ...             (RankState(0, (0,), ("S(0)",), (2,), [0, 1]), RankState(1, (1,), ("S(0)",), (1,), [2])))
    >>> print(describe_step(step))
    x = ...
    <BLANKLINE>
    0  1
    2  ·
    """
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
