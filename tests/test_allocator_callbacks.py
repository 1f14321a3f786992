"""The callbacks the shipped build runs under the host allocator's locks."""

import pytest

from explainers.allocator.callbacks import _function, callbacks_under_locks, order_in


def test_order_in_needs_every_needle_in_order():
    assert order_in("a b c", "a", "b", "c")
    assert not order_in("a c b", "a", "b", "c")
    assert not order_in("a b", "a", "z")


def test_function_body_balances_braces():
    text = "int f() { if (x) { y(); } return 1; }\nint g() { }"
    assert _function(text, "int f() {") == "int f() { if (x) { y(); } return 1; }"
    with pytest.raises(ValueError):
        _function("void h() { {", "void h() {")


def test_installed_torch_runs_both_callbacks_under_locks():
    got = callbacks_under_locks()
    assert got["filter_under_lock"] and got["active_only"] and got["marks_capture"], got
    assert "cudaStreamGetCaptureInfo" in got["filter_calls"], got["filter_calls"]
    assert got["context_resets"] and got["trace_context"], got
    assert "pthread_mutex_lock" in got["release_calls"] and got["frees_mutex"], got
