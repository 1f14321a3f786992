"""The mesh-elimination fragment, written once, and the two ways of running it.

:data:`FRAGMENT` holds the fragment's lines.  :func:`run_fragment` executes them as
written; :func:`walkthrough` executes the same lines with two calls replaced
(:func:`uneven_safe_line`: ``DTensor.from_local`` by :func:`explainers.mesh.uneven.from_local`,
``x.redistribute(placements=p)`` by :func:`explainers.mesh.uneven.redistribute`) and
records what every rank holds after each line.  Both run on a simulated mesh
(:func:`explainers.mesh.simulated.simulated_mesh`) or a real one (``torchrun``).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from explainers.checks import is_int
from explainers.mesh.steps import Step, rank_states
from explainers.mesh.uneven import from_local, redistribute

__all__ = ["FRAGMENT", "fragment_code", "run_fragment", "uneven_safe_line", "walkthrough"]

#: Edward Z. Yang's mesh-elimination fragment: (phase, label, line), verbatim but for the size.
FRAGMENT: tuple[tuple[str, str, str], ...] = (
    ("Start", "start", 'x = DTensor.from_local(arange_nd(15), mesh["m", "n", "k"], [R, R, R])'),
    (
        "Eliminate M",
        "shard K",
        'x = DTensor.from_local(x.redistribute(placements=[R, R, S(0)]).to_local(), mesh["m", "n"])',
    ),
    (
        "Eliminate M",
        "shard N",
        'x = DTensor.from_local(x.redistribute(placements=[R, S(0)]).to_local(), mesh["m"])',
    ),
    ("Eliminate M", "shard M", "x = x.redistribute(placements=[S(0)]).to_local()"),
    (
        "Eliminate M",
        "unshard N",
        'x = DTensor.from_local(x, mesh["n"], [S(0)]).redistribute(placements=[R])',
    ),
    (
        "Eliminate M",
        "unshard K",
        'x = DTensor.from_local(x.to_local(), mesh["n", "k"], [R, S(0)]).redistribute(placements=[R, R])',
    ),
    (
        "Eliminate N",
        "shard K",
        'x = DTensor.from_local(x.redistribute(placements=[R, S(0)]).to_local(), mesh["n"])',
    ),
    ("Eliminate N", "shard N", "x = x.redistribute(placements=[S(0)]).to_local()"),
)


def fragment_code(numel: int = 15) -> str:
    """The fragment's lines, as :func:`run_fragment` executes them.

    >>> print(fragment_code(16).splitlines()[0])
    x = DTensor.from_local(arange_nd(16), mesh["m", "n", "k"], [R, R, R])  # start
    """
    _check_numel(numel)
    return "\n".join(f"{_sized(code, numel)}  # {label}" for _, label, code in FRAGMENT)


def _sized(code: str, numel: int) -> str:
    return code.replace("arange_nd(15)", f"arange_nd({numel})")


def _check_numel(numel: object) -> int:
    if not is_int(numel) or numel < 1:
        raise ValueError(f"numel must be a positive int, got {numel!r}")
    return numel


def _check_mesh(mesh: Any, what: str) -> None:
    if tuple(mesh.mesh_dim_names or ()) != ("m", "n", "k"):
        raise ValueError(
            f'{what} needs a 3-D mesh named ("m", "n", "k"), got {mesh.mesh_dim_names}'
        )


def _check_mnk_2x2x2(mesh: Any, what: str) -> None:
    """The probes' mesh: the fragment's, 2x2x2, since they compare with its 8 ranks."""
    if tuple(mesh.mesh_dim_names or ()) != ("m", "n", "k") or tuple(mesh.shape) != (2, 2, 2):
        raise ValueError(
            f'{what} needs a 2x2x2 mesh named ("m", "n", "k"), got '
            f"{tuple(mesh.shape)} {mesh.mesh_dim_names}"
        )


def _names(mesh: Any) -> dict[str, Any]:
    """The names the fragment's lines use, and nothing else."""
    from torch.distributed.tensor import DTensor, Replicate, Shard

    from explainers.render import arange_nd

    def arange_on_mesh(n: int) -> Any:
        return arange_nd(n).to(mesh.device_type)

    return {"DTensor": DTensor, "R": Replicate(), "S": Shard, "mesh": mesh,
            "arange_nd": arange_on_mesh}  # fmt: skip


