"""Errors a page shows: a call's exception, with paths that do not depend on where it was built.

- :func:`show_error` calls a function that must raise and prints its traceback as
  Python prints it, each file named relative to the folder its package is
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

__all__ = ["capture_error", "shown_path", "show_error"]


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


def show_error(fn: Callable[..., object], /, *args: object, **kwargs: object) -> BaseException:
    """Call ``fn(*args, **kwargs)``, print the traceback of what it raises, and return the exception.

    The traceback starts in ``fn`` (this helper's own frame is left out), and
    every file is named by :func:`shown_path`. A call that returns is an error:

    >>> from explainers.render import render
    >>> error = show_error(render, [1, 2])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
      File "explainers/render.py", line ..., in render
        values = _as_array(tensor)
                 ^^^^^^^^^^^^^^^^^
      File "explainers/render.py", line ..., in _as_array
        raise TypeError(
    TypeError: render() expects a tensor or array with a .shape, got list; wrap it with torch.tensor(...)
    >>> show_error(len, [1, 2])
    Traceback (most recent call last):
    ...
    AssertionError: show_error: len(...) returned 2 instead of raising
    """
    try:
        result = fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the error is what is shown
        error = exc
    else:
        name = getattr(fn, "__name__", type(fn).__name__)
        raise AssertionError(f"show_error: {name}(...) returned {result!r} instead of raising")
    shown = traceback.TracebackException.from_exception(error)
    del shown.stack[0]  # this helper's call of fn
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
