"""Fast tests for explainers.allocator: parser, classifier, overlay, lock order, runner, errors."""

from __future__ import annotations

import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from explainers.allocator import build as B
from explainers.allocator.errors import (
    CompilerNotFoundError,
    SnapshotCodeMissingError,
    TorchHeadersNotFoundError,
    TsanUnsupportedError,
)
from explainers.allocator.lockorder import parse_lock_order, to_svg
from explainers.allocator.overlay import ATOMIC_FIELDS, remove_atomics, sed_command
from explainers.allocator.pyapi import (
    HOST_KEYS,
    inspect_python_api,
    take_snapshot,
    try_record_host_history,
)
from explainers.allocator.races import classify, group_by_family, load_sources
from explainers.allocator.source import (
    declared_mutexes,
    enclosing_function,
    gated_region,
    member_accesses,
)
from explainers.allocator.torchpaths import (
    TorchInstall,
    demangle_type,
    find_torch,
    headers_mentioning,
    instantiated_types,
    native_dispatch,
)
from explainers.allocator.tsan import parse_flag_help, parse_tsan
from explainers.page.torchsource import find_line, find_lines
from explainers.releases import SUPPORTED, env_python, release_of

DATA = Path(__file__).parent / "data" / "tsan"
# Reports name header lines by number: each release's stored runs are classified against
# its own header, so the tests read the folder of the torch they run under.
RELEASE = release_of(find_torch().version)
RELEASE_DATA = DATA / RELEASE
RUNS = sorted(RELEASE_DATA.glob("atomics_removed_run*.txt"))


@pytest.fixture(scope="module")
def torch_install():
    return find_torch()


@pytest.fixture(scope="module")
def sources(torch_install):
    return load_sources(torch_install.header)


# ---------------------------------------------------------------- parser


def test_every_supported_release_has_its_stored_runs():
    for release in SUPPORTED:
        assert len(sorted((DATA / release).glob("atomics_removed_run*.txt"))) == 3, release
        assert (DATA / release / "mixed.txt").is_file(), release


@pytest.mark.parametrize("path", RUNS, ids=lambda p: p.name)
def test_real_runs_parse_completely(path):
    log = parse_tsan(path.read_text())
    assert len(log.reports) >= 1
    assert not log.truncated
    assert log.warnings_reported == len(log.reports) == len(log.data_races)
    for r in log.reports:
        assert r.complete and r.summary.startswith("data race")
        assert r.current.frames and r.previous.frames
        # Each side's mutex ids have a creation stack in the same report.
        for acc in (r.current, r.previous):
            for _, mid in acc.mutexes:
                assert mid in r.mutex_stacks


@pytest.mark.parametrize("path", RUNS, ids=lambda p: p.name)
def test_real_runs_classify_into_the_two_families(path, sources):
    records = [classify(r, sources) for r in parse_tsan(path.read_text()).data_races]
    assert {r.family for r in records} <= {"A", "B"}
    for rec in records:
        sides = (rec.current, rec.previous)
        assert all(s.frames for s in sides)
        if rec.family == "A":
            by_role = {s.role.split()[0]: s for s in sides}
            assert set(by_role) == {"worker", "snapshotter"}
            assert set(by_role["snapshotter"].mutexes) == {"pool.blocks_mutex_", "block->mutex_"}
            assert by_role["worker"].mutexes == ("pool.free_list_[index].mutex_",)
            assert by_role["worker"].frames[0].function == "get_free_block"
        else:
            writer = next(s for s in sides if s.kind == "write")
            reader = next(s for s in sides if s.kind == "read")
            assert writer.role.startswith("profiler") and writer.mutexes == ("profiling_mutex_",)
            assert writer.frames[0].function == "recordHistory"
            # Not "no lock at all": record_trace can run under block->mutex_.
            assert "profiling_mutex_" not in reader.mutexes
        # The race in one sentence: no lock is held on both sides.
        assert not set(rec.current.mutexes) & set(rec.previous.mutexes)


