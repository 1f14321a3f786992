"""Markdown tables of computed rows, for ``{glue:md}``: a page shows the values its cell computed."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["md_table"]

def md_table(rows: Sequence[dict], columns: Sequence[str] | None = None, fmt: str = ".3g") -> str:
    """A Markdown table of ``rows`` (dicts); floats formatted with ``fmt``.

    For ``glue`` with ``{glue:md}``: the page shows a table of the values the
    cell computed.

    >>> print(md_table([{"a": 1, "b": 0.123456}, {"a": 2, "b": True}]))
    | a | b |
    |---|---|
    | 1 | 0.123 |
    | 2 | True |
    >>> print(md_table([{"max |x|": 1.0}]))
    | max \\|x\\| |
    |---|
    | 1 |
    >>> md_table([])
    Traceback (most recent call last):
    ...
    ValueError: md_table needs at least one row
    """
    if not rows:
        raise ValueError("md_table needs at least one row")
    columns = list(columns or rows[0])

    def cell(v: object) -> str:
        if isinstance(v, float):
            return format(v, fmt)
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(cell(c) for c in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(lines)

