"""The lock table of the host allocator: parser behaviour on small texts, and the installed headers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from explainers.allocator.lockorder import code_dot
from explainers.allocator.locktable import (
    against_note,
    backend_nestings,
    canonical_lock,
    lock_report,
    lock_table,
    virtual_members,
)
from explainers.releases import ReleaseNotProvisioned, run_under

TEMPLATE = """struct CachingHostAllocatorImpl {
  void outer() {
    std::unique_lock<std::shared_mutex> lg(instance_mutex_);
    %s
  }
  void inner(BlockPool& pool) {
    std::lock_guard<std::mutex> g(pool.events_mutex_);
  }
};"""


def test_a_call_under_a_lock_makes_the_nesting_and_without_it_there_is_none():
    with_call = lock_table(TEMPLATE % "inner(pool);")
    assert with_call.pairs() == {("instance_mutex_", "events_mutex_")}
    assert lock_table(TEMPLATE % "x = 1;").pairs() == set()
    # A call in a block the guard has already left carries nothing.
    scoped = TEMPLATE.replace("    std::unique_lock<std::shared_mutex> lg(instance_mutex_);\n    %s",
                              "    { std::unique_lock<std::shared_mutex> lg(instance_mutex_); }\n    inner(pool);")
    assert lock_table(scoped).pairs() == set()


def test_comments_and_strings_neither_lock_nor_call():
    text = TEMPLATE % '// inner(pool); std::lock_guard<std::mutex> g(block->mutex_);\n    f("inner(pool)");'
    table = lock_table(text)
    assert table.pairs() == set() and [s.line for s in table.sites] == [3, 8]


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=0, max_value=4))
def test_a_chain_of_any_depth_carries_the_outer_lock(depth):
    names = [f"f{i}" for i in range(depth + 1)]
    body = ["struct CachingHostAllocatorImpl {",
            "  void top() {", "    std::lock_guard<std::mutex> g(profiling_mutex_);", f"    {names[0]}();", "  }"]
    for a, b in zip(names, names[1:], strict=False):
        body += [f"  void {a}() {{", f"    {b}();", "  }"]
    body += [f"  void {names[-1]}() {{", "    std::lock_guard<std::mutex> g(block->mutex_);", "  }", "};"]
    nest = [n for n in lock_table("\n".join(body)).nestings if n.outer == "profiling_mutex_"]
    assert [(n.inner, len(n.via)) for n in nest] == [("block->mutex_", depth + 2)]


def test_unknown_mutex_fails_loudly():
    with pytest.raises(ValueError, match="unknown mutex expression"):
        canonical_lock("some_new_mutex_")
    with pytest.raises(ValueError, match="no 'struct CachingHostAllocatorImpl"):
        lock_table("struct Other {};")


def test_figure_keeps_every_contradiction_and_drops_implied_arrows():
    dot = code_dot([("a", "b", "drawn", ""), ("b", "c", "innermost", ""), ("a", "c", "drawn", ""),
                    ("a", "c2", "contradicts: c2 is independent", "f()"), ("b", "t", "not named", "hook()"),
                    ("a", "t", "not named", "hook()")])
    arrows = [ln.strip().split(" [")[0] for ln in dot.splitlines() if " -> " in ln]
    assert arrows == ['"a" -> "b"', '"b" -> "c"', '"a" -> "c2"', '"b" -> "t"']


def _check_hooks(report):
    # The virtual members entered with a lock held: a backend's override runs under those locks.
    locked = {e["function"] for e in report["entered"]}
    assert {"free_block", "query_event", "get_current_stream", "stream_is_capturing"} <= locked & set(report["virtual"])
    assert not {"allocate_host_memory", "record_stream"} & locked
    held = {tuple(e["held"]) for e in report["entered"] if e["function"] == "stream_is_capturing"}
    assert held == {("instance_mutex_",)}


def _check_report(report: dict, release: str) -> None:
    note = report["note"]
    verdict = {(n["outer"], n["inner"]): against_note((n["outer"], n["inner"]), [tuple(e) for e in note["edges"]],
                                                      note["independent"], note["innermost"])
               for n in report["nestings"] + report["backend"]}
    assert verdict[("instance_mutex_", "events_mutex_")].startswith("contradicts")
    assert verdict[("profiling_mutex_", "alloc_trace_lock")].startswith("contradicts")
    assert (("instance_mutex_", "instance_mutex_") in verdict) == (release == "2.14.1")
    held = {tuple(e["held"]) for e in report["entered"] if e["function"] == "free_block"}
    assert ("pool.blocks_mutex_", "pool.free_list_[i].mutex_") in held
    assert not any(e["function"] == "allocate_host_memory" for e in report["entered"])


def test_installed_header():
    report = lock_report()
    _check_report(report, report["version"].split("+")[0])
    _check_hooks(report)
    assert backend_nestings(lock_table("struct CachingHostAllocatorImpl {\n};")) == []


def test_other_release_header():
    try:
        report = run_under("2.14.1", "explainers.allocator.locktable:lock_report")
    except ReleaseNotProvisioned:
        pytest.skip("torch 2.14.1 has no environment here")
    _check_report(report, "2.14.1")
    _check_hooks(report)


def test_virtual_members_reads_only_the_impl_struct():
    text = ("struct CachingHostAllocatorImpl {\n  virtual void hook(S s) const {}\n  void plain() {}\n"
            "  virtual B* get_free_block(size_t size) { return nullptr; }\n};\nstruct X {\n  virtual void y() {}\n};\n")
    assert virtual_members(text) == ["hook", "get_free_block"]
    with pytest.raises(ValueError):
        virtual_members("struct Other {};")
