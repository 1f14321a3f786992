"""What the Versions page shows: which release verified which page, and what changed between them.

``nox -s docs`` executes each page on the primary release only;
``nox -s docs -- --all-releases`` and ``nox -s tests`` execute each page on every
release in :data:`explainers.releases.SUPPORTED`.  The published build runs on the
primary release; with ``--all-releases`` nox builds the others first and each of those builds records
which pages it executed and whether their claims held (``record.json``, written
by ``docs/_ext/strict_exec.py``).  :func:`matrix` turns those records into the
page × release table.  :data:`DIFFERENCES` lists the behaviour differences the
pages execute on both releases (a selection, not a changelog), each with the label of the section that shows
it; the strict build fails on a label that does not exist.

>>> rows = matrix(["render"], {"2.14.1": {"torch": "2.14.1", "pages": {"render": True}}},
...               ("2.15.0", "2.14.1"), "2.15.0", executed=["render"])
>>> rows[0]["page"], rows[0]["2.14.1"]
('render', 'claims held')
"""

from __future__ import annotations

import ast
import json
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DIFFERENCES", "Difference", "executed_pages", "matrix", "read_records"]


@dataclass(frozen=True)
class Difference:
    """A behaviour that differs between supported releases, and the section that executes it:
    ``what`` is the behaviour, ``old`` what 2.14.1 does, ``new`` what 2.15.0 does."""

    page: str
    label: str
    what: str
    old: str
    new: str


# One entry per difference a page shows by execution; the page asserts each release's behaviour.
DIFFERENCES: tuple[Difference, ...] = (
    Difference("mesh", "versions-mesh-broadcast",
               "LocalTensorMode's emulated broadcast from a group rank other than 0",
               "takes the source from the wrong rank, silently, along mesh dims whose groups are not "
               "consecutive ranks",
               "broadcasts what gloo broadcasts"),
    Difference("allocator", "versions-allocator-free",
               "the host allocator's free() when recording an event fails, reached from a dying StorageImpl",
               "lets the exception out and the process terminates",
               "catches it, warns once, and never reuses the block"),
    Difference("allocator", "versions-allocator-stats",
               "the host allocator's statistics",
               "updates the allocation and per-bucket counters from pools holding different mutexes, and "
               "getStats reads them under the default pool's locks only (ThreadSanitizer reports races)",
               "keeps per-bucket counters per pool and guards the rest with a new innermost "
               "stats_.allocations_mutex_ (no reports)"),
    Difference("allocator", "versions-allocator-empty-cache",
               "the host allocator's empty_cache()",
               "can destroy mutexes a concurrent free() holds, and re-locks instance_mutex_ shared while "
               "holding it (libstdc++ throws std::system_error)",
               "does neither"),
    Difference("allocator", "versions-allocator-record-stream",
               "aten::record_stream's kernels (neither release has a CPU kernel)",
               "no MPS kernel", "adds MPS"),
    Difference("collectives", "versions-collectives-fsdp2-reduce-dtype",
               "FSDP2 with MixedPrecisionPolicy(param_dtype=bf16) and reduce_dtype=None on fp32 parameters "
               "(reduce_dtype=bf16 gives 2.14.1's behaviour on both)",
               "reduce-scatters the bf16 gradients in bf16 and, with gradient sync off, holds bf16 gradients",
               "copies them into an fp32 buffer, reduce-scatters fp32 and holds fp32 gradients"),
    Difference("collectives", "versions-collectives-fsdp2-reduce-dtype",
               "FSDP2 with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp16) on fp32 parameters "
               "(both reduce in fp16)",
               "gradients are bf16 before the copy-in",
               "gradients are fp16 before the copy-in (the parameter's grad_dtype)"),
    Difference("collectives", "versions-collectives-fsdp2-reduce-dtype",
               "FSDP2 with param_dtype=bf16 and an explicit grad_dtype=None on every parameter of a group",
               "ignores grad_dtype",
               "reduces in bf16 and leaves a bf16 sharded .grad"),
    Difference("precision", "versions-precision-refusal-type",
               "mean, nanmean, std and var_mean of an integer tensor, argmax and argmin of a bool tensor "
               "(same message on both; on meta and fake tensors only nanmean changed, mean and var_mean "
               "raise RuntimeError on both, std, argmax and argmin do not refuse)",
               "RuntimeError", "NotImplementedError (a RuntimeError subclass)"),
    Difference("versions", "versions-numerics",
               "TORCHINDUCTOR_NUMERICS=strict and emulate_precision_casts",
               "leaves it off; TORCHINDUCTOR_EMULATE_PRECISION_CASTS alone decides it; numerics values "
               "default and strict",
               "turns it on, and neither TORCHINDUCTOR_EMULATE_PRECISION_CASTS nor "
               "config.patch(emulate_precision_casts=False) turns it off while strict is set; adds the values strict_pointwise (implies the flags) and "
               "strict_reduction (implies no flag, and no reader of numerics tests for it)"),
    Difference("versions", "versions-numerics",
               "The reductions Inductor's INNER_TREE check accepts under numerics=strict, over one "
               "dimension (read from the source; as installed, neither release's Triton has "
               "ReductionOrdering, so neither selects the order)",
               "sum.dim_IntList only", "sum.dim_IntList and prod.dim_int"),
    Difference("versions", "versions-numerics",
               "Inductor's joint-graph pass that drops an all-zero efficient-attention bias "
               "(read from the source)",
               "does not exist", "runs with joint-graph constant folding (on by default); numerics=strict "
               "skips it"),
    Difference("versions", "versions-premul-sum",
               "LocalTensorMode's all_reduce with ReduceOp.PREMUL_SUM",
               "raises NotImplementedError", "multiplies by the factor and sums (reduce_scatter_tensor too)"),
    Difference("versions", "versions-fsdp2-mixed-grads",
               "FSDP2 with param_dtype=bf16 and grad_dtype=None on some but not all parameters of a group",
               "ignores grad_dtype: foreach_reduce receives bf16 gradients and reduce-scatters bf16, also "
               "after a backward with gradient sync off (its foreach_reduce asserts a uniform gradient dtype)",
               "with one backward, foreach_reduce receives bf16 gradients and reduces in fp32; after a "
               "backward with gradient sync off, it receives one bf16 and three fp32 gradients and "
               "reduce-scatters fp32"),
    Difference("versions", "versions-fsdp2-uniform",
               "FSDP2 with param_dtype=bf16 and reduce_dtype fp16, fp32 or fp64, a backward with gradient "
               "sync off, then a synced backward in which a parameter gets its first gradient",
               "raises AssertionError: FSDP reduce-scatter expects uniform gradient dtype",
               "succeeds, with fp32 gradients"),
    Difference("versions", "versions-integer-var",
               "var and std_mean of an integer or bool CPU tensor (std, mean, nanmean and var_mean too: "
               "precision page; same message on both)",
               "RuntimeError", "NotImplementedError"),
    Difference("versions", "versions-bfx9",
               "fp32_precision = \"bfx9\"",
               "every setter refuses it as an unknown precision",
               "torch.backends.cuda.matmul.fp32_precision accepts it; the other setters refuse it as "
               "cuda-matmul-only"),
    Difference("versions", "versions-unsorted-ranks",
               "LocalTensorMode's all_reduce, broadcast and all_gather over new_group([1, 0], sort_ranks=False)",
               "raise AssertionError(ranks) in _prepare_collective_groups",
               "work (run in a 2-rank world, where the group is the whole world), all_gather in the "
               "group's rank order"),
)


