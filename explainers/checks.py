"""Argument checks shared by the library's public functions.

>>> is_int(3), is_int(True), is_int(3.0)
(True, False, False)
"""

from __future__ import annotations

__all__ = ["is_int"]


def is_int(value: object) -> bool:
    """Whether ``value`` is an ``int`` and not a ``bool``.

    ``bool`` is a subclass of ``int`` in Python, so ``isinstance(True, int)`` holds;
    a size, a count or a rank given as ``True`` is a caller's mistake.

    >>> [is_int(v) for v in (0, -2, False, "1", None)]
    [True, True, False, False, False]
    """
    return isinstance(value, int) and not isinstance(value, bool)