def test_stored_runs_cover_every_atomic_field(sources):
    fields = set()
    for path in RUNS:
        fields |= {classify(r, sources).field for r in parse_tsan(path.read_text()).data_races}
    assert fields == set(ATOMIC_FIELDS)


@pytest.mark.parametrize("path", RUNS, ids=lambda p: p.name)
def test_at_most_one_report_per_profiling_field(path, sources):
    """TSAN's suppress_equal_addresses: one address, at most one report per run."""
    from collections import Counter

    per_field = Counter(r.field for r in (classify(x, sources) for x in parse_tsan(path.read_text()).data_races)
                        if r.family == "B")
    assert per_field and max(per_field.values()) == 1


def test_truncated_report_is_kept_and_flagged():
    log = parse_tsan((DATA / "truncated.txt").read_text())
    assert log.truncated and log.warnings_reported is None
    assert [r.complete for r in log.reports] == [True, True, False]
    last = log.reports[-1]
    assert last.current is not None and last.previous is not None
    assert last.previous.frames == () and not last.previous.stack_restored
    assert len(log.data_races) == 2  # the cut-off one is not offered for classification


def test_mixed_report_kinds_and_unrestored_stack(sources):
    log = parse_tsan((RELEASE_DATA / "mixed.txt").read_text())
    assert [r.kind for r in log.reports] == ["data race", "lock-order-inversion"]
    assert log.warnings_reported == 2 and not log.truncated
    (race,) = log.data_races
    rec = classify(race, sources)
    assert rec.field == "context_recorder_" and rec.family == "B"
    assert rec.previous.role.startswith("unknown") and rec.previous.mutexes == ("profiling_mutex_",)
    assert rec.current.role.startswith("worker")
    # A race with an unrestored stack does not count towards a complete run.
    assert not rec.complete


def test_parse_rejects_bytes():
    with pytest.raises(TypeError, match="str"):
        parse_tsan(b"WARNING")


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=0, max_value=30000))
def test_any_prefix_parses_without_error(cut):
    text = RUNS[0].read_text()
    full = sum(r.complete for r in parse_tsan(text).reports)
    log = parse_tsan(text[:cut])
    assert sum(r.complete for r in log.reports) <= full
    assert log.truncated == (bool(log.reports) and not log.reports[-1].complete)


def test_group_by_family_orders_families(sources):
    recs = [classify(r, sources) for r in parse_tsan(RUNS[0].read_text()).data_races]
    groups = group_by_family(iter(recs))
    assert list(groups) == sorted(groups)
    assert sum(map(len, groups.values())) == len(recs)


# ---------------------------------------------------------------- overlay


def test_overlay_changes_only_the_four_declarations(torch_install):
    text = torch_install.header.read_text()
    out, changes = remove_atomics(text)
    assert len(out.split("\n")) == len(text.split("\n"))
    expected = {"2.14.1": [46, 1296, 1297, 1298], "2.15.0": [45, 1345, 1346, 1347]}[RELEASE]
    assert [c[0] for c in changes] == expected
    diff = [i for i, (a, b) in enumerate(zip(text.split("\n"), out.split("\n"), strict=True)) if a != b]
    assert [i + 1 for i in diff] == expected
    assert all("PlainAtomic<" in after and "std::atomic" not in after for _, _, after in changes)


@pytest.mark.skipif(shutil.which("sed") is None, reason="needs sed")
def test_sed_command_matches_python(torch_install, tmp_path):
    dst = tmp_path / "o.h"
    subprocess.run(["bash", "-c", sed_command(f'"{torch_install.header}"', str(dst))], check=True)
    assert dst.read_text() == remove_atomics(torch_install.header.read_text())[0]


def test_header_without_the_atomics_is_rejected(torch_install):
    old = torch_install.header.read_text().replace("std::atomic<bool> allocated_", "bool allocated_")
    with pytest.raises(SnapshotCodeMissingError, match="allocated_: 0"):
        remove_atomics(old)


# ---------------------------------------------------------------- lock order