def read_records(folder: str | os.PathLike | None = None) -> dict[str, dict]:
    """The records of the other releases' builds, by release: ``$TORCH_EXPLAINERS_RELEASE_RECORDS``
    (set by nox) or ``folder``; empty when there are none.

    >>> read_records("/nonexistent")
    {}
    """
    where = folder or os.environ.get("TORCH_EXPLAINERS_RELEASE_RECORDS")
    if not where or not Path(where).is_dir():
        return {}
    out = {}
    for path in sorted(Path(where).glob("*/record.json")):
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or not isinstance(data.get("pages"), dict):
            raise ValueError(f"{path}: not a release record (no 'pages' mapping)")
        out[path.parent.name] = data
    return out


def executed_pages(docs: str | os.PathLike) -> list[str]:
    """The pages a build of ``docs`` executes: every ``*.md`` with a ``{code-cell}``, less those
    ``docs/conf.py``'s ``nb_execution_excludepatterns`` names (read from its source).

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "conf.py").write_text("nb_execution_excludepatterns = ['b.md']\\n")
    >>> for name in "abc":
    ...     _ = (d / f"{name}.md").write_text("```{code-cell} ipython3\\n```\\n" if name < "c" else "text\\n")
    >>> executed_pages(d)
    ['a']
    """
    from fnmatch import fnmatch

    docs = Path(docs)
    exclude: list[str] = []
    for node in ast.parse((docs / "conf.py").read_text(encoding="utf-8")).body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) else None)
        if isinstance(target, ast.Name) and target.id == "nb_execution_excludepatterns":
            exclude = ast.literal_eval(node.value)
    return sorted(p.stem for p in docs.glob("*.md")
                  if "```{code-cell}" in p.read_text(encoding="utf-8")
                  and not any(fnmatch(p.name, pattern) for pattern in exclude))


def matrix(pages: list[str], records: dict[str, dict], supported: tuple[str, ...],
           this: str, built: tuple[str, ...] = (), executed: list[str] | None = None) -> list[dict[str, str]]:
    """One row per page, one column per supported release: what that release's build found.

    ``this`` release's column is the running build's own: a page it executes
    (``executed``, see :func:`executed_pages`) reads "claims held", since a build fails, and
    publishes nothing, unless every executed page's claims hold; any other page reads
    "not executed".  Another release's column comes from its record, when this build
    made one (``built``, default every release with a record).

    >>> rows = matrix(["mesh", "index"], {}, ("2.15.0", "2.14.1"), "2.15.0", executed=["mesh"])
    >>> [(r["2.15.0"], r["2.14.1"]) for r in rows]
    [('claims held', 'not built'), ('not executed', 'not built')]
    >>> matrix(["mesh"], {"2.14.1": {"pages": {"mesh": False}}}, ("2.15.0", "2.14.1"), "2.15.0",
    ...        executed=["mesh"])[0]["2.14.1"]
    'FAILED'
    >>> matrix(["mesh"], {}, ("2.15.0",), "2.14.1", executed=[])
    Traceback (most recent call last):
    ...
    ValueError: this build's release 2.14.1 is not among the supported releases ('2.15.0',)
    """
    if this not in supported:
        raise ValueError(f"this build's release {this} is not among the supported releases {supported}")
    if executed is None:
        raise TypeError("matrix() needs executed=, the pages this build executes (executed_pages)")
    built = built or tuple(records)
    rows = []
    for page in pages:
        row = {"page": page}
        for release in supported:
            if release == this:
                row[release] = "claims held" if page in executed else "not executed"
            elif release in built and release in records:
                held = records[release]["pages"].get(page)
                row[release] = "claims held" if held else ("FAILED" if held is False else "not executed")
            else:
                row[release] = "not built"
        rows.append(row)
    return rows
