"""Errors a page shows: a call's exception, with paths that do not depend on where it was built.

- :func:`show_error` prints a line of code as a ``>>>`` line, runs it (it must
  raise) and prints its traceback as Python prints it, each file named relative to the folder its package is
  installed in (``explainers/render.py``, ``torch/_tensor_str.py``), so a page
  built in any folder prints the same text.
- :func:`capture_error` calls a function and returns what it raised, in two strings,
  or ``None``: for a table of outcomes rather than a traceback.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["capture_error", "shown_path", "show_error"]

_CODE = "<shown code>"  # the file name of the code show_error runs, in its traceback


def _roots() -> list[str]:
    """Folders whose contents are named relative to them, the longest first."""
    import explainers

    roots = {
        str(Path(explainers.__file__).resolve().parents[1]),  # the checkout, or site-packages
        *(sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib")),
    }
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "__file__", None):
        roots.add(str(Path(torch.__file__).resolve().parents[1]))
    return sorted((os.path.realpath(r) for r in roots), key=len, reverse=True)


def shown_path(filename: str) -> str:
    """``filename`` relative to the folder of its package; another absolute path by its name only.

    >>> import explainers.render, torch
    >>> shown_path(explainers.render.__file__), shown_path(torch.__file__)
    ('explainers/render.py', 'torch/__init__.py')
    >>> shown_path("/tmp/ipykernel_4242/123.py"), shown_path("<doctest>")
    ('123.py', '<doctest>')
    """
    if not os.path.isabs(filename):
        return filename
    real = os.path.realpath(filename)
    for root in _roots():
        if real.startswith(root + os.sep):
            return os.path.relpath(real, root)
    return os.path.basename(filename)


def show_error(code: str, namespace: dict[str, Any]) -> BaseException:
    """Print ``code`` as a ``>>>`` line, evaluate it in ``namespace``, print what it raises.

    What the reader sees called is what runs. The traceback starts in the first
    function ``code`` calls (the frames of this helper and of ``code`` itself are
    left out), every file named by :func:`shown_path`. Code that returns is an error:

    >>> import contextlib, io
    >>> from explainers.render import render
    >>> with contextlib.redirect_stdout(io.StringIO()) as out:
    ...     error = show_error("render([1, 2])  # a list", {"render": render})
    >>> first, *rest = out.getvalue().splitlines()
    >>> first == ">>> render([1, 2])  # a list", type(error).__name__
    (True, 'TypeError')
    >>> print("\\n".join(rest))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
      File "explainers/render.py", line ..., in render
        values = _readable(tensor)
                 ^^^^^^^^^^^^^^^^^
      File "explainers/render.py", line ..., in _readable
        raise TypeError(
    TypeError: render() expects a tensor or array with a .shape, got list; wrap it with torch.tensor(...)
    >>> show_error("len([1, 2])", {})
    Traceback (most recent call last):
    ...
    AssertionError: show_error: len([1, 2]) returned 2 instead of raising
    """
    compiled = compile(code, _CODE, "eval")
    print(">>>", code)
    try:
        result = eval(compiled, namespace)  # noqa: S307 - the page's own code, shown above
    except Exception as exc:  # noqa: BLE001 - the error is what is shown
        error = exc
    else:
        raise AssertionError(f"show_error: {code} returned {result!r} instead of raising")
    shown = traceback.TracebackException.from_exception(error)
    del shown.stack[:2]  # this helper's eval and the frame of code itself
    seen: set[int] = set()
    chain = [shown]
    while chain:
        te = chain.pop()
        if id(te) in seen:
            continue
        seen.add(id(te))
        for frame in te.stack:
            _ = frame.line  # read the source line while the real path still names the file
            frame.filename = shown_path(frame.filename)
        chain.extend(t for t in (te.__cause__, te.__context__) if t is not None)
    print("".join(shown.format()), end="")
    return error


def capture_error(fn: Callable[[], object]) -> tuple[str, str] | None:
    """Call ``fn``; return ``(exception type name, first line of the message)`` or ``None``.

    >>> capture_error(lambda: 1 / 0)
    ('ZeroDivisionError', 'division by zero')
    >>> capture_error(lambda: 1) is None
    True
    """
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the error is the result being reported
        return type(exc).__name__, str(exc).splitlines()[0] if str(exc) else ""
    return None
