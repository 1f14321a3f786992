"""Quote the installed header on the page, by content rather than by line number.

Pages show excerpts of ``CachingHostAllocator.h`` *as installed*, read at
build time (nothing of PyTorch is copied into this repository).  Excerpts are
located by a line's text, so a PyTorch release that moves code moves the
excerpt with it, and one that removes the text fails the build.

>>> text = "a\\nvoid f() {\\n  x;\\n}\\nb"
>>> find_line(text, "void f()")
2
>>> print(excerpt(text, 2, 4))
2  void f() {
3    x;
4  }
"""

from __future__ import annotations

__all__ = ["find_line", "find_lines", "excerpt", "block_end", "earlier_in_block"]


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


def earlier_in_block(text: str, line: int, needle: str) -> int | None:
    r"""The line, before *line* in the same brace block or an enclosing one, that contains *needle*.

    Walks upward from *line*, skipping blocks that close before it (they are
    not in scope), and returns the first line holding *needle*; ``None`` if
    there is none.  The header uses it to ask "is ``block->mutex_`` locked
    around this access?" by finding the ``lock_guard`` line in scope.

    >>> code = "void f() {\n  {\n    lock(m);\n  }\n  x = 1;\n  {\n    lock(m);\n    y = 2;\n  }\n}"
    >>> earlier_in_block(code, 5, "lock(m)") is None  # the first lock's block closed before x = 1
    True
    >>> earlier_in_block(code, 8, "lock(m)")
    7
    """
    lines = text.splitlines()
    if not 1 <= line <= len(lines):
        raise ValueError(f"line {line} is outside a {len(lines)}-line file")
    depth = 0  # > 0 while inside a block that closed before *line*
    for no in range(line - 1, 0, -1):
        ln = lines[no - 1]
        if depth == 0 and needle in ln:
            return no
        depth += ln.count("}") - ln.count("{")
        depth = max(depth, 0)
    return None
