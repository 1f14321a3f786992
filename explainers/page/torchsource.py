"""Read the installed torch's own source: the one reader every page quotes torch through.

Pages quote the torch they run on (Python sources, and the C++ headers that
ship under ``torch/include/``), located by a line's text rather than by line
number, so a release that moves code moves the excerpt with it, and one that
removes the text fails the build.

Four ways to quote torch, each used by a page, and one to show a page's own code:

- :func:`quote_installed`: numbered lines from a needle to the end of its block;
- :func:`torch_lines`: ``path:line: text`` for each of several needles, in order;
- :func:`source_of`: the source of a live function or class, cut between two lines;
- :func:`excerpt` over :func:`installed_source` with :func:`find_line` and
  :func:`block_end`, for the allocator page's own analysis;
- :func:`function_source`: any Python function's source without its docstring.

>>> text = "a\\nvoid f() {\\n  x;\\n}\\nb"
>>> find_line(text, "void f()")
2
>>> print(excerpt(text, 2, 4))
2  void f() {
3    x;
4  }
"""

from __future__ import annotations

import inspect
import re
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

__all__ = ["installed_source", "find_lines", "find_line", "block_end", "excerpt",
           "quote_installed", "torch_lines", "torch_lines_many", "open_conditionals", "installed_conditionals", "source_commit", "source_of",
           "function_source"]


def installed_source(relpath: str) -> str:
    """The text of a file shipped in the installed torch package, ``relpath`` below ``torch/``.

    Pages quote the torch they run on (Python sources, and C++ headers under
    ``include/``) instead of copies.

    >>> "get_dtype_from_self" in installed_source("include/ATen/native/ReduceOpsUtils.h")
    True
    >>> installed_source("no/such/file.h")
    Traceback (most recent call last):
    ...
    FileNotFoundError: no/such/file.h is not in the installed torch
    """
    path = Path(torch.__file__).parent / relpath
    if not path.is_file():
        raise FileNotFoundError(f"{relpath} is not in the installed torch")
    return path.read_text(encoding="utf-8")


def find_lines(text: str, needle: str) -> list[int]:
    """All 1-based line numbers whose text contains *needle*.

    >>> find_lines("x = 1\\ny = x\\n", "x")
    [1, 2]
    """
    return [i for i, ln in enumerate(text.splitlines(), start=1) if needle in ln]


def find_line(text: str, needle: str, after: int = 0) -> int:
    """The first line number after line *after* that contains *needle*.

    >>> find_line("a\\nb", "zzz")
    Traceback (most recent call last):
    ...
    ValueError: 'zzz' does not occur in the header after line 0
    """
    for no in find_lines(text, needle):
        if no > after:
            return no
    raise ValueError(f"{needle!r} does not occur in the header after line {after}")


def block_end(text: str, start: int) -> int:
    """The line that closes the brace block opened on or after line *start*.

    >>> block_end("void f() {\\n  if (x) {\\n  }\\n}\\n", 1)
    4
    """
    depth, opened = 0, False
    lines = text.splitlines()
    for no in range(start, len(lines) + 1):
        for ch in lines[no - 1]:
            if ch == "{":
                depth, opened = depth + 1, True
            elif ch == "}":
                depth -= 1
        if opened and depth == 0:
            return no
    raise ValueError(f"unbalanced braces from line {start}")


def excerpt(text: str, start: int, end: int) -> str:
    """Lines *start*..*end* (inclusive) with their line numbers.

    >>> excerpt("a", 2, 1)
    Traceback (most recent call last):
    ...
    ValueError: bad line range 2..1 for a 1-line file
    """
    lines = text.splitlines()
    if not (1 <= start <= end <= len(lines)):
        raise ValueError(f"bad line range {start}..{end} for a {len(lines)}-line file")
    width = len(str(end))
    return "\n".join(f"{no:>{width}}  {lines[no - 1]}" for no in range(start, end + 1))


