"""The allocator's statistics with a private pool in use, under ThreadSanitizer.

``statsrace.cpp`` opens a private pool for stream 1 and runs two threads: in
mode ``pools`` one allocates and frees in the private pool, the other in the
default pool; in mode ``getstats`` the second thread calls ``getStats()``
instead.  :func:`stats_races` builds it with the harness's TSAN flags (cached
per torch version, header, source and compiler), runs both modes and returns
plain JSON: for each mode the exit status and, for every report, the ``stats_``
counter it is on, read off the header line of the innermost header frame.  The
page calls it for the other release with :func:`explainers.releases.run_under`.

>>> print(command("pools", 200))
TSAN_OPTIONS=halt_on_error=0:history_size=7 ./statsrace pools 200
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .build import FLAGS, build_program
from .errors import HarnessFailedError
from .runner import TSAN_OPTIONS, run_tsan
from .torchpaths import HEADER_RELPATH, find_torch
from .tsan import Access, parse_tsan

__all__ = ["SOURCE", "MODES", "THREADS", "command", "stats_field", "stats_races"]

#: The program, shipped with this package.
SOURCE = Path(__file__).with_name("statsrace.cpp")
BINARY = "statsrace"
MODES = ("pools", "getstats")
#: TSAN numbers threads in creation order; main() creates the private pool's thread first.
THREADS = {"pools": {"T1": "private pool", "T2": "default pool"},
           "getstats": {"T1": "private pool", "T2": "getStats"}}

_FIELD = re.compile(r"\bstats_\.(\w+)")


def command(mode: str, iterations: int) -> str:
    """The shell line that runs the built program (in its build folder)."""
    return f"TSAN_OPTIONS={TSAN_OPTIONS} ./{BINARY} {mode} {iterations}"


def stats_field(access: Access, header_lines: list[str]) -> tuple[str | None, str | None]:
    """The ``stats_`` member *access* is on, and the function that names it.

    The allocator-header frames are searched innermost first for a line naming a
    ``stats_`` member (an inlined helper such as ``getStats``' lambda names none; its
    caller does).  ``(None, None)`` when no header frame names one, for example in
    a stack TSAN could not restore.

    >>> from explainers.allocator.tsan import Access, Frame
    >>> h = "/t/include/ATen/core/CachingHostAllocator.h"
    >>> frames = (Frame(0, "operator()", h, 1), Frame(1, "getStats", h, 2))
    >>> a = Access("read", False, 8, "0x10", "T2", (), frames, previous=False)
    >>> stats_field(a, ["  accumulator.current += other.current;", "  add(s, stats_.active_bucket_stats[i]);"])
    ('active_bucket_stats', 'getStats')
    """
    for frame in access.frames:
        if frame.file and frame.file.endswith(HEADER_RELPATH) and frame.line:
            m = _FIELD.search(header_lines[frame.line - 1])
            if m:
                return m.group(1), frame.function
    return None, None


def stats_races(iterations: int = 200, torch_root: str | None = None) -> dict[str, Any]:
    """Build (or reuse) ``statsrace.cpp`` against the installed torch and run both modes.

    Returns ``version``, ``compiled`` (whether this call compiled the program) and,
    per mode, ``command``, ``returncode``, ``done`` (the program's last line was
    printed), ``reports`` (TSAN reports of any kind) and ``races``: one entry per
    data race with the ``threads`` of its two accesses (named by :data:`THREADS`),
    the ``fields`` and ``functions`` its accesses are in (see :func:`stats_field`).

    >>> stats_races(0)
    Traceback (most recent call last):
    ...
    ValueError: iterations must be a positive int, got 0
    """
    if not isinstance(iterations, int) or iterations <= 0:
        raise ValueError(f"iterations must be a positive int, got {iterations!r}")
    torch = find_torch(torch_root)
    program = build_program(SOURCE, BINARY, FLAGS, torch)
    header_lines = torch.header.read_text().splitlines()
    out: dict[str, Any] = {"version": torch.version, "compiled": not program.cached}
    for mode in MODES:
        res, launcher = run_tsan([str(program.executable), mode, str(iterations)], program.folder,
                                 timeout=120)
        done = res.stdout.splitlines()[-1:] == [f"statsrace: {mode} done"]
        if res.returncode not in (0, 66) or not done:
            raise HarnessFailedError(f"{command(mode, iterations)} exited {res.returncode}:\n"
                                     f"{(res.stdout + res.stderr)[-3000:]}")
        log = parse_tsan(res.stderr)
        races = []
        for report in log.data_races:
            sides = [a for a in (report.current, report.previous) if a is not None]
            named = [stats_field(a, header_lines) for a in sides]
            races.append({"threads": sorted(THREADS[mode].get(a.thread, a.thread) for a in sides),
                          "fields": sorted({f for f, _ in named if f}),
                          "functions": sorted({fn for _, fn in named if fn})})
        shown = command(mode, iterations)
        if launcher:
            shown = shown.replace("./", " ".join(launcher) + " ./", 1)
        out[mode] = {"command": shown, "returncode": res.returncode, "done": done,
                     "reports": len(log.reports), "races": races}
    return out
