"""Simulated DeviceMesh worlds: run real DTensor code for N ranks in one process.

PyTorch ships two pieces that together let one CPU process play every rank of
an SPMD program:

* the ``"fake"`` process-group backend, which gives ``torch.distributed`` a
  world size without any peers, and
* ``torch.distributed._local_tensor.LocalTensorMode(N)``, a dispatch mode under
  which every op runs once per simulated rank and collectives become local math.

Both are *global* state.  :func:`simulated_world` and :func:`simulated_mesh`
open them together and always close them together, so a program can open
another simulated world afterwards, or a real process group.

``LocalTensorMode`` is a private PyTorch API (``torch.distributed._local_tensor``),
checked on torch 2.14.1 and 2.15.0.

This file needs only torch and the standard library: copy it on its own and run
``python simulated.py`` for a small demo.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

__all__ = ["make_mesh", "simulated_mesh", "simulated_world"]


def _is_int(x: object) -> bool:
    # Written out here so that this file runs on its own, with only torch installed:
    # bool is an int subclass, and True is not a size.
    return isinstance(x, int) and not isinstance(x, bool)


def _check_world_size(world_size: object) -> int:
    # `simulated_world(True)` is a bug, not a world of 1.
    if not _is_int(world_size):
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
    RuntimeError: a process group is already initialized (backend 'fake', world size 2); simulated_world() will not replace it. Close the enclosing simulated_world()/simulated_mesh(), or call torch.distributed.destroy_process_group(), first.
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
    if _is_int(shape):
        shape = (shape,)
    if not isinstance(shape, Sequence) or isinstance(shape, str):
        raise TypeError(f"mesh shape must be a tuple of ints, got {shape!r}")
    shape = tuple(shape)
    if not shape:
        raise ValueError("mesh shape must have at least one dimension")
    for s in shape:
        if not _is_int(s):
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

    Works in any initialized process group: a simulated one, or a real one
    (``init_process_group`` in each process ``torchrun`` starts).  The product
    of ``shape`` must equal the world size, and names must be unique, one per
    mesh dim.

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



if __name__ == "__main__":
    # A 2x2 mesh of four simulated ranks, and a DTensor of 7 elements sharded over both mesh
    # dims: torch.chunk-style pieces of 4 and 3 over "dp", each split again over "tp".
    import torch
    from torch.distributed.tensor import Shard, distribute_tensor

    with simulated_mesh((2, 2), ("dp", "tp")) as mesh:
        print(mesh)
        x = distribute_tensor(torch.arange(7), mesh, [Shard(0), Shard(0)])
        print("global shape:", tuple(x.shape))
        for rank, local in sorted(x.to_local()._local_tensors.items()):
            print(f"rank {rank}: local shape {tuple(local.shape)}, values {local.tolist()}")