def quote_installed(relpath: str, needle: str, lines: int | None = None, after: str | None = None) -> str:
    """Numbered lines of an installed torch file, starting at the first line containing ``needle``.

    ``lines`` lines are shown, or, by default, up to the end of the brace (or
    indented Python) block that starts there.  ``after`` first skips to the
    line containing it.  The numbers are the installed file's.

    >>> text = quote_installed("include/ATen/OpMathType.h", "struct OpMathType<at::BFloat16>", lines=2)
    >>> [line.split("  ", 1)[1] for line in text.splitlines()]   # without the line numbers
    ['struct OpMathType<at::BFloat16> {', '  using type = float;']
    >>> quote_installed("include/ATen/OpMathType.h", "no such text")
    Traceback (most recent call last):
    ...
    ValueError: 'no such text' does not occur in include/ATen/OpMathType.h
    """
    text = installed_source(relpath)
    try:
        start = find_line(text, needle, after=find_line(text, after) if after else 0)
    except ValueError:
        raise ValueError(f"{needle!r} does not occur in {relpath}") from None
    if lines is not None:
        end = start + lines - 1
    elif relpath.endswith(".py"):
        src = text.splitlines()
        indent = len(src[start - 1]) - len(src[start - 1].lstrip())
        end = start
        for no in range(start + 1, len(src) + 1):
            ln = src[no - 1]
            if ln.strip() and len(ln) - len(ln.lstrip()) <= indent and not ln.lstrip().startswith(")"):
                break
            if ln.strip():
                end = no
    else:
        end = block_end(text, start)
    return excerpt(text, start, end)


def source_of(obj: Any, first: str | None = None, stop: str | None = None) -> tuple[str, int, str]:
    """Lines of the installed torch's source of ``obj`` (a function or class), read now.

    Returns ``(path relative to the torch package, first line number, text)``: the lines
    from the first one that starts with ``first`` up to, not including, the next one that
    starts with ``stop`` (leading spaces ignored); by default the whole definition.

    >>> from torch import _tensor_str
    >>> source_of(_tensor_str._tensor_str, "summarize =", "if self._is_zerotensor")[::2]
    ('_tensor_str.py', 'summarize = self.numel() > PRINT_OPTS.threshold')
    >>> source_of(_tensor_str._tensor_str, "return 42")
    Traceback (most recent call last):
    ...
    LookupError: source_of: no line of _tensor_str starts with 'return 42'; re-read the source
    """
    lines, lineno = inspect.getsourcelines(obj)

    def find(prefix: str, start: int) -> int:
        for i in range(start, len(lines)):
            if lines[i].lstrip().startswith(prefix):
                return i
        raise LookupError(f"source_of: no line of {obj.__name__} starts with {prefix!r}; re-read the source")

    begin = 0 if first is None else find(first, 0)
    end = len(lines) if stop is None else find(stop, begin + 1)
    path = Path(inspect.getsourcefile(obj)).relative_to(Path(torch.__file__).parent)
    return path.as_posix(), lineno + begin, textwrap.dedent("".join(lines[begin:end])).rstrip()


def torch_lines(relpath: str, needles: Sequence[str], after: str | None = None) -> str:
    """Lines of an installed torch source file, located by their text.

    ``relpath`` is relative to the ``torch`` package.  For each needle, the first line
    containing it (after the line containing ``after``, and after the previous
    needle's line) is shown with its line number; ``...`` marks skipped lines.  A
    needle that does not occur raises ``ValueError``, so a torch that moved the code
    fails loudly.

    >>> print(torch_lines("distributed/tensor/_redistribute.py",
    ...       ["def get_redistribute_planner", "if _are_we_tracing():"]))  # doctest: +ELLIPSIS
    distributed/tensor/_redistribute.py:...: def get_redistribute_planner(
    ...
    distributed/tensor/_redistribute.py:...:     if _are_we_tracing():
    >>> torch_lines("distributed/tensor/_redistribute.py", ["def _are_we_tracing"])
    Traceback (most recent call last):
    ...
    ValueError: 'def _are_we_tracing' does not occur in distributed/tensor/_redistribute.py after line 0
    """
    lines = installed_source(relpath).splitlines()
    start = 0
    if after is not None:
        start = _find(lines, after, 0, relpath) + 1
    out, last = [], None
    for needle in needles:
        no = _find(lines, needle, start, relpath)
        if last is not None and no > last + 1:
            out.append("...")
        out.append(f"{relpath}:{no + 1}: {lines[no].rstrip()}")
        start, last = no + 1, no
    return "\n".join(out)


