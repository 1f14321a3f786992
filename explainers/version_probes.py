"""Behaviour differences between torch releases that the Versions page executes itself.

Each probe takes and returns plain JSON, so :func:`explainers.releases.run_under`
can run it under every supported release and the page can put the answers side
by side.  :func:`probe_all` runs all four in one fresh process:

* :func:`numerics_strict`: what ``TORCHINDUCTOR_NUMERICS=strict`` implies for
  ``torch._inductor.config.emulate_precision_casts``;
* :func:`premul_sum`: an ``all_reduce`` with ``ReduceOp.PREMUL_SUM`` under
  ``LocalTensorMode`` (the simulated worlds of the mesh page);
* :func:`fsdp2_mixed_grad_dtypes`: the dtype FSDP2 reduce-scatters in when one
  parameter's gradient is bf16 and the others' fp32;
* :func:`integer_reductions`: the exception ``var``, ``std``, ``mean`` and
  ``var_mean`` raise for an integer tensor.

Private APIs (checked on torch 2.14.1 and 2.15.0): ``torch.distributed._make_nccl_premul_sum``
(the only way to build a PREMUL_SUM ``ReduceOp`` from Python; FSDP2 uses it),
``torch.distributed._local_tensor.LocalTensorMode`` (through
:mod:`explainers.mesh.simulated`), and ``torch.utils._python_dispatch.TorchDispatchMode``
(to see the reduce-scatter FSDP2 dispatches).

>>> integer_reductions(ops=("var",))["var"]["message"]
'std and var only support floating point and complex dtypes'
"""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["fsdp2_mixed_grad_dtypes", "integer_reductions", "numerics_strict", "premul_sum",
           "probe_all"]


def numerics_strict() -> dict[str, Any]:
    """``emulate_precision_casts`` with ``TORCHINDUCTOR_NUMERICS=strict``, and with ``numerics="default"``.

    Inductor reads the variable when ``torch._inductor.config`` is first imported, so
    this must run in a process that has not imported it yet (a :func:`run_under` child);
    ``TORCHINDUCTOR_EMULATE_PRECISION_CASTS`` is removed first, since it sets the flag too.

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
    with config.patch(numerics="default"):
        default = (config.numerics, bool(config.emulate_precision_casts))
    return {"torch": torch.__version__, "numerics": strict[0], "strict": strict[1],
            "default_numerics": default[0], "default": default[1]}


def premul_sum(world_size: int = 2, factor: float = 2.0) -> dict[str, Any]:
    """``all_reduce(ones(3), PREMUL_SUM with factor)`` in a simulated ``world_size``-rank world.

    Returns ``raised`` (the exception's type name, or ``None``), ``message`` and
    ``values`` (each rank's result, or ``None`` when it raised).

    >>> premul_sum(2, 0.5)["values"] in ([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], None)
    True
    """
    import torch
    import torch.distributed as dist

    from explainers.mesh.simulated import simulated_world

    with simulated_world(world_size):
        t = torch.ones(3)
        try:
            dist.all_reduce(t, op=dist._make_nccl_premul_sum(factor))
        except NotImplementedError as exc:
            return {"raised": type(exc).__name__, "message": str(exc), "values": None}
        values = [t._local_tensors[r].tolist() for r in sorted(t._local_tensors)]
    return {"raised": None, "message": None, "values": values}


def fsdp2_mixed_grad_dtypes() -> dict[str, Any]:
    """The dtype of FSDP2's reduce-scatter when ``grad_dtype=None`` is set on no, one or every parameter.

    A two-``Linear`` fp32 model, ``fully_shard`` with ``MixedPrecisionPolicy(param_dtype=bf16)``,
    one backward, on the ``"fake"`` process group (rank 0 of 2: the collective moves no
    data, FSDP2 still chooses its dtype).  ``grad_dtype=None`` lets a parameter's gradient
    keep the bf16 of the computation, so "one" gives a group with one bf16 and three fp32
    gradients.  ``uniform_assert`` says whether the installed FSDP2 still has the check
    "FSDP reduce-scatter expects uniform gradient dtype".

    >>> fsdp2_mixed_grad_dtypes()["reduce_scatter_dtype"]["all"]  # every gradient bf16
    ['bfloat16']
    """
    import inspect

    import torch
    import torch.distributed as dist
    import torch.distributed.fsdp._fully_shard._fsdp_collectives as collectives
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.dtypes: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if "reduce_scatter" in str(func):
                self.dtypes.append(str(args[1].dtype).removeprefix("torch."))
            return func(*args, **(kwargs or {}))

    out: dict[str, Any] = {}
    dist.init_process_group("fake", rank=0, world_size=2)
    try:
        for which in ("none", "one", "all"):
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
            params = list(model.parameters())
            for p in {"none": [], "one": params[:1], "all": params}[which]:
                p.grad_dtype = None
            fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
            seen = Seen()
            with seen:
                model(torch.ones(2, 4)).float().sum().backward()
            out[which] = seen.dtypes
    finally:
        dist.destroy_process_group()
    text = inspect.getsource(collectives)
    return {"reduce_scatter_dtype": out,
            "uniform_assert": "FSDP reduce-scatter expects uniform gradient dtype" in text}


def integer_reductions(ops: tuple[str, ...] = ("var", "std", "mean", "var_mean")) -> dict[str, Any]:
    """The exception each of ``ops`` raises for ``torch.arange(6)``: type name and first line.

    >>> integer_reductions(ops=("sum",))
    {'sum': {'raised': None, 'message': None}}
    """
    import torch

    out = {}
    for op in ops:
        try:
            getattr(torch, op)(torch.arange(6))
        except RuntimeError as exc:  # NotImplementedError is a RuntimeError subclass
            out[op] = {"raised": type(exc).__name__, "message": str(exc).splitlines()[0].strip()}
        else:
            out[op] = {"raised": None, "message": None}
    return out


def probe_all() -> dict[str, Any]:
    """All four probes, :func:`numerics_strict` first (it needs a fresh process), and torch's build.

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
            "fsdp2": fsdp2_mixed_grad_dtypes(), "integer_reductions": integer_reductions()}
