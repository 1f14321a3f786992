"""Where the host allocator's fields are read and written, and under which locks.

The C++ analysis the allocator page runs over the installed
``CachingHostAllocator.h``: which function encloses a line, which mutexes a class
declares, every access to a member with the locks held around it, and the region a
flag gates.  The text itself is read through :mod:`explainers.page.torchsource`.

>>> text = "struct A {\\n  std::mutex m_;\\n  int x_;\\n};"
>>> declared_mutexes(text)
{'A': ['m_']}
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from explainers.page.torchsource import block_end, find_lines

__all__ = ["earlier_in_block", "enclosing_function", "Access", "member_accesses", "declared_mutexes", "gated_region"]




def earlier_in_block(text: str, line: int, needle: str, closed: int = 0) -> int | None:
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

    *closed* counts blocks that *line* itself closes before the access in
    question, as in ``} else if (x) {``: the access is outside them.

    >>> code = "void f() {\n  if (a) {\n    lock(m);\n  } else if (x) {\n  }\n}"
    >>> earlier_in_block(code, 4, "lock(m)"), earlier_in_block(code, 4, "lock(m)", closed=1)
    (3, None)
    """
    lines = text.splitlines()
    if not 1 <= line <= len(lines):
        raise ValueError(f"line {line} is outside a {len(lines)}-line file")
    depth = closed  # > 0 while inside a block that closed before the access
    for no in range(line - 1, 0, -1):
        ln = lines[no - 1]
        if depth == 0 and needle in ln:
            return no
        depth += ln.count("}") - ln.count("{")
        depth = max(depth, 0)
    return None


# A member function's first line.  The header is clang-formatted: members of a
# struct sit at two spaces of indentation and statements in their bodies deeper,
# so the nearest such line above a statement is the head of its function.
_FUNCTION_HEAD = re.compile(r"^  (?!(?:if|for|while|switch|return)\b)[A-Za-z_][\w:<>,*&\s]*?\b(\w+)\(")


def enclosing_function(text: str, line: int) -> tuple[int, str]:
    """The head line and name of the member function that contains *line*.

    Relies on the header's formatting (see ``_FUNCTION_HEAD``): members at two
    spaces of indentation, bodies deeper.

    >>> code = "struct S {\\n  virtual void* f(int x) {\\n    if (x) {\\n      g(x);\\n    }\\n  }\\n};"
    >>> enclosing_function(code, 4)
    (2, 'f')
    >>> enclosing_function(code, 1)
    Traceback (most recent call last):
    ...
    ValueError: no member function head at or above line 1
    """
    lines = text.splitlines()
    if not 1 <= line <= len(lines):
        raise ValueError(f"line {line} is outside a {len(lines)}-line file")
    for no in range(line, 0, -1):
        m = _FUNCTION_HEAD.match(lines[no - 1])
        if m:
            return no, m.group(1)
    raise ValueError(f"no member function head at or above line {line}")


@dataclass(frozen=True)
class Access:
    """One source line that touches a member: where, how, and whether a lock is in scope."""

    line: int
    kind: str  # "write" or "read"
    function: str
    locked: bool


def member_accesses(text: str, expr: str, lock_needle: str) -> list[Access]:
    """Every line that touches *expr* (e.g. ``block->context_when_allocated_``), classified.

    A line is a write when it assigns *expr* (``expr = ...``) or calls
    ``expr.reset()``; any other mention is a read.  ``locked`` says whether a
    line holding *lock_needle* (e.g. ``(block->mutex_);``) is in scope above it
    (:func:`earlier_in_block`).  This reads the text line by line; it is meant
    for a header whose accesses each sit on one line, as they do here.

    >>> code = ("struct S {\\n  void f() {\\n    b->c_ = x;\\n    {\\n      lock(b->m_);\\n"
    ...         "      b->c_.reset();\\n      use(b->c_);\\n    }\\n  }\\n};")
    >>> for a in member_accesses(code, "b->c_", "lock(b->m_)"):
    ...     print(a.line, a.kind, a.function, a.locked)
    3 write f False
    6 write f True
    7 read f True
    >>> member_accesses(code, "", "m")
    Traceback (most recent call last):
    ...
    ValueError: expr and lock_needle must be non-empty
    """
    if not expr or not lock_needle:
        raise ValueError("expr and lock_needle must be non-empty")
    write = re.compile(re.escape(expr) + r"(?:\s*=(?!=)|\.reset\()")
    out = []
    for no in find_lines(text, expr):
        ln = text.splitlines()[no - 1]
        before = ln[:ln.index(expr)]  # "} else if (... expr" closes a block before the access
        closed = max(before.count("}") - before.count("{"), 0)
        out.append(Access(no, "write" if write.search(ln) else "read", enclosing_function(text, no)[1],
                          earlier_in_block(text, no, lock_needle, closed) is not None))
    return out


_STRUCT = re.compile(r"^\s*struct\s+(?:alignas\([^)]*\)\s+|TORCH_API\s+)*(\w+)\s*(?::[^{]*)?\{")
_MUTEX = re.compile(r"^\s*(?:alignas\([^)]*\)\s+)?(?:mutable\s+)?std::(?:shared_|recursive_)?mutex\s+(\w+);")


def declared_mutexes(text: str) -> dict[str, list[str]]:
    """The mutex members each struct declares, in order, keyed by struct name.

    >>> code = ("struct alignas(64) A {\\n  std::mutex m_;\\n  int x;\\n};\\n"
    ...         "struct B : public A {\\n  struct C {\\n    int y;\\n  };\\n"
    ...         "  mutable std::shared_mutex s_;\\n};")
    >>> declared_mutexes(code)
    {'A': ['m_'], 'B': ['s_']}
    """
    out: dict[str, list[str]] = {}
    lines = text.splitlines()
    for no, ln in enumerate(lines, start=1):
        m = _MUTEX.match(ln)
        if not m:
            continue
        for up in range(no - 1, 0, -1):
            s = _STRUCT.match(lines[up - 1])
            if s and block_end(text, up) > no:
                out.setdefault(s.group(1), []).append(m.group(1))
                break
        else:
            raise ValueError(f"mutex {m.group(1)} on line {no} is outside any struct")
    return out


def gated_region(text: str, line: int) -> tuple[int, int]:
    """The lines (first, last) that run only when the flag tested on *line* is set.

    ``if (flag) {`` gates its own block.  ``if (!flag) { return; }`` (the flag
    negated) gates the rest of the enclosing function after that block.

    >>> code = ("struct S {\\n  void f() {\\n    if (on) {\\n      a();\\n    }\\n    b();\\n  }\\n"
    ...         "  void g() {\\n    if (!on) {\\n      return;\\n    }\\n    c();\\n  }\\n};")
    >>> gated_region(code, 3), gated_region(code, 9)
    ((3, 5), (12, 13))
    >>> gated_region(code, 4)
    Traceback (most recent call last):
    ...
    ValueError: line 4 does not open an if block: '      a();'
    """
    lines = text.splitlines()
    if not 1 <= line <= len(lines):
        raise ValueError(f"line {line} is outside a {len(lines)}-line file")
    if "if (" not in lines[line - 1] or not lines[line - 1].rstrip().endswith("{"):
        raise ValueError(f"line {line} does not open an if block: {lines[line - 1]!r}")
    end = block_end(text, line)
    if re.search(r"if \(\s*(?:C10_(?:UN)?LIKELY\()?!", lines[line - 1]):
        head, _ = enclosing_function(text, line)
        return end + 1, block_end(text, head)
    return line, end
