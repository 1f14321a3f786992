"""One FSDP2 rank: join the gloo world, shard a tiny model under each policy, record what reduced.

Run by :func:`explainers.precision.fsdp_launch.fsdp_reduce_dtypes_many`, once
per rank, as ``python -m explainers.precision.fsdp_rank --rank=R ...``; run
without ``--rank``, it launches two ranks itself and prints what they saw for
``param_dtype=bf16`` with ``reduce_dtype`` unset and fp32, and the installed
source that decides.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from explainers.precision.fsdp_data import op_name, parse_dtype


def _dtypes(x: Any) -> list[str]:
    if isinstance(x, torch.Tensor):
        return [str(x.dtype)]
    if isinstance(x, (list, tuple)):
        return [d for item in x for d in _dtypes(item)]
    return []


def _rendezvous(rank: int, world_size: int, d: Path, timeout: float):
    import datetime

    import torch.distributed as dist

    td = datetime.timedelta(seconds=timeout)
    port_file = d / "port"
    if rank == 0:
        # Port 0: the OS picks a free port and the store reports it, so no other
        # process can take the port between choosing and binding it.
        # wait_for_workers=False, or the constructor would block until the
        # others join, before they could read the port.
        store = dist.TCPStore("127.0.0.1", 0, world_size, True, td, wait_for_workers=False)
        tmp = d / "port.tmp"
        tmp.write_text(str(store.port))
        tmp.replace(port_file)  # atomic: a reader never sees half a number
    else:
        deadline = time.monotonic() + timeout
        while not port_file.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"rank {rank}: rank 0 published no port in {timeout:g} s")
            time.sleep(0.05)
        port = int(port_file.read_text())
        store = dist.TCPStore("127.0.0.1", port, world_size, False, td)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=td)
    return store


def _new_model(spec: list[str | None]) -> torch.nn.Module:
    torch.manual_seed(0)  # the same initial weights on every rank, as FSDP2 expects
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))


def _shard(model: torch.nn.Module, spec: list[str | None]) -> None:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if len(spec) == 3:  # an explicit grad_dtype on every parameter, None included
        for p in model.parameters():
            p.grad_dtype = parse_dtype(spec[2])
    fully_shard(model, mp_policy=MixedPrecisionPolicy(
        param_dtype=parse_dtype(spec[0]), reduce_dtype=parse_dtype(spec[1])))


def _no_sync_held(spec: list[str | None], rank: int) -> dict[str, Any]:
    """One backward with gradient sync off: the dtype and size of the gradients FSDP2 holds.

    Returns the dtype of the gradient held per parameter (``"dtype"``), the number
    of elements held over all parameters (``"held_numel"``), and for scale the
    parameters' full (unsharded) and this rank's sharded element counts.
    """
    model = _new_model(spec)
    _shard(model, spec)
    model.set_requires_gradient_sync(False)
    model(_inputs(rank)).float().sum().backward()
    if any(p.grad is not None for p in model.parameters()):
        raise RuntimeError("FSDP2 produced a sharded .grad with gradient sync off")
    # Private FSDP2 state (torch 2.14.1 and 2.15.0): the gradient held between
    # microbatches is `unsharded_accumulated_grad` where 2.14.1 moved it there to
    # upcast it to reduce_dtype, else the unsharded parameter's .grad (in 2.15.0
    # `unsharded_accumulated_grad` is a property returning that .grad).
    held = set()
    held_numel = 0
    for fp in model._get_fsdp_state()._fsdp_param_group.fsdp_params:
        grad = fp.unsharded_accumulated_grad
        if grad is None:
            grad = fp._unsharded_param.grad
        if grad is None:
            raise RuntimeError("FSDP2 holds no gradient after a backward with gradient sync off")
        held.add(str(grad.dtype))
        held_numel += grad.numel()
    if len(held) != 1:
        raise RuntimeError(f"non-uniform held gradient dtypes with gradient sync off: {held}")
    # The sharded parameters are DTensors: numel() is the full size, to_local() this rank's shard.
    return {"dtype": held.pop(), "held_numel": held_numel,
            "param_numel": sum(p.numel() for p in model.parameters()),
            "shard_numel": sum(p.to_local().numel() for p in model.parameters())}


def _observe_one(spec: list[str | None], rank: int) -> dict[str, Any]:
    import torch.distributed as dist
    from torch.utils._python_dispatch import TorchDispatchMode

    param_dtype, reduce_dtype = spec[0], spec[1]

    events: list[dict[str, Any]] = []

    class Collect(TorchDispatchMode):
        """Logs, in order, every c10d and fsdp op and every in-place division."""

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            ns = func.namespace
            if ns in ("c10d", "fsdp"):
                events.append({"kind": ns, "name": str(func), "dtypes": _dtypes(list(args)),
                               "out_dtypes": _dtypes(list(kwargs.values()))})
            elif func in (torch.ops.aten.div_.Scalar, torch.ops.aten.div_.Tensor):
                divisor = args[1]
                events.append(
                    {
                        "kind": "div_",
                        "storage": args[0].untyped_storage().data_ptr(),
                        "divisor": float(divisor),
                    }
                )
            return func(*args, **kwargs)

    # FSDP2 (torch 2.14.1 and 2.15.0, _fsdp_collectives.py) looks these up on the
    # torch.distributed module at call time (`dist.reduce_scatter_single(...)`,
    # `dist.all_reduce(...)`), so wrapping the module attributes sees the exact
    # tensors and ReduceOp it passes.  The dispatcher log above shows what then
    # reached the c10d op that gloo runs.
    depth = [0]
    calls: list[dict[str, Any]] = []

    def wrap(name: str, fn):
        def wrapper(*args, **kwargs):
            if depth[0]:  # a wrapped API calling another: record the outermost call only
                return fn(*args, **kwargs)
            bound = dict(zip(_PARAMS[name], args, strict=False), **kwargs)
            inp, out = (bound[k] for k in _TENSORS[name])
            first = len(events)
            depth[0] += 1
            try:
                return fn(*args, **kwargs)
            finally:
                depth[0] -= 1
                calls.append(
                    {
                        "entry": f"torch.distributed.{name}",
                        "event_range": (first, len(events)),
                        "input": inp,
                        "output": out,
                        "op": op_name(bound.get("op", dist.ReduceOp.SUM)),
                    }
                )

        return wrapper

    originals = {n: getattr(dist, n) for n in _PARAMS if hasattr(dist, n)}
    for n, fn in originals.items():
        setattr(dist, n, wrap(n, fn))
    try:
        model = _new_model(spec)
        orig_dtypes = {str(p.dtype) for p in model.parameters()}
        reference = _mean_grads_fp64(model, dist.get_world_size())
        _shard(model, spec)
        with Collect():
            model(_inputs(rank)).float().sum().backward()
    finally:
        for n, fn in originals.items():
            setattr(dist, n, fn)

    def divisions(storage: int, lo: int, hi: int) -> float | None:
        ds = [
            e["divisor"]
            for e in events[lo:hi]
            if e["kind"] == "div_" and e["storage"] == storage
        ]
        if len(ds) > 1:
            raise RuntimeError(f"more than one in-place division of one buffer: {ds}")
        return ds[0] if ds else None

    reduce_scatters, all_reduces = [], []
    claimed: set[int] = set()
    for i, c in enumerate(calls):
        lo, hi = c["event_range"]
        c10d = [
            {"name": e["name"], "dtypes": e["dtypes"]} for e in events[lo:hi] if e["kind"] == "c10d"
        ]
        claimed.update(j for j in range(lo, hi) if events[j]["kind"] == "c10d")
        inp, out = c.pop("input"), c.pop("output")
        # A division of the input counts as "pre" if it comes after FSDP2's
        # copy-in (fsdp::chunk_cat, which fills the buffer) and before the
        # collective; one of the output, as "post" until the next collective.
        # Matching by storage address is sound inside these windows, where the
        # buffers are alive.
        copy_ins = [j for j in range(lo) if events[j].get("name") in _COPY_IN_OPS]
        prev_hi = max(copy_ins + [calls[i - 1]["event_range"][1] if i else 0])
        next_lo = calls[i + 1]["event_range"][0] if i + 1 < len(calls) else len(events)
        if any(dt != str(inp.dtype) for op in c10d for dt in op["dtypes"]):
            raise RuntimeError(f"the c10d op saw other dtypes than {c['entry']} got: {c10d}")
        rec = {
            "entry": c["entry"],
            "c10d_ops": c10d,
            "input_dtype": str(inp.dtype),
            "output_dtype": str(out.dtype),
            "op": c["op"],
            "pre_divide": divisions(inp.untyped_storage().data_ptr(), prev_hi, lo),
            "post_divide": divisions(out.untyped_storage().data_ptr(), hi, next_lo),
        }
        (all_reduces if c["entry"].endswith("all_reduce") else reduce_scatters).append(rec)

    unclaimed = [
        e["name"]
        for j, e in enumerate(events)
        if e["kind"] == "c10d" and j not in claimed and "allgather" not in e["name"]
    ]
    if unclaimed:
        raise RuntimeError(
            "c10d collectives other than all-gathers reached the dispatcher outside the wrapped "
            f"torch.distributed functions {sorted(_PARAMS)}: {unclaimed}. FSDP2 in "
            f"torch {torch.__version__} reduces through another entry point; wrap that one."
        )
    if not reduce_scatters:
        raise RuntimeError("FSDP2 issued no gradient reduce-scatter")
    rs_dtypes = {r["input_dtype"] for r in reduce_scatters}
    rs_ops = {r["op"] for r in reduce_scatters}
    if len(rs_dtypes) != 1 or len(rs_ops) != 1:
        raise RuntimeError(f"reduce-scatters disagree: {reduce_scatters}")
    copy_in = [e for e in events if e.get("name") in _COPY_IN_OPS]
    if not copy_in:
        fsdp_ops = sorted({e["name"] for e in events if e["kind"] == "fsdp"})
        raise RuntimeError(
            f"FSDP2 in torch {torch.__version__} copied the gradients in with none of "
            f"{sorted(_COPY_IN_OPS)}; its fsdp ops were {fsdp_ops}")
    # chunk_cat[_mixed_dtype](grads, dim, num_chunks, *, out=buffer): the positional
    # tensors are the gradients, the out= tensor the reduce-scatter buffer.
    grad_dtypes = {dt for e in copy_in for dt in e["dtypes"]}
    buffer_dtypes = {dt for e in copy_in for dt in e["out_dtypes"]}
    sharded = {str(p.grad.to_local().dtype) for p in model.parameters()}
    if len(grad_dtypes) != 1 or len(buffer_dtypes) != 1 or len(sharded) != 1 or len(orig_dtypes) != 1:
        raise RuntimeError(f"non-uniform dtypes: grads {grad_dtypes}, buffers {buffer_dtypes}, "
                           f"sharded .grad {sharded}")
    # The value check: the reduced gradient is the ranks' mean (AVG), not their
    # sum, to within the rounding of bf16/fp16 compute and communication.
    worst = 0.0
    for name, p in model.named_parameters():
        full = p.grad.full_tensor().double()  # an all-gather, after the wrappers are gone
        ref = reference[name]
        worst = max(worst, float((full - ref).norm() / ref.norm()))
    all_gathers = sorted(
        {dt for e in events if e["kind"] == "c10d" and "allgather" in e["name"] for dt in e["dtypes"]}
    )
    held = _no_sync_held(spec, rank)
    return {
        "torch_version": torch.__version__,
        "backend": dist.get_backend(),
        "device": "cpu",
        "world_size": dist.get_world_size(),
        "param_dtype": param_dtype,
        "reduce_dtype": reduce_dtype,
        "orig_dtype": orig_dtypes.pop(),
        "all_gather_dtypes": all_gathers,
        "unsharded_grad_dtype": grad_dtypes.pop(),
        "copy_in_dtype": buffer_dtypes.pop(),
        "reduce_scatters": reduce_scatters,
        "all_reduces": all_reduces,
        "reduce_scatter_dtype": rs_dtypes.pop(),
        "reduce_op": rs_ops.pop(),
        "sharded_grad_dtype": sharded.pop(),
        "grad_is_rank_mean": worst < _MEAN_RTOL,
        "param_grad_dtype": spec[2] if len(spec) == 3 else "unset",
        "no_sync_grad_dtype": held["dtype"],
        "no_sync_held_numel": held["held_numel"],
        "param_numel": held["param_numel"],
        "shard_numel": held["shard_numel"],
    }


# Relative error allowed between FSDP2's reduced gradient and the fp64 mean of
# the ranks' gradients.  bf16 compute leaves about 1e-2; a SUM instead of a mean
# gives world_size times the mean, a relative error of world_size - 1 >= 1.
_MEAN_RTOL = 0.1


def _inputs(rank: int) -> torch.Tensor:
    # A different batch per rank, so the reduction has different values to combine.
    return torch.randn(4, 8, generator=torch.Generator().manual_seed(1 + rank))


def _mean_grads_fp64(model: torch.nn.Module, world_size: int) -> dict[str, torch.Tensor]:
    """Mean over all ranks' batches of the gradients of an fp64 copy of ``model``."""
    import copy

    ref = copy.deepcopy(model).double()
    for r in range(world_size):
        ref(_inputs(r).double()).sum().backward()
    return {n: p.grad / world_size for n, p in ref.named_parameters()}


