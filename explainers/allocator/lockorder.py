"""The documented lock order, read from the header's Note and drawn with graphviz.

``Note [HostAllocator design]`` in ``CachingHostAllocator.h`` draws the order
as ASCII art, where a continuation line's ``>`` sits under the lock it nests
inside::

    Lock ordering (outer to inner):
      instance_mutex_ > pool.blocks_mutex_ > pool.free_list_[i].mutex_
                                           > block->mutex_
                                                           > alloc_trace_lock (RingBuffer)
    events_mutex_ is independent: never held together with the above.

A continuation ``>`` at column *c* makes the next lock inner to the deepest
locks that end left of *c*.  Locks whose sentence says "is independent" are
kept apart, and so are those whose sentence says "is innermost" (torch 2.15.0's
Note adds ``stats_.allocations_mutex_ is innermost: nothing is taken while
holding it.``): such a lock may be taken under any other, and nothing under it.
graphviz's ``dot`` lays the drawing out (:func:`to_dot`, :func:`to_svg`); a
nesting found in the code but not drawn in the Note (the caller reads the code)
is added as a dashed arrow.

>>> order = parse_lock_order(NOTE_SAMPLE)
>>> order.edges
[('instance_mutex_', 'pool.blocks_mutex_'), ('pool.blocks_mutex_', 'pool.free_list_[i].mutex_'), ('pool.blocks_mutex_', 'block->mutex_')]
>>> order.independent
{'events_mutex_': 'never held together with the above.'}
>>> order.innermost
{'stats_.allocations_mutex_': 'nothing is taken while holding it.'}
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["LockOrder", "parse_lock_order", "to_dot", "to_svg", "NOTE_SAMPLE", "code_dot", "dot_to_svg"]

NOTE_SAMPLE = """\
 * Lock ordering (outer to inner):
 *   instance_mutex_ > pool.blocks_mutex_ > pool.free_list_[i].mutex_
 *                                        > block->mutex_
 * events_mutex_ is independent: never held together with the above.
 * stats_.allocations_mutex_ is innermost: nothing is taken while holding it.
 */
