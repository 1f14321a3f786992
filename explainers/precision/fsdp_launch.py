"""Launch FSDP2 on a real gloo world on CPU and report which dtype and op reduced its gradients.

``MixedPrecisionPolicy(param_dtype=..., reduce_dtype=...)`` decides the dtype
FSDP2 (``torch.distributed.fsdp.fully_shard``) runs its gradient
reduce-scatter in.  Instead of trusting the docstring, :func:`fsdp_reduce_dtypes`
launches ``world_size`` real processes (one per rank, ``gloo`` backend, CPU,
rendezvous on 127.0.0.1 only), applies ``fully_shard`` with the policy to a tiny
fp32 model, runs one forward and backward, and records what actually happened:

* every collective that reached the c10d dispatcher, with its tensors' dtypes;
* for each gradient reduce-scatter (and all-reduce, which plain FSDP2 does not
  issue; HSDP does), the dtype of the tensor FSDP2 handed to
  ``torch.distributed``, the ``ReduceOp`` it passed, and any division FSDP2
  applied to that buffer before or after the collective;
* the dtype of the gradients autograd produced before the reduction, and of the
  sharded ``.grad`` FSDP2 leaves on the parameter afterwards;
* on a second fresh model with gradient sync off
  (``FSDPModule.set_requires_gradient_sync(False)``), the dtype of the gradient
  FSDP2 holds after one backward, the one later microbatches accumulate into.

Everything is returned as plain data (dtypes as strings such as
``"torch.bfloat16"``), so the ranks can run under another Python environment
(another torch release: pass its interpreter as ``python=``) and the result
still compares.  :func:`fsdp_reduce_report` takes and returns JSON only, for
:func:`explainers.releases.run_under`: one call observes another release's
FSDP2 and reads that release's source of the decision.

What ``param_dtype=bf16, reduce_dtype=None`` does differs between releases
(``python -m explainers.precision.fsdp_rank`` shows it): torch 2.14.1 reduce-scatters
the bf16 gradients as they are, in bf16, and holds bf16 gradients while sync is
off; torch 2.15.0 copies them into an fp32 buffer and reduce-scatters fp32, the
parameters' dtype, and holds fp32 gradients while sync is off.  Both use
``ReduceOp.AVG`` and leave an fp32 sharded ``.grad``.  A policy may carry a third
element, a ``grad_dtype`` set on every parameter before ``fully_shard`` (``None``
included), which 2.15.0's FSDP2 reads and 2.14.1's does not.

Private or semi-private PyTorch APIs used by the ranks (checked on torch 2.14.1
and 2.15.0): ``torch.utils._python_dispatch.TorchDispatchMode`` (to see the
``c10d::`` and ``fsdp::`` ops as dispatched; FSDP2's copy into the
reduce-scatter buffer is ``fsdp::chunk_cat`` in 2.14.1 and
``fsdp::chunk_cat_mixed_dtype`` in 2.15.0), FSDP2's per-parameter state
(``FSDPModule._get_fsdp_state()._fsdp_param_group.fsdp_params``, each with
``_unsharded_param`` and ``unsharded_accumulated_grad``: the gradient held while
sync is off), and the knowledge that FSDP2 calls
``torch.distributed.reduce_scatter_single`` / ``torch.distributed.all_reduce``
through the module attribute (``_fully_shard/_fsdp_collectives.py``), which is
why wrapping those two attributes sees the ``ReduceOp``.  If a release moves
the reduction elsewhere, the dispatcher still sees the c10d op and the ranks
fail with an error saying the entry point changed, instead of reporting nothing;
if it renames the copy-in, they fail saying so.

The ranks run :mod:`explainers.precision.fsdp_rank`; the plain-data helpers
are in :mod:`explainers.precision.fsdp_data`, where FSDP2 decides in
:mod:`explainers.precision.fsdp_decision`, the tables in
:mod:`explainers.precision.fsdp_tables`.

>>> fsdp_reduce_dtypes(world_size=9)
Traceback (most recent call last):
...
ValueError: world_size must be at most 8 processes, got 9
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from explainers.checks import is_int
from explainers.precision.fsdp_data import _check_dtype, dtype_name, parse_dtype
from explainers.precision.fsdp_decision import reduce_dtype_source

__all__ = [
    "fsdp_reduce_dtypes",
    "fsdp_reduce_dtypes_many",
    "fsdp_reduce_report",
]


_REPO_ROOT = Path(__file__).resolve().parents[2]
_MAX_WORLD = 8  # every rank is a Python process importing torch: keep it a demonstration


def _check_world_size(world_size: object) -> int:
    # bool is an int subclass; `world_size=True` is a bug, not a world of 1.
    if not is_int(world_size):
        raise TypeError(f"world_size must be an int, got {type(world_size).__name__}")
    if world_size < 2:
        # With one rank FSDP2 copies the gradient instead of reduce-scattering
        # it (foreach_reduce, torch 2.14.1 and 2.15.0): there would be nothing to observe.
        raise ValueError(
            f"world_size must be at least 2 (one rank issues no reduce-scatter), got {world_size}"
        )
    if world_size > _MAX_WORLD:
        raise ValueError(f"world_size must be at most {_MAX_WORLD} processes, got {world_size}")
    return world_size


def fsdp_reduce_dtypes(
    param_dtype: torch.dtype | None = torch.bfloat16,
    reduce_dtype: torch.dtype | None = None,
    world_size: int = 2,
    *,
    timeout: float = 180.0,
    python: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Run FSDP2 with ``MixedPrecisionPolicy(param_dtype, reduce_dtype)`` on real ranks; report.

    Launches ``world_size`` processes of ``python`` (default: this interpreter)
    forming a gloo process group on CPU, applies ``fully_shard`` with the
    policy to a tiny fp32 model (two ``Linear`` layers), runs one forward and
    backward, and returns what rank 0 observed (every rank must observe the
    same, or this raises):

    ``torch_version``, ``backend``, ``device``, ``world_size``
        where it ran;
    ``param_dtype``, ``reduce_dtype``
        the policy asked for (``None`` stays ``None``);
    ``orig_dtype``
        the parameters' dtype (``"torch.float32"``);
    ``all_gather_dtypes``
        dtypes of the parameter all-gathers (the compute dtype);
    ``unsharded_grad_dtype``
        dtype of the gradients FSDP2 took from the unsharded parameters' ``.grad``
        and copied into its reduce-scatter buffer;
    ``copy_in_dtype``
        dtype of that buffer (the copy casts where the two differ);
    ``reduce_scatters``, ``all_reduces``
        one dict per gradient collective: ``input_dtype`` and ``output_dtype``
        of the tensors passed to ``torch.distributed``, ``op`` (see
        :func:`op_name`), ``pre_divide`` / ``post_divide`` (the divisor FSDP2
        applied in place to that buffer before / after the collective, or
        ``None``) and ``c10d_ops`` (the dispatched c10d op names);
    ``reduce_scatter_dtype``, ``reduce_op``
        the dtype and op shared by every reduce-scatter;
    ``sharded_grad_dtype``
        dtype of the sharded ``.grad`` left on every parameter;
    ``param_grad_dtype``
        ``"unset"``, or the ``grad_dtype`` set on every parameter before
        ``fully_shard`` (see :func:`fsdp_reduce_dtypes_many`);
    ``no_sync_grad_dtype``
        on a second fresh model with the same policy and gradient sync off, the
        dtype of the gradient FSDP2 holds for each parameter after one backward
        (no reduce-scatter runs then);
    ``no_sync_held_numel``, ``param_numel``, ``shard_numel``
        on that model, the elements of those held gradients over all parameters,
        and the parameters' full (unsharded) and this rank's sharded element counts.

    Raises ``RuntimeError`` with every rank's output tail if a rank fails or
    the launch takes longer than ``timeout`` seconds (then every rank is
    killed).  Nothing is written to this process's stdout or stderr: the ranks'
    output (warnings included) is captured.

    >>> r = fsdp_reduce_dtypes(torch.bfloat16, None)  # doctest: +SKIP
    >>> r["reduce_op"], r["sharded_grad_dtype"]  # doctest: +SKIP
    ('AVG', 'torch.float32')
    >>> fsdp_reduce_dtypes(world_size=1)
    Traceback (most recent call last):
    ...
    ValueError: world_size must be at least 2 (one rank issues no reduce-scatter), got 1
    """
    return fsdp_reduce_dtypes_many(
        [(param_dtype, reduce_dtype)], world_size, timeout=timeout, python=python
    )[0]


