"""Parse ThreadSanitizer reports into records.

TSAN writes one block per warning between lines of ``=`` signs::

    WARNING: ThreadSanitizer: data race (pid=4952)
      Write of size 1 at 0x7b24... by thread T1 (mutexes: write M24):
        #0 PlainAtomic<bool>::store(...) harness.cpp:33 (harness+0x5deb)
        #1 get_free_block overlay/ATen/core/CachingHostAllocator.h:709 (...)
      Previous read of size 1 at 0x7b24... by thread T3 (mutexes: write M25, write M27):
        ...
      Mutex M24 (0x7b90...) created at:
        ...
    SUMMARY: ThreadSanitizer: data race harness.cpp:33 in PlainAtomic<bool>::store(...)

and, when any warning was printed, ``ThreadSanitizer: reported N warnings``
at exit.  This module knows the format, not the allocator: naming fields and
roles is :mod:`explainers.allocator.races`' job.

>>> log = parse_tsan(SAMPLE)
>>> r = log.reports[0]
>>> r.kind, r.current.kind, r.current.size, r.current.thread, r.current.mutexes
('data race', 'write', 1, 'T1', (('write', 'M24'),))
>>> r.previous.kind, r.previous.thread, [f.function for f in r.previous.frames]
('read', 'T3', ['getSegments'])
>>> r.mutex_stacks["M24"][0].line, r.complete, log.truncated
(697, True, False)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["Frame", "Access", "Report", "TsanLog", "parse_tsan", "trim_report", "RUNTIME_PREFIXES", "SAMPLE",
           "RuntimeFlag", "parse_flag_help"]

SAMPLE = """\
==================
WARNING: ThreadSanitizer: data race (pid=1)
  Write of size 1 at 0x7b2400000038 by thread T1 (mutexes: write M24):
    #0 get_free_block overlay/ATen/core/CachingHostAllocator.h:709 (h+0x5deb)

  Previous read of size 1 at 0x7b2400000038 by thread T3 (mutexes: write M25, write M27):
    #0 getSegments overlay/ATen/core/CachingHostAllocator.h:1153 (h+0xb44d)

  Mutex M24 (0x7b9000000300) created at:
    #0 get_free_block overlay/ATen/core/CachingHostAllocator.h:697 (h+0x5a3a)