"""

_NAME = re.compile(r"[A-Za-z_](?:[\w.\[\]]|->)*")
_INDEPENDENT = re.compile(r"^\s*\*?\s*(?P<name>[A-Za-z_]\w*) is independent:\s*(?P<why>.*)$")
_INNERMOST = re.compile(r"^\s*\*?\s*(?P<name>[A-Za-z_][\w.]*) is innermost:\s*(?P<why>.*)$")


@dataclass
class LockOrder:
    """Locks with their nesting depth, outer->inner edges, independent and innermost locks."""

    depth: dict[str, int] = field(default_factory=dict)
    edges: list[tuple[str, str]] = field(default_factory=list)
    notes: dict[str, str] = field(default_factory=dict)  # e.g. "(RingBuffer)"
    independent: dict[str, str] = field(default_factory=dict)
    innermost: dict[str, str] = field(default_factory=dict)  # taken under anything, nothing under it

    @property
    def names(self) -> list[str]:
        """Every lock the Note names: the drawing's, the independent ones, the innermost ones.

        >>> parse_lock_order(NOTE_SAMPLE).names[-2:]
        ['events_mutex_', 'stats_.allocations_mutex_']
        """
        return [*self.depth, *self.independent, *self.innermost]


def parse_lock_order(header_text: str) -> LockOrder:
    """Parse the "Lock ordering" drawing and the "is independent" and "is innermost" sentences.

    >>> parse_lock_order("no note here")
    Traceback (most recent call last):
    ...
    ValueError: no 'Lock ordering (outer to inner):' drawing in the header text
    """
    lines = header_text.splitlines()
    try:
        start = next(i for i, ln in enumerate(lines) if "Lock ordering (outer to inner):" in ln)
    except StopIteration:
        raise ValueError("no 'Lock ordering (outer to inner):' drawing in the header text") from None
    order = LockOrder()
    ends: list[tuple[int, str]] = []  # (end column, name) of every lock drawn so far
    i = start + 1
    while i < len(lines):
        body = lines[i]
        m = re.match(r"^\s*\*", body)
        if not m:
            break
        text = body[m.end():]
        first = text.lstrip()
        if i > start + 1 and not first.startswith(">"):
            break
        col0 = m.end()
        prev: list[str] = []
        pos = 0
        if first.startswith(">"):
            c = col0 + text.index(">")
            left = [(e, n) for e, n in ends if e < c]
            if not left:
                raise ValueError(f"continuation line {i + 1} has nothing to its left")
            deepest = max(order.depth[n] for _, n in left)
            prev = [n for _, n in left if order.depth[n] == deepest]
            pos = text.index(">") + 1
        for part in re.finditer(r"(?P<name>" + _NAME.pattern + r")(?P<note>\s*\([^)]*\))?|(?P<gt>(?<![-\w])>)", text[pos:]):
            if part.group("gt"):
                continue
            name = part.group("name")
            end = col0 + pos + part.end("name")
            order.depth[name] = 1 + max((order.depth[p] for p in prev), default=-1)
            for p in prev:
                order.edges.append((p, name))
            if part.group("note"):
                order.notes[name] = part.group("note").strip()
            ends.append((end, name))
            prev = [name]
        i += 1
    for ln in lines[i:]:
        m = _INDEPENDENT.match(ln)
        if m:
            order.independent[m.group("name")] = m.group("why").strip()
        m = _INNERMOST.match(ln)
        if m:
            order.innermost[m.group("name")] = m.group("why").strip()
        if ln.strip().startswith("*/"):
            break
    return order




def _quote(text: str) -> str:
    """A DOT string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(order: LockOrder, highlight: dict[str, str] | None = None,
           found: Sequence[tuple[str, str]] = ()) -> str:
    """The graphviz (DOT) source of the drawing: the nesting top down, the locks kept apart below.

    *highlight* maps a lock name to a fill colour that graphviz knows (``#rrggbb``).
    *found* lists (outer, inner) nestings read from the code rather than the Note,
    drawn as dashed arrows that do not move the Note's layout.

    >>> dot = to_dot(parse_lock_order(NOTE_SAMPLE), {"block->mutex_": "#fde3a7"})
    >>> [line.strip() for line in dot.splitlines() if '" -> "' in line and "invis" not in line]
    ['"instance_mutex_" -> "pool.blocks_mutex_";', '"pool.blocks_mutex_" -> "pool.free_list_[i].mutex_";', '"pool.blocks_mutex_" -> "block->mutex_";']
    >>> '"block->mutex_" [fillcolor="#fde3a7"];' in dot, dot.count("subgraph cluster_")
    (True, 2)
    >>> found = to_dot(parse_lock_order(NOTE_SAMPLE), found=[("events_mutex_", "block->mutex_")])
    >>> [line.strip() for line in found.splitlines() if "dashed, constraint" in line]
    ['"events_mutex_" -> "block->mutex_" [style=dashed, constraint=false];']
    >>> to_dot(parse_lock_order(NOTE_SAMPLE), found=[("events_mutex_", "no_such_lock")])
    Traceback (most recent call last):
    ...
    ValueError: found nesting ('events_mutex_', 'no_such_lock') names a lock the Note does not
    """
    highlight = highlight or {}
    for pair in found:
        if not set(pair) <= set(order.names):
            raise ValueError(f"found nesting {pair} names a lock the Note does not")
    out = [
        'digraph "the documented lock order, outer to inner" {',
        '  graph [fontname="monospace", fontsize=12, nodesep=0.3, ranksep=0.4, labeljust=l, '
        'labelloc=t, label="outer (acquired first)"];',
        '  node [shape=box, style="rounded,filled", fillcolor="#f4f4f4", color="#333333", '
        'fontname="monospace", fontsize=12, height=0.36];',
        '  edge [color="#444444", arrowsize=0.7];',
    ]
    for name in order.depth:
        label = name + (" " + order.notes[name] if name in order.notes else "")
        out.append(f"  {_quote(name)} [label={_quote(label)}];")
    out.extend(f"  {_quote(a)} -> {_quote(b)};" for a, b in order.edges)
    groups = [(key, title, list(names)) for key, title, names in (
        ("independent", "called independent by the Note:", order.independent),
        ("innermost", "innermost (nothing is taken while holding it):", order.innermost),
    ) if names]
    above = [n for n, d in order.depth.items() if d == max(order.depth.values(), default=0)]
    for key, title, names in groups:
        out.append(f"  subgraph cluster_{key} {{")
        out.append(f'    graph [label={_quote(title)}, style=dashed, color="#888888"];')
        out.append('    node [style="rounded,dashed,filled", fillcolor="#ffffff"];')
        out.extend(f"    {_quote(n)};" for n in names)
        out.append("  }")
        # Invisible edges only place each group below what comes before it.
        out.extend(f"  {_quote(a)} -> {_quote(names[0])} [style=invis];" for a in above)
        above = names
    # constraint=false: an arrow the code adds (possibly upward) leaves the Note's ranks alone.
    out.extend(f"  {_quote(a)} -> {_quote(b)} [style=dashed, constraint=false];" for a, b in found)
    out.extend(f"  {_quote(n)} [fillcolor={_quote(c)}];" for n, c in highlight.items())
    out.append("}")
    return "\n".join(out)


