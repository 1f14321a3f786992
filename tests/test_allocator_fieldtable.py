"""The shared-field table of the host allocator: access kinds, held locks, entry paths, and the installed headers."""

from __future__ import annotations

import re

import pytest

from explainers.allocator.fieldtable import (
    _entry_contexts,
    data_members,
    field_markdown,
    field_report,
    field_table,
)
from explainers.allocator.locktable import _functions, _impl_body, lock_table
from explainers.allocator.torchpaths import find_torch
from explainers.releases import ReleaseNotProvisioned, run_under

HEADER = """struct HostBlock {
  std::mutex mutex_;
  size_t count_{0};
};
struct CachingHostAllocatorImpl {
  template <typename F>
  void each(const F& fn) {
    std::lock_guard<std::mutex> g(block->mutex_);
    fn(block);
  }
  void api(B* block) {
    %s
  }
  void helper(B* block) {
    if (block->count_) {}
  }
  void locked_caller(B* block) {
    std::lock_guard<std::mutex> g(block->mutex_);
    helper(block);
  }
  size_t total_ = 0;
};
struct CachingHostAllocatorInterface {
  void api(void* p) { impl_->api(p); }
  void locked(void* p) { impl_->locked_caller(p); }
};"""


def accesses(body: str, field: str = "HostBlock::count_") -> list[tuple[str, str, tuple[str, ...]]]:
    row = next(r for r in field_table(HEADER % body) if r.field == field)
    return [(a.function, a.kind, a.held) for a in row.accesses if a.function == "api"]


@pytest.mark.parametrize(("statement", "kind"), [
    ("block->count_ = 1;", "write"), ("block->count_ += 2;", "write"), ("++block->count_;", "write"),
    ("block->count_--;", "write"), ("if (block->count_ == 0) {}", "read"), ("auto n = block->count_;", "read"),
    ("auto& n = block->count_;", "reference"),
])
def test_the_text_after_a_field_decides_its_access_kind(statement, kind):
    assert accesses(statement) == [("api", kind, ())]


@pytest.mark.parametrize(("statement", "kind"), [
    ("total_ = 3;", "write"), ("this->total_ = 3;", "write"), ("return total_;", "read"),
])
def test_the_class_own_fields_are_found_by_bare_name(statement, kind):
    assert accesses(statement, "CachingHostAllocatorImpl::total_") == [("api", kind, ())]


def test_a_local_of_the_same_name_is_not_a_field_access():
    # A name after "." belongs to some other object unless a tracked struct declares it.
    assert accesses("stats.total_ = 1; int total = 0;", "CachingHostAllocatorImpl::total_") == []


def test_a_guard_holds_until_its_block_closes():
    inside = "{ std::lock_guard<std::mutex> g(block->mutex_); block->count_ = 1; } block->count_ = 2;"
    assert accesses(inside) == [("api", "write", ("block->mutex_",)), ("api", "write", ())]


def test_a_lambda_given_to_a_member_runs_under_the_locks_held_where_that_member_calls_it():
    assert accesses("each([&](B* b) { b->count_ = 1; });") == [("api", "write", ("block->mutex_",))]
    # The same lambda written and called in place runs with what is held where it is written.
    assert accesses("auto f = [&](B* b) { b->count_ = 1; }; f(block);") == [("api", "write", ())]


def test_a_helper_inherits_only_the_locks_every_path_into_it_holds():
    row = next(r for r in field_table(HEADER % "helper(block);") if r.field == "HostBlock::count_")
    # api (an entry point, no lock) and locked_caller (block->mutex_) both call helper: nothing is certain.
    assert [(a.function, a.held) for a in row.accesses] == [("helper", ())]
    row = next(r for r in field_table(HEADER % "") if r.field == "HostBlock::count_")
    assert [(a.function, a.held) for a in row.accesses] == [("helper", ("block->mutex_",))]
    assert row.guard == ("block->mutex_",)


CYCLE = """struct CachingHostAllocatorImpl {
  void outer() { std::lock_guard<std::mutex> g(instance_mutex_); inner(); }
  void inner() { again(); }
  void again() { if (depth_) inner(); }
  std::mutex instance_mutex_;
  int depth_ = 0;
};
struct CachingHostAllocatorInterface {
  void api() { impl_->again(); }
};"""


def test_every_path_into_a_member_on_a_call_cycle_is_found():
    # again is an entry point and is also reached as outer -> inner -> again, holding instance_mutex_;
    # the cycle inner <-> again must not hide that second path, whichever member is visited first.
    text, start, end = _impl_body(CYCLE)
    entry = _entry_contexts(lock_table(CYCLE), text, _functions(text, start, end - 1))
    assert entry == {"outer": {()}, "inner": {(), ("instance_mutex_",)}, "again": {(), ("instance_mutex_",)}}


def test_every_declared_block_field_is_tracked_and_mutexes_are_not():
    header = find_torch().header.read_text()
    declared = data_members(header, "HostBlock")
    assert "mutex_" in declared and {"size_", "ptr_", "allocated_", "event_count_", "streams_"} <= set(declared)
    tracked = {r.field.split("::")[1] for r in field_table(header) if r.field.startswith("HostBlock::")}
    assert tracked == set(declared) - {"mutex_"}


def test_every_listed_access_is_on_a_line_that_names_the_field():
    header = find_torch().header.read_text()
    lines = header.splitlines()
    for row in field_table(header):
        name = row.field.split("::")[1]
        for a in row.accesses:
            assert re.search(rf"\b{name}\b", lines[a.line - 1]), (row.field, a)


def test_the_table_has_one_row_per_field_and_the_other_release_column():
    report = field_report()
    try:
        other = run_under("2.14.1" if report["version"].startswith("2.15") else "2.15.0",
                          "explainers.allocator.fieldtable:field_report")
    except ReleaseNotProvisioned:
        pytest.skip("the other release's environment is not built here")
    table = field_markdown(report, other).splitlines()
    names = {f["field"] for f in report["fields"]} | {f["field"] for f in other["fields"]}
    assert len(table) == 2 + len(names)
    assert all(line.count(" | ") == 6 for line in table[2:])
