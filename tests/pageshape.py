"""Measures of the page shape (README, "How to add a page"; issue 18), shared by the browser gate
(``tests/test_browser.py``) and the copy rule (``tests/test_copy_rule.py``).

The Python half classifies code: which lines of a cell are checks (an ``assert``
statement, a ``glue(...)`` call) or quote torch's source (``torch_lines(...)``,
``source_of(...)``, ...), and which cells a reader sees and copies.  The
JavaScript half (the ``*_JS`` strings) is evaluated by Playwright in the built
page: which code cells are visible with every fold closed, how tall the page is,
where the "In short" block sits, and which table cells break a word.

>>> cell = '''x = f(1)
... assert x == [
...     1, 2,
... ], "f(1) is [1, 2]"
... glue("x", x, display=False)
... print(torch_lines("c10/core/Allocator.h", ["struct"]))
... '''
>>> lines = classify(cell)
>>> sorted(lines.asserts), sorted(lines.glues), sorted(lines.quotes), lines.code
([2, 3, 4], [5], [6], 6)
>>> [c.tags for c in visible_cells(SAMPLE)]
[('hide-output',)]
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from sourceblocks import copyable_blocks

__all__ = [
    "Lines", "classify", "forbidden", "Share", "share", "Cell", "code_cells", "visible_cells",
    "explainer_pages", "GOAL", "HIDDEN_TAGS", "QUOTING", "FIRST_SCREEN",
    "CLOSE_FOLDS_JS", "OPEN_FOLDS_JS", "VISIBLE_CELLS_JS", "HEIGHT_JS", "IN_SHORT_JS",
    "TABLE_BREAKS_JS", "run_visible",
]

DOCS = Path(__file__).resolve().parents[1] / "docs"

# At most this share of a page's visible code lines may be checks (asserts and glue calls).
GOAL = 0.10
# The "In short" block's top must lie above this many CSS pixels, at 1400 x 1000.
FIRST_SCREEN = 1000
# Tags that take a cell's input out of what a reader sees (and copies) with the folds closed.
HIDDEN_TAGS = frozenset({"hide-input", "hide-cell", "remove-input", "remove-cell"})
# explainers.page.torchsource's quoting helpers: a call shows torch's source, not how to use torch.
QUOTING = frozenset({"installed_source", "quote_installed", "source_of", "torch_lines",
                     "torch_lines_many", "excerpt", "function_source"})


@dataclass
class Lines:
    """Line numbers (1-based, in the cell) of its checks and quotes; ``code``: its non-blank lines."""

    asserts: set[int] = field(default_factory=set)
    glues: set[int] = field(default_factory=set)
    quotes: set[int] = field(default_factory=set)
    code: int = 0


def _called(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _parsable(source: str) -> str:
    """``source`` with IPython's magic and shell lines made ``pass`` (line numbers kept)."""
    return "\n".join(re.sub(r"^(\s*)[%!].*$", r"\1pass", line) for line in source.splitlines())


def classify(source: str) -> Lines:
    """Which lines of a cell's ``source`` are asserts, ``glue`` calls and source quotes.

    A statement or call spread over several lines counts with all its lines.  A cell that
    does not parse is read line by line (a line starting ``assert``, a line with ``glue(``).

    >>> classify("a = 1\\n\\n# why\\nassert a, 'a is set'\\n").asserts, classify("a = 1\\n\\n# c\\n").code
    ({4}, 2)
    >>> sorted(classify("glue('n',\\n     2)\\nassert (\\n").glues)  # does not parse: line by line
    [1]
    """
    found = Lines(code=sum(bool(line.strip()) for line in source.splitlines()))
    span = lambda n: set(range(n.lineno, (n.end_lineno or n.lineno) + 1))  # noqa: E731
    try:
        tree = ast.parse(_parsable(source))
    except SyntaxError:
        for i, line in enumerate(source.splitlines(), 1):
            if re.match(r"\s*assert\b", line):
                found.asserts.add(i)
            if re.search(r"\bglue\(", line):
                found.glues.add(i)
            if any(re.search(rf"\b{name}\(", line) for name in QUOTING):
                found.quotes.add(i)
        return found
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert):
            found.asserts |= span(node)
        elif isinstance(node, ast.Call) and _called(node) == "glue":
            found.glues |= span(node)
        elif isinstance(node, ast.Call) and _called(node) in QUOTING:
            found.quotes |= span(node)
    return found


def forbidden(source: str) -> list[str]:
    """What a reader must never copy from a visible cell: its assert and ``glue`` lines.

    >>> forbidden("x = 2\\nassert x == 2, 'two'\\nglue('x', x)\\n")
    ["line 2: assert x == 2, 'two'", "line 3: glue('x', x)"]
    >>> forbidden("print(1)\\n")
    []
    """
    lines = source.splitlines()
    found = classify(source)
    return [f"line {n}: {lines[n - 1].strip()}" for n in sorted(found.asserts | found.glues)]


@dataclass(frozen=True)
class Share:
    """Check lines (asserts, glue calls) and quote lines among a page's visible code lines."""

    asserts: int
    glues: int
    quotes: int
    code: int

    @property
    def checks(self) -> float:
        """(assert + glue lines) / code lines; 0 when nothing is visible."""
        return (self.asserts + self.glues) / self.code if self.code else 0.0

    @property
    def machinery(self) -> float:
        """(assert + glue + quoting lines) / code lines: what the issue counted as "checking"."""
        return (self.asserts + self.glues + self.quotes) / self.code if self.code else 0.0


