"""Turn parsed TSAN reports into allocator-level race records, grouped by family.

A record names, for each side of a race: the thread's role in the harness,
the access (kind, size), the two top frames inside ``CachingHostAllocator.h``
and the mutexes held, by the expression that locked them in the source
(``pool.free_list_[index].mutex_``).  The field is read off the header line
of the first header frame, which works because the overlay keeps the
installed header's line numbers.

>>> from explainers.allocator.tsan import parse_tsan, SAMPLE
>>> lines = {"CachingHostAllocator.h": {709: "block->allocated_.store(true);",
...          1153: "seg.allocated = block->allocated_.load();",
...          697: "std::lock_guard<std::mutex> g(pool.free_list_[index].mutex_);"}}
>>> rec = classify(parse_tsan(SAMPLE).reports[0], lines)
>>> rec.family, rec.field, rec.current.mutexes, rec.previous.mutexes
('A', 'allocated_', ('pool.free_list_[index].mutex_',), ('M25', 'M27'))
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from .tsan import Access, Frame, Report

__all__ = [
    "FAMILIES",
    "FIELD_FAMILY",
    "ROLE_FUNCTIONS",
    "Side",
    "RaceRecord",
    "classify",
    "group_by_family",
    "load_sources",
    "mutex_name",
    "role_of",
    "records_markdown",
    "timeline_markdown",
]

HEADER = "CachingHostAllocator.h"

#: The two race families the four atomic fields prevent.
FAMILIES = {
    "A": "HostBlock::allocated_: writer and reader hold disjoint locks",
    "B": "profiling state: recordHistory() writes, hot paths read lock-free",
}
#: Which family each of the four atomic fields belongs to.
FIELD_FAMILY = {
    "allocated_": "A",
    "record_history_": "B",
    "context_recorder_": "B",
    "record_context_": "B",
}
#: Thread entry functions in ``harness.cpp`` and the role each plays.
ROLE_FUNCTIONS = {
    "run_worker": "worker (allocate/free)",
    "run_snapshotter": "snapshotter (getSegments)",
    "run_profiler": "profiler (recordHistory)",
    "main": "main",
}

_LOCK_RX = re.compile(
    r"(?:lock_guard|unique_lock|shared_lock|scoped_lock)(?:<[^>]*>)?\s+\w+\((?P<args>.+?)\);"
)


@dataclass(frozen=True)
class Side:
    """One access of a race, in allocator terms."""

    role: str
    thread: str
    kind: str
    size: int
    frames: tuple[Frame, ...]  # the two top frames inside CachingHostAllocator.h
    mutexes: tuple[str, ...]

    @property
    def site(self) -> str:
        """``function (L123)`` of the innermost header frame.

        >>> Side("w", "T1", "write", 1, (Frame(1, "get_free_block", "x/CachingHostAllocator.h", 709),), ()).site
        'get_free_block (L709)'
        """
        if not self.frames:
            return "?"
        return f"{self.frames[0].function} (L{self.frames[0].line})"


@dataclass(frozen=True)
class RaceRecord:
    """One data race: the field, its family, and both sides."""

    field: str
    family: str  # "A", "B" or "?" for a race outside the four atomic fields
    current: Side
    previous: Side
    summary: str

    @property
    def complete(self) -> bool:
        """Both stacks were restored: each side has a header frame and a known role.

        TSAN keeps a bounded per-thread history (``history_size``); when the
        earlier access has left it, the report says "failed to restore the
        stack" and that side has no frames.

        >>> s = Side("worker (allocate/free)", "T1", "write", 1, (Frame(1, "f", "h", 1),), ())
        >>> RaceRecord("allocated_", "A", s, s, "").complete
        True
        >>> RaceRecord("allocated_", "A", s, Side("unknown (stack not restored)", "T3", "read", 1, (), ()), "").complete
        False
        """
        return all(side.frames and not side.role.startswith("unknown")
                   for side in (self.current, self.previous))


def load_sources(*paths: str | Path) -> dict[str, dict[int, str]]:
    """Map base name -> {line number: text} for the headers reports point into.

    >>> from explainers.page.torchsource import find_line
    >>> from explainers.allocator.torchpaths import find_torch
    >>> header = find_torch().header
    >>> src = load_sources(header)
    >>> no = find_line(header.read_text(), "std::atomic<bool> allocated_")
    >>> "allocated_" in src["CachingHostAllocator.h"][no]
    True
    """
    out: dict[str, dict[int, str]] = {}
    for p in paths:
        p = Path(p)
        out[p.name] = dict(enumerate(p.read_text().splitlines(), start=1))
    return out


def _source_line(frame: Frame, sources: Mapping[str, Mapping[int, str]]) -> str:
    if frame.file is None or frame.line is None:
        return ""
    return sources.get(frame.file.rsplit("/", 1)[-1], {}).get(frame.line, "")


def mutex_name(mid: str, report: Report, sources: Mapping[str, Mapping[int, str]]) -> str:
    """Name mutex *mid* by the lock expression where TSAN first saw it locked.

    Falls back to the TSAN id when the creation stack has no lock line we know.

    >>> from explainers.allocator.tsan import parse_tsan, SAMPLE
    >>> r = parse_tsan(SAMPLE).reports[0]
    >>> mutex_name("M24", r, {"CachingHostAllocator.h": {697: "std::lock_guard<std::mutex> g(pool.free_list_[index].mutex_);"}})
    'pool.free_list_[index].mutex_'
    >>> mutex_name("M99", r, {})
    'M99'
    """
    for frame in report.mutex_stacks.get(mid, ()):
        m = _LOCK_RX.search(_source_line(frame, sources))
        if m:
            return " or ".join(a.strip() for a in m.group("args").split(","))
    return mid


def role_of(frames: Iterable[Frame], roles: Mapping[str, str] = ROLE_FUNCTIONS) -> str:
    """The role of the thread that ran *frames*: its outermost known entry function.

    >>> role_of([Frame(0, "getSegments", None, None), Frame(1, "run_snapshotter", "h.cpp", 9)])
    'snapshotter (getSegments)'
    >>> role_of([])
    'unknown (stack not restored)'
    """
    found = "unknown (stack not restored)"
    for f in frames:
        if f.function in roles:
            found = roles[f.function]
    return found


def _side(acc: Access, report: Report, sources) -> Side:
    header_frames = tuple(f for f in acc.frames if f.file and f.file.endswith(HEADER))[:2]
    return Side(
        role=role_of(acc.frames),
        thread=acc.thread,
        kind=("atomic " if acc.atomic else "") + acc.kind,
        size=acc.size,
        frames=header_frames,
        mutexes=tuple(mutex_name(mid, report, sources) for _, mid in acc.mutexes),
    )


def classify(report: Report, sources: Mapping[str, Mapping[int, str]]) -> RaceRecord:
    """Build the :class:`RaceRecord` for one data-race report.

    >>> classify(Report(kind="heap-use-after-free"), {})
    Traceback (most recent call last):
    ...
    ValueError: classify() takes a data race with both accesses, got a 'heap-use-after-free' report
    """
    if report.kind != "data race" or report.current is None or report.previous is None:
        raise ValueError(
            f"classify() takes a data race with both accesses, got a {report.kind!r} report"
        )
    field = "?"
    for acc in (report.current, report.previous):
        for frame in acc.frames:
            text = _source_line(frame, sources)
            hits = [f for f in FIELD_FAMILY if re.search(rf"\b{f}\b", text)]
            if hits:
                field = hits[0]
                break
        if field != "?":
            break
    return RaceRecord(
        field=field,
        family=FIELD_FAMILY.get(field, "?"),
        current=_side(report.current, report, sources),
        previous=_side(report.previous, report, sources),
        summary=report.summary or "",
    )


def group_by_family(records: Iterable[RaceRecord]) -> dict[str, list[RaceRecord]]:
    """Group records by family, families in ``FAMILIES`` order, then ``"?"``.

    >>> s = Side("w", "T1", "read", 1, (), ())
    >>> g = group_by_family([RaceRecord("record_context_", "B", s, s, ""), RaceRecord("allocated_", "A", s, s, "")])
    >>> list(g), [r.field for r in g["B"]]
    (['A', 'B'], ['record_context_'])
    """
    records = list(records)
    out: dict[str, list[RaceRecord]] = {}
    for key in [*FAMILIES, "?"]:
        for r in records:
            if r.family == key:
                out.setdefault(key, []).append(r)
    return out


def _function_md(side: Side) -> str:
    # A lambda shows up as `operator()`; name it after its enclosing function.
    f = side.frames[0]
    if f.function == "operator()" and len(side.frames) > 1:
        return f"a lambda in `{side.frames[1].function}`"
    return f"`{f.function}`"


def _frames_md(side: Side) -> str:
    return " ← ".join(f"`{f.function}` L{f.line}" for f in side.frames) or "?"


def _mutexes_md(side: Side) -> str:
    return ", ".join(f"`{m}`" for m in side.mutexes) or "none"


def records_markdown(records: Iterable[RaceRecord]) -> str:
    """A Markdown table, two rows per race (the later access, then the earlier one).

    >>> s = Side("worker (allocate/free)", "T1", "write", 1, (Frame(1, "get_free_block", "CachingHostAllocator.h", 709),), ("m",))
    >>> print(records_markdown([RaceRecord("allocated_", "A", s, s, "")]).splitlines()[2])
    | A | `allocated_` | write, 1 B | T1 worker (allocate/free) | `get_free_block` L709 | `m` |
    """
    rows = [
        "| family | field | access | thread | top frames in the header | mutexes held |",
        "|---|---|---|---|---|---|",
    ]
    for rec in records:
        for i, side in enumerate((rec.current, rec.previous)):
            fam, fld = (rec.family, f"`{rec.field}`") if i == 0 else ("", "")
            when = "" if i == 0 else "earlier "
            rows.append(
                f"| {fam} | {fld} | {when}{side.kind}, {side.size} B | {side.thread} {side.role} | "
                f"{_frames_md(side)} | {_mutexes_md(side)} |"
            )
    return "\n".join(rows)


def timeline_markdown(rec: RaceRecord) -> str:
    """A two-thread timeline of one race as a Markdown table (earlier access first).

    >>> a = Side("snapshotter (getSegments)", "T3", "read", 1, (Frame(1, "getSegments", "h", 1153),), ("b",))
    >>> b = Side("worker (allocate/free)", "T1", "write", 1, (Frame(1, "get_free_block", "h", 709),), ("f",))
    >>> print(timeline_markdown(RaceRecord("allocated_", "A", b, a, "")))
    | | T3 snapshotter (getSegments) | T1 worker (allocate/free) |
    |---|---|---|
    | 1 | holds `b`; **reads** `allocated_` in `getSegments` (L1153) | |
    | 2 | releases `b` | |
    | 3 | | holds `f`; **writes** `allocated_` in `get_free_block` (L709) |
    | ⇒ | no mutex in common; TSAN saw no happens-before edge from step 1 to step 3 | data race |
    """
    first, second = rec.previous, rec.current

    def act(side: Side) -> str:
        held = f"holds {_mutexes_md(side)}; " if side.mutexes else "holds no lock; "
        verb = {"read": "reads", "write": "writes"}.get(side.kind.split()[-1], side.kind)
        where = f" in {_function_md(side)} (L{side.frames[0].line})" if side.frames else ""
        return f"{held}**{verb}** `{rec.field}`{where}"

    rel = f"releases {_mutexes_md(first)}" if first.mutexes else "(no lock to release)"
    return "\n".join([
        f"| | {first.thread} {first.role} | {second.thread} {second.role} |",
        "|---|---|---|",
        f"| 1 | {act(first)} | |",
        f"| 2 | {rel} | |",
        f"| 3 | | {act(second)} |",
        "| ⇒ | no mutex in common; TSAN saw no happens-before edge from step 1 to step 3 | data race |",
    ])
