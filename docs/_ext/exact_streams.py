"""Show a cell's printed output exactly as the cell wrote it, however the kernel sent it.

The kernel sends what a cell prints in as many stream messages as its flush timer
happened to cut it into, so under load one ``print("placements:", x)`` can arrive
as ``"placements:"`` and ``" (...)"``.  MyST-NB 1.4's ``coalesce_streams`` (used
with ``nb_merge_streams = True``) strips each message and joins them with a
newline, so the page then shows ``"placements:\\n (...)"``: the HTML changed with
the machine's load, and two builds of the same page differed.  This extension
joins each stream's messages as written before MyST-NB's own merge runs, which
still normalizes the end of the text, handles ``\\r`` and ``\\b`` and orders
stdout before stderr.  It replaces ``myst_nb.core.render.coalesce_streams``, the
name MyST-NB 1.4's renderer calls.
"""

from __future__ import annotations

from myst_nb.core import render
from myst_nb.core.utils import coalesce_streams
from nbformat import NotebookNode


def join_streams(outputs: list[NotebookNode]) -> list[NotebookNode]:
    """One output per stream name, its messages' text concatenated exactly, then MyST-NB's merge.

    >>> out = join_streams([NotebookNode(output_type="stream", name="stdout", text="placements:"),
    ...                     NotebookNode(output_type="stream", name="stdout", text=" (S(0),)\\n")])
    >>> [o["text"] for o in out]
    ['placements: (S(0),)\\n']
    """
    joined: list[NotebookNode] = []
    first: dict[str, NotebookNode] = {}
    for output in outputs:
        if output.get("output_type") == "stream":
            if output["name"] in first:
                first[output["name"]]["text"] += output["text"]
                continue
            output = first[output["name"]] = NotebookNode(output)
        joined.append(output)
    return coalesce_streams(joined)


def setup(app):
    render.coalesce_streams = join_streams
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
