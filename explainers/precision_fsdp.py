"""Watch FSDP2 reduce gradients: which dtype, which op, on a real gloo world on CPU.

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
(``python -m explainers.precision_fsdp`` shows it): torch 2.14.1 reduce-scatters
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

The pure helpers need no processes:

>>> import torch
>>> dtype_name(torch.bfloat16), parse_dtype("torch.bfloat16"), parse_dtype(None)
('torch.bfloat16', torch.bfloat16, None)
>>> from torch.distributed import ReduceOp
>>> op_name(ReduceOp.AVG), op_name(ReduceOp.PREMUL_SUM(0.5))
('AVG', 'PREMUL_SUM(0.5)')
"""

from __future__ import annotations

import argparse
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
from explainers.page.tables import md_table

__all__ = [
    "dtype_name",
    "fsdp_reduce_dtypes",
    "fsdp_reduce_dtypes_many",
    "fsdp_reduce_report",
    "fsdp_runs_by_policy",
    "fsdp_table",
    "gradient_divide_factors",
    "leaf_grad_dtype",
    "op_name",
    "parse_dtype",
    "reduce_dtype_source",
    "short_dtypes",
]

_REPO_ROOT = Path(__file__).resolve().parent.parent
_MAX_WORLD = 8  # every rank is a Python process importing torch: keep it a demonstration


def dtype_name(dtype: torch.dtype | None) -> str | None:
    """``str(dtype)`` (``"torch.float32"``), or ``None``: the plain-data form of a dtype.

    >>> dtype_name(torch.float32), dtype_name(None)
    ('torch.float32', None)
    """
    if dtype is None:
        return None
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"expected a torch.dtype or None, got {type(dtype).__name__} {dtype!r}")
    return str(dtype)


def parse_dtype(name: str | None) -> torch.dtype | None:
    """Inverse of :func:`dtype_name`: ``"torch.bfloat16"`` (or ``"bfloat16"``) to the dtype.

    >>> parse_dtype("float16")
    torch.float16
    >>> parse_dtype("torch.nonsense")
    Traceback (most recent call last):
    ...
    ValueError: not a torch dtype name: 'torch.nonsense'
    """
    if name is None:
        return None
    attr = name.removeprefix("torch.")
    dtype = getattr(torch, attr, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"not a torch dtype name: {name!r}")
    return dtype


def op_name(op: Any) -> str:
    """A ``ReduceOp`` as plain text: ``"AVG"``, ``"SUM"``, ``"PREMUL_SUM(0.5)"``.

    FSDP2 passes either a bare ``ReduceOp.RedOpType`` (``ReduceOp.AVG``) or, for a
    custom gradient divide factor, a ``ReduceOp`` object from
    ``ReduceOp.PREMUL_SUM(factor)`` whose ``.op`` and ``.factor`` say what it is.

    >>> from torch.distributed import ReduceOp
    >>> op_name(ReduceOp.SUM), op_name(ReduceOp(ReduceOp.AVG))
    ('SUM', 'AVG')
    """
    inner = getattr(op, "op", None)  # a ReduceOp object wraps a RedOpType
    if inner is not None and hasattr(inner, "name"):
        if inner.name == "PREMUL_SUM":
            return f"PREMUL_SUM({op.factor:g})"
        return inner.name
    if hasattr(op, "name"):  # a bare RedOpType enum member
        return op.name
    raise TypeError(f"not a torch.distributed.ReduceOp: {op!r}")


class _SizedGroup:
    # _get_gradient_divide_factors (torch 2.14.1, 2.15.0) only calls .size() on the groups it is
    # given, so a stand-in with that method lets it run without a process group.
    def __init__(self, size: int) -> None:
        self._size = size

    def size(self) -> int:
        return self._size


