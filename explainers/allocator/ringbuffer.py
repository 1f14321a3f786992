"""Re-enabling host recording with a smaller ``max_entries``, under AddressSanitizer.

``ringbuffer.cpp`` drives the installed ``CachingHostAllocator.h`` (with the
fake backend) through ``recordHistory`` and ``recordExternalRegister``: the trace
buffer is filled and wrapped at ``max_entries`` 8, then recording is enabled
again at 2, without ``clearHistory`` (mode ``shrink``) or with it (``clear``).
Mode ``window`` replays on a ``c10::RingBuffer`` of the allocator's entry type
the calls the buffer sees when another thread registers memory between the
``setMaxEntries`` and the ``clear()`` of one ``recordHistory(..., clearHistory=true)``;
:func:`clear_window` reads from the header why that order can happen.
:func:`ring_buffer_overflow` builds it once per torch release (cached) and runs
every mode, so the page can call it for the other release with
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

__all__ = ["SOURCE", "FLAGS", "MODES", "script", "asan_verdict", "clear_window", "ring_buffer_overflow"]

SOURCE = Path(__file__).with_name("ringbuffer.cpp")
FLAGS = ("-std=c++17", "-fsanitize=address", "-fno-omit-frame-pointer", "-g", "-O1", "-Wno-interference-size")
BINARY = "ringbuffer"
MODES = ("shrink", "clear", "window")
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


def clear_window(header: str) -> dict[str, Any]:
    """Where ``recordHistory`` resizes and clears the trace buffer, and which locks it and ``record_trace`` take.

    *header* is the text of ``CachingHostAllocator.h``.  Returns the line numbers of
    ``recordHistory``, of its ``trace_buffer_.setMaxEntries`` and ``trace_buffer_.clear()``
    calls and of its end, the lines in between (the calls are separate, each taking
    the buffer's own lock), the mutexes ``recordHistory`` locks, every line of the
    header that locks ``profiling_mutex_`` (only ``recordHistory``'s), and the lines of
    ``record_trace``'s body that lock anything (none: a registration's insert waits
    only for the buffer's lock).

    >>> text = ("  void record_trace(int a) {\\n    trace_buffer_.insertEntries(a);\\n  }\\n"
    ...         "  void recordHistory(bool on, size_t n, bool clearHistory) {\\n"
    ...         "    std::lock_guard<std::mutex> g(profiling_mutex_);\\n"
    ...         "    if (on) {\\n      trace_buffer_.setMaxEntries(n);\\n    }\\n"
    ...         "    if (clearHistory) {\\n      trace_buffer_.clear();\\n    }\\n  }\\n")
    >>> clear_window(text)
    {'start': 4, 'set_max': 7, 'clear': 10, 'end': 12, 'between': ['    }', '    if (clearHistory) {'], 'history_locks': ['profiling_mutex_'], 'profiling_locks': [5], 'trace_locks': []}
    """
    from explainers.page.torchsource import block_end, find_line

    lines = header.splitlines()
    start = find_line(header, "void recordHistory(")
    end = block_end(header, start)
    set_max = find_line(header, "trace_buffer_.setMaxEntries(", start)
    clear = find_line(header, "trace_buffer_.clear();", start)
    if not start < set_max < clear < end:
        raise ValueError(f"recordHistory's calls are not in its body: {start}, {set_max}, {clear}, {end}")
    trace = find_line(header, "void record_trace(")
    body = lines[trace - 1:block_end(header, trace)]
    return {"start": start, "set_max": set_max, "clear": clear, "end": end,
            "between": lines[set_max:clear - 1],
            "history_locks": re.findall(r"lock(?:_guard|)<[^>]*> \w+\((\w+)\)", "\n".join(lines[start - 1:end])),
            "profiling_locks": [no for no, ln in enumerate(lines, 1)
                                if re.search(r"lock\w*<[^>]*> \w+\(profiling_mutex_\)", ln)],
            "trace_locks": [ln.strip() for ln in body if re.search(r"lock|mutex", ln)]}


def ring_buffer_overflow(torch_root: str | None = None) -> dict[str, Any]:
    """Build ``ringbuffer.cpp`` with ASan against the installed torch and run both modes.

    Returns ``version``, ``recordHistory`` (:func:`clear_window` of the installed header) and,
    per mode, ``returncode``, ``asan`` (:func:`asan_verdict`) and ``output`` (the JSON
    line, when the program survived).
    """
    torch = find_torch(torch_root)
    program = build_program(SOURCE, BINARY, FLAGS, torch)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:abort_on_error=0")
    header = torch.header.read_text()
    out: dict[str, Any] = {"version": torch.version, "recordHistory": clear_window(header)}
    for mode in MODES:
        res = subprocess.run([str(program.executable), mode], cwd=program.folder, capture_output=True, text=True,
                             timeout=120, env=env)
        line = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else ""
        out[mode] = {"returncode": res.returncode, "asan": asan_verdict(res.stderr),
                     "output": json.loads(line) if line.startswith("{") else None}
    return out
