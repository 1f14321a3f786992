"""What the Python side of the pinned-memory snapshot looks like, checked without CUDA.

``torch.cuda.memory._record_memory_history(..., record_pinned_host_memory=True)``
turns on host recording and ``torch.cuda.memory._snapshot()`` returns the
data under ``host_segments`` and ``host_traces``.  Both calls need a CUDA
device, so on a CPU-only machine this module only *inspects* them: the
signature, the docstring that documents the keys, and the key names compiled
into ``libtorch_python`` (which builds the snapshot dictionary in C++).
Nothing here calls either function.

>>> info = inspect_python_api()
>>> info.has_param("record_pinned_host_memory"), info.param_default("record_cuda")
(True, True)
"""

from __future__ import annotations

import inspect
import mmap
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PythonApi", "inspect_python_api", "HOST_KEYS"]

#: Snapshot keys that carry the pinned-host data.
HOST_KEYS = ("host_segments", "host_traces")


@dataclass(frozen=True)
class PythonApi:
    """The inspected facts."""

    signature: inspect.Signature
    documented_keys: tuple[str, ...]  # HOST_KEYS named in _record_memory_history's docstring
    binary_keys: tuple[str, ...]  # HOST_KEYS found as strings in libtorch_python
    binary: str

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
    """Inspect ``_record_memory_history`` and ``libtorch_python`` (no CUDA call is made).

    In torch 2.14.1 ``_record_memory_history(enabled, *args, **kwargs)``
    dispatches to a legacy or a new implementation and sets ``__signature__``
    to the new one, so :func:`inspect.signature` shows the real parameters.
    """
    import torch.cuda.memory as mem

    fn = mem._record_memory_history
    sig = inspect.signature(fn)
    doc = fn.__doc__ or ""
    documented = tuple(k for k in HOST_KEYS if f"``{k}``" in doc)
    lib = Path(mem.__file__).parents[1] / "lib" / "libtorch_python.so"
    in_binary: tuple[str, ...] = ()
    if lib.is_file():
        with open(lib, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            # NUL on both sides: the key as a whole C string, not a substring.
            in_binary = tuple(k for k in HOST_KEYS if m.find(b"\0" + k.encode() + b"\0") >= 0)
    return PythonApi(sig, documented, in_binary, lib.name)