def test_lock_order_from_installed_header(torch_install):
    order = parse_lock_order(torch_install.header.read_text())
    assert order.edges == [
        ("instance_mutex_", "pool.blocks_mutex_"),
        ("pool.blocks_mutex_", "pool.free_list_[i].mutex_"),
        ("pool.blocks_mutex_", "block->mutex_"),
        ("pool.free_list_[i].mutex_", "alloc_trace_lock"),
        ("block->mutex_", "alloc_trace_lock"),
    ]
    assert set(order.independent) == {
        "events_mutex_", "external_registrations_mutex_", "profiling_mutex_"
    }
    # 2.15.0's Note adds one sentence the drawing does not hold.
    innermost = {"2.14.1": {}, "2.15.0": {"stats_.allocations_mutex_": "nothing is taken while holding it."}}
    assert order.innermost == innermost[RELEASE]
    svg = to_svg(order, {"profiling_mutex_": "#ffcc88"})
    # One graphviz node per lock the Note names, one drawn edge per nesting; the invisible edges
    # that place the groups below are not drawn.
    assert svg.count('class="node"') == 8 + len(order.innermost) and 'fill="#ffcc88"' in svg
    assert svg.count('class="edge"') == len(order.edges)
    assert ("innermost (" in svg) == bool(order.innermost)
    assert svg == to_svg(order, {"profiling_mutex_": "#ffcc88"}), "graphviz lays the same graph out the same way"
    found = to_svg(order, found=[("profiling_mutex_", "alloc_trace_lock")])
    assert found.count('class="edge"') == len(order.edges) + 1
    assert "<title>profiling_mutex_&#45;&gt;alloc_trace_lock</title>" in found


# ---------------------------------------------------------------- header structure


def test_declared_mutexes_finds_every_mutex_member_of_the_installed_header(torch_install):
    # The page owns which mutexes these are; here: none is missed or counted twice.
    text = torch_install.header.read_text()
    members = [ln for ln in text.splitlines() if re.search(r"std::(?:shared_|recursive_)?mutex \w+;", ln)]
    found = declared_mutexes(text)
    assert sum(len(names) for names in found.values()) == len(members) >= 8


def test_context_accesses_in_the_installed_header(torch_install):
    text = torch_install.header.read_text()
    acc = member_accesses(text, "block->context_when_allocated_", "(block->mutex_);")
    table = [(a.line, a.kind, a.function, a.locked) for a in acc]
    # The same ten accesses in both releases; 2.15.0's lines moved.
    lines = {"2.14.1": [359, 366, 367, 373, 416, 425, 447, 835, 836, 1155],
             "2.15.0": [362, 369, 370, 376, 419, 428, 450, 878, 879, 1204]}[RELEASE]
    assert table == [(no, *rest) for no, rest in zip(lines, [
        ("write", "allocate", True), ("read", "allocate", True),
        ("read", "allocate", False),  # "} else if (... ||" closes the locked block first
        ("write", "allocate", True), ("write", "allocate", False),
        ("read", "allocate", False), ("read", "free", False),
        ("read", "maybe_cache_block", True), ("write", "maybe_cache_block", True),
        ("read", "getSegments", True),
    ], strict=True)]
    publish = {"2.14.1": 417, "2.15.0": 420}[RELEASE]
    assert find_line(text, "add_allocated_block(block, pool);", 400) == publish  # right after the write


def test_what_record_history_gates(torch_install):
    text = torch_install.header.read_text()
    gates = {enclosing_function(text, no)[1]: no for no in find_lines(text, "record_history_.load(")}
    expected = {
        "2.14.1": {"allocate": 355, "maybe_cache_block": 820, "record_trace": 1086,
                   "isHistoryEnabled": 1126, "recordExternalRegister": 1188},
        "2.15.0": {"allocate": 358, "maybe_cache_block": 863, "record_trace": 1135,
                   "isHistoryEnabled": 1175, "recordExternalRegister": 1237},
    }[RELEASE]
    assert gates == expected
    assert gated_region(text, gates["allocate"]) == (gates["allocate"], gates["allocate"] + 19)
    assert gated_region(text, gates["maybe_cache_block"]) == (gates["maybe_cache_block"],
                                                              gates["maybe_cache_block"] + 17)
    # Negated early returns gate the rest of their function.
    trace = gates["record_trace"]
    assert gated_region(text, trace) == (trace + 3, {"2.14.1": 1101, "2.15.0": 1150}[RELEASE])
    reg = gates["recordExternalRegister"]
    assert gated_region(text, reg) == (reg + 3, reg + 22)
    with pytest.raises(ValueError, match="does not open an if block"):
        gated_region(text, gates["isHistoryEnabled"])