def gradient_divide_factors(
    reduce_dtype: torch.dtype,
    data_parallel_size: int,
    *,
    force_sum_reduction_for_comms: bool = False,
    device_type: str = "",
) -> dict[str, Any]:
    """FSDP2's choice of ``ReduceOp`` and divisions for one gradient reduce-scatter.

    Calls the installed FSDP2's private ``_get_gradient_divide_factors``
    (``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``, torch 2.14.1 and 2.15.0)
    for a reduce-scatter group of ``data_parallel_size`` ranks, no HSDP
    all-reduce group and no custom divide factor, and returns what it picks:
    the division before the collective (``"pre"``), after it (``"post"``) and
    the reduce-scatter's op.  ``foreach_reduce`` skips a division by ``None``
    or 1 (``_div_if_needed``).

    >>> import torch
    >>> gradient_divide_factors(torch.float16, 16)
    {'pre': 4, 'post': 4.0, 'reduce_scatter': 'SUM'}
    >>> gradient_divide_factors(torch.bfloat16, 16)
    {'pre': None, 'post': None, 'reduce_scatter': 'AVG'}
    >>> gradient_divide_factors(torch.int32, 2)
    Traceback (most recent call last):
    ...
    ValueError: reduce_dtype must be a floating-point dtype, got torch.int32
    """
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import _get_gradient_divide_factors

    _check_dtype("reduce_dtype", reduce_dtype)
    if not is_int(data_parallel_size):
        raise TypeError(f"data_parallel_size must be an int, got {type(data_parallel_size).__name__}")
    if data_parallel_size < 1:
        raise ValueError(f"data_parallel_size must be >= 1, got {data_parallel_size}")
    pre, post, rs_op, _ = _get_gradient_divide_factors(
        _SizedGroup(data_parallel_size), None, reduce_dtype, device_type,
        None, force_sum_reduction_for_comms,
    )
    return {"pre": pre, "post": post, "reduce_scatter": op_name(rs_op)}


def _check_dtype(arg: str, dtype: object) -> torch.dtype | None:
    if dtype is None:
        return None
    if not isinstance(dtype, torch.dtype):
        raise TypeError(
            f"{arg} must be a torch.dtype or None, got {type(dtype).__name__} {dtype!r}"
        )
    if not dtype.is_floating_point:
        raise ValueError(f"{arg} must be a floating-point dtype, got {dtype}")
    return dtype


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
        (no reduce-scatter runs then).

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


def short_dtypes(run: dict[str, Any]) -> dict[str, Any]:
    """``run`` with ``"torch."`` dropped from the dtype names of its ``*_dtype`` fields.

    Other fields (``all_gather_dtypes``, ``reduce_scatters``, ...) are kept as they are.

    >>> short_dtypes({"reduce_dtype": None, "copy_in_dtype": "torch.float32",
    ...               "all_gather_dtypes": ["torch.bfloat16"]})
    {'reduce_dtype': None, 'copy_in_dtype': 'float32', 'all_gather_dtypes': ['torch.bfloat16']}
    """
    return {k: v.removeprefix("torch.") if k.endswith("_dtype") and isinstance(v, str) else v
            for k, v in run.items()}


def fsdp_runs_by_policy(reports: dict[str, dict], keys: Sequence[str]) -> dict[str, dict[str, dict]]:
    """``{release: {key: run}}`` from :func:`fsdp_reduce_report` results per release.

    ``keys`` name the report's policies, in order (one per run); each run goes
    through :func:`short_dtypes`.

    >>> report = {"runs": [{"reduce_dtype": None, "reduce_scatter_dtype": "torch.float32"}]}
    >>> fsdp_runs_by_policy({"2.15.0": report}, ["None"])
    {'2.15.0': {'None': {'reduce_dtype': None, 'reduce_scatter_dtype': 'float32'}}}
    >>> fsdp_runs_by_policy({"2.15.0": report}, ["None", "float32"])
    Traceback (most recent call last):
    ...
    ValueError: zip() argument 2 is shorter than argument 1
    """
    return {rel: dict(zip(keys, map(short_dtypes, report["runs"]), strict=True))
            for rel, report in reports.items()}


