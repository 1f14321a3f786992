"""Errors raised when the TSAN reproduction cannot run here.

Each message says what is missing and what to install.  They subclass
``RuntimeError`` (the environment is wrong, not an argument), except
:class:`SnapshotCodeMissingError`, which is also a ``ValueError`` because a
caller can hand it a wrong header explicitly.

>>> issubclass(CompilerNotFoundError, ToolchainError)
True
>>> str(CompilerNotFoundError("g++ not on PATH"))
'g++ not on PATH'
"""

from __future__ import annotations

__all__ = [
    "ToolchainError",
    "CompilerNotFoundError",
    "TsanUnsupportedError",
    "TsanRuntimeError",
    "TorchHeadersNotFoundError",
    "SnapshotCodeMissingError",
    "HarnessFailedError",
]


class ToolchainError(RuntimeError):
    """Base class: the machine cannot build or run the TSAN harness.

    >>> isinstance(TsanUnsupportedError("x"), ToolchainError)
    True
    """


class CompilerNotFoundError(ToolchainError):
    """``g++`` is not on ``PATH``.

    >>> raise CompilerNotFoundError("no g++")
    Traceback (most recent call last):
    ...
    explainers.allocator.errors.CompilerNotFoundError: no g++
    """


class TsanUnsupportedError(ToolchainError):
    """``g++`` exists but cannot build a ``-fsanitize=thread`` program (no libtsan).

    >>> TsanUnsupportedError("no libtsan").args
    ('no libtsan',)
    """


class TsanRuntimeError(ToolchainError):
    """A TSAN binary built but its runtime refused to start (for example ASLR).

    >>> TsanRuntimeError("mapping").args
    ('mapping',)
    """


class TorchHeadersNotFoundError(ToolchainError):
    """The installed torch has no ``include/`` folder or no ``libc10``.

    >>> TorchHeadersNotFoundError("x").args
    ('x',)
    """


class SnapshotCodeMissingError(ToolchainError, ValueError):
    """``CachingHostAllocator.h`` lacks the pinned-memory snapshot code or its four atomic fields.

    >>> issubclass(SnapshotCodeMissingError, ValueError)
    True
    """


class HarnessFailedError(RuntimeError):
    """The harness crashed or printed no summary line (not a TSAN verdict).

    >>> HarnessFailedError("rc=-11").args
    ('rc=-11',)
    """