# FSDP2's copy of the gradients into the reduce-scatter buffer, as dispatched:
# foreach_reduce_scatter_copy_in calls fsdp::chunk_cat in torch 2.14.1 and
# fsdp::chunk_cat_mixed_dtype, which casts to the buffer's dtype, in 2.15.0.
_COPY_IN_OPS = frozenset({"fsdp.chunk_cat.default", "fsdp.chunk_cat_mixed_dtype.default"})

# Positional parameter names of the wrapped functions (output tensor first for
# reduce_scatter_single, as in torch 2.14.1's and 2.15.0's distributed_c10d.py).
_PARAMS = {
    "reduce_scatter_single": ("output", "input", "op", "group", "async_op"),
    "reduce_scatter_tensor": ("output", "input", "op", "group", "async_op"),
    "all_reduce": ("tensor", "op", "group", "async_op"),
}
# Which of those are the (input, output) of the reduction; all_reduce works in place.
_TENSORS = {
    "reduce_scatter_single": ("input", "output"),
    "reduce_scatter_tensor": ("input", "output"),
    "all_reduce": ("tensor", "tensor"),
}


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m explainers.precision.fsdp_rank",
        description="One rank of fsdp_reduce_dtypes(); without --rank, run the demo.",
    )
    parser.add_argument("--rank", type=int)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--dir", type=Path, help="rendezvous/results directory")
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args(argv)
    if args.rank is None:  # a person running the module: show both policies, and why
        from explainers.precision.fsdp_launch import fsdp_reduce_report

        report = fsdp_reduce_report([["bfloat16", None], ["bfloat16", "float32"]],
                                    args.world_size, timeout=args.timeout)
        print(json.dumps(report["runs"], indent=1))
        for e in report["source"]:
            print(f"\ntorch/{e['path']}:\n{e['text']}")
        return 0

    import torch.distributed as dist

    specs = json.loads((args.dir / "policies.json").read_text())
    _rendezvous(args.rank, args.world_size, args.dir, args.timeout)
    try:
        results = [_observe_one(spec, args.rank) for spec in specs]
        dist.barrier()  # rank 0 owns the store: nobody leaves while others still need it
    finally:
        dist.destroy_process_group()
    out = args.dir / f"rank{args.rank}.json"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(results))
    tmp.replace(out)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