def fsdp_table(reports: dict[str, dict]) -> str:
    """The Markdown table of :func:`fsdp_reduce_report` results per release.

    One row per policy and release (policies in the reports' order, then
    ``reports``' order): the dtype of the gradients copied in, of the buffer
    and reduce-scatter, the op and any division before it, the sharded
    ``.grad``'s dtype and the one held with gradient sync off.

    >>> run = {"reduce_dtype": "torch.float16", "param_grad_dtype": None,
    ...        "unsharded_grad_dtype": "torch.float16", "reduce_scatter_dtype": "torch.float16",
    ...        "reduce_op": "SUM", "reduce_scatters": [{"pre_divide": 2.0}],
    ...        "sharded_grad_dtype": "torch.float32", "no_sync_grad_dtype": "torch.float16"}
    >>> header, _, row = fsdp_table({"2.15.0": {"runs": [run]}}).splitlines()
    >>> header.split(" | ")[:4]
    ['| policy', 'torch', 'gradients copied in', 'buffer, reduce-scatter']
    >>> print(row)
    | `reduce_dtype=float16`, `grad_dtype = None` | 2.15.0 | float16 | float16 | SUM | 2 | float32 | float16 |
    """
    runs = {rel: [short_dtypes(run) for run in report["runs"]] for rel, report in reports.items()}
    rows = []
    for i in range(len(next(iter(runs.values()), []))):
        for rel, rel_runs in runs.items():
            run = rel_runs[i]
            policy = f"`reduce_dtype={run['reduce_dtype']}`"
            if run["param_grad_dtype"] != "unset":
                policy += f", `grad_dtype = {run['param_grad_dtype']}`"
            rows.append({
                "policy": policy, "torch": rel,
                "gradients copied in": run["unsharded_grad_dtype"],
                "buffer, reduce-scatter": run["reduce_scatter_dtype"],
                "op": run["reduce_op"], "divided before": run["reduce_scatters"][0]["pre_divide"] or "",
                "sharded `.grad`": run["sharded_grad_dtype"],
                "held, sync off": run["no_sync_grad_dtype"],
            })
    return md_table(rows)


_FSDP2 = "distributed/fsdp/_fully_shard/"
# Where each release decides the dtype of the gradient reduce-scatter when
# MixedPrecisionPolicy.reduce_dtype is None, and casts the reduced shard back:
# (file under torch/, the first line's text, how many lines (None: the whole
# block), and a line to find first (None: from the top)).
_REDUCE_DTYPE_SOURCE: dict[str, tuple[tuple[str, str, int | None, str | None], ...]] = {
    "2.14.1": (
        # foreach_reduce falls back to the dtype of the gradients it was handed.
        (_FSDP2 + "_fsdp_collectives.py", "grad_dtype = unsharded_grads[0].dtype", 2, None),
        # ... and casts the reduced shard to the parameters' original dtype.
        (_FSDP2 + "_fsdp_collectives.py", "_to_dtype_if_needed(reduce_output, orig_dtype)", 1, None),
        # With gradient sync off, post_backward reshards and moves each gradient
        # to an accumulator in reduce_dtype, only if one is set.
        (_FSDP2 + "_fsdp_param_group.py", "if not self.reduce_grads:", 6, "def post_backward"),
        (_FSDP2 + "_fsdp_param.py", "def to_accumulated_grad_if_needed", None, None),
    ),
    "2.15.0": (
        # Each parameter's gradient dtype: reduce_dtype, else its grad_dtype, else its own dtype.
        (_FSDP2 + "_fsdp_param.py", "def unsharded_grad_dtype(self)", None, None),
        # The unsharded parameter's grad_dtype is set to it, so autograd casts to it ...
        (_FSDP2 + "_fsdp_param.py", "self._unsharded_param.grad_dtype = self.unsharded_grad_dtype", 1, None),
        # ... except where it is wider than the compute dtype (more bytes) ...
        (_FSDP2 + "_fsdp_param_group.py", "self._fsdp_params_with_wider_grad_dtype = [", 9,
         "def _init_mp_dtypes"),
        # ... whose cast pre_backward defers to the copy-in, by clearing grad_dtype,
        # in a backward that reduces or onto an existing gradient; with gradient
        # sync off and no gradient yet, grad_dtype stays and autograd casts to it.
        (_FSDP2 + "_fsdp_param_group.py", "self._set_unsharded_grad_dtypes(defer_upcast=True)", 1,
         "def pre_backward"),
        (_FSDP2 + "_fsdp_param_group.py", "def _set_unsharded_grad_dtypes", None, None),
        # The reduce dtype: the promotion of those dtypes (without the partial-HSDP case).
        (_FSDP2 + "_fsdp_param_group.py", "def _get_reduce_dtype(", 11, None),
        (_FSDP2 + "_fsdp_param_group.py", "return functools.reduce(torch.promote_types, dtypes)", 1,
         "def _get_reduce_dtype("),
        # The reduced shard is cast to each parameter's sharded gradient dtype,
        # not at all where that is None (a grad_dtype=None set on the parameter).
        (_FSDP2 + "_fsdp_collectives.py", "key=lambda param_and_size: param_and_size[0].sharded_grad_dtype", 1,
         None),
        (_FSDP2 + "_fsdp_collectives.py", "new_output = _to_dtype_if_needed(group_output, grad_dtype)", 1, None),
        (_FSDP2 + "_fsdp_common.py", "def _to_dtype_if_needed(", None, None),
        # What the release's MixedPrecisionPolicy docstring says changed.
        (_FSDP2 + "_fsdp_api.py", ".. versionchanged:: 2.15", 7, None),
    ),
}