def test_record_stream_dispatch_table(torch_install):
    # 2.15.0 registers an MPS kernel too.
    extra = {"2.14.1": {}, "2.15.0": {"MPS": "record_stream_mps"}}[RELEASE]
    assert native_dispatch(torch_install, "record_stream") == {
        "CUDA": "record_stream_cuda", "XPU": "record_stream_xpu", **extra}
    # A multi-key line and a following entry are parsed too.
    assert native_dispatch(torch_install, "isposinf")["SparseCsrMeta"] == "isposinf_sparse_csr"
    with pytest.raises(ValueError, match="no '- func: record_streams\\(' entry"):
        native_dispatch(torch_install, "record_streams")


def test_dispatch_table_without_torchgen(tmp_path):
    with pytest.raises(TorchHeadersNotFoundError, match="torchgen is not installed"):
        native_dispatch(TorchInstall(tmp_path / "torch", "2.14.1"), "record_stream")


def test_old_record_event_name_only_in_a_comment(torch_install):
    assert headers_mentioning(torch_install, "THCCachingHostAllocator_recordEvent") == [
        "ATen/cuda/CachingHostAllocator.h"]


def test_header_helpers_reject_bad_input():
    with pytest.raises(ValueError, match="outside a 1-line file"):
        enclosing_function("x", 5)
    with pytest.raises(ValueError, match="non-empty"):
        member_accesses("x", "x", "")
    with pytest.raises(ValueError, match="outside any struct"):
        declared_mutexes("std::mutex m_;")


# ---------------------------------------------------------------- errors


def _fake_torch(root: Path, header: str) -> Path:
    (root / "include" / "ATen" / "core").mkdir(parents=True)
    (root / "include" / "ATen" / "core" / "CachingHostAllocator.h").write_text(header)
    (root / "lib").mkdir()
    (root / "lib" / "libc10.so").write_bytes(b"")
    (root / "version.py").write_text("__version__ = '2.9.0'\n")
    return root


