"""Tables of FSDP2 runs: one row per ``MixedPrecisionPolicy`` and torch release.

>>> short_dtypes({"reduce_dtype": "torch.bfloat16"})
{'reduce_dtype': 'bfloat16'}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from explainers.page.tables import md_table

__all__ = [
    "short_dtypes",
    "fsdp_runs_by_policy",
    "fsdp_table",
    "excerpt_listing",
]


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


def excerpt_listing(excerpts: Sequence[dict[str, str]], strip: str = "") -> str:
    r"""Numbered excerpts (``{"path", "text"}``, as read by ``reduce_dtype_source``) as one listing.

    Each excerpt is headed by its path (``strip`` removed from its front).  Where an
    excerpt continues the previous one's file further down, the lines skipped between
    them are marked, so a cut never reads as contiguous code.

    >>> print(excerpt_listing([{"path": "a.py", "text": "10  x = 1\n11  y = 2"},
    ...                        {"path": "a.py", "text": "15  return y"}]))
    a.py:
    10  x = 1
    11  y = 2
        ⋮  (lines 12-14 not shown)
    15  return y
    """
    out: list[str] = []
    prev_path, prev_last = None, None
    for e in excerpts:
        lines = e["text"].splitlines()
        first, last = int(lines[0].split()[0]), int(lines[-1].split()[0])
        if e["path"] == prev_path and prev_last is not None and first > prev_last:
            if first > prev_last + 1:  # contiguous excerpts read as one block
                out.append(f"    \u22ee  (lines {prev_last + 1}-{first - 1} not shown)")
        else:
            if out:
                out.append("")
            out.append(f"{e['path'].removeprefix(strip)}:")
        out.extend(lines)
        prev_path, prev_last = e["path"], last
    return "\n".join(out)