class _UnevenSafe(ast.NodeTransformer):
    """``DTensor.from_local(...)`` -> ``from_local(...)``;
    ``X.redistribute(placements=P)`` -> ``redistribute(X, P, log)``."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        f = node.func
        if not isinstance(f, ast.Attribute):
            return node
        if f.attr == "from_local" and isinstance(f.value, ast.Name) and f.value.id == "DTensor":
            return ast.Call(ast.Name("from_local", ast.Load()), node.args, node.keywords)
        if f.attr == "redistribute":
            if node.args or [k.arg for k in node.keywords] != ["placements"]:
                raise ValueError(f"expected .redistribute(placements=...), got {ast.unparse(node)}")
            return ast.Call(ast.Name("redistribute", ast.Load()),
                            [f.value, node.keywords[0].value, ast.Name("log", ast.Load())], [])
        return node


def _uneven_safe_tree(code: str) -> ast.Module:
    return ast.fix_missing_locations(_UnevenSafe().visit(ast.parse(code)))


def uneven_safe_line(code: str) -> str:
    """A line of the fragment as :func:`walkthrough` executes it: ``DTensor.from_local``
    replaced by :func:`~explainers.mesh.uneven.from_local`, ``x.redistribute(placements=p)``
    by :func:`~explainers.mesh.uneven.redistribute` appending to ``log``.

    >>> uneven_safe_line(FRAGMENT[4][2])
    "x = redistribute(from_local(x, mesh['n'], [S(0)]), [R], log)"
    """
    return ast.unparse(_uneven_safe_tree(code))


def run_fragment(mesh: Any, numel: int, on_line: Callable[[int], None] | None = None) -> Any:
    """Execute the fragment exactly as written, with plain ``DTensor.from_local`` and
    ``x.redistribute``, on ``mesh`` (dims named ``m``, ``n``, ``k``).

    The lines are :data:`FRAGMENT`, executed one at a time so that
    ``on_line(i)`` can record which line (index into ``FRAGMENT``) a rank started last:
    a real rank may die inside a collective without a Python exception.  Returns the
    final ``x`` (a local tensor).

    >>> from explainers.mesh.simulated import simulated_mesh
    >>> with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
    ...     out = run_fragment(mesh, 16)
    >>> out._local_tensors[7].tolist()
    [14, 15]
    """
    _check_numel(numel)
    _check_mesh(mesh, "the fragment")
    names = _names(mesh)
    for i, (_, _, code) in enumerate(FRAGMENT):
        if on_line is not None:
            on_line(i)
        exec(_sized(code, numel), names)  # noqa: S102
    return names["x"]


def walkthrough(mesh: Any, numel: int = 15) -> list[Step]:
    """Run the mesh-elimination fragment (:data:`FRAGMENT`) on ``mesh``; record every step.

    ``mesh`` must have dims named ``("m", "n", "k")``; its world may be
    simulated (:func:`~explainers.mesh.simulated.simulated_mesh`) or real (``torchrun``):
    the code is the same.  The fragment's own lines run, one at a time, with
    ``DTensor.from_local`` and ``x.redistribute`` replaced by the uneven-safe
    :func:`~explainers.mesh.uneven.from_local` and :func:`~explainers.mesh.uneven.redistribute`
    (:func:`uneven_safe_line`), so uneven sizes such as 15 work too.

    >>> from explainers.mesh.simulated import simulated_mesh
    >>> with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
    ...     steps = walkthrough(mesh, 15)
    >>> [s.label for s in steps]
    ['start', 'shard K', 'shard N', 'shard M', 'unshard N', 'unshard K', 'shard K', 'shard N']
    >>> steps[3].locals()[7], steps[-1].locals()[7]
    ([14], [14])
    """
    _check_numel(numel)
    _check_mesh(mesh, "the walkthrough")
    log: list = []
    names = {**_names(mesh), "from_local": from_local, "redistribute": redistribute, "log": log}
    steps: list[Step] = []
    for phase, label, code in FRAGMENT:
        line = _sized(code, numel)
        exec(compile(_uneven_safe_tree(line), f"<fragment: {label}>", "exec"), names)  # noqa: S102
        x = names["x"]
        steps.append(
            Step(
                label=label,
                phase=phase,
                code=line,
                mesh_dims=tuple(mesh.mesh_dim_names),
                mesh_shape=tuple(mesh.shape),
                submesh=tuple(x.device_mesh.mesh_dim_names) if hasattr(x, "device_mesh") else None,
                redistribution=log[0] if log else None,
                ranks=rank_states(x, mesh),
            )
        )
        log.clear()
    return steps