def test_missing_gxx_names_the_package(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(CompilerNotFoundError, match=r"apt-get install g\+\+"):
        B.find_compiler()


def test_gxx_without_tsan(tmp_path):
    # A g++ whose link step fails the way a g++ without libtsan does.
    fake = tmp_path / "bin" / "g++"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "g++ (Fake) 12.2.0"; exit 0; fi\n'
        'echo "/usr/bin/ld: cannot find -ltsan: No such file or directory" >&2\n'
        "exit 1\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(TsanUnsupportedError, match="libtsan2") as exc:
        B.check_tsan(str(fake), cache=tmp_path / "cache")
    assert "cannot find -ltsan" in str(exc.value)


def test_header_without_snapshot_code(tmp_path):
    root = _fake_torch(tmp_path / "torch", "struct HostBlock { bool allocated_; };\n")
    spec = B.BuildSpec("shipped", find_torch(root))
    with pytest.raises(SnapshotCodeMissingError, match=r"#182407.*pip install torch==2\.15\.0"):
        # Fails on the header check, before any compiler is needed.
        B.build(spec, "/nonexistent/g++", "g++ 0", cache=tmp_path / "cache")


def test_torch_without_headers(tmp_path):
    (tmp_path / "lib").mkdir()
    with pytest.raises(TorchHeadersNotFoundError, match="ships no C\\+\\+ headers"):
        find_torch(tmp_path)


def test_bad_variant():
    with pytest.raises(ValueError, match="variant must be one of"):
        B.BuildSpec("unpatched", find_torch())


# ---------------------------------------------------------------- python API


def test_python_api_signature_and_keys():
    info = inspect_python_api()
    assert info.has_param("record_pinned_host_memory") and info.has_param("record_cuda")
    assert info.param_default("record_pinned_host_memory") is False
    assert info.documented_keys == HOST_KEYS


def test_snapshot_runs_without_a_gpu():
    snap = take_snapshot()
    assert all(isinstance(snap[k], list) for k in HOST_KEYS)


def test_host_history_needs_a_driver():
    import torch

    attempt = try_record_host_history()
    if torch.cuda.is_available():
        assert attempt.ok
    else:
        assert not attempt.ok and attempt.error_type == "RuntimeError" and "driver" in attempt.error


# ---------------------------------------------------------------- torch libraries


def test_cuda_library_instantiates_the_template_with_cuda_streams(torch_install):
    names = instantiated_types(torch_install, "libtorch_cuda.so")
    assert names and all(n.startswith("N2at24CachingHostAllocatorImplIN3c104cuda10CUDAStream") for n in names)
    if shutil.which("c++filt"):
        assert demangle_type(names[0]).startswith("at::CachingHostAllocatorImpl<c10::cuda::CUDAStream,")
    assert instantiated_types(torch_install, "no-such-library.so") == []


# ---------------------------------------------------------------- TSAN runtime flags


def test_flag_listing_of_gcc12_libtsan():
    flags = parse_flag_help((DATA / "tsan_help.txt").read_text())
    assert len(flags) > 100
    for name in ("suppress_equal_stacks", "suppress_equal_addresses", "report_atomic_races"):
        assert flags[name].value == "true"
    assert "same address" in flags["suppress_equal_addresses"].description
    assert flags["exitcode"].value == "66"


def test_flag_listing_missing():
    with pytest.raises(ValueError, match="help=1"):
        parse_flag_help("harness: workers=2")


# ---------------------------------------------------------------- runner arguments


def test_runner_rejects_bad_bounds():
    from explainers.allocator.runner import reproduce, run_build

    with pytest.raises(ValueError, match="max_attempts"):
        reproduce(max_attempts=0)
    with pytest.raises(ValueError, match="iterations"):
        run_build(None, 0, 1.0, {})
    with pytest.raises(ValueError, match="max_seconds"):
        run_build(None, 10, 600.0, {})


def test_reader_script_is_the_runner_commands(torch_install):
    from explainers.allocator.runner import reader_script, run_command

    script = reader_script(torch_install, 123, 2.0)
    for variant in B.VARIANTS:
        spec = B.BuildSpec(variant, torch_install)
        assert spec.script() in script
        assert run_command(123, 2.0, spec.binary) in script


def _stored_run(name: str, sources):
    from explainers.allocator.runner import Run

    text = (RELEASE_DATA / name).read_text() if name else ""
    log = parse_tsan(text)
    records = [classify(r, sources) for r in log.data_races]
    return Run(f"./{name or 'shipped'}", 66 if records else 0, {}, text, 0.1, log, records)


@pytest.mark.parametrize("max_attempts, expected_runs", [(8, 3), (2, 2)])
def test_rounds_repeat_the_other_build_until_every_field_has_raced(monkeypatch, sources, max_attempts,
                                                                   expected_runs):
    """Each release's atomics_removed_run1.txt is a real run that found both families but no
    race on `context_recorder_` (as a loaded CI machine once did): the runner must go on to a
    run that has every field, within its bound, and stop there; the shipped build runs in
    every round."""
    from types import SimpleNamespace

    from explainers.allocator import runner

    queue = ["atomics_removed_run1.txt", "atomics_removed_run1.txt", "atomics_removed_run2.txt",
             "atomics_removed_run3.txt"]
    monkeypatch.setattr(runner, "find_compiler", lambda path=None: "g++")
    monkeypatch.setattr(runner, "check_tsan", lambda gxx, cache: "g++ (test)")
    monkeypatch.setattr(runner, "build", lambda spec, gxx, version, cache: SimpleNamespace(spec=spec))
    monkeypatch.setattr(runner, "runtime_flags", lambda b: {})
    monkeypatch.setattr(runner, "run_build", lambda b, it, secs, src: _stored_run(
        "" if b.spec.variant == "shipped" else queue.pop(0), sources))
    repro = runner.reproduce(max_attempts=max_attempts)
    assert len(repro.no_atomics.runs) == expected_runs and repro.max_attempts == max_attempts
    assert len(repro.shipped.runs) == max_attempts
    assert all(r.records == [] for r in repro.shipped.runs)
    missed = set() if max_attempts == 8 else {"context_recorder_"}
    assert repro.no_atomics.final.complete_fields == set(ATOMIC_FIELDS) - missed
    assert {"A", "B"} <= repro.no_atomics.final.families


# ---------------------------------------------------------------- releases side by side


def test_header_facts_of_the_installed_torch(torch_install):
    from explainers.allocator.compare import REGIONS, header_facts

    facts = header_facts()
    assert release_of(facts["version"]) == RELEASE
    assert facts["lines"] == len(torch_install.header.read_text().splitlines())
    # for_each_bucket is new in 2.15.0; every other region is in both releases.
    missing = {"2.14.1": {"for_each_bucket", "add_stats"}, "2.15.0": set()}[RELEASE]
    assert set(REGIONS) == set(facts["regions"])
    assert {name for name, region in facts["regions"].items() if region is None} == missing
    text = torch_install.header.read_text().splitlines()
    for region in filter(None, facts["regions"].values()):
        assert region["text"].splitlines() == text[region["start"] - 1:region["end"]]
    sites = facts["allocations_mutex_sites"]
    assert [s["function"] for s in sites] == {
        "2.14.1": [], "2.15.0": ["getStats", "resetAccumulatedStats", "resetPeakStats", "add_allocated_block",
                                 "destroy_block"]}[RELEASE]
    assert all(s["nested"] == [] for s in sites)
    assert facts["text"] == torch_install.header.read_text()
    assert facts["pragma_lines"] == {"2.14.1": ['C10_DIAGNOSTIC_PUSH_AND_IGNORED_IF_DEFINED("-Wunused-parameter")',
                                                "C10_DIAGNOSTIC_POP()"], "2.15.0": []}[RELEASE]
    assert len(facts["atomic_declarations"]) == len(ATOMIC_FIELDS)
    assert ["maybeGatherContext", "if (record_context_.load(std::memory_order_acquire) < level) {"] in (
        facts["atomic_uses"])


def test_lock_sites_see_a_nested_lock():
    from explainers.allocator.compare import lock_sites

    code = ("struct S {\n  void f() {\n    std::lock_guard<std::mutex> g(a_);\n"
            "    std::lock_guard<std::mutex> h(b_);\n    record_trace(x);\n  }\n};")
    assert lock_sites(code, "g(a_);") == [{"line": 3, "function": "f", "nested": [4, 5]}]


def test_region_helpers_reject_what_is_not_there():
    from explainers.allocator.compare import region_lines, side_by_side

    with pytest.raises(ValueError, match="does not occur"):
        region_lines("int x;", ("struct HostBlockPool {", None))
    with pytest.raises(ValueError, match="at least one release"):
        side_by_side({}, "stats")


def test_a_comment_excerpt_is_not_highlighted_as_cpp():
    from explainers.allocator.compare import side_by_side

    note = {"start": 1, "end": 1, "text": " * it holds that pool's mutex together with default_pool_'s."}
    code = {"start": 1, "end": 1, "text": "  std::mutex m_;"}
    assert "```text\n" in side_by_side({RELEASE: {"regions": {"r": note}}}, "r", language="cpp")
    assert "```cpp\n" in side_by_side({RELEASE: {"regions": {"r": code}}}, "r", language="cpp")
    assert "```text\n" in side_by_side({RELEASE: {"regions": {"r": code}}}, "r")  # the default


def _other_releases():
    return [r for r in SUPPORTED if r != RELEASE]


@pytest.mark.skipif(not all(env_python(r).exists() for r in _other_releases()),
                    reason="another supported release's environment is not provisioned here")
def test_facts_of_every_release_and_what_changed_between_them():
    from explainers.allocator.compare import facts_by_release

    facts = facts_by_release()
    assert list(facts) == list(SUPPORTED)
    old, new = facts["2.14.1"], facts["2.15.0"]
    # What the page's TSAN part rests on is the same in both releases.
    assert old["atomic_declarations"] == new["atomic_declarations"]
    assert old["atomic_uses"] == new["atomic_uses"]
    assert old["lock_order"]["edges"] == new["lock_order"]["edges"]
    # What changed: a mutex for the allocation counters, innermost in the Note.
    assert old["mutexes"]["HostStatsStaged"] == ["timing_mutex_"]
    assert new["mutexes"]["HostStatsStaged"] == ["timing_mutex_", "allocations_mutex_"]
    assert old["lock_order"]["innermost"] == {}
    assert list(new["lock_order"]["innermost"]) == ["stats_.allocations_mutex_"]
    assert "active_bucket_stats" in old["regions"]["stats"]["text"]
    assert "active_bucket_stats" in new["regions"]["pool"]["text"]
    assert old["regions"]["for_each_bucket"] is None and new["regions"]["for_each_bucket"] is not None
    assert "pool_from_block" in old["regions"]["process_available"]["text"]
    assert "pool_from_block(" not in new["regions"]["process_available"]["text"].replace(
        "skip pool_from_block()", "")


def test_outside_regions_finds_a_change_no_region_covers():
    from explainers.allocator.compare import REGIONS, changed_lines, outside_regions

    old = "struct S {\n  // f\n  void f() {\n    a();\n  }\n  int x;\n};"
    new = "struct S {\n  // f, changed\n  void f() {\n    b();\n  }\n  long x;\n};"
    removed, added = changed_lines(old, new)
    assert (removed, added) == ([2, 4, 6], [2, 4, 6])
    REGIONS["test_f"] = ("void f() {", None)
    REGIONS["test_absent"] = ("void g() {", None)
    try:
        assert outside_regions(new, added, ["test_f"]) == [6]  # the heading comment belongs to f
        assert outside_regions(new, added, ["test_f", "test_absent"]) == [6]  # absent: skipped
    finally:
        del REGIONS["test_f"], REGIONS["test_absent"]
    with pytest.raises(ValueError, match="never_defined"):
        outside_regions(new, added, ["never_defined"])


@pytest.mark.skipif(not all(env_python(r).exists() for r in _other_releases()),
                    reason="another supported release's environment is not provisioned here")
def test_every_change_between_the_releases_is_in_a_region_the_page_shows():
    from explainers.allocator.compare import (
        REGIONS,
        changed_lines,
        facts_by_release,
        outside_regions,
    )

    facts = facts_by_release()
    old, new = facts["2.14.1"], facts["2.15.0"]
    removed, added = changed_lines(old["text"], new["text"])
    assert removed and added
    everything = list(REGIONS)
    assert outside_regions(old["text"], removed, everything) == []
    assert outside_regions(new["text"], added, everything) == []
    # Without the statistics regions, their changes are found outside.
    stats = {"stats", "stats_note", "pool", "get_free_block", "getStats", "resetAccumulatedStats",
             "resetPeakStats", "add_stats", "for_each_bucket", "add_allocated_block", "destroy_block"}
    assert outside_regions(new["text"], added, [r for r in everything if r not in stats])


def test_a_release_not_provisioned_here_is_none(monkeypatch, tmp_path):
    from explainers.allocator import compare

    monkeypatch.setenv("TORCH_EXPLAINERS_CACHE", str(tmp_path))
    facts = compare.facts_by_release()
    assert list(facts) == list(SUPPORTED)
    assert {r for r, f in facts.items() if f is None} == set(_other_releases())
    assert release_of(facts[RELEASE]["version"]) == RELEASE
    shown = compare.side_by_side(facts, "stats")
    assert all(f"**{r}**: not built here" in shown for r in _other_releases())