SUMMARY: ThreadSanitizer: data race overlay/ATen/core/CachingHostAllocator.h:709 in get_free_block
==================
ThreadSanitizer: reported 1 warnings
"""


@dataclass(frozen=True)
class Frame:
    """One stack frame: ``#index function file:line (module+offset)``.

    >>> Frame.parse("    #2 run_worker harness.cpp:112 (h+0x12ad8)")
    Frame(index=2, function='run_worker', file='harness.cpp', line=112)
    >>> Frame.parse("    #8 <null> <null> (libstdc++.so.6+0xd44a2)")
    Frame(index=8, function='<null>', file=None, line=None)
    """

    index: int
    function: str
    file: str | None
    line: int | None

    # "#N <function, may contain spaces> <file>:<line>[:<col>] (<module>+0x..)"
    _RX = re.compile(
        r"^\s*#(?P<i>\d+)\s+(?P<rest>.*?)(?:\s+\((?P<mod>[^()]*\+0x[0-9a-f]+)\))?\s*$"
    )
    _LOC = re.compile(r"^(?P<fn>.*)\s+(?P<file>\S+?):(?P<line>\d+)(?::\d+)?$")

    @classmethod
    def parse(cls, text: str) -> Frame | None:
        m = cls._RX.match(text)
        if not m:
            return None
        rest = m.group("rest")
        loc = cls._LOC.match(rest)
        if loc:
            return cls(int(m.group("i")), loc.group("fn").strip(), loc.group("file"), int(loc.group("line")))
        fn = rest.rsplit(" <null>", 1)[0] if rest.endswith("<null>") else rest
        return cls(int(m.group("i")), fn.strip(), None, None)

    def where(self) -> str:
        """``file:line`` with the file's base name, or ``?``.

        >>> Frame(0, "f", "/a/b/CachingHostAllocator.h", 709).where()
        'CachingHostAllocator.h:709'
        """
        if self.file is None:
            return "?"
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line}"


@dataclass(frozen=True)
class Access:
    """One side of a data race."""

    kind: str  # "read" or "write"
    atomic: bool
    size: int
    address: str
    thread: str  # "T1", ..., or "main"
    mutexes: tuple[tuple[str, str], ...]  # (("write", "M24"), ...): held during the access
    frames: tuple[Frame, ...]
    previous: bool
    stack_restored: bool = True


@dataclass
class Report:
    """One ``WARNING: ThreadSanitizer: ...`` block."""

    kind: str  # "data race", "heap-use-after-free", ...
    current: Access | None = None
    previous: Access | None = None
    location: str | None = None
    mutex_stacks: dict[str, tuple[Frame, ...]] = field(default_factory=dict)
    thread_stacks: dict[str, tuple[Frame, ...]] = field(default_factory=dict)
    summary: str | None = None
    complete: bool = False  # saw SUMMARY and the closing rule
    text: str = ""


@dataclass
class TsanLog:
    """All reports of one run."""

    reports: list[Report]
    warnings_reported: int | None  # from "ThreadSanitizer: reported N warnings"
    truncated: bool  # the last report was cut off

    @property
    def data_races(self) -> list[Report]:
        """Complete data-race reports (a truncated one may lack its second access)."""
        return [
            r for r in self.reports
            if r.kind == "data race" and r.complete and r.current and r.previous
        ]


_ACCESS = re.compile(
    r"^\s*(?P<prev>Previous )?(?P<atomic>[Aa]tomic )?(?P<kind>[Rr]ead|[Ww]rite) of size (?P<size>\d+) "
    r"at (?P<addr>0x[0-9a-f]+) by (?:thread (?P<tid>T\d+)|(?P<main>main) thread)"
    r"(?: \(mutexes: (?P<mx>[^)]*)\))?:\s*$"
)
_WARNING = re.compile(r"^WARNING: ThreadSanitizer: (?P<kind>[^(]+?)\s*(?:\(.*)?$")
_MUTEX = re.compile(r"^\s*Mutex (?P<id>M\d+) \(0x[0-9a-f]+\) created at:")
_THREAD = re.compile(r"^\s*Thread (?P<id>T\d+) \(tid=\d+, [^)]*\) created by")
_REPORTED = re.compile(r"^ThreadSanitizer: reported (\d+) warnings?")


def _mutex_list(text: str | None) -> tuple[tuple[str, str], ...]:
    if not text:
        return ()
    out = []
    for part in text.split(","):
        words = part.split()
        if len(words) == 2:
            out.append((words[0], words[1]))
    return tuple(out)


def parse_tsan(text: str) -> TsanLog:
    """Parse TSAN's stderr into a :class:`TsanLog`; never raises on odd input.

    A report cut off before its ``SUMMARY`` (a killed process, a size-limited
    log) is kept with ``complete=False`` and the log is flagged ``truncated``:

    >>> cut = parse_tsan(SAMPLE[:300])
    >>> len(cut.reports), cut.reports[0].complete, cut.truncated, cut.warnings_reported
    (1, False, True, None)
    >>> parse_tsan("").reports
    []
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_tsan expects the report text as str, got {type(text).__name__}")
    reports: list[Report] = []
    warnings_reported = None
    cur: Report | None = None
    lines_of_cur: list[str] = []
    # The stack being read, and what it belongs to: ("access", fields of the
    # access line), ("mutex", id), ("thread", id) or ("ignore", None).
    stack: list[Frame] | None = None
    target: tuple[str, object] = ("ignore", None)

    def flush_stack() -> None:
        nonlocal stack, target
        if stack is not None and cur is not None:
            what, key = target
            frames = tuple(stack)
            if what == "access":
                acc = Access(frames=frames, stack_restored=bool(frames), **key)
                if acc.previous:
                    cur.previous = acc
                else:
                    cur.current = acc
            elif what == "mutex":
                cur.mutex_stacks[key] = frames
            elif what == "thread":
                cur.thread_stacks[key] = frames
        stack, target = None, ("ignore", None)

    def finish() -> None:
        nonlocal cur
        flush_stack()
        if cur is not None:
            cur.text = "\n".join(lines_of_cur).rstrip("\n")
            reports.append(cur)
        cur = None

    for raw in text.splitlines():
        line = raw.rstrip()
        m = _WARNING.match(line)
        if m:
            finish()
            cur = Report(kind=m.group("kind").strip())
            lines_of_cur = ["=" * 18, line]
            continue
        m = _REPORTED.match(line)
        if m:
            finish()
            warnings_reported = int(m.group(1))
            continue
        if cur is None:
            continue
        if line.startswith("=" * 10):
            if cur.summary is not None:
                lines_of_cur.append(line)
                cur.complete = True
                finish()
            continue
        lines_of_cur.append(line)
        if line.startswith("SUMMARY: ThreadSanitizer:"):
            flush_stack()
            cur.summary = line.split("SUMMARY: ThreadSanitizer:", 1)[1].strip()
            continue
        fr = Frame.parse(line) if line.lstrip().startswith("#") else None
        if fr is not None and stack is not None:
            stack.append(fr)
            continue
        if "[failed to restore the stack]" in line and stack is not None:
            continue
        m = _ACCESS.match(line)
        if m:
            flush_stack()
            stack = []
            target = ("access", dict(
                kind=m.group("kind").lower(),
                atomic=bool(m.group("atomic")),
                size=int(m.group("size")),
                address=m.group("addr"),
                thread=m.group("tid") or "main",
                mutexes=_mutex_list(m.group("mx")),
                previous=bool(m.group("prev")),
            ))
            continue
        m = _MUTEX.match(line) or _THREAD.match(line)
        if m:
            flush_stack()
            stack = []
            target = ("mutex" if m.re is _MUTEX else "thread", m.group("id"))
            continue
        if line.strip().startswith("Location is"):
            flush_stack()
            cur.location = line.strip().rstrip(":")
            stack = []  # the allocation stack, not kept
            continue
        if not line.strip():
            flush_stack()
    finish()
    truncated = bool(reports) and not reports[-1].complete
    return TsanLog(reports, warnings_reported, truncated)


