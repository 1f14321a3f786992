"""The trace buffer overflow under AddressSanitizer, on the installed torch (and 2.14.1 where provisioned)."""

from __future__ import annotations

import shutil

import pytest

from explainers.allocator.ringbuffer import asan_verdict, ring_buffer_overflow
from explainers.releases import ReleaseNotProvisioned, run_under

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ with AddressSanitizer")


def _check(got: dict) -> None:
    assert got["shrink"]["asan"]["kind"] == "heap-buffer-overflow"
    assert any("insertEntries" in f for f in got["shrink"]["asan"]["frames"])
    assert got["clear"] == {"returncode": 0, "asan": None, "output": {"traces_before": 8, "traces_after": 2}}
    # the same calls with another thread's two registrations between recordHistory's resize and its clear
    assert got["window"]["asan"]["kind"] == "heap-buffer-overflow"
    assert got["window"]["asan"]["access"].startswith("WRITE")
    assert any("insertEntries" in f for f in got["window"]["asan"]["frames"])
    window = got["recordHistory"]
    assert window["start"] < window["set_max"] < window["clear"] < window["end"]
    assert window["history_locks"] == ["profiling_mutex_"] and window["trace_locks"] == []
    assert all(window["start"] < line < window["end"] for line in window["profiling_locks"])


def test_shrink_overflows_and_clear_does_not():
    _check(ring_buffer_overflow())


def test_other_release():
    try:
        got = run_under("2.14.1", "explainers.allocator.ringbuffer:ring_buffer_overflow")
    except ReleaseNotProvisioned:
        pytest.skip("torch 2.14.1 has no environment here")
    _check(got)


def test_verdict_parser_reads_only_the_first_error():
    text = ("==1==ERROR: AddressSanitizer: heap-use-after-free on address 0x2\nREAD of size 8 at 0x2\n"
            "    #0 0x1 in f() /a/b.cpp:3\n==1==ERROR: AddressSanitizer: heap-buffer-overflow\n")
    assert asan_verdict(text) == {"kind": "heap-use-after-free", "access": "READ of size 8", "frames": ["f() b.cpp:3"]}


def _ring_order(old, entries, new, more):
    """A Python transcription of RingBuffer's insertEntries/getEntries: the values returned, or None."""
    buf, nxt, mx = [], 0, old
    for i in range(entries + more):
        if i == entries:
            mx = max(1, new)
        if len(buf) < mx:
            buf.append(i)
        else:
            if nxt >= len(buf):
                return None
            buf[nxt] = i
            nxt += 1
            if nxt == mx:
                nxt = 0
    return buf[nxt:] + buf[:nxt]


def test_sweep_matches_the_condition():
    from explainers.allocator.ringsweep import entries_returned, out_of_order, overflows, ring_sweep

    got = ring_sweep(max_old=4)
    assert len(got["cases"]) == sum((2 * m + 2) * (m + 1) * (m + 3) for m in range(1, 5))
    for old, entries, new, more, status, kind, returned, values in got["cases"]:
        assert (status != 0) == overflows(old, entries, new, more), (old, entries, new, more)
        if status:
            assert kind in ("heap-buffer-overflow", "container-overflow")
        else:
            assert returned == entries_returned(old, entries, new, more) == len(values)
            assert values == _ring_order(old, entries, new, more), (old, entries, new, more, values)
    assert any(c[4] for c in got["cases"]) and not all(c[4] for c in got["cases"])
    clean = [c for c in got["cases"] if c[4] == 0]
    assert any(out_of_order(c[7]) for c in clean) and not any(out_of_order(c[7]) for c in clean if c[2] == c[0])


def test_condition_against_a_model():
    """overflows/entries_returned agree with a Python transcription of RingBuffer's three methods."""
    from explainers.allocator.ringsweep import entries_returned, overflows

    def model(old, entries, new, more):
        values = _ring_order(old, entries, new, more)
        return None if values is None else len(values)

    for old in range(1, 7):
        for entries in range(0, 3 * old):
            for new in range(0, old + 3):
                for more in range(0, old + 4):
                    got = model(old, entries, new, more)
                    assert (got is None) == overflows(old, entries, new, more), (old, entries, new, more)
                    if got is not None:
                        assert got == entries_returned(old, entries, new, more)