def to_svg(order: LockOrder, highlight: dict[str, str] | None = None,
           found: Sequence[tuple[str, str]] = ()) -> str:
    """The drawing as inline SVG, laid out by graphviz's ``dot`` from :func:`to_dot`.

    The XML prolog and graphviz's comments are dropped, so the text depends on
    the graph alone.  A page shows it as an image: its alt text belongs to the page's cell.

    >>> svg = to_svg(parse_lock_order(NOTE_SAMPLE))
    >>> svg.startswith("<svg") and "<title>block&#45;&gt;mutex_</title>" in svg and svg.count('class="edge"') == 3
    True
    >>> svg.count('class="node"'), "innermost (nothing is taken while holding it)" in svg
    (6, True)
    >>> to_svg(parse_lock_order(NOTE_SAMPLE), {"block->mutex_": "#fc8"})
    Traceback (most recent call last):
    ...
    RuntimeError: dot -Tsvg failed (exit 0): Warning: #fc8 is not a known color.
    """
    dot = shutil.which("dot")
    if dot is None:
        raise FileNotFoundError("graphviz's dot is not on PATH; install graphviz (apt-get install graphviz)")
    res = subprocess.run([dot, "-Tsvg"], input=to_dot(order, highlight, found), capture_output=True, text=True,
                         timeout=60, check=False)
    if res.returncode != 0 or res.stderr.strip():  # a warning too, e.g. a colour dot does not know
        raise RuntimeError(f"dot -Tsvg failed (exit {res.returncode}): {res.stderr.strip()}")
    svg = res.stdout[res.stdout.index("<svg"):]
    svg = re.sub(r"<!--.*?-->\n?", "", svg, flags=re.DOTALL)
    return svg.strip()


#: Edge styles of :func:`code_dot`, by how the Note judges a nesting found in the code.
_STYLE = {"agrees": 'color="#444444"', "contradicts": 'color="#c0392b", penwidth=2.2, fontcolor="#c0392b"',
          "not named": 'color="#b9770e", style=dashed, fontcolor="#b9770e"'}


def _kind(verdict: str) -> str:
    if verdict in ("drawn", "innermost"):
        return "agrees"
    return "not named" if verdict == "not named" else "contradicts"


def code_dot(nestings: Sequence[tuple[str, str, str, str]]) -> str:
    """The DOT source of the nestings found in the code: (outer, inner, verdict, label) each.

    *verdict* is :func:`explainers.allocator.locktable.against_note`'s.  A nesting
    the Note's order allows is a grey arrow, one it contradicts (or a lock taken
    again under itself) a thick red arrow with its *label*, one through a lock the
    Note does not name a dashed amber arrow with its label.  An arrow implied by
    two others (a -> b -> c) is left out, unless the Note contradicts it.

    >>> dot = code_dot([("a", "b", "drawn", ""), ("b", "c", "drawn", ""), ("a", "c", "drawn", ""),
    ...                 ("a", "x", "contradicts: x is independent", "f()")])
    >>> [line.strip() for line in dot.splitlines() if " -> " in line]
    ['"a" -> "b" [color="#444444"];', '"b" -> "c" [color="#444444"];', '"a" -> "x" [color="#c0392b", penwidth=2.2, fontcolor="#c0392b", label="f()"];']
    """
    pairs = {(a, b) for a, b, _, _ in nestings}
    nodes = list(dict.fromkeys(n for a, b, _, _ in nestings for n in (a, b)))
    out = ['digraph "lock nestings in the code, outer to inner" {',
           '  graph [fontname="monospace", fontsize=11, nodesep=0.35, ranksep=0.45];',
           '  node [shape=box, style="rounded,filled", fillcolor="#f4f4f4", color="#333333", '
           'fontname="monospace", fontsize=12, height=0.36];',
           '  edge [arrowsize=0.7, fontname="monospace", fontsize=10];']
    out.extend(f"  {_quote(n)};" for n in nodes)
    for a, b, verdict, label in nestings:
        kind = _kind(verdict)
        if kind != "contradicts" and any((a, m) in pairs and (m, b) in pairs for m in nodes if m not in (a, b)):
            continue
        attrs = _STYLE[kind] + (f", label={_quote(label)}" if label and kind != "agrees" else "")
        out.append(f"  {_quote(a)} -> {_quote(b)} [{attrs}];")
    out.append("}")
    return "\n".join(out)


def dot_to_svg(dot_source: str) -> str:
    """Any DOT source as inline SVG (graphviz's ``dot``; prolog and comments dropped), as :func:`to_svg`."""
    dot = shutil.which("dot")
    if dot is None:
        raise FileNotFoundError("graphviz's dot is not on PATH; install graphviz (apt-get install graphviz)")
    res = subprocess.run([dot, "-Tsvg"], input=dot_source, capture_output=True, text=True, timeout=60, check=False)
    if res.returncode != 0 or res.stderr.strip():
        raise RuntimeError(f"dot -Tsvg failed (exit {res.returncode}): {res.stderr.strip()}")
    svg = res.stdout[res.stdout.index("<svg"):]
    return re.sub(r"<!--.*?-->\n?", "", svg, flags=re.DOTALL).strip()
