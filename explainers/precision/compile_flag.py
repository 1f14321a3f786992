"""Where the installed torch reads ``emulate_precision_casts``, and what its saved-tensors variant sees.

Two readers for the compile page:

* :func:`config_reads` lists every line of the installed torch's Python
  source that reads an Inductor setting as ``config.<name>`` (found with
  :mod:`ast`, so comments, docstrings and strings do not count);
* :func:`watch_saved_tensor_casts` records, during a compile, what
  Inductor's pointwise lowering decides for
  ``emulate_precision_casts_on_saved_tensors``, which of its downcasts
  survive the C++ backend's low-precision legalization, and which
  conversions reach the C++ backend;
* :func:`keep_saved_tensor_downcast` keeps those downcasts through that
  legalization, the ablation that shows where they go.

>>> ("_inductor/codegen/triton.py", '"enable_fp_fusion": not config.emulate_precision_casts,') in {
...     (path, text) for path, _, _, text in config_reads("emulate_precision_casts")}
True
"""

from __future__ import annotations

import ast
import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import torch

__all__ = ["config_reads", "flag_switches", "op_calls", "watch_saved_tensor_casts", "keep_saved_tensor_downcast"]


def _sources(mention: str, under: str = "") -> Iterator[tuple[str, str]]:
    """``(path below torch/, text)`` of each installed ``.py`` file below ``under`` that mentions ``mention``."""
    root = Path(torch.__file__).parent
    for path in sorted((root / under).rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if mention in text:
            yield path.relative_to(root).as_posix(), text


def op_calls(name: str, under: str = "_inductor") -> list[tuple[str, int, str]]:
    """``(path below torch/, line, enclosing function)`` of each call ``ops.<name>(...)`` below ``under``.

    The enclosing function is the module-level one (a lowering's name, not
    that of the ``inner_fn`` it defines).  Inductor's lowerings emit an op
    through the ``ops`` handler, so these are the places that can put the op
    into generated code.

    >>> [(path, fn) for path, _, fn in op_calls("round_to_int")]
    [('_inductor/lowering.py', 'quantized_decomposed_quantize_per_tensor_tensor')]
    """
    found = []
    for relpath, text in _sources(name, under):
        for top in ast.parse(text).body:  # module-level functions: the lowerings
            if not isinstance(top, ast.FunctionDef):
                continue
            found += [(relpath, node.lineno, top.name) for node in ast.walk(top)
                      if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                      and node.func.attr == name and isinstance(node.func.value, ast.Name)
                      and node.func.value.id == "ops"]
    return sorted(found)


#: Run in a fresh interpreter: Inductor's config reads its environment variables at import.
_READ_FLAG = "import torch._inductor.config as c; print(c.emulate_precision_casts)"


def flag_switches() -> dict[str, bool]:
    """What ``torch._inductor.config.emulate_precision_casts`` reads after each way a user can switch it on.

    Each ``numerics`` mode is set with ``config.patch`` in this process; each
    environment variable is set for a fresh interpreter, which imports the
    config and prints the flag.  Keys name the action.

    >>> switches = flag_switches()
    >>> switches["default"], switches["TORCHINDUCTOR_EMULATE_PRECISION_CASTS=1"]
    (False, True)
    """
    import torch._inductor.config as config

    out = {"default": bool(config.emulate_precision_casts)}
    for mode in ("strict_pointwise", "strict_reduction", "strict"):
        with config.patch(numerics=mode):
            out[f'config.patch(numerics="{mode}")'] = bool(config.emulate_precision_casts)
    base = {k: v for k, v in os.environ.items() if not k.startswith("TORCHINDUCTOR_")}
    for var, value in (("TORCHINDUCTOR_EMULATE_PRECISION_CASTS", "1"), ("TORCHINDUCTOR_NUMERICS", "strict_pointwise"),
                       ("TORCHINDUCTOR_NUMERICS", "strict")):
        read = subprocess.run([sys.executable, "-c", _READ_FLAG], env={**base, var: value},
                              capture_output=True, text=True, check=True).stdout.split()[-1]
        out[f"{var}={value}"] = read == "True"
    return out


def _qualnames(tree: ast.Module) -> list[tuple[int, int, str]]:
    """``(first line, last line, qualified name)`` of every function and class in ``tree``."""
    spans = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                spans.append((child.lineno, child.end_lineno, name))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return spans


def config_reads(name: str) -> list[tuple[str, int, str, str]]:
    """``(path below torch/, line, enclosing definition, stripped text)`` of each line reading ``config.<name>``.

    Every ``.py`` file of the installed torch whose text mentions ``name`` is
    parsed; a line counts when it holds an attribute ``name`` of a variable
    called ``config`` (Inductor's modules import their settings under that
    name).  A setting whose name extends ``name`` is a different attribute
    and does not count.  The enclosing definition is the innermost function
    or class around the line, qualified (``Class.method``, ``outer.inner``),
    or ``""`` at module level.  Sorted by path, then line.

    >>> [(path, where, text) for path, _, where, text in config_reads("emulate_precision_casts_on_saved_tensors")]
    [('_inductor/lowering.py', 'make_pointwise.inner', 'config.emulate_precision_casts_on_saved_tensors')]
    >>> config_reads("no_such_setting_anywhere")
    []
    """
    found = []
    for relpath, text in _sources(name):
        tree = ast.parse(text)
        lines, spans = text.splitlines(), _qualnames(tree)
        linenos = sorted({node.lineno for node in ast.walk(tree)
                          if isinstance(node, ast.Attribute) and node.attr == name
                          and isinstance(node.value, ast.Name) and node.value.id == "config"})
        for no in linenos:
            around = [(first, qual) for first, last, qual in spans if first <= no <= last]
            found.append((relpath, no, max(around)[1] if around else "", lines[no - 1].strip()))
    return found


@contextlib.contextmanager
def watch_saved_tensor_casts() -> Iterator[dict[str, list]]:
    """Record what the saved-tensors emulation decides and what the C++ backend converts, until exit.

    Yields a dict, filled during the compiles run inside the block:

    * ``"saved_check"``: ``(node name, result, source line)`` for each call of
      ``torch._inductor.lowering._has_saved_lowp_output_use``, the test
      ``make_pointwise`` applies, while
      ``emulate_precision_casts_on_saved_tensors`` is on, to a bf16/fp16
      pointwise node: is its output saved for backward and also read by
      forward math; the source line is the last line of code in the node's
      recorded stack trace (the user's line it was traced from), or ``None``;
    * ``"legalized"``: ``(before, after)`` for each loop body the C++ backend
      legalizes (``CppKernelProxy.legalize_lowp_fp_dtype_loopbody``): the
      number of its ``to_dtype`` nodes with ``use_compute_types=False``
      (:func:`_saved_downcasts`) before and after that pass;
    * ``"cpp_to_dtype"``: ``(dtype, use_compute_types)`` of each call of the
      C++ backend's ``to_dtype`` (``CppOverrides`` and ``CppVecOverrides``).
      ``make_pointwise`` asks for its emulated downcast with
      ``use_compute_types=False``.

    Private APIs of torch 2.14.1 and 2.15.0, wrapped (not changed) and
    restored on exit.

    >>> from torch._inductor import lowering
    >>> before = lowering._has_saved_lowp_output_use
    >>> with watch_saved_tensor_casts() as seen:
    ...     lowering._has_saved_lowp_output_use is before, sorted(seen)
    (False, ['cpp_to_dtype', 'legalized', 'saved_check'])
    >>> lowering._has_saved_lowp_output_use is before
    True
    """
    from torch._inductor import lowering
    from torch._inductor.codegen.cpp import CppKernelProxy, CppOverrides, CppVecOverrides

    seen: dict[str, list] = {"saved_check": [], "legalized": [], "cpp_to_dtype": []}
    check = lowering._has_saved_lowp_output_use
    legalize = CppKernelProxy.legalize_lowp_fp_dtype_loopbody

    def legalize_counted(self, loop_body):
        before = _saved_downcasts(loop_body)
        result = legalize(self, loop_body)
        seen["legalized"].append((before, _saved_downcasts(loop_body)))
        return result

    def saved_check(node):
        result = check(node)
        trace = (getattr(node, "meta", None) or {}).get("stack_trace") or ""
        # the last line that is code, not the ^~~ marks Python prints under it
        lines = [ln.strip() for ln in trace.splitlines() if set(ln) - set(" ^~")]
        seen["saved_check"].append((getattr(node, "name", None), result, lines[-1] if lines else None))
        return result

    def spy(to_dtype):
        def wrapped(x, dtype, src_dtype=None, use_compute_types=True):
            seen["cpp_to_dtype"].append((dtype, use_compute_types))
            return to_dtype(x, dtype, src_dtype=src_dtype, use_compute_types=use_compute_types)
        wrapped.__name__ = "to_dtype"  # CppVecOverrides finds its scalar fallback by this name
        return staticmethod(wrapped)

    originals = {cls: cls.__dict__["to_dtype"] for cls in (CppOverrides, CppVecOverrides)}
    lowering._has_saved_lowp_output_use = saved_check
    CppKernelProxy.legalize_lowp_fp_dtype_loopbody = legalize_counted
    for cls in originals:
        cls.to_dtype = spy(cls.to_dtype)
    try:
        yield seen
    finally:
        lowering._has_saved_lowp_output_use = check
        CppKernelProxy.legalize_lowp_fp_dtype_loopbody = legalize
        for cls, original in originals.items():
            cls.to_dtype = original


def _is_saved_downcast(node) -> bool:
    """A loop-body ``to_dtype`` node made with ``use_compute_types=False`` (``make_pointwise``'s emulated downcast)."""
    return node.target == "to_dtype" and node.kwargs.get("use_compute_types") is False


def _saved_downcasts(loop_body) -> int:
    """How many :func:`_is_saved_downcast` nodes a ``LoopBody``'s blocks hold."""
    blocks = [loop_body.root_block, *loop_body.subblocks.values()]
    return sum(_is_saved_downcast(node) for block in blocks for node in block.graph.nodes)


@contextlib.contextmanager
def keep_saved_tensor_downcast() -> Iterator[None]:
    """Keep ``make_pointwise``'s ``use_compute_types=False`` downcasts through the C++ legalization, until exit.

    ``CppKernelProxy.legalize_lowp_fp_dtype_loopbody``
    (``torch/_inductor/codegen/cpp.py``, torch 2.14.1 and 2.15.0) ends by
    erasing each ``to_dtype`` node whose users are all ``to_dtype`` nodes to
    the same dtype (it hands the node's uses to the node's input, then erases
    the node), whatever the node's ``use_compute_types``.  While this is
    active, that hand-over and that erasure skip :func:`_is_saved_downcast`
    nodes during that pass; every other step, node and pass is untouched.  The FX graph
    cache is switched off, so a compile generates code.  Private APIs,
    wrapped (not changed) and restored on exit.

    >>> import torch.fx
    >>> from torch._inductor.codegen.cpp import CppKernelProxy
    >>> before = CppKernelProxy.legalize_lowp_fp_dtype_loopbody, torch.fx.Graph.erase_node
    >>> with keep_saved_tensor_downcast():
    ...     CppKernelProxy.legalize_lowp_fp_dtype_loopbody is before[0]
    False
    >>> (CppKernelProxy.legalize_lowp_fp_dtype_loopbody, torch.fx.Graph.erase_node) == before
    True
    """
    import torch._inductor.config as inductor_config
    import torch.fx
    from torch._inductor.codegen.cpp import CppKernelProxy

    legalize = CppKernelProxy.legalize_lowp_fp_dtype_loopbody
    replace, erase = torch.fx.Node.replace_all_uses_with, torch.fx.Graph.erase_node

    def replace_unless_kept(node, replace_with, *args, **kwargs):
        # the elimination's step: the node's uses handed to its own input
        if _is_saved_downcast(node) and replace_with is node.all_input_nodes[-1]:
            return []
        return replace(node, replace_with, *args, **kwargs)

    def erase_unless_kept(graph, node):
        return None if _is_saved_downcast(node) and node.users else erase(graph, node)

    def legalize_keeping(self, loop_body):
        torch.fx.Node.replace_all_uses_with, torch.fx.Graph.erase_node = replace_unless_kept, erase_unless_kept
        try:
            return legalize(self, loop_body)
        finally:
            torch.fx.Node.replace_all_uses_with, torch.fx.Graph.erase_node = replace, erase

    CppKernelProxy.legalize_lowp_fp_dtype_loopbody = legalize_keeping
    try:
        with inductor_config.patch(fx_graph_cache=False):
            yield
    finally:
        CppKernelProxy.legalize_lowp_fp_dtype_loopbody = legalize
