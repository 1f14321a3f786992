"""Every shared field of the host allocator template: who reads it, who writes it, and under which lock.

The data members of the structs ``CachingHostAllocatorImpl`` works on
(``HostBlock``, ``FreeBlockList``, ``HostBlockPool``, ``HostPrivatePool``,
``HostStatsStaged`` and the class itself) are read from their declarations.
Each mention of one inside a member function of ``CachingHostAllocatorImpl``
is an access: a field of the class itself by its bare name (or ``this->``),
a field of the other structs after ``.`` or ``->``.  An access is a *write*
when an assignment, an increment or a mutating method call follows it, a
*reference* when ``auto&`` binds a name to it (reads and writes through that
name are not followed), and a *read* otherwise.

The locks held at an access are those held in its own function at that point
(the acquisition rules of :mod:`explainers.allocator.locktable`) plus those
held on *every* path into the function: a member called by
``CachingHostAllocatorInterface`` (``impl_->name(``) or by no other member is
an entry point, entered with nothing held; any other member is entered only
from its callers in the template.  A backend's own calls (the CUDA backend's
``.cpp``, not in the wheel) are not part of the table.

>>> header = '''struct HostBlock {
...   std::mutex mutex_;
...   size_t event_count_{0};
... };
... struct CachingHostAllocatorImpl {
...   void free(B* block) {
...     std::lock_guard<std::mutex> g(block->mutex_);
...     block->event_count_ += 1;
...     helper(block);
...   }
...   void helper(B* block) {
...     if (block->event_count_ == 0) {}
...   }
...   std::atomic<bool> active_{false};
... };
... struct CachingHostAllocatorInterface {
...   void free(void* p) { impl_->free(p); }
... };'''
>>> rows = field_table(header)
>>> [(r.field, r.guard, [(a.function, a.kind, a.held) for a in r.accesses]) for r in rows]
[('CachingHostAllocatorImpl::active_', (), []), ('HostBlock::event_count_', ('block->mutex_',), [('free', 'write', ('block->mutex_',)), ('helper', 'read', ('block->mutex_',))])]
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .locktable import LockTable, _functions, _impl_body, blank_comments, lock_table, scoped_walk

__all__ = ["STRUCTS", "Access", "FieldRow", "data_members", "field_table", "field_report", "field_markdown", "lock_comments"]

#: The structs whose data members are tracked, in the order the table lists them.
STRUCTS = ("CachingHostAllocatorImpl", "HostBlockPool", "FreeBlockList", "HostBlock", "HostPrivatePool",
           "HostStatsStaged")
#: Methods that change the object they are called on (containers, atomics, ``c10::Stat``, ring buffer).
_MUTATORS = ("insert", "erase", "emplace", "emplace_back", "emplace_front", "push_back", "push_front", "pop_back",
             "pop_front", "clear", "reset", "store", "exchange", "fetch_add", "fetch_sub", "swap", "increase",
             "decrease", "reset_peak", "reset_accumulated", "resize", "reserve", "assign", "try_emplace",
             "extract", "setMaxEntries", "insertEntries")
_WRITE_AFTER = re.compile(r"\s*(?:\[[^\];]*\])?\s*(?:(?:=(?!=)|\+=|-=|\*=|/=|\|=|&=|\+\+|--)|[.]\s*(?:"
                          + "|".join(_MUTATORS) + r")\s*\()")
_PATH_AFTER = re.compile(r"\s*(?:\[[^\];]*\])?\s*(?:\.|->)\s*(?P<next>\w+)")


@dataclass(frozen=True)
class Access:
    """One mention of a field in *function* at header *line*: ``read``, ``write`` or ``reference``."""

    function: str
    line: int
    kind: str
    held: tuple[str, ...]  # held on every path to this access: in the function, and on entry to it


@dataclass
class FieldRow:
    """A data member, its declared type, its accesses and the locks every access holds (*guard*)."""

    field: str  # Struct::name
    type: str
    accesses: list[Access] = field(default_factory=list)
    guard: tuple[str, ...] = ()

    @property
    def atomic(self) -> bool:
        """Whether the field is declared ``std::atomic``."""
        return self.type.startswith("std::atomic")

    @property
    def aggregate(self) -> bool:
        """Whether the field is an object of a tracked struct (a pool, a free list, the statistics)."""
        return bool(re.search(r"\b(?:BlockPool|HostBlockPool|FreeBlockList|HostStatsStaged)\b", self.type))

    @property
    def unguarded(self) -> list[Access]:
        """Accesses that hold no lock at all."""
        return [a for a in self.accesses if not a.held]


def _struct_body(text: str, name: str) -> tuple[int, int] | None:
    """Offsets just inside the braces of ``struct <name>`` (attributes and templates allowed before it)."""
    m = re.search(r"\bstruct\s+(?:alignas\([^)]*\)\s+)?(?:TORCH_API\s+)?" + re.escape(name) + r"\s*(?::[^{;]*)?\{",
                  text)
    if not m:
        return None
    depth, i = 1, m.end()
    while depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return m.end(), i - 1


def data_members(header: str, struct: str) -> dict[str, str]:
    """``{name: type}`` of the data members *struct* declares (mutexes included), in declaration order.

    >>> data_members('''struct alignas(64) S {
    ...   S(int n) : n_(n) {}
    ...   int f() const { return n_; }
    ...   alignas(64) std::mutex m_;
    ...   std::vector<std::pair<int, std::function<bool(int)>>>
    ...       cbs_;
    ...   std::atomic<bool> on_{false};
    ...   std::vector<int> v_ = std::vector<int>(3);
    ...  private:
    ...   struct Inner { int x; };
    ...   using T = int;
    ... };''', "S")
    {'m_': 'std::mutex', 'cbs_': 'std::vector<std::pair<int, std::function<bool(int)>>>', 'on_': 'std::atomic<bool>', 'v_': 'std::vector<int>'}
    """
    return _members(blank_comments(header), struct)


def _members(text: str, struct: str) -> dict[str, str]:
    """:func:`data_members` of a header whose comments are already blanked."""
    span = _struct_body(text, struct)
    if span is None:
        return {}
    start, end = span
    members: dict[str, str] = {}
    depth, stmt = 0, []
    i = start
    while i < end:
        c = text[i]
        stmt.append(c)
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        if depth == 0 and (c == ";" or (c == "}" and not text[i + 1:end].lstrip().startswith(";"))):
            s = re.sub(r"^\s*(?:(?:public|private|protected)\s*:\s*)*", "", "".join(stmt))
            stmt = []
            s = re.sub(r"alignas\([^)]*\)\s*", "", s).strip().rstrip(";").strip()
            s = re.sub(r"\s*(?:=[^{]*|\{[^{}]*\})$", "", s).strip()  # an initializer
            if not s or re.match(r"(?:using|typedef|friend|template|static_assert|struct|enum|class)\b", s) or re.search(
                    r"\boperator\b", s):
                pass
            elif s.endswith(")") or "{" in s or re.search(r"\)\s*(?:const|override|noexcept|final|\s)*$", s):
                pass  # a function, constructor or operator
            else:
                m = re.match(r"(?:(?:mutable|static|inline|constexpr)\s+)*(?P<type>.+?)\s*\b(?P<name>\w+)$", s, re.S)
                if m:
                    members[m.group("name")] = re.sub(r"\s+", " ", m.group("type")).replace("> >", ">>")
        i += 1
    return members


def _entry_contexts(table: LockTable, text: str, spans: dict[str, tuple[int, int]]) -> dict[str, set[tuple[str, ...]]]:
    """For each member function, every set of locks some path into it holds (``()`` for an entry point).

    A fixed point over the call graph, so a cycle (a member that reaches itself)
    neither loops nor cuts short the paths of the members on it.
    """
    callers: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for c in table.calls:
        if not c.callee.startswith("trace_buffer_."):
            callers.setdefault(c.callee, []).append((c.caller, c.held))
    external = set(re.findall(r"impl_->(\w+)\s*\(", text))
    out = {fn: {()} if fn in external or fn not in callers else set() for fn in {*spans, *callers}}
    changed = True
    while changed:
        changed = False
        for fn, calls in callers.items():
            for caller, held in calls:
                for ctx in list(out.get(caller, {()})):
                    path = tuple(sorted({*ctx, *held}))
                    if path not in out[fn]:
                        out[fn].add(path)
                        changed = True
    return {fn: out[fn] or {()} for fn in spans}


def _held_at(text: str, a: int, b: int, points: list[int]) -> dict[int, tuple[str, ...]]:
    """The locks a function body ``text[a:b]`` holds at each offset in *points*."""
    return {pos: held for pos, what, _, held in scoped_walk(text, a, b, [(p, "point", None) for p in points])
            if what == "point"}


def _callback_locks(text: str, spans: dict[str, tuple[int, int]]) -> dict[str, tuple[str, ...]]:
    """Members that call a callable parameter (``for_each_bucket(const F& fn)``): the locks held at that call.

    A lambda passed to such a member runs there, not where it is written.
    """
    out: dict[str, tuple[str, ...]] = {}
    for fn, (a, b) in spans.items():
        head = text[text.rfind("\n", 0, a):a]
        for param in re.findall(r"const\s+\w+\s*&\s*(\w+)\s*[,)]", head):
            calls = [m.start() for m in re.finditer(r"(?<![\w.>])" + param + r"\s*\(", text[a:b])]
            if calls:
                held = _held_at(text, a, b, [a + c for c in calls])
                out[fn] = tuple(sorted(set.intersection(*(set(h) for h in held.values()))))
    return out


def field_table(header: str) -> list[FieldRow]:
    """One :class:`FieldRow` per data member (mutexes left out) of :data:`STRUCTS`, accesses in header order."""
    text, start, end = _impl_body(header)
    spans = _functions(text, start, end - 1)
    entry = _entry_contexts(lock_table(header), text, spans)
    callbacks = _callback_locks(text, spans)
    rows: dict[str, FieldRow] = {}
    members = {s: _members(text, s) for s in (*STRUCTS, "HostStats")}
    for struct in STRUCTS:
        for name, type_ in members[struct].items():
            if "mutex" not in type_:
                rows.setdefault(name, FieldRow(f"{struct}::{name}", type_))
    own = set(members["CachingHostAllocatorImpl"])
    others = {n for s in STRUCTS[1:] for n in members[s]}
    # HostStats (what getStats returns) reuses HostStatsStaged's names: those need the ``stats_.`` path.
    staged = set(members["HostStatsStaged"]) & set(members["HostStats"])
    mention = re.compile(r"(?P<pre>\.|->)?\s*\b(?P<name>" + "|".join(map(re.escape, sorted(rows, key=len, reverse=True)))
                         + r")\b")

    def line_of(offset: int) -> int:
        return text.count("\n", 0, offset) + 1

    for fn, (a, b) in spans.items():
        always = set.intersection(*(set(c) for c in entry[fn])) if entry[fn] else set()
        lent = []  # (open paren, close paren, locks) of each call that runs a lambda argument elsewhere
        for member, locks in callbacks.items():
            for m in re.finditer(r"(?<![\w.>])" + member + r"\s*\(", text[a:b]):
                depth, j = 0, a + m.end() - 1
                while True:
                    depth += {"(": 1, ")": -1}.get(text[j], 0)
                    if depth == 0:
                        break
                    j += 1
                lent.append((a + m.end(), j, locks))
        hits = [m for m in mention.finditer(text, a, b)
                if (m.group("name") in own and (m.group("pre") is None or text[max(a, m.start() - 6):m.start(
                    "name")].replace(" ", "").endswith("this->"))) or (m.group("pre") and m.group("name") in others)]
        hits = [m for m in hits if m.group("name") not in staged
                or text[max(a, m.start() - 8):m.start("name")].replace(" ", "").endswith("stats_.")]
        held = _held_at(text, a, b, [m.start("name") for m in hits])
        for m in hits:
            pos, name = m.start("name"), m.group("name")
            after = text[m.end():m.end() + 120]
            path = _PATH_AFTER.match(after)
            if path and path.group("next") in rows:
                kind = "read"  # the container is read on the way to one of its fields
            elif _WRITE_AFTER.match(after) or re.search(r"(?:\+\+|--)\s*(?:\(\s*)?[\w.>\-\[\]]*$",
                                                         text[max(a, pos - 40):pos]):
                kind = "write"
            elif re.search(r"auto\s*&\s*\w+\s*=\s*[^;]*$", text[max(a, pos - 80):pos]):
                kind = "reference"
            else:
                kind = "read"
            extra = {lk for lo, hi, locks in lent if lo <= pos < hi for lk in locks}
            now = tuple(sorted(always | extra | set(held[pos])))
            rows[name].accesses.append(Access(fn, line_of(pos), kind, now))
    for row in rows.values():
        locks = [set(a.held) for a in row.accesses]
        row.guard = tuple(sorted(set.intersection(*locks))) if locks else ()
    return list(rows.values())


def lock_comments(header: str) -> dict[str, str]:
    """``{HostStatsStaged::member: words}`` from the ``// LOCK: ... protected by ...`` comment above each statistic.

    >>> lock_comments('''struct alignas(64) HostStatsStaged {
    ...   // LOCK: access to this stat is protected by the allocator's blocks_mutex_
    ...   Stat allocations;
    ...   // LOCK: access to this stat is protected by the per bucket free_list_[index].mutex_
    ...   std::vector<Stat> active_bucket_stats = std::vector<Stat>(8);
    ... };''')
    {'HostStatsStaged::allocations': "allocator's blocks_mutex_", 'HostStatsStaged::active_bucket_stats': 'per bucket free_list_[index].mutex_'}
    """
    span = _struct_body(header, "HostStatsStaged")
    if span is None:
        return {}
    lines = header[span[0]:span[1]].splitlines()
    out = {}
    for here, below in zip(lines, lines[1:], strict=False):
        said = re.search(r"// LOCK: access to this stat is protected by (?:the )?(.+?)\s*$", here)
        member = re.search(r"(\w+)\s*(?:=.*)?;\s*$", below)
        if said and member:
            out[f"HostStatsStaged::{member.group(1)}"] = said.group(1)
    return out


def field_report(torch_root: str | None = None) -> dict:
    """:func:`field_table` of the installed header as plain JSON (for ``run_under`` on another release)."""
    from dataclasses import asdict

    from .torchpaths import find_torch

    torch = find_torch(torch_root)
    rows = field_table(torch.header.read_text())
    return {"version": torch.version,
            "lock_comments": lock_comments(torch.header.read_text()),
            "fields": [{"field": r.field, "type": r.type, "atomic": r.atomic, "aggregate": r.aggregate, "guard": list(r.guard),
                        "accesses": [{**asdict(a), "held": list(a.held)} for a in r.accesses]} for r in rows]}


def _verdict(row: dict) -> str:
    """The cell that says what protects one field (see :func:`field_markdown`)."""
    if row["aggregate"]:
        return "an object: its fields have rows of their own"
    if not row["accesses"]:
        return "not accessed by the template"
    guard = ", ".join(f"`{g}`" for g in row["guard"])
    per_pool = row["guard"] and row["field"].split("::")[0] in ("CachingHostAllocatorImpl", "HostStatsStaged") and all(
        g.startswith(("pool.", "block->")) for g in row["guard"])
    text = ("atomic" + (f"; also {guard}" if guard else "")) if row["atomic"] else (guard or "no lock common to all")
    return text + (" (one mutex per pool, for one field per allocator)" if per_pool else "")


def field_markdown(report: dict, other: dict | None = None) -> str:
    """A Markdown table of :func:`field_report`: writers, readers, what every access holds, unlocked accesses.

    *other* (another release's report) adds a column where its verdict differs.

    >>> rep = {"fields": [{"field": "S::n_", "type": "int", "atomic": False, "aggregate": False, "guard": ["m"],
    ...        "accesses": [{"function": "f", "line": 3, "kind": "write", "held": ["m"]},
    ...                     {"function": "g", "line": 9, "kind": "read", "held": ["m"]}]}]}
    >>> print(field_markdown(rep))
    | field | type | written in | read in | every access holds | accesses holding no lock |
    |---|---|---|---|---|---|
    | `S::n_` | `int` | `f` L3 | `g` L9 | `m` |  |
    """
    head = "| field | type | written in | read in | every access holds | accesses holding no lock |"
    rule = "|---|---|---|---|---|---|"
    if other is not None:
        head, rule = head + " other release, where it differs |", rule + "---|"
    others = {r["field"]: r for r in (other or {}).get("fields", [])}

    def where(acc: list[dict]) -> str:
        by: dict[str, list[int]] = {}
        for a in acc:
            if a["line"] not in by.setdefault(a["function"], []):
                by[a["function"]].append(a["line"])
        return "; ".join(f"`{fn}` " + ", ".join(f"L{n}" for n in lines) for fn, lines in by.items())

    out = [head, rule]
    for r in report["fields"]:
        acc = r["accesses"]
        cells = [f"`{r['field']}`", f"`{r['type']}`", where([a for a in acc if a["kind"] != "read"]),
                 where([a for a in acc if a["kind"] == "read"]), _verdict(r),
                 "" if r["aggregate"] else where([a for a in acc if not a["held"]])]
        if other is not None:
            o = others.get(r["field"])
            cells.append("not declared" if o is None else ("" if _verdict(o) == _verdict(r) else _verdict(o)))
        out.append("| " + " | ".join(cells) + " |")
    mine = {r["field"] for r in report["fields"]}
    for o in (other or {}).get("fields", []):
        if o["field"] not in mine:  # declared only by the other release
            out.append(f"| `{o['field']}` | `{o['type']}` |  |  | not declared |  | {_verdict(o)} |")
    return "\n".join(out)