def fsdp_reduce_dtypes_many(
    policies: Sequence[tuple[torch.dtype | None, ...]],
    world_size: int = 2,
    *,
    timeout: float = 180.0,
    python: str | os.PathLike | None = None,
) -> list[dict[str, Any]]:
    """:func:`fsdp_reduce_dtypes` for several ``(param_dtype, reduce_dtype)`` policies, one launch.

    The ranks start and form the process group once, then run every policy in
    turn on a fresh model: a page that compares policies pays the start-up
    (interpreters, ``import torch``, rendezvous) once.  A policy may be a triple
    ``(param_dtype, reduce_dtype, grad_dtype)``: ``grad_dtype`` (a floating dtype
    or ``None``) is then assigned to every parameter's ``Tensor.grad_dtype``
    before ``fully_shard``; in a pair it is left unset.

    >>> fsdp_reduce_dtypes_many([("bf16", None)])
    Traceback (most recent call last):
    ...
    TypeError: policies[0] param_dtype must be a torch.dtype or None, got str 'bf16'
    """
    world_size = _check_world_size(world_size)
    if isinstance(policies, (str, bytes)) or not isinstance(policies, Sequence):
        raise TypeError(f"policies must be a sequence of (param_dtype, reduce_dtype) pairs, got {policies!r}")
    if not policies:
        raise ValueError("policies is empty: give at least one (param_dtype, reduce_dtype) pair")
    specs = []
    for i, pair in enumerate(policies):
        if not isinstance(pair, (tuple, list)) or len(pair) not in (2, 3):
            raise TypeError(f"policies[{i}] must be a (param_dtype, reduce_dtype[, grad_dtype]) tuple, "
                            f"got {pair!r}")
        p = _check_dtype(f"policies[{i}] param_dtype", pair[0])
        r = _check_dtype(f"policies[{i}] reduce_dtype", pair[1])
        spec = [dtype_name(p), dtype_name(r)]
        if len(pair) == 3:
            spec.append(dtype_name(_check_dtype(f"policies[{i}] grad_dtype", pair[2])))
        specs.append(spec)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    interpreter = os.fspath(python) if python is not None else sys.executable
    if not Path(interpreter).is_file():
        raise FileNotFoundError(f"python interpreter not found: {interpreter}")
    return _launch(specs, world_size, float(timeout), interpreter)


