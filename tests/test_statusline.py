"""The status-line snippet, run for real: bash, jq, JSON on stdin.

"Prints nothing and exits as the snippet intends" means, precisely: exit
status 0 (the script's last command is an `if` whose condition failed), empty
stdout, and empty stderr (a status line is redrawn on every update, so the
corrected script silences jq's parse errors instead of leaking them).  Any
JSON number is printed as jq formats it; anything else prints nothing.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from explainers.statusline.runner import SCRIPT, TABLE_COPY, jq_manual_url, run_statusline

pytestmark = pytest.mark.slow  # every case starts bash and jq

LINE = re.compile(r"Context: -?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?% remaining")
META = set("$`;|&<>()\\'\"\n\r{}[]*?!#~")


def doc(value) -> str:
    return json.dumps({"context_window": {"remaining_percentage": value}})


def assert_silent(proc):
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


@pytest.mark.parametrize(("value", "shown"), [(42, "42"), (42.5, "42.5"), (0, "0"), (100, "100"), (7.25, "7.25")])
def test_a_number_prints_the_line(value, shown):
    proc = run_statusline(doc(value))
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"Context: {shown}% remaining", "")


def test_other_fields_are_ignored():
    text = json.dumps({"model": {"id": "x"}, "context_window": {"remaining_percentage": 12, "total": 9}})
    assert run_statusline(text).stdout == "Context: 12% remaining"


@pytest.mark.parametrize("text", [
    "{}",
    '{"context_window": {}}',
    '{"context_window": null}',
    '{"remaining_percentage": 42}',  # right key, wrong place
], ids=["no-context-window", "no-field", "context-window-null", "top-level-field"])
def test_a_missing_field_prints_nothing(text):
    assert_silent(run_statusline(text))


def test_null_prints_nothing():
    assert_silent(run_statusline(doc(None)))


@pytest.mark.parametrize("value", ["42", "42%", "", "abc", True, False, [42], {"v": 42}, "1e3"])
def test_a_non_number_prints_nothing(value):
    assert_silent(run_statusline(doc(value)))


@pytest.mark.parametrize("text", [
    "", "not json", '{"context_window": ', '{"context_window": {"remaining_percentage": 4', "[1, 2",
    '{"context_window": "text"}', "[]", "42", "-n", "-e \\x41",
], ids=["empty", "words", "truncated", "truncated-number", "bad-array", "field-of-string",
        "array", "bare-number", "echo-option-n", "echo-option-e"])
def test_malformed_or_odd_json_prints_nothing(text):
    assert_silent(run_statusline(text))


NUL_INPUTS = {
    "in-the-number": doc(42).encode().replace(b"42", b"4\x002"),
    "after-the-document": doc(42).encode() + b"\x00",
    "after-the-document-then-junk": doc(42).encode() + b"\x00junk",
    "after-the-document-then-newline": doc(42).encode() + b"\x00\n" + doc(7).encode(),
    "before-the-document": b"\x00" + doc(42).encode(),
    "inside-a-string": doc(42).encode().replace(b'"context_window"', b'"context\x00_window"'),
    "as-the-value": doc(42).encode().replace(b"42", b'"4\x002"'),
    "alone": b"\x00",
}


@pytest.mark.parametrize("data", NUL_INPUTS.values(), ids=NUL_INPUTS.keys())
def test_a_raw_nul_byte_prints_nothing(data):
    # Raw bytes, not text: $(cat) would drop the NUL with a warning on stderr
    # (and turn 4 NUL 2 into 42); jq 1.6 alone ignores the rest of a line after
    # a NUL, so a valid document followed by NUL and junk would still print.
    assert b"\x00" in data
    assert_silent(run_statusline(data))


def test_what_the_nul_check_prevents():
    # The same jq program reading stdin itself, without the `read -d ''` guard.
    jq_alone = ("jq -rs 'if length == 1 then .[0].context_window.remaining_percentage"
                " | numbers else empty end' 2>/dev/null")
    proc = run_statusline(NUL_INPUTS["in-the-number"], TABLE_COPY.replace("\\|", "|"))
    assert proc.stdout == "Context: 42% remaining"
    assert "ignored null byte" in proc.stderr
    shown = run_statusline(NUL_INPUTS["after-the-document-then-junk"], jq_alone).stdout
    if shown == "":
        pytest.skip("this jq rejects the NUL byte itself")
    assert shown == "42\n"


@pytest.mark.parametrize("text", [doc(1) + "\n" + doc(2), doc(1) + " {}", doc(1) + " 2", "{} " + doc(1)])
def test_more_than_one_document_prints_nothing(text):
    # Without -s and `length == 1`, jq prints the field of each document in
    # turn, and `{..: 1} {}` prints just 1 (null is dropped by `numbers`).
    assert_silent(run_statusline(text))


def test_without_slurp_the_first_of_two_documents_would_show():
    one_by_one = "jq -r '.context_window.remaining_percentage | numbers' 2>/dev/null"
    assert run_statusline(doc(1) + " {}", one_by_one).stdout == "1\n"


HOSTILE = [
    "$(touch {m})", "`touch {m}`", "; touch {m}", "| touch {m}", "&& touch {m}",
    "42\ntouch {m}", "42; touch {m}", "$(touch {m})42", "\x1b]0;title\x07", "%s%s%n",
]


@pytest.mark.parametrize("template", HOSTILE)
def test_hostile_strings_execute_nothing_and_print_no_metacharacter(tmp_path, template):
    marker = tmp_path / "pwned"
    payload = template.format(m=marker)
    inputs = [
        doc(payload),  # as the value
        json.dumps({"context_window": {payload: 42, "remaining_percentage": payload}}),  # as a key
        json.dumps({"context_window": payload}),  # instead of the object
        payload,  # as the whole stdin, not JSON at all
        doc(42) + payload,  # after a valid document
    ]
    for text in inputs:
        proc = run_statusline(text)
        assert not marker.exists(), f"executed: {text!r}"
        assert proc.returncode == 0 and proc.stderr == ""
        assert proc.stdout == "" or LINE.fullmatch(proc.stdout), proc.stdout
        assert not (set(proc.stdout) & META), proc.stdout


@settings(max_examples=40, deadline=None)
@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=5,
))
def test_any_json_value_prints_the_number_or_nothing(value):
    proc = run_statusline(doc(value))
    assert proc.returncode == 0 and proc.stderr == ""
    if isinstance(value, int | float) and not isinstance(value, bool):
        assert LINE.fullmatch(proc.stdout), proc.stdout
        shown = float(proc.stdout.removeprefix("Context: ").removesuffix("% remaining"))
        assert shown == pytest.approx(float(value), rel=1e-15, abs=0)
    else:
        assert proc.stdout == ""


def test_the_table_copy_is_broken_by_its_markdown_escape():
    # With `\|`, echo prints its arguments: the raw input, a literal `|` and the jq program.
    proc = run_statusline(doc(42), TABLE_COPY)
    assert proc.stdout.startswith('Context: {"context_window"')
    assert "| jq -r" in proc.stdout


def test_the_table_copy_with_only_the_pipe_fixed_lets_metacharacters_through(tmp_path):
    # Nothing runs (bash does not expand the $(...) inside the value of
    # $remaining again), but the text reaches the terminal: the reason the
    # corrected script accepts numbers only.
    marker = tmp_path / "pwned"
    fixed_pipe = TABLE_COPY.replace("\\|", "|")
    proc = run_statusline(doc(f"$(touch {marker})"), fixed_pipe)
    assert not marker.exists()
    assert proc.stdout == f"Context: $(touch {marker})% remaining"


def test_the_table_copy_with_only_the_pipe_fixed_prints_raw_control_characters():
    # jq -r decodes \u001b: a raw ESC (a terminal escape sequence) reaches stdout.
    fixed_pipe = TABLE_COPY.replace("\\|", "|")
    proc = run_statusline(doc("\x1b]0;title\x07"), fixed_pipe)
    assert proc.stdout == "Context: \x1b]0;title\x07% remaining"
    assert_silent(run_statusline(doc("\x1b]0;title\x07")))


def test_echo_would_take_an_input_of_dash_n_as_its_option():
    assert run_statusline("-n", 'input=$(cat); echo "$input"').stdout == ""
    assert run_statusline("-n", "input=$(cat); printf '%s' \"$input\"").stdout == "-n"


def test_an_echo_that_interprets_backslashes_breaks_a_json_escape():
    # Why printf '%s' and not echo: portability to an echo that interprets \n (dash's, xpg_echo).
    newline = json.dumps({"context_window": {"remaining_percentage": 42.5}, "note": "a\nb"})
    assert "\\n" in newline
    simple = TABLE_COPY.replace("\\|", "|")
    assert run_statusline(newline, simple).stdout == "Context: 42.5% remaining"
    assert run_statusline(newline, "shopt -s xpg_echo\n" + simple).stdout == ""
    by_printf = simple.replace('echo "$input"', "printf '%s' \"$input\"")
    assert by_printf != simple
    assert run_statusline(newline, "shopt -s xpg_echo\n" + by_printf).stdout == "Context: 42.5% remaining"
    assert run_statusline(newline, "shopt -s xpg_echo\n" + SCRIPT.read_text()).stdout == (
        "Context: 42.5% remaining")


def test_the_script_is_the_file_the_page_shows():
    page = (SCRIPT.parents[2] / "docs" / "snippets.md").read_text(encoding="utf-8")
    assert "../explainers/statusline/statusline.sh" in page
    assert "\\|" not in SCRIPT.read_text(encoding="utf-8")


def test_the_jq_manual_link_names_the_installed_release():
    url = jq_manual_url()
    assert re.fullmatch(r"https://jqlang\.org/manual/v\d+\.\d+/", url), url
