"""Behaviour differences between torch releases that the Versions page executes itself.

Each probe takes and returns plain JSON, so :func:`explainers.releases.run_under`
can run it under every supported release and the page can put the answers side
by side.  :func:`probe_all` runs all but the FSDP2 probe (and the process-spawning
:func:`numerics_env_override`) in one fresh process:

* :func:`numerics_strict`: what ``TORCHINDUCTOR_NUMERICS=strict`` implies for
  ``torch._inductor.config.emulate_precision_casts``, and what overrides it
  (:func:`numerics_env_override`, run on its own, reads it in further processes);
* :func:`premul_sum`: an ``all_reduce`` and a ``reduce_scatter_tensor`` with
  ``ReduceOp.PREMUL_SUM`` under ``LocalTensorMode`` (the simulated worlds of the mesh page);
* :func:`fsdp2_mixed_grad_dtypes`: the gradients FSDP2's ``foreach_reduce`` receives,
  and the dtype it reduces in, when some parameters have ``grad_dtype=None``;
* :func:`integer_reductions`: the exception ``var``, ``std``, ``mean``, ``var_mean``
  and ``std_mean`` raise for an integer tensor;
* :func:`unsorted_ranks`: collectives over a group made with
  ``new_group([1, 0], sort_ranks=False)`` under ``LocalTensorMode``.

Private APIs (checked on torch 2.14.1 and 2.15.0):
``torch.distributed._local_tensor.LocalTensorMode`` (through
:mod:`explainers.mesh.simulated`), ``torch.utils._python_dispatch.TorchDispatchMode``
(to see the reduce-scatter FSDP2 dispatches),
``torch.distributed.fsdp._fully_shard._fsdp_param_group.foreach_reduce`` (the module
global FSDP2's post-backward calls with the gradients to reduce; wrapped to record
them), and ``torch._subclasses.FakeTensorMode``.

>>> integer_reductions(ops=("var",))["cpu"]["var"]["message"]
'std and var only support floating point and complex dtypes'
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

__all__ = ["FSDP2_CASES", "INTEGER_DTYPES", "INTEGER_OPS", "fsdp2_mixed_grad_dtypes", "integer_reductions", "numerics_env_override",
           "numerics_patch_override", "numerics_strict", "premul_sum",
           "probe_all", "source_facts", "unsorted_ranks"]


def _emulate_flag_in_child(emulate_env: str) -> bool:
    # A fresh interpreter of this release: Inductor reads both variables at import.
    env = {**os.environ, "TORCHINDUCTOR_NUMERICS": "strict",
           "TORCHINDUCTOR_EMULATE_PRECISION_CASTS": emulate_env}
    code = "from torch._inductor import config; print(int(config.emulate_precision_casts))"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300, check=True)
    return proc.stdout.strip().splitlines()[-1] == "1"


def numerics_strict() -> dict[str, Any]:
    """``emulate_precision_casts`` with ``TORCHINDUCTOR_NUMERICS=strict``, and what overrides it.

    Inductor reads the variable when ``torch._inductor.config`` is first imported, so
    this must run in a process that has not imported it yet (a :func:`run_under` child);
    ``TORCHINDUCTOR_EMULATE_PRECISION_CASTS`` is removed first, since it sets the flag too.
    (:func:`numerics_env_override` sets it.)  ``set_false`` the flag read after ``config.emulate_precision_casts = False``;
    ``strict_reduction`` and ``bogus`` what ``numerics`` and the flag read after assigning
    those values (no release rejects either).

    >>> from explainers.releases import PRIMARY, run_under
    >>> run_under(PRIMARY, "explainers.version_probes:numerics_strict")["default"]
    False
    """
    if "torch._inductor.config" in sys.modules:
        raise RuntimeError("numerics_strict: torch._inductor.config is already imported in this "
                           "process; run it in a fresh one (explainers.releases.run_under)")
    os.environ.pop("TORCHINDUCTOR_EMULATE_PRECISION_CASTS", None)
    os.environ["TORCHINDUCTOR_NUMERICS"] = "strict"
    import torch
    from torch._inductor import config

    strict = (config.numerics, bool(config.emulate_precision_casts))
    with config.patch(emulate_precision_casts=False):
        set_false = bool(config.emulate_precision_casts)
    other = {}
    for value in ("default", "strict_reduction", "bogus"):
        with config.patch(numerics=value):
            other[value] = (config.numerics, bool(config.emulate_precision_casts))
    return {"torch": torch.__version__, "numerics": strict[0], "strict": strict[1],
            "default_numerics": other["default"][0], "default": other["default"][1],
            "set_false": set_false,
            "strict_reduction": list(other["strict_reduction"]), "bogus": list(other["bogus"])}


def numerics_env_override() -> dict[str, bool]:
    """``emulate_precision_casts`` under ``TORCHINDUCTOR_NUMERICS=strict`` when
    ``TORCHINDUCTOR_EMULATE_PRECISION_CASTS`` is ``"0"`` or ``"1"``, each read in a fresh
    interpreter of this torch.

    >>> numerics_env_override()["1"]
    True
    """
    return {v: _emulate_flag_in_child(v) for v in ("0", "1")}


def numerics_patch_override() -> dict[str, bool]:
    """``emulate_precision_casts`` under ``TORCHINDUCTOR_NUMERICS=strict`` with
    ``TORCHINDUCTOR_EMULATE_PRECISION_CASTS=1`` (so the flag starts on on both releases), read in a
    fresh interpreter of this torch: ``before``, inside ``config.patch(emulate_precision_casts=False)``
    (``patched``), and after the plain assignment ``config.emulate_precision_casts = False``
    (``assigned``).

    >>> numerics_patch_override()["before"]
    True
    """
    env = {**os.environ, "TORCHINDUCTOR_NUMERICS": "strict", "TORCHINDUCTOR_EMULATE_PRECISION_CASTS": "1"}
    code = ("from torch._inductor import config\n"
            "before = config.emulate_precision_casts\n"
            "with config.patch(emulate_precision_casts=False):\n"
            "    patched = config.emulate_precision_casts\n"
            "config.emulate_precision_casts = False\n"
            "print(int(before), int(patched), int(config.emulate_precision_casts))")
    proc = subprocess.run([sys.executable, "-W", "error", "-c", code], env=env, capture_output=True, text=True,
                          timeout=300, check=True)
    before, patched, assigned = (v == "1" for v in proc.stdout.strip().splitlines()[-1].split())
    return {"before": before, "patched": patched, "assigned": assigned}


def premul_sum(world_size: int = 2, factor: float = 2.0) -> dict[str, Any]:
    """``all_reduce(ones(3), ReduceOp.PREMUL_SUM(factor))`` in a simulated ``world_size``-rank world,
    and a ``reduce_scatter_tensor`` with the same op (the collective FSDP2 uses it in).

    ``ReduceOp.PREMUL_SUM(factor)`` is the public form FSDP2 itself writes.  Returns
    ``raised`` (the exception's type name, or ``None``), ``message`` and ``values``
    (each rank's result, or ``None`` when it raised) for the ``all_reduce``, and the same
    three under ``reduce_scatter`` for ``reduce_scatter_tensor``, where rank ``r`` holds
    ``r * world_size + 1, ..., (r + 1) * world_size`` and receives one element.

    >>> premul_sum(2, 0.5)["reduce_scatter"]["values"] in ([[2.0], [3.0]], None)
    True
    """
    import torch
    import torch.distributed as dist
    from torch.distributed._local_tensor import LocalTensor

    from explainers.mesh.simulated import simulated_world

    def run(call):
        try:
            values = call()
        except NotImplementedError as exc:
            return {"raised": type(exc).__name__, "message": str(exc), "values": None}
        return {"raised": None, "message": None, "values": values}

    def all_reduce():
        t = torch.ones(3)
        dist.all_reduce(t, op=dist.ReduceOp.PREMUL_SUM(factor))
        return [t._local_tensors[r].tolist() for r in sorted(t._local_tensors)]

    def reduce_scatter():
        n = world_size
        inp = LocalTensor({r: torch.arange(r * n + 1.0, (r + 1) * n + 1.0) for r in range(n)})
        out = LocalTensor({r: torch.zeros(1) for r in range(n)})
        dist.reduce_scatter_tensor(out, inp, op=dist.ReduceOp.PREMUL_SUM(factor))
        return [out._local_tensors[r].tolist() for r in sorted(out._local_tensors)]

    with simulated_world(world_size):
        return {**run(all_reduce), "reduce_scatter": run(reduce_scatter)}


def unsorted_ranks() -> dict[str, Any]:
    """Collectives over ``new_group([1, 0], sort_ranks=False)`` in a simulated 2-rank world.

    ``sort_ranks`` is a public parameter of ``torch.distributed.new_group``; with ``False`` the
    group keeps the caller's order.  Rank 0 holds 1.0 and rank 1 holds 100.0.  Returns the
    group's ``ranks`` and, for ``all_reduce`` (sum), ``broadcast`` from global rank 1, ``broadcast``
    from the group's rank 0 (``group_src=0``) and ``all_gather``, each rank's result or what it raised and the function that raised it.

    >>> unsorted_ranks()["ranks"]
    [1, 0]
    """
    import traceback

    import torch
    import torch.distributed as dist
    from torch.distributed._local_tensor import LocalTensor

    from explainers.mesh.simulated import simulated_world

    def per_rank(t):
        return {str(r): t._local_tensors[r].tolist() for r in sorted(t._local_tensors)}

    def start():
        return LocalTensor({0: torch.tensor([1.0]), 1: torch.tensor([100.0])})

    def run(call):
        try:
            return call()
        except AssertionError as exc:  # 2.14.1's emulation asserts the ranks are ascending
            return f"AssertionError: {exc} in {traceback.extract_tb(exc.__traceback__)[-1].name}"

    def all_reduce():
        t = start()
        dist.all_reduce(t, group=group)
        return per_rank(t)

    def broadcast():
        t = start()
        dist.broadcast(t, src=1, group=group)
        return per_rank(t)

    def broadcast_group_src():
        # group rank 0 is global rank 1 only if the group keeps the caller's order
        t = start()
        dist.broadcast(t, group=group, group_src=0)
        return per_rank(t)

    def all_gather():
        out = [LocalTensor({0: torch.zeros(1), 1: torch.zeros(1)}) for _ in range(2)]
        dist.all_gather(out, start(), group=group)
        return [per_rank(o) for o in out]

    with simulated_world(2):
        group = dist.new_group([1, 0], sort_ranks=False)
        ranks = dist.get_process_group_ranks(group)
        results = {name: run(call) for name, call in
                   (("all_reduce", all_reduce), ("broadcast", broadcast),
                    ("broadcast_group_src", broadcast_group_src), ("all_gather", all_gather))}
    return {"ranks": ranks, **results}


def _dtype_name(dtype: Any) -> str | None:
    return None if dtype is None else str(dtype).removeprefix("torch.")


# The sweep behind the integer section's general sentences: every op the precision page and
# this page name, on every integer width the page's range names, and bool.
INTEGER_OPS = ("var", "std", "mean", "nanmean", "var_mean", "std_mean")
INTEGER_DTYPES = ("int8", "int32", "int64", "uint8", "bool")


# grad_dtype=None is set on these of the four parameters (weight, bias, weight, bias);
# "one, no sync first" runs a backward with gradient sync off before the synced one.
FSDP2_CASES = {"none": 0, "one": 1, "three": 3, "all": 4, "one, no sync first": 1}


def fsdp2_mixed_grad_dtypes() -> dict[str, Any]:
    """What FSDP2's ``foreach_reduce`` receives and reduce-scatters, per case of :data:`FSDP2_CASES`.

    A two-``Linear`` fp32 model, ``fully_shard`` with ``MixedPrecisionPolicy(param_dtype=bf16)``,
    on the ``"fake"`` process group (rank 0 of 2: the collective moves no data, FSDP2
    still chooses its dtypes).  ``received[case]`` is the dtypes of the gradients handed
    to ``foreach_reduce`` in the synced backward and its ``reduce_dtype`` argument;
    ``reduce_scatter_dtype[case]`` the dtype of each reduce-scatter dispatched.
    ``uniform_assert`` says whether the installed FSDP2 still has the check
    "FSDP reduce-scatter expects uniform gradient dtype".

    >>> fsdp2_mixed_grad_dtypes()["reduce_scatter_dtype"]["all"]  # every grad_dtype None
    ['bfloat16']
    """
    import inspect

    import torch
    import torch.distributed as dist
    import torch.distributed.fsdp._fully_shard._fsdp_collectives as collectives
    import torch.distributed.fsdp._fully_shard._fsdp_param_group as param_group
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.dtypes: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if "reduce_scatter" in str(func):
                self.dtypes.append(_dtype_name(args[1].dtype))
            return func(*args, **(kwargs or {}))

    received: list[dict[str, Any]] = []
    original = param_group.foreach_reduce
    signature = inspect.signature(original)

    def recording(*args, **kwargs):
        bound = signature.bind(*args, **kwargs).arguments
        received.append({"grads": [_dtype_name(g.dtype) for g in bound["unsharded_grads"]],
                         "reduce_dtype": _dtype_name(bound["reduce_dtype"])})
        return original(*args, **kwargs)

    out: dict[str, Any] = {}
    got: dict[str, Any] = {}
    param_group.foreach_reduce = recording
    dist.init_process_group("fake", rank=0, world_size=2)
    try:
        for case, count in FSDP2_CASES.items():
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
            for p in list(model.parameters())[:count]:
                p.grad_dtype = None
            fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
            if case.endswith("no sync first"):
                model.set_requires_gradient_sync(False)
                model(torch.ones(2, 4)).float().sum().backward()
                model.set_requires_gradient_sync(True)
            received.clear()
            seen = Seen()
            with seen:
                model(torch.ones(2, 4)).float().sum().backward()
            out[case], got[case] = seen.dtypes, list(received)
    finally:
        param_group.foreach_reduce = original
        dist.destroy_process_group()
    text = inspect.getsource(collectives)
    return {"reduce_scatter_dtype": out, "received": got,
            "uniform_assert": "FSDP reduce-scatter expects uniform gradient dtype" in text}


def integer_reductions(ops: tuple[str, ...] = ("var", "std", "mean", "var_mean", "std_mean"),
                       where: tuple[str, ...] = ("cpu", "meta", "fake"), dtype: str = "int64") -> dict[str, Any]:
    """What each of ``ops`` does to ``torch.arange(6)`` (cast to ``dtype``) on a CPU, a meta and
    a fake tensor.

    ``{where: {op: {"raised", "message", "dtype"}}}``: the exception's type name and first
    line, or ``None`` and the dtype of the (first) result.

    >>> integer_reductions(ops=("sum",), where=("cpu",))
    {'cpu': {'sum': {'raised': None, 'message': None, 'dtype': 'int64'}}}
    """
    import contextlib

    import torch
    from torch._subclasses import FakeTensorMode

    out: dict[str, Any] = {}
    for place in where:
        mode = FakeTensorMode() if place == "fake" else contextlib.nullcontext()
        out[place] = {}
        with mode:
            x = torch.arange(6, device="meta" if place == "meta" else "cpu").to(getattr(torch, dtype))
            for op in ops:
                try:
                    got = getattr(torch, op)(x)
                except RuntimeError as exc:  # NotImplementedError is a RuntimeError subclass
                    out[place][op] = {"raised": type(exc).__name__,
                                      "message": str(exc).splitlines()[0].strip(), "dtype": None}
                else:
                    first = got[0] if isinstance(got, tuple) else got
                    out[place][op] = {"raised": None, "message": None, "dtype": _dtype_name(first.dtype)}
    return out


def source_facts() -> dict[str, bool]:
    """Whether lines the page names occur in this release's installed source.

    >>> source_facts()["fsdp2_public_premul_sum"]
    True
    """
    import inspect

    import torch.distributed.fsdp._fully_shard._fsdp_collectives as collectives
    from torch.distributed._local_tensor import _c10d

    prepare = inspect.getsource(_c10d._prepare_collective_groups)
    return {"fsdp2_public_premul_sum": "ReduceOp.PREMUL_SUM(1 / factor)" in inspect.getsource(collectives),
            "unsorted_ranks_raise": "if ranks != sorted(ranks):" in prepare
            and "raise AssertionError(ranks)" in prepare,
            "ranks_sorted": "ranks_sorted = sorted(ranks)" in prepare}


def probe_all() -> dict[str, Any]:
    """The probes but FSDP2's, :func:`numerics_strict` first (it needs a fresh process), and torch's build.

    ``torch`` is ``torch.__version__``, ``git`` the first 12 digits of the commit it
    was built from, ``cuda`` the CUDA toolkit it was built against (``None`` for a CPU build).

    >>> import torch._inductor.config
    >>> probe_all()
    Traceback (most recent call last):
    ...
    RuntimeError: numerics_strict: torch._inductor.config is already imported in this process; run it in a fresh one (explainers.releases.run_under)
    """
    numerics = numerics_strict()
    import torch

    return {"torch": numerics.pop("torch"), "git": torch.version.git_version[:12],
            "cuda": torch.version.cuda, "numerics": numerics, "premul_sum": premul_sum(),
            "integer_reductions": integer_reductions(), "unsorted_ranks": unsorted_ranks(),
            "integer_sweep": {dtype: integer_reductions(INTEGER_OPS, dtype=dtype) for dtype in INTEGER_DTYPES},
            "source": source_facts()}
