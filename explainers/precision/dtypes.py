"""What dtype the answer lands in: output dtypes, the reductions that refuse a dtype, one rounding per op.

Rule 3 of PyTorch's precision rules: the output dtype follows the input; a
reduction that cannot give an answer in a dtype refuses it; a fused op such as
``addmm`` rounds once, where ``mm`` then ``add`` round twice.

>>> import torch
>>> output_dtype(lambda x: x.sum(), torch.bfloat16)
'bfloat16'
"""

import contextlib
from collections.abc import Callable, Iterator, Sequence

import torch

from explainers.page.tables import md_table

__all__ = [
    "output_dtype",
    "output_dtype_table",
    "output_dtype_report",
    "REFUSALS",
    "refusal_report",
    "refusal_cases",
    "refusal_table",
    "addmm_roundings",
]


def output_dtype(op: Callable[[torch.Tensor], torch.Tensor], dtype: torch.dtype) -> str:
    """The dtype ``op`` returns for a small input of ``dtype``, or ``"error: <Type>"``.

    >>> import torch
    >>> output_dtype(lambda x: x.sum(), torch.int8)
    'int64'
    >>> output_dtype(lambda x: x - x, torch.bool)
    'error: NotImplementedError'
    """
    x = (torch.arange(1, 5).reshape(2, 2) % 2).to(dtype)
    try:
        return str(op(x).dtype).removeprefix("torch.")
    except Exception as exc:  # noqa: BLE001 - which ops reject a dtype is part of the table
        return f"error: {type(exc).__name__}"


def output_dtype_table(
    ops: dict[str, Callable[[torch.Tensor], torch.Tensor]],
    dtypes: Sequence[torch.dtype],
) -> dict[str, dict[str, str]]:
    """``{op name: {input dtype: output dtype}}`` for every pair.

    >>> import torch
    >>> output_dtype_table({"x @ x": lambda x: x @ x}, [torch.bfloat16])
    {'x @ x': {'bfloat16': 'bfloat16'}}
    """
    return {
        name: {str(d).removeprefix("torch."): output_dtype(op, d) for d in dtypes}
        for name, op in ops.items()
    }


def output_dtype_report(exprs: Sequence[str], dtype_names: Sequence[str]) -> dict[str, dict[str, str]]:
    """:func:`output_dtype_table` for ops written as expressions in ``x``, as plain JSON.

    Each expression is evaluated with ``x``, ``torch``, ``softmax``
    (``torch.nn.functional.softmax``) and ``float32`` in scope, so a page's
    table labels can be run again under the other release through
    :func:`explainers.releases.run_under`.

    >>> output_dtype_report(["x @ x", "softmax(x, -1)"], ["bool"])
    {'x @ x': {'bool': 'error: NotImplementedError'}, 'softmax(x, -1)': {'bool': 'error: NotImplementedError'}}
    >>> output_dtype_report(["x @ x"], ["integer"])
    Traceback (most recent call last):
    ...
    ValueError: 'integer' is not a torch dtype name
    """
    import torch.nn.functional as F

    dtypes = []
    for name in dtype_names:
        dtype = getattr(torch, name, None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"{name!r} is not a torch dtype name")
        dtypes.append(dtype)
    scope = {"torch": torch, "softmax": F.softmax, "float32": torch.float32}
    ops = {expr: eval(f"lambda x: {expr}", scope) for expr in exprs}  # noqa: S307 - the page's own labels
    return output_dtype_table(ops, dtypes)


# Reductions that refuse an input dtype: (torch function, dtype name).
REFUSALS: tuple[tuple[str, str], ...] = (
    ("mean", "int32"), ("nanmean", "int32"), ("std", "int32"), ("var_mean", "int32"),
    ("argmax", "bool"), ("argmin", "bool"),
)
_REFUSAL_WHERE = ("cpu", "meta", "fake")


@contextlib.contextmanager
def _quiet_fake_tensor_log() -> Iterator[None]:
    # FakeTensorMode (torch 2.14.1, 2.15.0) logs a meta kernel's exception with
    # log.exception before raising it again; the exception is what is reported.
    import logging

    log = logging.getLogger("torch._subclasses.fake_tensor")
    was = log.disabled
    log.disabled = True
    try:
        yield
    finally:
        log.disabled = was


def _torch_frames(exc: BaseException) -> list[str]:
    """``path:function`` of the traceback's frames inside the torch package (none: raised in C++)."""
    import os
    import traceback

    root = os.path.dirname(torch.__file__) + os.sep
    return [f"{f.filename.removeprefix(root)}:{f.name}"
            for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith(root)]


