"""The collectives dimension: all-reduce the same bf16 gradients with communication in bf16 or fp32.

Runs a real ``torch.distributed.all_reduce`` in a simulated world
(:func:`explainers.mesh.simulated_world`, PyTorch's ``"fake"`` process group
plus ``LocalTensorMode``).  In torch 2.14.1 ``LocalTensorMode`` reduces with
``functools.reduce(operator.add, per_rank_tensors)``
(``torch/distributed/_local_tensor/_c10d.py``): a chain of ``world_size - 1``
additions, each rounded to the tensor's dtype, like the hops of a ring
all-reduce.  A tree all-reduce rounds fewer times along each path; that order
is not simulated here.

>>> e = allreduce_errors(4, n=64)
>>> e["bf16 comm"] > e["fp32 comm"]
True
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["rank_gradients", "allreduce", "allreduce_errors", "allreduce_error_table"]

_VARIANTS = ("bf16 comm", "fp32 comm, result rounded to bf16", "fp32 comm")


def rank_gradients(world_size: int, n: int = 4096, seed: int = 0) -> dict[int, torch.Tensor]:
    """One bf16 gradient of ``n`` N(0, 1) values per rank, reproducible from ``seed``.

    bf16 because that is what a backward in bf16 (FSDP2 ``param_dtype=torch.bfloat16``)
    produces; the reduction is what ``reduce_dtype`` decides.

    >>> g = rank_gradients(2, n=3)
    >>> sorted(g), g[0].dtype, tuple(g[1].shape)
    ([0, 1], torch.bfloat16, (3,))
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    g = torch.Generator().manual_seed(seed)
    return {r: torch.randn(n, generator=g).bfloat16() for r in range(world_size)}


def allreduce(per_rank: dict[int, torch.Tensor], comm_dtype: torch.dtype) -> torch.Tensor:
    """SUM all-reduce of ``per_rank`` in a simulated world, communicating in ``comm_dtype``.

    Returns rank 0's result (every rank holds the same one), in ``comm_dtype``.

    >>> import torch
    >>> allreduce({0: torch.tensor([1.0]), 1: torch.tensor([2.0])}, torch.float32).tolist()
    [3.0]
    """
    import torch.distributed as dist
    from torch.distributed._local_tensor import LocalTensor

    from explainers.mesh import simulated_world

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


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm())


def allreduce_errors(world_size: int, n: int = 4096, seed: int = 0) -> dict[str, float]:
    """Relative error ``||out - ref|| / ||ref||`` of three ways to all-reduce the same bf16 gradients.

    * ``"bf16 comm"``: reduce in bf16 (``reduce_dtype=torch.bfloat16``);
    * ``"fp32 comm"``: cast to fp32, reduce in fp32 (``reduce_dtype=torch.float32``);
    * ``"fp32 comm, result rounded to bf16"``: the same, then one rounding to bf16,
      the floor for any result stored in bf16.

    The reference is the fp64 sum of the same bf16 gradients.

    >>> e = allreduce_errors(2, n=64)
    >>> e["fp32 comm"]
    0.0
    """
    grads = rank_gradients(world_size, n, seed)
    ref = torch.stack([g.double() for g in grads.values()]).sum(0)
    bf16 = allreduce(grads, torch.bfloat16)
    fp32 = allreduce(grads, torch.float32)
    return {
        "bf16 comm": _rel_err(bf16, ref),
        "fp32 comm, result rounded to bf16": _rel_err(fp32.bfloat16(), ref),
        "fp32 comm": _rel_err(fp32, ref),
    }


def allreduce_error_table(
    world_sizes: Sequence[int] = (2, 4, 8, 16, 32, 64), n: int = 4096, seed: int = 0
) -> list[dict[str, float]]:
    """:func:`allreduce_errors` for each world size, one row each with a ``"world_size"`` key.

    >>> rows = allreduce_error_table([2, 4], n=32)
    >>> [r["world_size"] for r in rows]
    [2, 4]
    """
    return [{"world_size": w, **allreduce_errors(w, n, seed)} for w in world_sizes]