def reduce_dtype_source() -> list[dict[str, str]]:
    """The installed FSDP2's lines that choose the reduce-scatter dtype when ``reduce_dtype`` is None.

    Read from this torch's files (numbered as installed), one ``{"path", "text"}``
    per excerpt, ``path`` relative to the ``torch`` package.  The excerpts are
    listed per release, since the decision moved between files in 2.15.0.

    >>> any("reduce_dtype" in e["text"] for e in reduce_dtype_source())
    True
    """
    from explainers.page.torchsource import quote_installed
    from explainers.releases import release_of

    release = release_of(torch.__version__)
    if release not in _REDUCE_DTYPE_SOURCE:
        raise ValueError(f"no FSDP2 reduce-dtype excerpts for torch {release}: "
                         "add where it decides to _REDUCE_DTYPE_SOURCE")
    return [{"path": path, "text": quote_installed(path, needle, lines=lines, after=after)}
            for path, needle, lines, after in _REDUCE_DTYPE_SOURCE[release]]


def leaf_grad_dtype(param_dtype: torch.dtype, grad_dtype: torch.dtype) -> torch.dtype:
    """The dtype of ``.grad`` that autograd leaves on a ``param_dtype`` leaf whose ``grad_dtype`` is set.

    The leaf is used in ``param_dtype`` arithmetic, so its incoming gradient is
    ``param_dtype``; ``Tensor.grad_dtype`` asks autograd to store it in another
    dtype.  FSDP2 2.15.0 sets its unsharded parameters' ``grad_dtype`` to their
    ``unsharded_grad_dtype``, so their gradients arrive in that dtype when it is
    not wider than the compute dtype; a wider one it clears in a backward that
    reduces, leaving the cast to the reduce-scatter's copy-in.

    >>> leaf_grad_dtype(torch.bfloat16, torch.float16)
    torch.float16
    """
    _check_dtype("param_dtype", param_dtype)
    _check_dtype("grad_dtype", grad_dtype)
    leaf = torch.zeros(4, dtype=param_dtype, requires_grad=True)
    leaf.grad_dtype = grad_dtype
    (leaf * 2).sum().backward()
    return leaf.grad.dtype


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
                    "explainers.precision_fsdp",
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


# --------------------------------------------------------------------------
# Rank side: runs in each launched process (python -m explainers.precision_fsdp).
# --------------------------------------------------------------------------


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


def _no_sync_grad_dtype(spec: list[str | None], rank: int) -> str:
    """One backward with gradient sync off: the dtype of the gradient FSDP2 holds per parameter."""
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
    for fp in model._get_fsdp_state()._fsdp_param_group.fsdp_params:
        grad = fp.unsharded_accumulated_grad
        if grad is None:
            grad = fp._unsharded_param.grad
        if grad is None:
            raise RuntimeError("FSDP2 holds no gradient after a backward with gradient sync off")
        held.add(str(grad.dtype))
    if len(held) != 1:
        raise RuntimeError(f"non-uniform held gradient dtypes with gradient sync off: {held}")
    return held.pop()


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
        "no_sync_grad_dtype": _no_sync_grad_dtype(spec, rank),
    }


# Relative error allowed between FSDP2's reduced gradient and the fp64 mean of
# the ranks' gradients.  bf16 compute leaves about 1e-2; a SUM instead of a mean
# would be off by 1 - 1/world_size >= 0.5.
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
        prog="python -m explainers.precision_fsdp",
        description="One rank of fsdp_reduce_dtypes(); without --rank, run the demo.",
    )
    parser.add_argument("--rank", type=int)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--dir", type=Path, help="rendezvous/results directory")
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args(argv)
    if args.rank is None:  # a person running the module: show both policies, and why
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
