"""Find the code blocks a reader can copy in MyST sources, and hard-coded figures in prose.

Used by ``tests/test_snippets.py``: every copyable block on the site must be
executed at build time, collected by ``nox -s doctest``, or carry an explicit
marker with a reason on the line before it::

    <!-- snippet: not-run — why it is not run -->

(``—``, ``--`` or ``:`` may separate the reason.)  And no page may write in
its prose a figure that one of its cells computes and glues.

>>> text = '''
... ```python
... >>> 1 + 1
... 2
... ```
...
... <!-- snippet: not-run — installs a package -->
... ```bash
... pip install nox
... ```
... '''
>>> [(b.line, b.kind, b.lang, b.doctest, b.marker) for b in copyable_blocks(text)]
[(2, 'fence', 'python', True, None), (8, 'fence', 'bash', False, 'installs a package')]
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

__all__ = ["Block", "copyable_blocks", "glue_roles", "prose", "hard_coded_figures"]

# Directives whose body is code a reader sees with a copy button.
CODE_DIRECTIVES = {"code-cell", "code-block", "code", "sourcecode", "literalinclude"}
_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,}|:{3,})\s*(?P<info>.*?)\s*$")
_DIRECTIVE = re.compile(r"^\{(?P<name>[\w:.-]+)\}\s*(?P<arg>.*)$")
_MARKER = re.compile(r"^\s*<!--\s*snippet:\s*not-run\s*(?:—|–|--|:|-)\s*(?P<reason>.*?)\s*-->\s*$")
_OPTION = re.compile(r"^\s*:(?P<key>[\w-]+):\s*(?P<value>.*)$")


@dataclass
class Block:
    """One fenced block: where it starts (1-based line), what it is, and its body."""

    line: int
    kind: str  # "fence" (plain ```lang) or the directive name
    lang: str
    body: str
    options: dict[str, str] = field(default_factory=dict)
    marker: str | None = None  # the reason given by a not-run marker

    @property
    def doctest(self) -> bool:
        """Whether the block holds ``>>>`` examples (collected by pytest's doctest-glob)."""
        return any(line.lstrip().startswith(">>> ") or line.strip() == ">>>"
                   for line in self.body.splitlines())

    @property
    def tags(self) -> list[str]:
        """The cell's ``:tags:`` option as a list."""
        raw = self.options.get("tags", "").strip().strip("[]")
        return [t.strip().strip("'\"") for t in raw.split(",") if t.strip()]


def _closing(fence: str) -> re.Pattern:
    return re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}\s*$")


def _blocks(lines: list[str], offset: int) -> list[Block]:
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m["fence"], m["info"]
        close = _closing(fence)
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        body_lines = lines[i + 1 : j]
        prev = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        marker = _MARKER.match(prev)
        d = _DIRECTIVE.match(info)
        if d is None and fence[0] == ":":
            pass  # a colon fence without a directive is plain text in MyST
        elif d is None or d["name"] in CODE_DIRECTIVES:
            options: dict[str, str] = {}
            k = 0
            if d is not None and body_lines and body_lines[0].strip() == "---":
                # Options as a YAML block (MyST's other form), e.g. a cell's `mystnb:` settings.
                import yaml

                end = next(n for n in range(1, len(body_lines)) if body_lines[n].strip() == "---")
                for key, value in (yaml.safe_load("\n".join(body_lines[1:end])) or {}).items():
                    options[key] = ("[" + ", ".join(value) + "]" if isinstance(value, list)
                                    else str(value))
                k = end + 1
            elif d is not None:
                while k < len(body_lines) and (o := _OPTION.match(body_lines[k])):
                    options[o["key"]] = o["value"]
                    k += 1
            lang = (d["arg"] if d else info).split()[0] if (d["arg"] if d else info).strip() else ""
            found.append(Block(offset + i + 1, d["name"] if d else "fence", lang,
                               "\n".join(body_lines[k:]), options,
                               marker["reason"] if marker else None))
        else:
            # Admonitions, dropdowns, cards, tabs: their bodies can hold code blocks.
            found.extend(_blocks(body_lines, offset + i + 1))
        i = j + 1
    return found