_OFFSET = re.compile(r"\s+\([^()\s]+\+0x[0-9a-f]+\)$")


#: Frames from the sanitizer runtime and the C++ library: noise in a displayed report.
RUNTIME_PREFIXES = ("../../../../src/libsanitizer", "/usr/include/", "/usr/lib/")


def trim_report(report: Report, keep_frames: int = 3, strip_prefix: str | None = None,
                drop: tuple[str, ...] = ("Location is", "Thread T"),
                skip_runtime: bool = True) -> str:
    """A shorter copy of a report's text for display; nothing is reworded.

    Keeps the first *keep_frames* frames of every stack (then ``...``), drops
    the ``(module+0xoffset)`` suffixes and the sections whose first line
    starts with one of *drop*, and removes *strip_prefix* from paths.  With
    *skip_runtime*, frames in the sanitizer runtime or the C++ library (such
    as ``pthread_mutex_lock`` under a ``std::lock_guard``) are left out and
    marked ``...``.

    >>> print(trim_report(parse_tsan(SAMPLE).reports[0], keep_frames=1, strip_prefix="overlay/"))
    ==================
    WARNING: ThreadSanitizer: data race (pid=1)
      Write of size 1 at 0x7b2400000038 by thread T1 (mutexes: write M24):
        #0 get_free_block ATen/core/CachingHostAllocator.h:709
    <BLANKLINE>
      Previous read of size 1 at 0x7b2400000038 by thread T3 (mutexes: write M25, write M27):
        #0 getSegments ATen/core/CachingHostAllocator.h:1153
    <BLANKLINE>
      Mutex M24 (0x7b9000000300) created at:
        #0 get_free_block ATen/core/CachingHostAllocator.h:697
    <BLANKLINE>
    SUMMARY: ThreadSanitizer: data race ATen/core/CachingHostAllocator.h:709 in get_free_block
    ==================
    """
    if keep_frames < 1:
        raise ValueError(f"keep_frames must be >= 1, got {keep_frames}")
    out: list[str] = []
    frames_seen = 0
    skipping = False
    elided = False
    for line in report.text.splitlines():
        stripped = line.strip()
        if line.startswith("  ") and not line.startswith("   ") and stripped:
            # A section header ("  Write of size ...", "  Mutex M1 ...").
            skipping = stripped.startswith(drop)
            frames_seen = 0
            elided = False
        if skipping:
            if not stripped:
                skipping = False
            continue
        if stripped.startswith("#"):
            frame = Frame.parse(line)
            runtime = frame is not None and (
                frame.file is None or frame.file.startswith(RUNTIME_PREFIXES)
            )
            if (skip_runtime and runtime) or frames_seen >= keep_frames:
                if not elided:
                    out.append("    ...")
                    elided = True
                continue
            frames_seen += 1
            elided = False
            line = _OFFSET.sub("", line)
        if strip_prefix:
            line = line.replace(strip_prefix, "")
        out.append(line)
    return "\n".join(out)


@dataclass(frozen=True)
class RuntimeFlag:
    """One runtime flag, as ``TSAN_OPTIONS=help=1`` describes it."""

    name: str
    description: str
    value: str  # "Current Value" as the runtime printed it


_FLAG_VALUE = re.compile(r"^(?P<desc>.*?)\s*\(Current Value: (?P<value>.*)\)\s*$")


def parse_flag_help(text: str) -> dict[str, RuntimeFlag]:
    r"""Parse what a TSAN runtime prints for ``TSAN_OPTIONS=help=1`` (on stderr).

    The runtime lists each flag as a tab-indented name followed by a line
    ``<tab><tab>- <description> (Current Value: <value>)``; reading it from the
    runtime itself shows that runtime's flags and defaults, whatever its version.

    >>> flags = parse_flag_help("Available flags for ThreadSanitizer:\n\tsuppress_equal_addresses\n"
    ...     "\t\t- Suppress a race report if we've already output another race report on the "
    ...     "same address. (Current Value: true)\n")
    >>> flags["suppress_equal_addresses"].value
    'true'
    >>> parse_flag_help("no flags here")
    Traceback (most recent call last):
    ...
    ValueError: no 'Available flags for ThreadSanitizer' listing in the text (was TSAN_OPTIONS=help=1 set?)
    """
    if "Available flags for ThreadSanitizer" not in text:
        raise ValueError("no 'Available flags for ThreadSanitizer' listing in the text "
                         "(was TSAN_OPTIONS=help=1 set?)")
    flags: dict[str, RuntimeFlag] = {}
    name = None
    for line in text.splitlines():
        if line.startswith("\t\t- ") and name is not None:
            m = _FLAG_VALUE.match(line[4:])
            if m:
                flags[name] = RuntimeFlag(name, m.group("desc"), m.group("value"))
            name = None
        elif line.startswith("\t") and not line.startswith("\t\t"):
            name = line.strip()
    return flags
