"""Re-enabling host recording with a smaller ``max_entries``, under AddressSanitizer.

``ringbuffer.cpp`` drives the installed ``CachingHostAllocator.h`` (with the
fake backend) through ``recordHistory`` and ``recordExternalRegister``: the trace
buffer is filled and wrapped at ``max_entries`` 8, then recording is enabled
again at 2, without ``clearHistory`` (mode ``shrink``) or with it (``clear``).
:func:`ring_buffer_overflow` builds it once per torch release (cached) and runs
both modes, so the page can call it for the other release with
:func:`explainers.releases.run_under`.

>>> print(script())  # doctest: +NORMALIZE_WHITESPACE
g++ -std=c++17 -fsanitize=address -fno-omit-frame-pointer -g -O1 -Wno-interference-size -I"$TORCH/include"
    ringbuffer.cpp -o ringbuffer -L"$TORCH/lib" -lc10 -Wl,-rpath,"$TORCH/lib"
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from .build import build_program
from .torchpaths import find_torch
from .tsan_command import compile_command

__all__ = ["SOURCE", "FLAGS", "MODES", "script", "asan_verdict", "ring_buffer_overflow"]

SOURCE = Path(__file__).with_name("ringbuffer.cpp")
FLAGS = ("-std=c++17", "-fsanitize=address", "-fno-omit-frame-pointer", "-g", "-O1", "-Wno-interference-size")
BINARY = "ringbuffer"
MODES = ("shrink", "clear")
_ERROR = re.compile(r"ERROR: AddressSanitizer: (?P<kind>[\w-]+)")
_ACCESS = re.compile(r"^(?P<op>READ|WRITE) of size (?P<size>\d+)", re.M)
_FRAME = re.compile(r"^\s*#(?P<n>\d+) 0x[0-9a-f]+ in (?P<fn>.+?) (?P<where>\S+:\d+)", re.M)


def script() -> str:
    """The compile command, run in the build folder with ``$TORCH`` set to the torch package."""
    return compile_command(SOURCE.name, BINARY, FLAGS)


def asan_verdict(stderr: str) -> dict[str, Any] | None:
    """The first AddressSanitizer error in *stderr*: its kind, access and top frames; ``None`` if none.

    >>> asan_verdict("==1==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x1\\n"
    ...              "WRITE of size 4 at 0x1 thread T0\\n"
    ...              "    #0 0x4011 in c10::RingBuffer<int>::insertEntries(int const&) /x/RingBuffer.h:44\\n")
    {'kind': 'heap-buffer-overflow', 'access': 'WRITE of size 4', 'frames': ['c10::RingBuffer<int>::insertEntries(int const&) RingBuffer.h:44']}
    >>> asan_verdict("clean") is None
    True
    """
    m = _ERROR.search(stderr)
    if not m:
        return None
    access = _ACCESS.search(stderr, m.end())
    frames = [f"{f.group('fn')} {f.group('where').rsplit('/', 1)[-1]}" for f in _FRAME.finditer(stderr, m.end())]
    return {"kind": m.group("kind"), "access": f"{access.group('op')} of size {access.group('size')}" if access else "",
            "frames": frames[:6]}


def ring_buffer_overflow(torch_root: str | None = None) -> dict[str, Any]:
    """Build ``ringbuffer.cpp`` with ASan against the installed torch and run both modes.

    Returns ``version`` and, per mode, ``returncode``, ``asan`` (:func:`asan_verdict`)
    and ``output`` (the JSON line, when the program survived).
    """
    torch = find_torch(torch_root)
    program = build_program(SOURCE, BINARY, FLAGS, torch)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:abort_on_error=0")
    out: dict[str, Any] = {"version": torch.version}
    for mode in MODES:
        res = subprocess.run([str(program.executable), mode], cwd=program.folder, capture_output=True, text=True,
                             timeout=120, env=env)
        line = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else ""
        out[mode] = {"returncode": res.returncode, "asan": asan_verdict(res.stderr),
                     "output": json.loads(line) if line.startswith("{") else None}
    return out
