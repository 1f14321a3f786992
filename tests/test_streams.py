"""Printed output reaches the page as the cell wrote it, whatever the kernel's flushes."""

from __future__ import annotations

import sys
from pathlib import Path

from nbformat import NotebookNode

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs" / "_ext"))
import exact_streams  # noqa: E402


def _stream(text: str, name: str = "stdout") -> NotebookNode:
    return NotebookNode(output_type="stream", name=name, text=text)


def test_a_print_cut_into_two_messages_shows_as_one_line():
    # What the kernel sent for print("placements:", x) when a flush fell between its writes.
    cut = [_stream("placements:"), _stream(" ('_S(0, sf=2)', 'S(0)')\n"), _stream("next line\n")]
    whole = [_stream("placements: ('_S(0, sf=2)', 'S(0)')\nnext line\n")]
    assert [o["text"] for o in exact_streams.join_streams(cut)] == [o["text"] for o in exact_streams.join_streams(whole)]
    assert exact_streams.join_streams(cut)[0]["text"] == "placements: ('_S(0, sf=2)', 'S(0)')\nnext line\n"


def test_other_outputs_and_streams_keep_their_place():
    display = NotebookNode(output_type="display_data", data={"text/plain": "x"}, metadata={})
    out = exact_streams.join_streams([_stream("a"), display, _stream("b\n"), _stream("e\n", "stderr")])
    assert [(o["output_type"], o.get("text")) for o in out] == [
        ("stream", "ab\n"), ("display_data", None), ("stream", "e\n")]


def test_the_renderer_calls_the_exact_join():
    from myst_nb.core import render

    exact_streams.setup(type("App", (), {})())
    assert render.coalesce_streams is exact_streams.join_streams
