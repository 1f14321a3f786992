"""Every lock the host allocator template takes, and what is already held, read from the code.

``CachingHostAllocatorImpl`` in ``ATen/core/CachingHostAllocator.h`` is parsed
function by function: each ``std::lock_guard``, ``std::unique_lock``,
``std::shared_lock`` and ``std::scoped_lock`` is an acquisition, held until the
brace block that declares it closes; each call of another member function (or
of a ``c10::RingBuffer`` method that locks ``alloc_trace_lock``) carries the
locks held at the call into the callee.  Walking every call chain gives each
nesting the code can produce, with the chain that produces it.  The lock names
are the design Note's (``pool.blocks_mutex_``, ``events_mutex_``, ...), so the
result compares directly with :func:`explainers.allocator.lockorder.parse_lock_order`.

The parser relies on the header's clang-formatting (member functions at two
spaces of indentation) and blanks comments and string literals first.

>>> code = '''struct CachingHostAllocatorImpl {
...   void outer() {
...     std::unique_lock<std::shared_mutex> lg(instance_mutex_);
...     inner(pool);
...   }
...   void inner(BlockPool& pool) {
...     std::lock_guard<std::mutex> g(pool.events_mutex_);  // a comment { with a brace
...   }
... };'''
>>> table = lock_table(code)
>>> [(s.function, s.line, s.locks, s.held) for s in table.sites]
[('outer', 3, ('instance_mutex_',), ()), ('inner', 7, ('events_mutex_',), ())]
>>> [(c.caller, c.line, c.callee, c.held) for c in table.calls]
[('outer', 4, 'inner', ('instance_mutex_',))]
>>> [(n.outer, n.inner, n.via) for n in table.nestings]
[('instance_mutex_', 'events_mutex_', ('outer:4 inner()', 'inner:7'))]
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["virtual_members", "LockSite", "CallSite", "Nesting", "LockTable", "lock_table", "scoped_walk", "canonical_lock", "blank_comments",
           "RING_BUFFER_LOCKING", "CUDA_BACKEND_LOCKS", "backend_nestings", "against_note", "lock_report"]

_IMPL = "struct CachingHostAllocatorImpl {"
_ACQUIRE = re.compile(r"std::(?P<kind>lock_guard|unique_lock|shared_lock|scoped_lock)\s*(?:<[^>]*>)?\s+\w+\s*"
                      r"\((?P<args>[^;]*?)\)\s*;", re.S)
_VIRTUAL = re.compile(r"^  virtual\s+(?:[\w:<>,*&\[\]]+\s+)*?[*&]?(?P<name>\w+)\(", re.M)
_HEAD = re.compile(r"^  (?!(?:if|for|while|switch|return)\b)(?:[\w:<>,*&\[\]]+\s+)*?[*&]?(?P<name>~?\w+)\(", re.M)
#: ``c10::RingBuffer`` methods that lock ``alloc_trace_lock`` (c10/core/RingBuffer.h, both releases).
RING_BUFFER_LOCKING = ("setMaxEntries", "insertEntries", "getEntries", "clear")


def blank_comments(text: str) -> str:
    r"""*text* with comments and string literals replaced by spaces (newlines and length kept).

    >>> blank_comments('a; // b {\nc("}"); /* d */ e')
    'a;       \nc(   );         e'
    """
    out = list(text)
    for m in re.finditer(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])\'', text, re.S):
        for i in range(m.start(), m.end()):
            if out[i] != "\n":
                out[i] = " "
    return "".join(out)


def canonical_lock(expr: str) -> str:
    """The design Note's name for a mutex expression of the header.

    >>> [canonical_lock(e) for e in ("it->second->blocks.blocks_mutex_", "dst.free_list_[i].mutex_",
    ...                               "pool.events_mutex_", "stats_.timing_mutex_")]
    ['pool.blocks_mutex_', 'pool.free_list_[i].mutex_', 'events_mutex_', 'stats_.timing_mutex_']
    >>> canonical_lock("other_mutex_")
    Traceback (most recent call last):
    ...
    ValueError: unknown mutex expression 'other_mutex_': extend canonical_lock
    """
    e = re.sub(r"\s+", "", expr)
    for pattern, name in ((r"(^|\W)instance_mutex_$", "instance_mutex_"),
                          (r"(^|\.)blocks_mutex_$", "pool.blocks_mutex_"),
                          (r"free_list_\[[^]]+\]\.mutex_$", "pool.free_list_[i].mutex_"),
                          (r"(^|\.)events_mutex_$", "events_mutex_"),
                          (r"^block->mutex_$", "block->mutex_"),
                          (r"^(stats_\.(?:allocations|timing)_mutex_|profiling_mutex_|"
                           r"external_registrations_mutex_)$", None)):
        if re.search(pattern, e):
            return name or e
    raise ValueError(f"unknown mutex expression {expr!r}: extend canonical_lock")


@dataclass(frozen=True)
class LockSite:
    """One acquisition: *locks* taken together (one ``scoped_lock`` may take two), *held* already in *function*."""

    function: str
    line: int
    kind: str  # lock_guard, unique_lock (exclusive), shared_lock (shared), scoped_lock
    locks: tuple[str, ...]
    exprs: tuple[str, ...]
    held: tuple[str, ...]


@dataclass(frozen=True)
class CallSite:
    """A call of *callee* (a member function, or ``trace_buffer_.<method>``) from *caller*, holding *held*."""

    caller: str
    line: int
    callee: str
    held: tuple[str, ...]


@dataclass(frozen=True)
class Nesting:
    """*inner* taken while *outer* is held, along *via*: ``function:line`` steps down a call chain."""

    outer: str
    inner: str
    via: tuple[str, ...]


@dataclass
class LockTable:
    """Acquisitions, calls that carry held locks, and the nestings they produce (first chain found)."""

    functions: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (head line, last line)
    sites: list[LockSite] = field(default_factory=list)
    calls: list[CallSite] = field(default_factory=list)
    nestings: list[Nesting] = field(default_factory=list)
    # (callee, held, chain): every path on which a function is entered with locks held
    entered: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = field(default_factory=list)

    def pairs(self) -> set[tuple[str, str]]:
        """The (outer, inner) pairs of :attr:`nestings`."""
        return {(n.outer, n.inner) for n in self.nestings}

    def held_on_entry(self, function: str) -> set[tuple[str, ...]]:
        """Every set of locks (sorted) that some call chain holds when it enters *function*."""
        return {held for callee, held, _ in self.entered if callee == function}


def _functions(text: str, start: int, end: int) -> dict[str, tuple[int, int]]:
    """Member function name -> (offset of its body's ``{``, offset of the matching ``}``) in [start, end)."""
    out: dict[str, tuple[int, int]] = {}
    for m in _HEAD.finditer(text, start, end):
        # The body opens at the first "{" after the parameter list; a ";" first means a declaration.
        depth, i = 0, m.end() - 1
        while i < end:
            c = text[i]
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
            elif depth == 0 and c in "{;":
                break
            i += 1
        if i >= end or text[i] == ";":
            continue
        open_at, depth = i, 0
        for j in range(open_at, end):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                out.setdefault(m.group("name"), (open_at, j))
                break
    return out


def virtual_members(header: str) -> list[str]:
    """The member functions ``CachingHostAllocatorImpl`` declares ``virtual``: the ones a backend may override.

    A backend's override runs with whatever locks the template holds when it calls the
    member, so these are the hooks whose callers' locks matter.

    >>> virtual_members("struct CachingHostAllocatorImpl {\\n  virtual ~CachingHostAllocatorImpl() {}\\n"
    ...                 "  virtual bool query_event(E& event) { return true; }\\n  void plain() {}\\n};\\n"
    ...                 "struct Other {\\n  virtual void outside() {}\\n};\\n")
    ['query_event']
    """
    text, start, end = _impl_body(header)
    return [m.group("name") for m in _VIRTUAL.finditer(text, start, end)]


def _impl_body(header: str) -> tuple[str, int, int]:
    """The header with comments blanked, and the span of ``CachingHostAllocatorImpl``'s body
    (from after its opening brace to after its closing one)."""
    if _IMPL not in header:
        raise ValueError(f"no '{_IMPL}' in the header text")
    text = blank_comments(header)
    start = header.index(_IMPL) + len(_IMPL)
    depth, end = 1, start
    while depth:
        depth += {"{": 1, "}": -1}.get(text[end], 0)
        end += 1
    return text, start, end


def scoped_walk(text: str, a: int, b: int, marks: list[tuple[int, str, object]]):
    """Walk the function body ``text[a:b]`` in order, tracking block-scoped guards.

    Yields ``(offset, what, obj, held)`` for each acquisition (``what == "lock"``,
    *obj* its :data:`_ACQUIRE` match) and each of *marks* (``(offset, what, obj)``),
    where *held* is the locks the guards live at that point hold.  A guard lives
    until the ``}`` that closes the block it was declared in.

    >>> body = "{ std::lock_guard<std::mutex> g(instance_mutex_); { std::lock_guard<std::mutex> h(block->mutex_); f(); } f(); }"
    >>> calls = [(body.index("f()"), "call", None), (body.rindex("f()"), "call", None)]
    >>> [(what, held) for _, what, _, held in scoped_walk(body, 0, len(body) - 1, calls)]
    [('lock', ()), ('lock', ('instance_mutex_',)), ('call', ('instance_mutex_', 'block->mutex_')), ('call', ('instance_mutex_',))]
    """
    found: list[tuple[int, str, object]] = [(i, "brace", text[i]) for i in range(a + 1, b) if text[i] in "{}"]
    found += [(m.start(), "lock", m) for m in _ACQUIRE.finditer(text, a, b)]
    found += marks
    found.sort(key=lambda t: (t[0], t[1] not in ("brace", "lock")))
    live: list[tuple[int, tuple[str, ...]]] = []  # (block depth, locks) per live guard
    level = 0
    for pos, what, obj in found:
        now = tuple(lk for _, locks in live for lk in locks)
        if what == "brace":
            level += 1 if obj == "{" else -1
            live = [g for g in live if g[0] <= level]
            continue
        yield pos, what, obj, now
        if what == "lock":
            live.append((level, tuple(canonical_lock(x.strip()) for x in obj.group("args").split(","))))


def lock_table(header: str) -> LockTable:
    """Parse ``CachingHostAllocatorImpl`` in *header* (the text of ``CachingHostAllocator.h``)."""
    text, start, end = _impl_body(header)
    spans = _functions(text, start, end - 1)

    def line_of(offset: int) -> int:
        return text.count("\n", 0, offset) + 1

    table = LockTable(functions={n: (line_of(a), line_of(b)) for n, (a, b) in spans.items()})
    members = sorted(spans, key=len, reverse=True)
    call_re = re.compile(r"(?<![\w.])(?<!->)(?:this->)?(?P<name>" + "|".join(map(re.escape, members)) + r")\s*\("
                         r"|trace_buffer_\.(?P<ring>\w+)\s*\(")
    events: dict[str, list[tuple[str, object]]] = {}
    for name, (a, b) in spans.items():
        steps: list[tuple[str, object]] = []
        marks = [(m.start(), "call", m) for m in call_re.finditer(text, a, b)]
        for pos, what, obj, now in scoped_walk(text, a, b, marks):
            if what == "lock":
                exprs = tuple(x.strip() for x in obj.group("args").split(","))
                site = LockSite(name, line_of(pos), obj.group("kind"), tuple(canonical_lock(x) for x in exprs), exprs, now)
                table.sites.append(site)
                steps.append(("lock", site))
            else:
                callee = obj.group("name") or "trace_buffer_." + obj.group("ring")
                if obj.group("ring") and obj.group("ring") not in RING_BUFFER_LOCKING:
                    continue
                call = CallSite(name, line_of(pos), callee, now)
                table.calls.append(call)
                steps.append(("call", call))
        events[name] = steps

    seen: set[tuple[str, str]] = set()
    entered: set[tuple[str, tuple[str, ...]]] = set()

    def walk(function: str, outer: tuple[str, ...], chain: tuple[str, ...], stack: tuple[str, ...]) -> None:
        for what, obj in events.get(function, ()):
            if what == "lock":
                here = (*chain, f"{function}:{obj.line}")
                for o in (*outer, *obj.held):
                    for inner in obj.locks:
                        if (o, inner) not in seen:
                            seen.add((o, inner))
                            table.nestings.append(Nesting(o, inner, here))
                continue
            held = (*outer, *obj.held)
            step = (*chain, f"{function}:{obj.line} {obj.callee}()")
            if obj.callee.startswith("trace_buffer_."):
                for o in held:
                    if (o, "alloc_trace_lock") not in seen:
                        seen.add((o, "alloc_trace_lock"))
                        table.nestings.append(Nesting(o, "alloc_trace_lock", step))
                continue
            if held and (obj.callee, tuple(sorted(held))) not in entered:
                entered.add((obj.callee, tuple(sorted(held))))
                table.entered.append((obj.callee, tuple(sorted(held)), step))
            if obj.callee not in stack:
                walk(obj.callee, held, step, (*stack, obj.callee))

    for name in spans:
        walk(name, (), (), (name,))
    return table


#: The CUDA backend's overrides and the locks they take, from
#: ``aten/src/ATen/cuda/CachingHostAllocator.cpp`` (not in the wheel): ``free_block``
#: (through ``free_block_slowpath``) and ``allocate_host_memory`` (through
#: ``allocate_host_memory_slowpath``) lock ``stats_.timing_mutex_``; ``record_stream``
#: takes the event pool's per-device mutex.  ``free_block`` also calls ``cudaFreeHost``
#: or ``cudaHostUnregister``.
CUDA_BACKEND_LOCKS = {"free_block": ("stats_.timing_mutex_",),
                      "allocate_host_memory": ("stats_.timing_mutex_",),
                      "record_stream": ("EventPool mutex_",)}


def backend_nestings(table: LockTable, hooks: dict[str, tuple[str, ...]] | None = None) -> list[Nesting]:
    """Nestings a backend adds: each lock its override of a hook takes, under what a chain holds on entry.

    >>> t = lock_table('''struct CachingHostAllocatorImpl {
    ...   void destroy() {
    ...     std::lock_guard<std::mutex> g(pool.blocks_mutex_);
    ...     free_block(b);
    ...   }
    ...   virtual void free_block(B* block) {
    ...   }
    ... };''')
    >>> [(n.outer, n.inner, n.via[-1]) for n in backend_nestings(t)]
    [('pool.blocks_mutex_', 'stats_.timing_mutex_', 'destroy:4 free_block()')]
    """
    hooks = CUDA_BACKEND_LOCKS if hooks is None else hooks
    out: list[Nesting] = []
    seen: set[tuple[str, str]] = set()
    for callee, held, chain in table.entered:
        for inner in hooks.get(callee, ()):
            for outer in held:
                if (outer, inner) not in seen:
                    seen.add((outer, inner))
                    out.append(Nesting(outer, inner, chain))
    return out


def against_note(pair: tuple[str, str], edges: list[tuple[str, str]], independent: dict[str, str],
                 innermost: dict[str, str]) -> str:
    """How the Note's order (its drawn *edges*, *independent* and *innermost* locks) judges a code nesting.

    ``drawn`` (inner below outer in the drawing), ``innermost`` (the Note lets it be taken under
    anything), ``contradicts: ... independent`` (the Note says it is never held with the others),
    ``reentrant`` (the same lock class), ``upward`` (against the drawn order), ``not named``
    (a lock the Note does not mention), or ``undrawn`` (both drawn, neither below the other).

    >>> e = [("a", "b"), ("b", "c")]
    >>> [against_note(p, e, {"x": ""}, {"s": ""}) for p in
    ...  [("a", "c"), ("a", "s"), ("a", "x"), ("a", "a"), ("c", "a"), ("a", "t")]]
    ['drawn', 'innermost', 'contradicts: x is independent', 'reentrant', 'upward', 'not named']
    """
    outer, inner = pair
    below: dict[str, set[str]] = {}
    for a, b in edges:
        below.setdefault(a, set()).add(b)

    def reach(a: str) -> set[str]:
        seen, todo = set(), [a]
        while todo:
            for b in below.get(todo.pop(), ()):
                if b not in seen:
                    seen.add(b)
                    todo.append(b)
        return seen

    named = {n for e in edges for n in e} | set(independent) | set(innermost)
    if outer == inner:
        return "reentrant"
    for lock in (outer, inner):
        if lock in independent:
            return f"contradicts: {lock} is independent"
    if inner in innermost:
        return "innermost"
    if outer in innermost:
        return f"contradicts: {outer} is innermost"
    if not {outer, inner} <= named:
        return "not named"
    if inner in reach(outer):
        return "drawn"
    return "upward" if outer in reach(inner) else "undrawn"


def lock_report(torch_root: str | None = None) -> dict:
    """The lock table of the installed header as plain JSON, for this release or (via ``run_under``) another.

    Keys: ``version``, ``sites``, ``calls`` (those made holding a lock), ``nestings``,
    ``backend`` (the CUDA backend's nestings, :data:`CUDA_BACKEND_LOCKS`), ``entered``
    (functions entered holding locks), ``virtual`` (:func:`virtual_members`) and ``note`` (the Note's drawn edges, independent and
    innermost locks).
    """
    from dataclasses import asdict

    from .lockorder import parse_lock_order
    from .torchpaths import find_torch

    torch = find_torch(torch_root)
    header = torch.header.read_text()
    table = lock_table(header)
    order = parse_lock_order(header)
    return {"version": torch.version,
            "sites": [asdict(s) for s in table.sites],
            "calls": [asdict(c) for c in table.calls if c.held],
            "nestings": [asdict(n) for n in table.nestings],
            "backend": [asdict(n) for n in backend_nestings(table)],
            "entered": [{"function": f, "held": list(h), "via": list(v)} for f, h, v in table.entered],
            "virtual": virtual_members(header),
            "note": {"edges": order.edges, "independent": order.independent, "innermost": order.innermost}}
