"""What each value of Inductor's ``numerics`` setting does on the torch release it runs under.

A value acts in two ways, and this module measures both on the installed torch:

* the flags it implies: :func:`implied_flags` sets it with ``config.patch`` and reads
  ``emulate_precision_casts`` and ``eager_numerics.{disable_ftz,division_rounding}``;
* the code that reads it: :func:`readers` finds, with :mod:`ast`, every read of an
  attribute ``numerics`` in the installed ``torch`` package and the string it is compared
  with, and :func:`fires` says whether a value takes a different branch there than
  ``"default"`` does.  :func:`reduction_targets` lists the ATen ops the INNER_TREE
  reduction-order check (the reader in ``lowering.py``) accepts, and who calls it.

The Versions page runs :func:`numerics_values` under each release with
:func:`explainers.releases.run_under`.  ``torch._inductor.config`` is a private module;
its ``numerics`` setting exists in torch 2.14.1 (``"default"``, ``"strict"``) and 2.15.0
(``"strict_pointwise"`` and ``"strict_reduction"`` added).

>>> fires({"op": "NotEq", "value": "strict"}, "strict"), fires({"op": "NotEq", "value": "strict"}, "bogus")
(True, False)
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

__all__ = ["IMPLIED", "VALUES", "fires", "implied_flags", "numerics_values", "preconditions", "reduction_targets",
           "readers"]

# Every value either release names, and one neither does (neither rejects it).
VALUES = ("default", "strict_pointwise", "strict_reduction", "strict", "bogus")
# The flags 2.15.0's `numerics` implies (all three exist on both releases).
IMPLIED = ("emulate_precision_casts", "eager_numerics.disable_ftz", "eager_numerics.division_rounding")

_OPS = {ast.Eq: "Eq", ast.NotEq: "NotEq", ast.In: "In", ast.NotIn: "NotIn"}


def _torch() -> Path:
    import torch

    return Path(torch.__file__).parent


def _functions(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    # (node, name of the innermost function around it) for every node of the module
    out: list[tuple[ast.AST, str]] = []

    def walk(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else where
            out.append((child, inner))
            walk(child, inner)

    walk(tree, "<module>")
    return out


def readers(root: str | Path | None = None) -> list[dict[str, Any]]:
    """Every read of an attribute ``numerics`` under ``root`` (default: the installed ``torch``
    package), sorted by file: the file (relative to ``root``'s parent), line and function
    around it and, where the read is compared with a string (``==``, ``!=``, ``in``,
    ``not in``), the operator and the string (a list for ``in``); else both ``None``.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()) / "torch"; d.mkdir()
    >>> _ = (d / "x.py").write_text("def f():\\n    return config.numerics != 'strict'\\n")
    >>> readers(d)
    [{'file': 'torch/x.py', 'line': 2, 'function': 'f', 'op': 'NotEq', 'value': 'strict'}]
    """
    root = Path(root) if root is not None else _torch()
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if ".numerics" not in text:  # parse only the few files that can hold a reader
            continue
        nodes = _functions(ast.parse(text))
        compared = {id(n.left): n for n, _ in nodes
                    if isinstance(n, ast.Compare) and len(n.ops) == 1 and type(n.ops[0]) in _OPS}
        for node, function in nodes:
            if not (isinstance(node, ast.Attribute) and node.attr == "numerics"
                    and isinstance(node.ctx, ast.Load)):
                continue
            op, value = None, None
            if id(node) in compared:
                cmp = compared[id(node)]
                op, value = _OPS[type(cmp.ops[0])], ast.literal_eval(cmp.comparators[0])
            found.append({"file": path.relative_to(root.parent).as_posix(), "line": node.lineno,
                          "function": function, "op": op,
                          "value": list(value) if isinstance(value, tuple | list | set) else value})
    return found


def _outcome(reader: dict[str, Any], value: str) -> bool | None:
    op, want = reader["op"], reader["value"]
    if op is None:
        return None  # not a comparison: the page asserts there is none
    return {"Eq": value == want, "NotEq": value != want,
            "In": value in want if isinstance(want, list) else False,
            "NotIn": value not in want if isinstance(want, list) else True}[op]


def fires(reader: dict[str, Any], value: str) -> bool:
    """Whether ``numerics=value`` takes a different branch at ``reader`` than ``"default"`` does.

    >>> fires({"op": "Eq", "value": "strict"}, "strict_reduction")
    False
    """
    return _outcome(reader, value) != _outcome(reader, "default")


def implied_flags(values: tuple[str, ...] = VALUES) -> dict[str, dict[str, bool]]:
    """Each flag of :data:`IMPLIED`, read inside ``config.patch(numerics=value)``, per value.

    Run it where no ``TORCHINDUCTOR_*`` variable sets those flags (their defaults are off).

    >>> implied_flags(("default",))
    {'default': {'emulate_precision_casts': False, 'eager_numerics.disable_ftz': False, 'eager_numerics.division_rounding': False}}
    """
    from torch._inductor import config

    def read(name: str) -> bool:
        obj = config
        for part in name.split("."):
            obj = getattr(obj, part)
        return bool(obj)

    out = {}
    for value in values:
        with config.patch(numerics=value):
            out[value] = {flag: read(flag) for flag in IMPLIED}
    return out


def reduction_targets(reader: dict[str, Any], root: str | Path | None = None) -> dict[str, list[str]]:
    """For the reader in Inductor's lowering: the ``current_node.target`` values its function
    accepts (``targets``, as written in the source) and the functions that call it (``callers``).

    >>> r = [r for r in readers() if r["file"] == "torch/_inductor/lowering.py"][0]
    >>> "aten.sum.dim_IntList" in reduction_targets(r)["targets"]
    True
    """
    root = Path(root) if root is not None else _torch()
    tree = ast.parse((root.parent / reader["file"]).read_text(encoding="utf-8"))
    nodes = _functions(tree)
    targets, callers = [], []
    for node, function in nodes:
        if (function == reader["function"] and isinstance(node, ast.Compare)
                and isinstance(node.left, ast.Attribute) and node.left.attr == "target"):
            right = node.comparators[0]
            targets += [ast.unparse(e) for e in (right.elts if isinstance(right, ast.Tuple) else [right])]
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == reader["function"]):
            callers.append(function)
    return {"targets": targets, "callers": callers}


def preconditions() -> dict[str, Any]:
    """What the INNER_TREE check needs besides ``numerics="strict"`` that a CPU can read, and
    whether the zero-bias attention pass exists in this release.

    ``triton`` is the installed Triton's version and ``triton_required`` torch's own
    requirement on it (its wheel metadata); ``reduction_ordering`` is
    ``torch.utils._triton.has_triton_reduction_ordering()`` (a private helper, in 2.14.1 and
    2.15.0, that the check calls: Triton must export ``ReductionOrdering.INNER_TREE``);
    ``zero_bias_pass`` whether ``torch._inductor.fx_passes.joint_graph`` defines
    ``_remove_zero_bias_from_efficient_attention``, and ``constant_folding`` the default of
    ``config.joint_graph_constant_folding`` (the pass that calls it runs only when it is on).

    >>> sorted(preconditions())
    ['constant_folding', 'reduction_ordering', 'triton', 'triton_required', 'zero_bias_pass']
    """
    from importlib.metadata import requires, version

    import torch._inductor.fx_passes.joint_graph as joint_graph
    from torch._inductor import config
    from torch.utils._triton import has_triton_reduction_ordering

    required = [r.split(";")[0].strip() for r in requires("torch") or [] if r.startswith("triton")]
    return {"triton": version("triton"), "triton_required": required,
            "reduction_ordering": has_triton_reduction_ordering(),
            "constant_folding": bool(config.joint_graph_constant_folding),
            "zero_bias_pass": hasattr(joint_graph, "_remove_zero_bias_from_efficient_attention")}


def numerics_values() -> dict[str, Any]:
    """Everything above for this release: ``readers``, ``fires`` (value -> the readers, as
    ``file:line``, where it differs from ``"default"``), ``implied`` and ``reductions``
    (the lowering reader's targets and callers) and ``preconditions`` (:func:`preconditions`).

    >>> from explainers.releases import PRIMARY, run_under
    >>> run_under(PRIMARY, "explainers.version_numerics:numerics_values")["fires"]["strict_reduction"]
    []
    """
    found = readers()
    lowering = [r for r in found if r["file"] == "torch/_inductor/lowering.py"]
    return {"readers": found,
            "fires": {v: [f"{r['file']}:{r['line']}" for r in found if fires(r, v)] for v in VALUES},
            "implied": implied_flags(),
            "reductions": reduction_targets(lowering[0]) if len(lowering) == 1 else None,
            "preconditions": preconditions()}
