"""The allocator header of every supported torch release, side by side.

The page reads ``CachingHostAllocator.h`` of the torch that builds it; to show
what changed between releases it also needs the other release's header, which
lives in that release's own environment.  :func:`header_facts` reads the
*installed* torch's header (and ``native_functions.yaml``) and returns plain
JSON: the mutexes each struct declares, the documented lock order, every load
and store of the four atomic fields, and the excerpts in :data:`REGIONS`.
:func:`facts_by_release` collects those facts for every release in
:data:`explainers.releases.SUPPORTED`: this process's torch directly, each other
release through :func:`explainers.releases.on_each_release` (a subprocess in
that release's environment; ``None`` where this machine has no environment
for it).  :func:`side_by_side` lays one region of two releases
out as two columns of MyST.

Regions are found by a line's text, not by number, so each release's excerpt
carries its own line numbers.

>>> REGIONS["note"]
('Lock ordering (outer to inner):', 'lock either.')
>>> region_lines("a\\n  if (x) {\\n    y;\\n  }\\nb", ("if (x) {", None))
(2, 4)
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from explainers.page.torchsource import block_end, find_line

from .lockorder import parse_lock_order
from .overlay import ATOMIC_FIELDS
from .source import declared_mutexes, enclosing_function
from .torchpaths import find_torch, native_dispatch

__all__ = ["REGIONS", "PRAGMA_LINES", "region_lines", "atomic_uses", "lock_sites", "header_facts",
           "facts_by_release", "side_by_side", "changed_lines", "outside_regions"]

#: Excerpts the page compares: name -> (first line's text, last line's text or None for
#: "to the end of the brace block that the first line opens").
REGIONS: dict[str, tuple[str, str | None]] = {
    "stats": ("struct alignas(hardware_destructive_interference_size) HostStatsStaged {", None),
    "pool": ("struct HostBlockPool {", None),
    "get_free_block": ("virtual B* get_free_block(size_t size, BlockPool& pool) {", None),
    "for_each_bucket": ("void for_each_bucket(const F& fn) {", None),
    "getStats": ("HostStats getStats() {", None),
    "note": ("Lock ordering (outer to inner):", "lock either."),
    "free": ("virtual void free(void* ctx) {", None),
    "free_events": ("if (!allocated_during_capture) {", None),
    "process_events": ("virtual void process_events(BlockPool& pool,", None),
    "process_available": ("if (available) {", None),
    "pool_from_block": ("BlockPool& pool_from_block(B* block) {", None),
    "empty_cache": ("virtual void empty_cache() {", None),
    "maybe_cache_block": ("void maybe_cache_block(B* block, BlockPool& pool,", None),
    "cache_or_destroy": ("if (size > pinned_max_cached_size()) {", None),
    "destroy_block": ("void destroy_block(B* block, BlockPool& pool, bool is_active) {", None),
    "stats_note": ("In order to gather statistics about caching host allocator while minimally", "*/"),
    "add_allocated_block": ("virtual void add_allocated_block(B* block, BlockPool& pool) {", None),
    "resetAccumulatedStats": ("void resetAccumulatedStats() {", None),
    "resetPeakStats": ("void resetPeakStats() {", None),
    "add_stats": ("static void add_stats(Stat& accumulator, const Stat& other) {", None),
    "host_allocator": ("struct TORCH_API HostAllocator : public at::Allocator {", None),
    "declare_host_allocator": ("#define DECLARE_HOST_ALLOCATOR(name, impl, deleter, instance)", "  }"),
    "pool_for_stream": ("get_allocation_pool_for_current_stream() {", None),
    "interface_allocate": ("at::DataPtr allocate(size_t size) override {", None),
}

#: Lines the header has outside every region: the pragma that 2.14.1 puts around the
#: whole header to silence ``-Wunused-parameter``.
PRAGMA_LINES = ('C10_DIAGNOSTIC_PUSH_AND_IGNORED_IF_DEFINED("-Wunused-parameter")', "C10_DIAGNOSTIC_POP()")

_LOCK = re.compile(r"\b(?:lock_guard|scoped_lock|unique_lock|shared_lock)\b|\.lock\(|record_trace\(")

_ATOMIC_USE = re.compile(r"\b(" + "|".join(ATOMIC_FIELDS) + r")\.(load|store)\(")


def region_lines(text: str, region: tuple[str, str | None]) -> tuple[int, int]:
    """First and last line (1-based, inclusive) of *region* in *text*.

    >>> region_lines("a\\nb\\nc", ("b", "c"))
    (2, 3)
    >>> region_lines("a", ("zzz", None))
    Traceback (most recent call last):
    ...
    ValueError: 'zzz' does not occur in the header after line 0
    """
    first, last = region
    start = find_line(text, first)
    return start, (block_end(text, start) if last is None else find_line(text, last, start - 1))


def atomic_uses(text: str) -> list[list[str]]:
    """Every load and store of the four atomic fields: ``[function, statement]``, in order.

    The statement is the line with its indentation removed, so two releases
    compare equal where only line numbers moved.

    >>> code = "struct S {\\n  void f() {\\n    allocated_.store(true, std::memory_order_relaxed);\\n  }\\n};"
    >>> atomic_uses(code)
    [['f', 'allocated_.store(true, std::memory_order_relaxed);']]
    """
    return [[enclosing_function(text, no)[1], ln.strip()]
            for no, ln in enumerate(text.splitlines(), start=1) if _ATOMIC_USE.search(ln)]


def lock_sites(text: str, needle: str) -> list[dict[str, Any]]:
    """Every line that holds *needle* (a lock statement), its function, and what its scope takes.

    The scope runs from the lock to the end of the brace block it sits in;
    ``nested`` lists the lines in it that take a lock or call ``record_trace``
    (which takes the ring buffer's lock).

    >>> code = ("struct S {\\n  void f() {\\n    {\\n      lock_guard g(m);\\n      x++;\\n    }\\n"
    ...         "    lock_guard h(n);\\n  }\\n};")
    >>> lock_sites(code, "g(m);")
    [{'line': 4, 'function': 'f', 'nested': []}]
    """
    lines = text.splitlines()
    out = []
    for no, ln in enumerate(lines, start=1):
        if needle not in ln:
            continue
        depth, nested = 0, []
        for later in range(no + 1, len(lines) + 1):
            body = lines[later - 1]
            depth += body.count("{") - body.count("}")
            if depth < 0:
                break
            if _LOCK.search(body):
                nested.append(later)
        out.append({"line": no, "function": enclosing_function(text, no)[1], "nested": nested})
    return out


def header_facts() -> dict[str, Any]:
    """What the installed torch's allocator header says, as JSON-able data.

    Keys: ``version``, ``lines`` (the header's line count), ``mutexes``
    (struct -> declared mutexes), ``lock_order`` (``edges``, ``independent``,
    ``innermost`` from the design Note), ``atomic_declarations`` (the four
    ``std::atomic`` declarations, stripped), ``atomic_uses``
    (:func:`atomic_uses`), ``regions`` (name -> ``start``, ``end``, ``text``;
    ``None`` where a region's first line is absent) and ``record_stream``
    (the dispatch table of ``aten::record_stream`` in ``native_functions.yaml``) and
    ``allocations_mutex_sites`` (:func:`lock_sites` of ``stats_.allocations_mutex_``),
    ``pragma_lines`` (which of :data:`PRAGMA_LINES` it has), ``commented_parameter_names``
    (parameters whose name is commented out, ``int /*x*/``) and ``text`` (the whole header).

    >>> facts = header_facts()
    >>> facts["lines"] > 1000 and "HostBlockPool" in facts["mutexes"]
    True
    >>> facts["regions"]["note"]["text"].splitlines()[0].strip()
    '* Lock ordering (outer to inner):'
    """
    torch = find_torch()
    text = torch.header.read_text()
    lines = text.splitlines()
    order = parse_lock_order(text)
    regions: dict[str, dict[str, Any] | None] = {}
    for name, region in REGIONS.items():
        try:
            start, end = region_lines(text, region)
        except ValueError:
            regions[name] = None
            continue
        regions[name] = {"start": start, "end": end, "text": "\n".join(lines[start - 1:end])}
    declarations = [ln.strip() for ln in lines
                    if re.search(r"std::atomic<[^>]*> (" + "|".join(ATOMIC_FIELDS) + r")\{", ln)]
    return {
        "version": torch.version,
        "lines": len(lines),
        "mutexes": declared_mutexes(text),
        "lock_order": {"edges": [list(e) for e in order.edges], "independent": order.independent,
                       "innermost": order.innermost},
        "atomic_declarations": declarations,
        "atomic_uses": atomic_uses(text),
        "regions": regions,
        "record_stream": native_dispatch(torch, "record_stream"),
        "allocations_mutex_sites": lock_sites(text, "(stats_.allocations_mutex_);"),
        "pragma_lines": [ln.strip() for ln in lines if ln.strip() in PRAGMA_LINES],
        "commented_parameter_names": len(re.findall(r"\w /\*\w+\*/[,)]", text)),
        "text": text,
    }


def facts_by_release() -> dict[str, dict[str, Any] | None]:
    """:func:`header_facts` for every supported release, newest first.

    This process's torch answers for its own release; every other release is
    asked in its own environment (:func:`~explainers.releases.on_each_release`).
    A release whose environment does not exist on this machine maps to ``None``.
    """
    from explainers.releases import on_each_release, release_of

    out = on_each_release("explainers.allocator.compare:header_facts", here=header_facts())
    for release, facts in out.items():
        if facts is not None and release_of(facts["version"]) != release:
            raise RuntimeError(f"the environment of torch {release} has torch {facts['version']}")
    return out


def changed_lines(old: str, new: str) -> tuple[list[int], list[int]]:
    """The lines (1-based) that a line diff removes from *old* and adds in *new*.

    >>> changed_lines("a\\nb\\nc", "a\\nB\\nc\\nd")
    ([2], [2, 4])
    """
    a, b = old.splitlines(), new.splitlines()
    removed: list[int] = []
    added: list[int] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            removed += range(i1 + 1, i2 + 1)
            added += range(j1 + 1, j2 + 1)
    return removed, added


def outside_regions(text: str, lines: list[int], names: list[str]) -> list[int]:
    """Those of *lines* that lie in none of the regions *names* (absent regions are skipped),
    are not one of :data:`PRAGMA_LINES`, and are not a comment, ``template <...>`` or blank
    line directly above one of those regions (a region's own heading).

    >>> code = "int a;\\n// about f\\nvoid f() {\\n  x;\\n}\\nint b;"
    >>> REGIONS["demo_f"] = ("void f() {", None)
    >>> outside_regions(code, [1, 2, 4, 6], ["demo_f"])
    [1, 6]
    >>> _ = REGIONS.pop("demo_f")
    """
    unknown = [name for name in names if name not in REGIONS]
    if unknown:
        raise ValueError(f"not regions of REGIONS: {unknown}")
    text_lines = text.splitlines()
    spans = []
    for name in names:
        try:
            start, end = region_lines(text, REGIONS[name])
        except ValueError:
            continue
        while start > 1 and (not text_lines[start - 2].strip()
                             or text_lines[start - 2].lstrip().startswith(("//", "template <"))):
            start -= 1
        spans.append((start, end))
    return [no for no in lines if text_lines[no - 1].strip() not in PRAGMA_LINES
            and not any(a <= no <= b for a, b in spans)]


def _lexes_as_cpp(code: str) -> bool:
    # Sphinx warns (and the strict build fails) when Pygments cannot lex a block in
    # its language; a comment excerpt such as the Note is not C++ on its own.
    from pygments.lexers import CppLexer
    from pygments.token import Error

    return not any(tok is Error for tok, _ in CppLexer().get_tokens(code))


def _column(release: str, facts: dict[str, Any] | None, name: str, language: str) -> str:
    if facts is None:
        return f"**{release}**: not built here (no environment for this release on this machine)"
    region = facts["regions"][name]
    if region is None:
        return f"**{release}**: not in this release's header"
    width = len(str(region["end"]))
    body = "\n".join(f"{no:>{width}}  {ln}" for no, ln in
                     enumerate(region["text"].splitlines(), start=region["start"]))
    if language == "cpp" and not _lexes_as_cpp(body):
        language = "text"
    return (f"**{release}**, `CachingHostAllocator.h` lines {region['start']}–{region['end']}\n\n"
            f"```{language}\n{body}\n```")


def side_by_side(facts: dict[str, dict[str, Any]], name: str, language: str = "text") -> str:
    """MyST for region *name* of each release in *facts*, oldest on the left, as grid columns.

    A release whose facts are ``None`` (not built on this machine) gets a column saying so.
    Plain text by default: the columns are for reading two releases' lines against each
    other, and highlighted C++ weighs about five times the bytes (the page has many grids).

    >>> one = {"start": 3, "end": 3, "text": "int x;"}
    >>> md = side_by_side({"2.15.0": {"regions": {"r": one}}, "2.14.1": {"regions": {"r": None}}}, "r")
    >>> print(md)  # doctest: +NORMALIZE_WHITESPACE
    ::::{grid} 1 1 2 2
    :::{grid-item}
    **2.14.1**: not in this release's header
    :::
    :::{grid-item}
    **2.15.0**, `CachingHostAllocator.h` lines 3–3
    <BLANKLINE>
    ```text
    3  int x;
    ```
    :::
    ::::
    >>> side_by_side({}, "r")
    Traceback (most recent call last):
    ...
    ValueError: side_by_side needs the facts of at least one release
    """
    if not facts:
        raise ValueError("side_by_side needs the facts of at least one release")
    columns = [_column(release, facts[release], name, language) for release in reversed(list(facts))]
    return "\n".join(["::::{grid} 1 1 2 2",
                      *(f":::{{grid-item}}\n{col}\n:::" for col in columns),
                      "::::"])
