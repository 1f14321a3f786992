"""``c10::RingBuffer`` over a grid of shrinking maxima, under AddressSanitizer.

``ringsweep.cpp`` does what ``recordHistory`` does to the trace buffer when
recording is re-enabled without ``clearHistory``: ``setMaxEntries(M)``, ``E``
inserts, ``setMaxEntries(m)``, ``k`` more inserts, then ``getEntries``; each case
in its own forked process.  It is built against the installed
``c10/core/RingBuffer.h`` with ``-fsanitize=address`` and libstdc++'s vector
annotations (``_GLIBCXX_SANITIZE_VECTOR``), so a write past the vector's size is
reported even where its capacity is larger.

:func:`overflows` and :func:`entries_returned` state the behaviour the header's
code implies; the page compares them with every case :func:`ring_sweep` ran.

>>> print(script())  # doctest: +NORMALIZE_WHITESPACE
g++ -std=c++17 -fsanitize=address -D_GLIBCXX_SANITIZE_VECTOR=1 -fno-omit-frame-pointer -g -O1
    -I"$TORCH/include" ringsweep.cpp -o ringsweep -L"$TORCH/lib" -lc10 -Wl,-rpath,"$TORCH/lib"
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from .build import build_program
from .torchpaths import find_torch
from .tsan_command import compile_command

__all__ = ["SOURCE", "FLAGS", "MAX_OLD", "script", "next_slot", "overflows", "entries_returned", "out_of_order",
           "ring_sweep"]

SOURCE = Path(__file__).with_name("ringsweep.cpp")
FLAGS = ("-std=c++17", "-fsanitize=address", "-D_GLIBCXX_SANITIZE_VECTOR=1", "-fno-omit-frame-pointer", "-g",
         "-O1")
BINARY = "ringsweep"
MAX_OLD = 8  # old maxima 1..8; entries 0..2M+1, new maxima 1..M+1, more entries 0..M+2 (5184 cases)


def script() -> str:
    """The compile command, run in the build folder with ``$TORCH`` set to the torch package."""
    return compile_command(SOURCE.name, BINARY, FLAGS)


def next_slot(old_max: int, entries: int) -> int:
    """Where ``insertEntries`` writes next after *entries* inserts at *old_max* (0 until it wraps).

    >>> next_slot(8, 9), next_slot(8, 14), next_slot(8, 16), next_slot(8, 5)
    (1, 6, 0, 0)
    """
    return (entries - old_max) % old_max if entries > old_max else 0


def overflows(old_max: int, entries: int, new_max: int, more: int) -> bool:
    """Whether the *more* inserts after ``setMaxEntries(new_max)`` write past the vector's end.

    The buffer holds ``min(entries, old_max)`` entries.  Once full, ``insertEntries``
    writes at the next slot and resets it only when it *equals* the maximum, so a
    slot already at or above the new maximum climbs until it reaches the size.

    >>> overflows(8, 14, 2, 4), overflows(8, 14, 2, 2), overflows(8, 9, 2, 100), overflows(8, 9, 4, 100)
    (True, False, False, False)
    """
    size, slot = min(entries, old_max), next_slot(old_max, entries)
    return entries > old_max and slot >= max(1, new_max) and more > size - slot


def entries_returned(old_max: int, entries: int, new_max: int, more: int) -> int:
    """How many entries ``getEntries`` returns afterwards, when nothing overflowed.

    The vector grows to the new maximum but never shrinks to it.

    >>> entries_returned(8, 9, 2, 100), entries_returned(2, 1, 4, 10), entries_returned(8, 3, 2, 0)
    (8, 4, 3)
    """
    size = min(entries, old_max)
    return max(size, min(size + more, max(1, new_max)))


def out_of_order(values: list[int]) -> bool:
    """Whether ``getEntries`` returned *values* out of insertion order (insert ``i`` stores ``i``).

    A ring buffer should return its entries oldest first, so the values must increase.

    >>> out_of_order([2, 3, 4]), out_of_order([10, 11, 2, 3]), out_of_order([])
    (False, True, False)
    """
    return any(a >= b for a, b in zip(values, values[1:], strict=False))


def ring_sweep(torch_root: str | None = None, max_old: int = MAX_OLD) -> dict[str, Any]:
    """Build ``ringsweep.cpp`` with ASan against the installed torch and run the grid up to *max_old*.

    Returns ``version``, ``header`` (the text of the ``RingBuffer.h`` it was built
    against) and ``cases``: ``[old_max, entries, new_max, more, exit status,
    ASan error kind or "", entries returned or -1, the values returned in order]``
    per case (insert ``i`` stores ``i``; the list is empty when the case did not return).
    """
    torch = find_torch(torch_root)
    program = build_program(SOURCE, BINARY, FLAGS, torch)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:symbolize=0:abort_on_error=0:detect_container_overflow=1")
    res = subprocess.run([str(program.executable), str(max_old)], cwd=program.folder, capture_output=True,
                         text=True, timeout=600, env=env, check=True)
    return {"version": torch.version,
            "header": (torch.include / "c10" / "core" / "RingBuffer.h").read_text(),
            "cases": [json.loads(line) for line in res.stdout.splitlines()]}