def refusal_report(cases: Sequence[Sequence[str]] | None = None) -> dict:
    """How this torch refuses reductions of a dtype they do not take, as plain JSON.

    ``cases`` are ``[function, dtype name]`` pairs (default :data:`REFUSALS`), each
    called as ``torch.<function>(torch.ones(2, dtype=...))`` on a CPU tensor
    (``"cpu"``), a meta tensor (``"meta"``) and under ``FakeTensorMode``
    (``"fake"``).  Each outcome is ``{"raises": class name, "message": first line,
    "frames": the torch Python frames it was raised through}`` or ``{"returns":
    dtype name}``.  For :func:`explainers.releases.run_under`.

    >>> r = refusal_report([["mean", "int32"]])
    >>> r["cases"][0]["cpu"]["raises"] in ("RuntimeError", "NotImplementedError")
    True
    >>> refusal_report([["mean", "integer"]])
    Traceback (most recent call last):
    ...
    ValueError: cases[0]: 'integer' is not a torch dtype name
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    from explainers.releases import release_of

    rows = []
    for i, case in enumerate(REFUSALS if cases is None else cases):
        if isinstance(case, (str, bytes)) or len(case) != 2 or not all(isinstance(c, str) for c in case):
            raise TypeError(f"cases[{i}] must be a [function, dtype name] pair, got {case!r}")
        name, dtype_name = case
        fn, dtype = getattr(torch, name, None), getattr(torch, dtype_name, None)
        if not callable(fn):
            raise ValueError(f"cases[{i}]: torch.{name} is not a function")
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"cases[{i}]: {dtype_name!r} is not a torch dtype name")
        row = {"op": name, "dtype": dtype_name}
        for where in _REFUSAL_WHERE:
            mode = FakeTensorMode() if where == "fake" else contextlib.nullcontext()
            try:
                with _quiet_fake_tensor_log(), mode:
                    out = fn(torch.ones(2, dtype=dtype, device="meta" if where == "meta" else "cpu"))
            except Exception as exc:  # noqa: BLE001 - the error is the result being reported
                row[where] = {"raises": type(exc).__name__, "message": str(exc).splitlines()[0],
                              "frames": _torch_frames(exc)}
            else:
                first = out[0] if isinstance(out, tuple) else out
                row[where] = {"returns": str(first.dtype).removeprefix("torch.")}
        rows.append(row)
    return {"torch_version": torch.__version__, "release": release_of(torch.__version__), "cases": rows}


def refusal_cases(reports: dict[str, dict]) -> dict[str, dict[tuple[str, str], dict]]:
    """``{release: {(function, dtype name): case}}`` from :func:`refusal_report` results per release.

    >>> rep = {"cases": [{"op": "mean", "dtype": "int32", "cpu": {"raises": "RuntimeError"}}]}
    >>> refusal_cases({"2.14.1": rep})["2.14.1"]["mean", "int32"]["cpu"]
    {'raises': 'RuntimeError'}
    """
    return {rel: {(c["op"], c["dtype"]): c for c in r["cases"]} for rel, r in reports.items()}


_REFUSAL_COLUMNS = (("CPU tensor", "cpu"), ("meta tensor", "meta"), ("`FakeTensorMode`", "fake"))


def refusal_table(reports: dict[str, dict]) -> str:
    """The Markdown table of :func:`refusal_report` results per release: one row per case and release.

    Rows follow the first report's cases, and within a case the order of
    ``reports``; each outcome is the class raised, or ``returns <dtype>``.

    >>> case = {"op": "std", "dtype": "int32", "cpu": {"raises": "RuntimeError"},
    ...         "meta": {"returns": "float32"}, "fake": {"returns": "float32"}}
    >>> print(refusal_table({"2.14.1": {"cases": [case]}}))
    | op | torch | CPU tensor | meta tensor | `FakeTensorMode` |
    |---|---|---|---|---|
    | `std` of `int32` | 2.14.1 | RuntimeError | returns float32 | returns float32 |
    """
    by = refusal_cases(reports)
    rows = []
    for op, dtype in next(iter(by.values()), {}):
        for rel, cases in by.items():
            case = cases[op, dtype]
            rows.append({
                "op": f"`{op}` of `{dtype}`", "torch": rel,
                **{col: case[w]["raises"] if "raises" in case[w] else f"returns {case[w]['returns']}"
                   for col, w in _REFUSAL_COLUMNS},
            })
    return md_table(rows)


def addmm_roundings(m: int = 64, k: int = 512, n: int = 64, seed: int = 0) -> dict[str, float | int]:
    """bf16 ``addmm(bias, a, b)`` against ``a @ b + bias`` and the fp32 result rounded once.

    Returns each one's max error against fp64, and in how many of the ``m*n``
    elements ``addmm`` and ``mm + add`` differ from "fp32 ``a @ b + bias``,
    rounded once to bf16".

    >>> r = addmm_roundings(m=8, k=64, n=8)
    >>> r["max error, addmm"] <= r["max error, mm + add"]
    True
    """
    if min(m, k, n) < 1:
        raise ValueError(f"sizes must be >= 1, got m={m}, k={k}, n={n}")
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=g).bfloat16()
    b = torch.randn(k, n, generator=g).bfloat16()
    bias = torch.randn(n, generator=g).bfloat16()
    ref = a.double() @ b.double() + bias.double()
    fused = torch.addmm(bias, a, b)
    once = (a.float() @ b.float() + bias.float()).bfloat16()
    twice = a @ b + bias  # the product is rounded to bf16, then the sum again

    def err(t: torch.Tensor) -> float:
        return float((t.double() - ref).abs().max())

    return {
        "elements": m * n,
        "max error, addmm": err(fused),
        "max error, fp32 result rounded once": err(once),
        "max error, mm + add": err(twice),
        "addmm differs from rounded once": int((fused != once).sum()),
        "mm + add differs from rounded once": int((twice != once).sum()),
    }
