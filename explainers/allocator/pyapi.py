"""The Python side of the pinned-memory snapshot, called on whatever machine runs this.

``torch.cuda.memory._record_memory_history(..., record_pinned_host_memory=True)``
turns on host recording; ``torch.cuda.memory._snapshot()`` returns the data
under ``host_segments`` and ``host_traces``.  In torch 2.14.1 and 2.15.0 the snapshot
call works without a GPU (it returns empty lists), while turning recording on
raises when no CUDA driver is present.  This module calls both, and inspects
the signature and the docstring of the first.

>>> info = inspect_python_api()
>>> info.has_param("record_pinned_host_memory"), info.param_default("record_cuda")
(True, True)
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

__all__ = ["PythonApi", "HistoryAttempt", "inspect_python_api", "take_snapshot",
           "try_record_host_history", "HOST_KEYS"]

#: Snapshot keys that carry the pinned-host data.
HOST_KEYS = ("host_segments", "host_traces")


@dataclass(frozen=True)
class PythonApi:
    """The inspected facts."""

    signature: inspect.Signature
    documented_keys: tuple[str, ...]  # HOST_KEYS named in _record_memory_history's docstring

    def has_param(self, name: str) -> bool:
        return name in self.signature.parameters

    def param_default(self, name: str):
        """Default value of parameter *name*.

        >>> inspect_python_api().param_default("nope")
        Traceback (most recent call last):
        ...
        ValueError: _record_memory_history has no parameter 'nope'
        """
        if name not in self.signature.parameters:
            raise ValueError(f"_record_memory_history has no parameter {name!r}")
        return self.signature.parameters[name].default


def inspect_python_api() -> PythonApi:
    """Inspect ``_record_memory_history`` (nothing is called).

    In torch 2.14.1 and 2.15.0 ``_record_memory_history(enabled, *args, **kwargs)``
    dispatches to a legacy or a new implementation and sets ``__signature__``
    to the new one, so :func:`inspect.signature` shows the real parameters.
    """
    import torch.cuda.memory as mem

    fn = mem._record_memory_history
    doc = fn.__doc__ or ""
    return PythonApi(inspect.signature(fn), tuple(k for k in HOST_KEYS if f"``{k}``" in doc))


def take_snapshot() -> dict:
    """Call ``torch.cuda.memory._snapshot()`` and return its dictionary.

    >>> sorted(k for k in take_snapshot() if k.startswith("host_"))
    ['host_segments', 'host_traces']
    """
    import torch.cuda.memory as mem

    return mem._snapshot()


@dataclass(frozen=True)
class HistoryAttempt:
    """What turning host-only recording on did here."""

    ok: bool
    error_type: str | None = None  # e.g. "RuntimeError"
    error: str | None = None  # the first line of the message


def try_record_host_history() -> HistoryAttempt:
    """Turn host-only recording on (and at once off again, if that worked).

    Calls ``_record_memory_history("all", max_entries=1,
    record_pinned_host_memory=True, record_cuda=False)``.  Only a
    ``RuntimeError`` is caught: that is what torch 2.14.1 and 2.15.0 raise when there
    is no CUDA driver.
    """
    import torch.cuda.memory as mem

    try:
        mem._record_memory_history("all", max_entries=1, record_pinned_host_memory=True,
                                   record_cuda=False)
    except RuntimeError as e:
        first = (str(e).strip().splitlines() or [""])[0]
        return HistoryAttempt(False, type(e).__name__, first)
    mem._record_memory_history(None)
    return HistoryAttempt(True)