def torch_lines_many(specs: Sequence[Sequence[Any]]) -> list[str]:
    """:func:`torch_lines` for each ``[relpath, needles]`` or ``[relpath, needles, after]``
    of ``specs``, so that :func:`explainers.releases.run_under` reads several excerpts of
    another release in one process.

    >>> [len(e.splitlines()) for e in torch_lines_many([
    ...     ["distributed/tensor/_redistribute.py", ["def get_redistribute_planner("]],
    ...     ["distributed/tensor/_redistribute.py", ["if _are_we_tracing():"],
    ...      "def get_redistribute_planner("]])]
    [1, 1]
    """
    out = []
    for spec in specs:
        if not 2 <= len(spec) <= 3:
            raise ValueError(f"an excerpt is [relpath, needles] or [relpath, needles, after], not {spec!r}")
        out.append(torch_lines(*spec))
    return out


def open_conditionals(text: str, line: int) -> list[list[str]]:
    """The preprocessor conditionals open at ``line`` (from 1) of C or C++ ``text``, outermost first.

    Each is ``[opening directive, branch]``, the branch being ``"if"``,
    ``"else"`` or the ``#elif`` line that ``line`` falls under.  A quote of one
    definition cannot tell which branch a build compiled; this says which
    branch the quoted line is in.

    >>> src = "#ifdef FAST\\nint f();\\n#else\\nint f() { return 1; }\\n#endif\\nint g();"
    >>> open_conditionals(src, 2), open_conditionals(src, 4), open_conditionals(src, 6)
    ([['#ifdef FAST', 'if']], [['#ifdef FAST', 'else']], [])
    """
    stack: list[list[str]] = []
    for ln in text.splitlines()[:line - 1]:
        m = re.match(r"#\s*(ifdef|ifndef|if|elif|else|endif)\b(.*)", ln.strip())
        if m is None:
            continue
        kw, rest = m.groups()
        if kw in ("if", "ifdef", "ifndef"):
            stack.append([f"#{kw} {rest.strip()}", "if"])
        elif kw == "endif":
            stack.pop()
        else:
            stack[-1][1] = "else" if kw == "else" else f"#elif {rest.strip()}"
    return stack


def installed_conditionals(relpath: str, needle: str) -> list[list[str]]:
    """:func:`open_conditionals` at the first line of an installed torch file containing ``needle``.

    >>> installed_conditionals("include/ATen/OpMathType.h", "struct OpMathType<at::BFloat16>")
    [['#if !defined(TORCH_STABLE_ONLY) && !defined(TORCH_TARGET_VERSION)', 'if']]
    """
    text = installed_source(relpath)
    return open_conditionals(text, find_line(text, needle))


def source_commit() -> str:
    """The commit of PyTorch's repository that this torch was built from (``torch.version.git_version``).

    A release tag names the same commit only if the wheel was built from the
    tag; the wheel's own record is the one to pin a source reading to.

    >>> c = source_commit()
    >>> len(c), set(c) <= set("0123456789abcdef")
    (40, True)
    """
    return torch.version.git_version


def _find(lines: list[str], needle: str, start: int, relpath: str) -> int:
    for i in range(start, len(lines)):
        if needle in lines[i]:
            return i
    raise ValueError(f"{needle!r} does not occur in {relpath} after line {start}")


def function_source(fn: Any) -> str:
    """The source of the Python function ``fn`` without its docstring, for showing code a page runs.

    >>> from explainers.precision.topk_router import topk_softmax
    >>> print(function_source(topk_softmax))
    def topk_softmax(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        _check_router_args(logits, k)
        vals, idx = torch.topk(logits, k, dim=-1)
        return idx, F.softmax(vals, dim=-1)
    >>> function_source(Path)
    Traceback (most recent call last):
    ...
    TypeError: function_source expects a function, got type
    """
    import ast

    if not inspect.isfunction(fn):
        raise TypeError(f"function_source expects a function, got {type(fn).__name__}")
    src = textwrap.dedent(inspect.getsource(fn))
    node = ast.parse(src).body[0]
    lines = src.splitlines()
    body = node.body
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        drop = set(range(body[0].lineno - 1, body[0].end_lineno))
        lines = [line for i, line in enumerate(lines) if i not in drop]
    return "\n".join(lines)