def fsdp_reduce_report(
    policies: Sequence[Sequence[str | None]], world_size: int = 2, timeout: float = 180.0
) -> dict[str, Any]:
    """:func:`fsdp_reduce_dtypes_many` with JSON in and out, plus the source that decides.

    For :func:`explainers.releases.run_under`, which runs it under another torch
    release: ``policies`` are ``[param_dtype, reduce_dtype]`` pairs, or
    ``[param_dtype, reduce_dtype, grad_dtype]`` triples, of dtype names
    (``"bfloat16"`` or ``"torch.bfloat16"``) or ``None``.  Returns ``torch_version``,
    ``release`` (:func:`explainers.releases.release_of`), ``runs`` (one
    :func:`fsdp_reduce_dtypes` result per policy) and ``source``
    (:func:`reduce_dtype_source` of this torch), so one call, one interpreter,
    observes a release and reads why.

    >>> fsdp_reduce_report([["bfloat16", "fp32"]])
    Traceback (most recent call last):
    ...
    ValueError: not a torch dtype name: 'fp32'
    >>> fsdp_reduce_report([[torch.bfloat16, None]])
    Traceback (most recent call last):
    ...
    TypeError: policies[0] must be a pair or triple of dtype names or None, got [torch.bfloat16, None]
    """
    from explainers.releases import release_of

    if isinstance(policies, (str, bytes)) or not isinstance(policies, Sequence):
        raise TypeError(f"policies must be a list of [param_dtype, reduce_dtype] name pairs, got {policies!r}")
    pairs = []
    for i, pair in enumerate(policies):
        if (isinstance(pair, (str, bytes)) or not isinstance(pair, Sequence) or len(pair) not in (2, 3)
                or not all(n is None or isinstance(n, str) for n in pair)):
            raise TypeError(f"policies[{i}] must be a pair or triple of dtype names or None, got {list(pair)!r}")
        pairs.append(tuple(parse_dtype(n) for n in pair))
    return {
        "torch_version": torch.__version__,
        "release": release_of(torch.__version__),
        "runs": fsdp_reduce_dtypes_many(pairs, world_size, timeout=timeout),
        "source": reduce_dtype_source(),
    }


def _launch(
    specs: list[list[str | None]], world_size: int, timeout: float, interpreter: str
) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="fsdp-reduce-") as tmp:
        d = Path(tmp)
        (d / "policies.json").write_text(json.dumps(specs))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_REPO_ROOT), env.get("PYTHONPATH")) if p
        )
        # One thread per rank: the model is tiny, and the ranks share the cores.
        env["OMP_NUM_THREADS"] = "1"
        procs: list[subprocess.Popen] = []
        logs = []
        try:
            for rank in range(world_size):
                log = open(d / f"rank{rank}.log", "wb")  # noqa: SIM115 (closed in finally)
                logs.append(log)
                cmd = [
                    interpreter,
                    "-m",
                    "explainers.precision.fsdp_rank",
                    f"--rank={rank}",
                    f"--world-size={world_size}",
                    f"--dir={d}",
                    f"--timeout={timeout}",
                ]
                # Own session per rank: on timeout we kill exactly the processes
                # we started (and anything they started), by process-group id.
                procs.append(
                    subprocess.Popen(
                        cmd,
                        env=env,
                        cwd=d,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
            deadline = time.monotonic() + timeout
            timed_out = False
            for p in procs:
                try:
                    p.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    timed_out = True
                    break
        finally:
            for p in procs:
                if p.poll() is None:
                    with contextlib.suppress(ProcessLookupError):  # exited meanwhile
                        os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
            for log in logs:
                log.close()
        tails = "\n".join(
            f"--- rank {r} (exit {p.returncode}) ---\n"
            + (d / f"rank{r}.log").read_text(errors="replace")[-2000:]
            for r, p in enumerate(procs)
        )
        if timed_out:
            raise RuntimeError(f"FSDP2 ranks did not finish in {timeout:g} s:\n{tails}")
        if any(p.returncode != 0 for p in procs):
            raise RuntimeError(f"an FSDP2 rank failed:\n{tails}")
        per_rank = [json.loads((d / f"rank{r}.json").read_text()) for r in range(world_size)]
    for r, got in enumerate(per_rank[1:], start=1):
        if got != per_rank[0]:
            raise RuntimeError(
                f"rank {r} observed something else than rank 0:\n{got}\nvs\n{per_rank[0]}"
            )
    return per_rank[0]
