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
