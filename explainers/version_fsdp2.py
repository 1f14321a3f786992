"""When 2.14.1's FSDP2 "uniform gradient dtype" assertion fires, swept over its two conditions.

FSDP2 (``torch.distributed.fsdp.fully_shard``) with ``MixedPrecisionPolicy(param_dtype=bf16)``
accumulates gradients across backwards with gradient sync off.  :func:`uniform_dtype_sweep`
builds a two-``Linear`` module whose forward can skip the second ``Linear``, runs one
backward with sync off (using or skipping it), then one synced backward that uses both, for
``reduce_dtype`` ``None``, ``bfloat16`` (the ``param_dtype``), ``float16``, ``float32`` and
``float64``.  It runs on the ``"fake"`` process group (rank 0 of 2), so it needs no second
process and no GPU.  Checked on torch 2.14.1 and 2.15.0.

>>> uniform_dtype_sweep()["reduce_dtype=None, second Linear skipped first"]
'ok: float32, float32, float32, float32'
"""

from __future__ import annotations

import contextlib
import io
import re
from typing import Any

__all__ = ["CASES", "uniform_dtype_sweep"]

# case -> (MixedPrecisionPolicy.reduce_dtype, whether the no-sync backward skips the second Linear)
CASES = {
    f"reduce_dtype={rd}, {'second Linear skipped first' if skip else 'both Linears used first'}": (
        None if rd == "None" else rd, skip)
    for rd in ("None", "bfloat16", "float16", "float32", "float64") for skip in (False, True)
}


def _outcome(exc: BaseException | None, grads: list[str]) -> str:
    if exc is None:
        return "ok: " + ", ".join(grads)
    first = str(exc).splitlines()[0]
    # the message prints a Python set, whose order varies between runs: sort its members
    first = re.sub(r"\{([^}]*)\}", lambda m: "{" + ", ".join(sorted(m.group(1).split(", "))) + "}", first)
    return f"{type(exc).__name__}: {first}"


def uniform_dtype_sweep() -> dict[str, Any]:
    """For each of :data:`CASES`, ``"ok: "`` and the four accumulated gradients' dtypes after the
    synced backward, or the exception's type and first line (a set in it sorted).

    Run it in a process with no default process group (it creates and destroys the ``"fake"`` one).
    """
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    class Two(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

        def forward(self, x, use_b=True):
            y = self.a(x)
            return self.b(y) if use_b else y

    out: dict[str, Any] = {}
    dist.init_process_group("fake", rank=0, world_size=2)
    try:
        for case, (reduce_dtype, skip) in CASES.items():
            torch.manual_seed(0)
            model = Two()
            fully_shard(model, mp_policy=MixedPrecisionPolicy(
                param_dtype=torch.bfloat16, reduce_dtype=reduce_dtype and getattr(torch, reduce_dtype)))
            model.set_requires_gradient_sync(False)
            model(torch.ones(2, 4), use_b=not skip).float().sum().backward()
            model.set_requires_gradient_sync(True)
            try:
                # 2.14.1 also prints the assertion's message, prefixed with the rank, before raising it
                with contextlib.redirect_stdout(io.StringIO()):
                    model(torch.ones(2, 4)).float().sum().backward()
            except AssertionError as exc:
                out[case] = _outcome(exc, [])
            else:
                out[case] = _outcome(None, [str(p.grad.dtype).removeprefix("torch.") for p in model.parameters()])
    finally:
        dist.destroy_process_group()
    return out