def copyable_blocks(text: str) -> list[Block]:
    """Every code block in a MyST/Markdown source, nested ones included, in order.

    Front matter is skipped.  Directives that are not code (``{glue:md}``,
    ``{toctree}``, ...) are not blocks, but their bodies are searched.

    >>> src = "````{dropdown} Answer\\n```{code-block} python\\n:caption: x\\nprint(1)\\n```\\n````\\n"
    >>> [(b.kind, b.lang, b.options, b.body) for b in copyable_blocks(src)]
    [('code-block', 'python', {'caption': 'x'}, 'print(1)')]
    >>> [b.tags for b in copyable_blocks("```{code-cell} ipython3\\n:tags: [remove-cell, skip-execution]\\n1\\n```")]
    [['remove-cell', 'skip-execution']]
    >>> [(b.tags, b.body) for b in copyable_blocks("```{code-cell} ipython3\\n---\\ntags: [hide-input]\\nmystnb:\\n  image:\\n    alt: x\\n---\\n1\\n```")]
    [(['hide-input'], '1')]
    """
    lines = text.splitlines()
    start = 0
    if lines and lines[0].strip() == "---":
        end = next((k for k in range(1, len(lines)) if lines[k].strip() == "---"), 0)
        start = end + 1
    return _blocks(lines[start:], start)


_GLUE_ROLE = re.compile(r"\{glue(?::text|:any)?\}`(?P<key>[^`:]+)(?::(?P<fmt>[^`]*))?`")


def glue_roles(text: str) -> list[tuple[str, str]]:
    """The ``(key, format)`` of every inline glue role in ``text``.

    >>> glue_roles("took {glue:text}`t_ms:.1f` ms over {glue}`n` runs")
    [('t_ms', '.1f'), ('n', '')]
    """
    return [(m["key"], m["fmt"] or "") for m in _GLUE_ROLE.finditer(text)]


def prose(text: str) -> str:
    """``text`` without front matter, fenced blocks, HTML comments, roles and inline code.

    >>> prose("It took {glue:text}`t:.1f` ms; `x = 3`.\\n```python\\ny = 4\\n```\\nDone in 5 s.")
    'It took  ms; .\\nDone in 5 s.'
    """
    lines = text.splitlines()
    if lines and lines[0].strip() == "---":
        end = next((k for k in range(1, len(lines)) if lines[k].strip() == "---"), -1)
        lines = lines[end + 1 :]
    kept: list[str] = []
    close = None
    for line in lines:
        if close is not None:
            if close.match(line):
                close = None
            continue
        m = _OPEN.match(line)
        if m:
            close = _closing(m["fence"])
            continue
        kept.append(line)
    out = "\n".join(kept)
    out = re.sub(r"<!--.*?-->", "", out, flags=re.S)
    out = re.sub(r"\{[\w:.-]+\}`[^`]*`", "", out)  # roles, glue included
    out = re.sub(r"(`+)(?:(?!\1).)+?\1", "", out, flags=re.S)  # inline code
    return out


_NUMBER = re.compile(r"(?<![\w.,])[-−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w]|[.,]\d)")


def _as_float(text: str) -> float | None:
    try:
        return float(text.replace(",", "").replace("−", "-"))
    except ValueError:
        return None


def hard_coded_figures(text: str, shown: dict[str, str]) -> list[tuple[str, str]]:
    """The ``(glue key, number in prose)`` pairs where prose repeats a glued figure.

    ``shown`` maps each glue key to the text the page displays for it.  A
    number in the prose matches when it equals that text, or has the same
    value.  Figures whose value is a whole number from -9 to 9 (``0.0``,
    ``8``) are not matched: they collide with ordinary counting ("dims 0, 2,
    4") far more often than they restate a result.

    >>> page = "We ran {glue:text}`runs` runs; all 1,024 agreed, in 12.5 ms, 3 passes, 100 000 rows."
    >>> hard_coded_figures(page, {"runs": "1024", "ms": "12.5", "passes": "3.0", "zero": "0.0"})
    [('runs', '1,024'), ('ms', '12.5')]
    """
    values = {}
    for key, text_shown in shown.items():
        value = _as_float(text_shown.strip())
        if value is None or not math.isfinite(value) or (value == int(value) and abs(value) <= 9):
            continue
        values[key] = (text_shown.strip(), value)
    found = []
    for m in _NUMBER.finditer(prose(text)):
        token = m.group(0)
        number = _as_float(token)
        for key, (text_shown, value) in values.items():
            if token == text_shown or (number is not None and number == value):
                found.append((key, token))
    return found
