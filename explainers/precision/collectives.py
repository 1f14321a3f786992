"""The collectives dimension: all-reduce the same bf16 gradients with communication in bf16 or fp32.

Runs a real ``torch.distributed.all_reduce`` in a simulated world
(:func:`explainers.mesh.simulated.simulated_world`, PyTorch's ``"fake"`` process group
plus ``LocalTensorMode``).  ``LocalTensorMode`` (torch 2.14.1 and 2.15.0) reduces with
``functools.reduce(operator.add, per_rank_tensors)``
(``_local_reduce`` in ``torch/distributed/_local_tensor/_c10d.py``; checked
bit for bit by :func:`allreduce_matches_fold`): a chain of ``world_size - 1``
additions, each rounded to the tensor's dtype.  A ring reduce-scatter adds each
chunk in such a chain (starting at a different rank per chunk).  A pairwise
order does the same number of additions, ``world_size - 1`` per element, but
each rank's value passes through only about ``log2(world_size)`` of them
instead of up to ``world_size - 1``; :func:`pairwise_sum` emulates that order
with plain tensor additions (it is not a collective, and not NCCL's tree
algorithm).

>>> e = allreduce_errors(4, n=64)
>>> e["bf16 comm"] > e["fp32 comm"]
True
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from explainers.checks import is_int

__all__ = [
    "rank_gradients",
    "allreduce",
    "allreduce_matches_fold",
    "pairwise_sum",
    "allreduce_errors",
    "allreduce_error_table",
    "fp32_inexact_counts",
    "bf16_avg_scale_bias",
    "avg_errors",
    "nccl_wheel",
    "plot_allreduce_errors",
    "figure_svg",
]

_VARIANTS = (
    "bf16 comm",
    "bf16, pairwise order",
    "fp32 comm, result rounded to bf16",
    "fp32 comm",
)


def rank_gradients(world_size: int, n: int = 4096, seed: int = 0, shared: float = 0.0) -> dict[int, torch.Tensor]:
    """One bf16 gradient of ``n`` N(0, 1) values per rank, reproducible from ``seed``.

    bf16 because that is what a backward in bf16 (FSDP2 ``param_dtype=torch.bfloat16``)
    produces; the reduction is what ``reduce_dtype`` decides.  With ``shared = c``
    (``0 <= c < 1``) rank ``r``'s gradient is ``c * s + sqrt(1 - c**2) * e_r`` with
    ``s`` and every ``e_r`` independent N(0, 1): still N(0, 1) per element, and two
    ranks' gradients correlate at ``c**2``, as when every rank sees similar data.
    ``shared = 0`` (the default) draws exactly what it drew before ``shared`` existed.

    >>> g = rank_gradients(2, n=3)
    >>> sorted(g), g[0].dtype, tuple(g[1].shape)
    ([0, 1], torch.bfloat16, (3,))
    >>> c = rank_gradients(64, n=4096, shared=0.99)
    >>> round(float(torch.corrcoef(torch.stack([c[0].float(), c[1].float()]))[0, 1]), 2)
    0.98
    """
    if not is_int(world_size) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not 0.0 <= shared < 1.0:
        raise ValueError(f"shared must be in [0, 1), got {shared!r}")
    g = torch.Generator().manual_seed(seed)
    if shared == 0.0:
        return {r: torch.randn(n, generator=g).bfloat16() for r in range(world_size)}
    s = torch.randn(n, generator=g)
    noise = (1.0 - shared * shared) ** 0.5
    return {r: (shared * s + noise * torch.randn(n, generator=g)).bfloat16() for r in range(world_size)}


def allreduce(per_rank: dict[int, torch.Tensor], comm_dtype: torch.dtype) -> torch.Tensor:
    """SUM all-reduce of ``per_rank`` in a simulated world, communicating in ``comm_dtype``.

    Returns rank 0's result (every rank holds the same one), in ``comm_dtype``.

    >>> import torch
    >>> allreduce({0: torch.tensor([1.0]), 1: torch.tensor([2.0])}, torch.float32).tolist()
    [3.0]
    """
    import torch.distributed as dist
    from torch.distributed._local_tensor import LocalTensor

    from explainers.mesh.simulated import simulated_world

    if comm_dtype not in (torch.bfloat16, torch.float16, torch.float32, torch.float64):
        raise ValueError(f"comm_dtype must be a floating dtype, got {comm_dtype}")
    world_size = len(per_rank)
    if sorted(per_rank) != list(range(world_size)):
        raise ValueError(f"per_rank must be keyed 0..{world_size - 1}, got {sorted(per_rank)}")
    with simulated_world(world_size):
        t = LocalTensor({r: v.detach().to(comm_dtype).clone() for r, v in per_rank.items()})
        dist.all_reduce(t)
        results = [t._local_tensors[r] for r in range(world_size)]
        out = results[0].clone()
        # A real all-reduce leaves every rank with the same bits; check the simulation does.
        if not all(torch.equal(out, other) for other in results[1:]):
            raise AssertionError("simulated all_reduce left ranks with different results")
    return out


def allreduce_matches_fold(world_size: int, n: int = 4096, seed: int = 0) -> dict[str, bool]:
    """Is the simulated bf16 all-reduce bitwise a left fold of the ranks' tensors?

    Compares :func:`allreduce` of :func:`rank_gradients` in bf16 with
    ``functools.reduce(operator.add, ...)`` over ranks ``0, 1, ..., N - 1``
    (``"rank order"``) and over the reversed ranks (``"reversed order"``).

    >>> allreduce_matches_fold(4, n=256)
    {'rank order': True, 'reversed order': False}
    """
    import functools
    import operator

    grads = rank_gradients(world_size, n, seed)
    out = allreduce(grads, torch.bfloat16)
    ranks = [grads[r] for r in range(world_size)]
    return {
        "rank order": torch.equal(out, functools.reduce(operator.add, ranks)),
        "reversed order": torch.equal(out, functools.reduce(operator.add, ranks[::-1])),
    }


def pairwise_sum(per_rank: dict[int, torch.Tensor], comm_dtype: torch.dtype) -> torch.Tensor:
    """Sum the ranks' tensors in pairs, level by level, every partial sum rounded to ``comm_dtype``.

    The order of a binary reduction tree, emulated with tensor additions.

    >>> import torch
    >>> g = {0: torch.tensor([256.0]), 1: torch.tensor([1.0]), 2: torch.tensor([1.0]),
    ...      3: torch.tensor([1.0])}
    >>> pairwise_sum(g, torch.bfloat16).item()   # (256 + 1) + (1 + 1): 256 + 2
    258.0
    """
    if not per_rank:
        raise ValueError("pairwise_sum needs at least one rank")
    level = [per_rank[r].detach().to(comm_dtype) for r in sorted(per_rank)]
    while len(level) > 1:
        level = [level[i] + level[i + 1] if i + 1 < len(level) else level[i]
                 for i in range(0, len(level), 2)]
    return level[0]


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm())


def allreduce_errors(world_size: int, n: int = 4096, seed: int = 0, shared: float = 0.0) -> dict[str, float]:
    """Relative error ``||out - ref|| / ||ref||`` of three ways to all-reduce the same bf16 gradients.

    * ``"bf16 comm"``: reduce in bf16 (``reduce_dtype=torch.bfloat16``), the chain order;
    * ``"bf16, pairwise order"``: the same additions in bf16, in the order of a tree
      (:func:`pairwise_sum`);
    * ``"fp32 comm"``: cast to fp32, reduce in fp32 (``reduce_dtype=torch.float32``);
    * ``"fp32 comm, result rounded to bf16"``: the same, then one rounding to bf16,
      the floor for any result stored in bf16.

    The reference is the fp64 sum of the same bf16 gradients, drawn by
    :func:`rank_gradients` (``shared``: how much of them the ranks share).

    >>> e = allreduce_errors(2, n=64)
    >>> e["fp32 comm"]
    0.0
    """
    grads = rank_gradients(world_size, n, seed, shared)
    ref = torch.stack([g.double() for g in grads.values()]).sum(0)
    bf16 = allreduce(grads, torch.bfloat16)
    fp32 = allreduce(grads, torch.float32)
    return {
        "bf16 comm": _rel_err(bf16, ref),
        "bf16, pairwise order": _rel_err(pairwise_sum(grads, torch.bfloat16), ref),
        "fp32 comm, result rounded to bf16": _rel_err(fp32.bfloat16(), ref),
        "fp32 comm": _rel_err(fp32, ref),
    }


def allreduce_error_table(
    world_sizes: Sequence[int] = (2, 4, 8, 16, 32, 64), n: int = 4096, seed: int = 0, shared: float = 0.0
) -> list[dict[str, float]]:
    """:func:`allreduce_errors` for each world size, one row each with a ``"world_size"`` key.

    >>> rows = allreduce_error_table([2, 4], n=32)
    >>> [r["world_size"] for r in rows]
    [2, 4]
    """
    return [{"world_size": w, **allreduce_errors(w, n, seed, shared)} for w in world_sizes]


def fp32_inexact_counts(
    world_sizes: Sequence[int], seeds: Sequence[int] = range(20), n: int = 4096
) -> dict[int, int]:
    """For each world size, over how many of ``seeds`` the fp32 all-reduce differs from the fp64 sum.

    Each seed draws other :func:`rank_gradients`; a sum of bf16 values is exact in
    fp32 only while no partial sum needs more than fp32's 24 significant bits, so
    exactness is a property of the values, not of the world size alone.

    >>> fp32_inexact_counts([2], seeds=range(3), n=64)
    {2: 0}
    """
    counts = {}
    for w in world_sizes:
        counts[w] = 0
        for seed in seeds:
            grads = rank_gradients(w, n, seed)
            ref = torch.stack([g.double() for g in grads.values()]).sum(0)
            counts[w] += bool(_rel_err(allreduce(grads, torch.float32), ref) > 0)
    return counts


def bf16_avg_scale_bias(world_size: int) -> dict[str, float]:
    """The bf16 scalar ``1 / world_size`` as NCCL's AVG builds it, and its relative bias.

    NCCL's ``hostToDevRedOp`` (``src/enqueue.cc``) turns ``ncclAvg`` on bf16 into a
    pre-multiplied sum with the scalar ``__float2bfloat16(float(1.0/nRanks))``;
    this rounds the same way (double to float to bf16, to nearest even).  Returns
    the scalar (``"scale"``) and ``scale * world_size - 1`` (``"bias"``), the
    relative error of an average taken with it, before any other rounding.

    >>> bf16_avg_scale_bias(3)
    {'scale': 0.333984375, 'bias': 0.001953125}
    >>> bf16_avg_scale_bias(4)
    {'scale': 0.25, 'bias': 0.0}
    """
    if not is_int(world_size) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    scale = torch.tensor(1.0 / world_size, dtype=torch.float32).bfloat16().double()
    return {"scale": float(scale), "bias": float(scale * world_size - 1.0)}


def avg_errors(world_size: int, n: int = 4096, seed: int = 0) -> dict[str, float]:
    """Relative error of three bf16 averages of the same gradients, against their fp64 mean.

    * ``"pre-multiplied, bf16 1/N"``: each rank's bf16 gradient times the bf16 scalar
      of :func:`bf16_avg_scale_bias`, the product rounded to bf16, then the bf16
      all-reduce of :func:`allreduce` (chain order): NCCL's ``PreMulSum`` for
      ``ncclAvg`` on bf16, emulated, not run;
    * ``"pre-multiplied, exact 1/N"``: the same with the exact ``1/N`` (each product
      rounded to bf16 once), which removes the scalar's bias and keeps the per-rank
      rounding;
    * ``"SUM, then / N"``: the bf16 all-reduce, then one division rounded to bf16.

    >>> e = avg_errors(4, n=64)
    >>> e["pre-multiplied, bf16 1/N"] == e["pre-multiplied, exact 1/N"] == e["SUM, then / N"]
    True
    """
    grads = rank_gradients(world_size, n, seed)
    ref = torch.stack([g.double() for g in grads.values()]).mean(0)
    scale = torch.tensor(bf16_avg_scale_bias(world_size)["scale"], dtype=torch.bfloat16)
    # bf16 * bf16 rounds the (exact, in fp32) product once to bf16, as __hmul does.
    biased = allreduce({r: g * scale for r, g in grads.items()}, torch.bfloat16)
    exact = allreduce({r: (g.double() / world_size).bfloat16() for r, g in grads.items()}, torch.bfloat16)
    summed = allreduce(grads, torch.bfloat16) / world_size
    return {
        "pre-multiplied, bf16 1/N": _rel_err(biased, ref),
        "pre-multiplied, exact 1/N": _rel_err(exact, ref),
        "SUM, then / N": _rel_err(summed, ref),
    }


def nccl_wheel() -> dict[str, str | None]:
    """Which NCCL wheel the installed torch depends on, read from the packages' metadata.

    ``"requirement"``: torch's ``Requires-Dist`` line naming an ``nvidia-nccl`` wheel
    (``None`` if it names none); ``"installed"``: that wheel's installed version
    (``None`` if it is not installed).  Reads metadata only; loads no NCCL library.

    >>> sorted(nccl_wheel())
    ['installed', 'requirement']
    """
    from importlib import metadata

    lines = [r for r in metadata.requires("torch") or [] if r.lower().startswith("nvidia-nccl")]
    if not lines:
        return {"requirement": None, "installed": None}
    name = lines[0].split(";")[0].split("=")[0].split("<")[0].split(">")[0].strip()
    try:
        installed = metadata.version(name)
    except metadata.PackageNotFoundError:
        installed = None
    return {"requirement": lines[0], "installed": installed}


# Mid-contrast colours and a transparent background: legible on the light and
# the dark theme of the site alike.
_COLOURS = {
    "bf16 comm": "#e8710a",
    "bf16, pairwise order": "#c2185b",
    "fp32 comm, result rounded to bf16": "#1a9ba8",
    "fp32 comm": "#7b68ee",
}
_INK = "#8a8a8a"


def plot_allreduce_errors(rows: Sequence[dict]):
    """Log-log plot of each variant's relative error against world size; returns the Figure.

    Variants whose error is exactly zero at some world size are drawn only where
    it is non-zero (a log axis has no zero).

    >>> import matplotlib
    >>> matplotlib.use("agg")
    >>> fig = plot_allreduce_errors([{"world_size": 2, "bf16 comm": 1e-3, "bf16, pairwise order": 1e-3,
    ...     "fp32 comm, result rounded to bf16": 1e-3, "fp32 comm": 0.0}])
    >>> [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    ['bf16 comm', 'bf16, pairwise order', 'fp32 comm, result rounded to bf16', 'fp32 comm']
    """
    import matplotlib.pyplot as plt

    if not rows:
        raise ValueError("plot_allreduce_errors needs at least one row")
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    fig.patch.set_alpha(0.0)
    ax.patch.set_alpha(0.0)
    for name in _VARIANTS:
        pts = [(r["world_size"], r[name]) for r in rows if r[name] > 0]
        ax.plot(
            [p[0] for p in pts], [p[1] for p in pts], marker="o", color=_COLOURS[name], label=name
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks([r["world_size"] for r in rows], [str(r["world_size"]) for r in rows])
    ax.set_xlabel("world size (ranks)", color=_INK)
    ax.set_ylabel("relative error vs fp64", color=_INK)
    ax.tick_params(colors=_INK, which="both")
    for spine in ax.spines.values():
        spine.set_color(_INK)
    ax.grid(True, which="major", color=_INK, alpha=0.25)
    leg = ax.legend(frameon=False, fontsize=9)
    for text in leg.get_texts():
        text.set_color(_INK)
    fig.tight_layout()
    return fig


def figure_svg(fig):
    """``fig`` as an ``IPython.display.SVG``, background kept transparent; closes ``fig``.

    Independent of the matplotlib backend (the docs build runs with
    ``MPLBACKEND=agg``, where a bare Figure has no image to display).

    >>> import matplotlib
    >>> matplotlib.use("agg")
    >>> import matplotlib.pyplot as plt
    >>> fig, ax = plt.subplots()
    >>> figure_svg(fig).data.startswith("<svg")
    True
    >>> def drawn():
    ...     fig, ax = plt.subplots()
    ...     _ = ax.plot([0, 1], [1, 0])
    ...     return figure_svg(fig).data
    >>> drawn() == drawn()
    True
    """
    import io

    import matplotlib.pyplot as plt
    from IPython.display import SVG

    buf = io.StringIO()
    # No date in the metadata, and a fixed salt for the element ids (random
    # otherwise): the same figure gives the same bytes.  Text stays text, in the
    # page's font, instead of a path per glyph: a fraction of the bytes.
    with plt.rc_context({"svg.hashsalt": "torch-explainers", "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", transparent=True, bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return SVG(buf.getvalue())