def share(sources: list[str]) -> Share:
    """The :class:`Share` of the visible cells' ``sources`` (a line both assert and glue counts once,
    as an assert).

    >>> s = share(["x = 1\\nprint(x)", "assert x == 1, 'one'\\nglue('x', x)"])
    >>> s, f"{s.checks:.0%}"
    (Share(asserts=1, glues=1, quotes=0, code=4), '50%')
    """
    asserts = glues = quotes = code = 0
    for source in sources:
        lines = classify(source)
        asserts += len(lines.asserts)
        glues += len(lines.glues - lines.asserts)
        quotes += len(lines.quotes - lines.asserts - lines.glues)
        code += lines.code
    return Share(asserts, glues, quotes, code)


@dataclass(frozen=True)
class Cell:
    """One code cell of a MyST notebook: where it starts, its tags, its source."""

    line: int
    tags: tuple[str, ...]
    source: str


def code_cells(text: str) -> list[Cell]:
    """The ``{code-cell}`` blocks of a MyST notebook's ``text``, in order."""
    return [Cell(b.line, tuple(b.tags), b.body) for b in copyable_blocks(text) if b.kind == "code-cell"]


def visible_cells(text: str) -> list[Cell]:
    """The code cells whose input a reader sees, and copies, with every fold closed."""
    return [c for c in code_cells(text) if not HIDDEN_TAGS & set(c.tags)]


def explainer_pages(docs: Path = DOCS) -> list[str]:
    """The pages the page shape applies to: every page with a code cell, except the home page
    (``index``), as names without ``.md``, sorted."""
    return sorted(p.stem for p in docs.glob("*.md")
                  if p.stem != "index" and code_cells(p.read_text(encoding="utf-8")))


# A MyST notebook with a check cell folded, a cell whose output is folded, and a removed cell.
SAMPLE = """```{code-cell} ipython3
:tags: [remove-cell]
from explainers.page import begin_page
```

```{code-cell} ipython3
:tags: [hide-input]
assert True, "a check"
```

```{code-cell} ipython3
:tags: [hide-output]
print(1)
```
"""


# -- in the browser (Playwright's page.evaluate) -------------------------------------------------
# MyST-NB 1.4 renders a code cell as div.cell > div.cell_input (absent under remove-input) and
# div.cell_output; hide-input wraps div.cell_input in <details class="hide above-input">.
# sphinx-design's dropdowns are <details> too.

CLOSE_FOLDS_JS = "() => document.querySelectorAll('details').forEach(d => { d.open = false; })"
OPEN_FOLDS_JS = "() => document.querySelectorAll('details').forEach(d => { d.open = true; })"

# The source of each code cell whose input is on screen (not in a closed fold, rendered).
VISIBLE_CELLS_JS = """() => [...document.querySelectorAll('div.cell div.cell_input')]
    .filter(e => !e.closest('details:not([open])') && e.checkVisibility())
    .map(e => (e.querySelector('pre') || e).innerText)"""

HEIGHT_JS = "() => Math.round(document.documentElement.scrollHeight)"

# Where the first element of class in-short sits on the page, in CSS pixels (null: none).
IN_SHORT_JS = """() => {
    const e = document.querySelector('.in-short');
    if (!e) return null;
    const r = e.getBoundingClientRect();
    return {top: Math.round(r.top + window.scrollY), bottom: Math.round(r.bottom + window.scrollY)};
}"""

# Every word in a table cell that the browser laid out on more than one line.  A word is a run
# of non-space characters in one text node; outside code, a break right after a hyphen
# (per-release) is a normal break, so prose words are also split after their hyphens.
TABLE_BREAKS_JS = """() => {
    const broken = [];
    document.querySelectorAll('table').forEach((table, t) => {
        table.querySelectorAll('td, th').forEach(cell => {
            const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
            for (let node = walker.nextNode(); node; node = walker.nextNode()) {
                const code = !!node.parentElement.closest('code, pre, kbd, samp');
                const pieces = code ? /\\S+/g : /[^\\s-]+-*|-+/g;
                for (const m of node.data.matchAll(pieces)) {
                    const range = document.createRange();
                    range.setStart(node, m.index);
                    range.setEnd(node, m.index + m[0].length);
                    const rects = [...range.getClientRects()].filter(r => r.width > 0 && r.height > 0);
                    if (rects.length < 2) continue;
                    const top = Math.min(...rects.map(r => r.top));
                    const lines = 1 + rects.filter(r => r.top > top + r.height / 2).length;
                    if (lines > 1) broken.push({table: t, word: m[0], lines: lines,
                        row: (cell.closest('tr').innerText || '').trim().slice(0, 60)});
                }
            }
        });
    });
    return broken;
}"""


# -- in a fresh kernel -----------------------------------------------------------------------------

def run_visible(text: str, cwd: Path, env: dict[str, str], timeout: int = 300) -> tuple[int, str | None]:
    """Run the visible cells of the MyST notebook ``text``, in order, in one fresh Python kernel
    started in ``cwd`` with environment ``env``: what a reader who copies each visible cell runs.

    Returns (how many cells ran, None) or (how many ran before the failing one, what failed:
    the cell's line in ``text`` and the error).  A cell tagged ``raises-exception`` may raise.
    """
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    cells = visible_cells(text)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c.source, metadata={"tags": list(c.tags)}) for c in cells]
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(cwd)}})
    try:
        client.execute(env=env)
    except CellExecutionError as e:
        ran = sum(bool(c.get("execution_count")) for c in nb.cells)
        failed = next((c for c, n in zip(cells, nb.cells, strict=True)
                       if any(o.get("output_type") == "error" for o in n.get("outputs", []))), None)
        where = f"the visible cell at line {failed.line}" if failed else "a visible cell"
        plain = re.sub(r"\x1b\[[0-9;]*m", "", str(e))  # the traceback's terminal colours
        lines = [line for line in plain.splitlines() if line.strip()]
        return ran - 1, f"{where}: {lines[-1] if lines else e}"
    return len(cells), None
