"""The documented lock order, read from the header's Note and drawn as SVG.

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
The SVG is plain code (no graphviz needed).

>>> order = parse_lock_order(NOTE_SAMPLE)
>>> order.edges
[('instance_mutex_', 'pool.blocks_mutex_'), ('pool.blocks_mutex_', 'pool.free_list_[i].mutex_'), ('pool.blocks_mutex_', 'block->mutex_')]
>>> order.independent
{'events_mutex_': 'never held together with the above.'}
>>> order.innermost
{'stats_.allocations_mutex_': 'nothing is taken while holding it.'}
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

__all__ = ["LockOrder", "parse_lock_order", "to_svg", "NOTE_SAMPLE"]

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


def to_svg(order: LockOrder, highlight: dict[str, str] | None = None) -> str:
    """Draw *order*: outer locks on top, arrows point inward; independent and innermost locks below.

    *highlight* maps a lock name to a fill colour.

    >>> svg = to_svg(parse_lock_order(NOTE_SAMPLE))
    >>> svg.startswith("<svg") and "block-&gt;mutex_" in svg and svg.count("<line") == 3
    True
    >>> svg.count("<rect"), "innermost (nothing is taken while holding it)" in svg
    (6, True)
    """
    highlight = highlight or {}
    char_w, box_h, row_h, pad = 7.4, 26, 62, 14
    rows: dict[int, list[str]] = {}
    for name, d in order.depth.items():
        rows.setdefault(d, []).append(name)

    def label(n):
        return n + (" " + order.notes[n] if n in order.notes else "")

    def width(n):
        return len(label(n)) * char_w + 2 * pad

    # Below the drawing, one row per group of locks the Note keeps apart from it.
    groups = [(title, names) for title, names in (
        ("independent (never nested with the above):", list(order.independent)),
        ("innermost (nothing is taken while holding it):", list(order.innermost)),
    ) if names]
    pos: dict[str, tuple[float, float, float]] = {}  # name -> (x, y, w)
    total_w = max(
        [sum(width(n) + 24 for n in names) for names in rows.values()]
        + [sum(width(n) + 24 for n in names) for _, names in groups]
        + [max((len(title) * char_w for title, _ in groups), default=0), 300]
    )
    y = 40.0
    for d in sorted(rows):
        names = rows[d]
        row_w = sum(width(n) + 24 for n in names) - 24
        x = (total_w - row_w) / 2
        for n in names:
            pos[n] = (x, y, width(n))
            x += width(n) + 24
        y += row_h
    group_y = [y + 24 + i * (box_h + 44) for i in range(len(groups))]
    height = (group_y[-1] + box_h + 10) if groups else y + 10
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w + 20:.0f}" height="{height:.0f}" '
        f'font-family="monospace" font-size="12" role="img" aria-label="lock order">',
        '<defs><marker id="arr" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto">'
        '<path d="M0,0 L8,4 L0,8 z" fill="#444"/></marker></defs>',
        '<text x="10" y="18" fill="#444">outer (acquired first)</text>',
    ]
    for a, b in order.edges:
        xa, ya, wa = pos[a]
        xb, yb, wb = pos[b]
        out.append(
            f'<line x1="{xa + wa / 2 + 10:.1f}" y1="{ya + box_h:.1f}" x2="{xb + wb / 2 + 10:.1f}" '
            f'y2="{yb - 2:.1f}" stroke="#444" stroke-width="1.3" marker-end="url(#arr)"/>'
        )
    for n, (x, y0, w) in pos.items():
        fill = highlight.get(n, "#f4f4f4")
        out.append(
            f'<rect x="{x + 10:.1f}" y="{y0:.1f}" width="{w:.1f}" height="{box_h}" rx="5" '
            f'fill="{fill}" stroke="#333"/>'
            f'<text x="{x + 10 + w / 2:.1f}" y="{y0 + 17:.1f}" text-anchor="middle">{html.escape(label(n))}</text>'
        )
    for (title, names), gy in zip(groups, group_y, strict=True):
        out.append(f'<text x="10" y="{gy - 8:.0f}" fill="#444">{html.escape(title)}</text>')
        x = 10.0
        for n in names:
            w = width(n)
            fill = highlight.get(n, "#ffffff")
            out.append(
                f'<rect x="{x:.1f}" y="{gy:.1f}" width="{w:.1f}" height="{box_h}" rx="5" fill="{fill}" '
                f'stroke="#333" stroke-dasharray="4 3"/>'
                f'<text x="{x + w / 2:.1f}" y="{gy + 17:.1f}" text-anchor="middle">{html.escape(n)}</text>'
            )
            x += w + 24
    out.append("</svg>")
    return "\n".join(out)
