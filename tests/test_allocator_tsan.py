"""Slow: compile the harness with g++ -fsanitize=thread and check both verdicts."""

from __future__ import annotations

import pytest

from explainers.allocator.errors import CompilerNotFoundError
from explainers.allocator.overlay import ATOMIC_FIELDS
from explainers.allocator.runner import reproduce

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def repro():
    # Default cache: shared with the docs build, so CI compiles once.
    return reproduce()


def test_shipped_header_is_clean_in_every_round(repro):
    assert len(repro.shipped.runs) == repro.max_attempts >= len(repro.no_atomics.runs)
    for run in repro.shipped.runs:
        assert run.returncode == 0
        assert run.log.reports == [] and "ThreadSanitizer" not in run.tsan_text
        # The workload really ran: allocations, snapshots and toggles all happened.
        assert run.stats["snapshots"] > 0 and run.stats["toggles"] > 0 and run.stats["max_segments"] > 0


def test_atomics_removed_races_on_every_field(repro):
    run = repro.no_atomics.final
    assert run.returncode == 66  # TSAN's exit code when it reported something
    assert {"A", "B"} <= run.families
    assert run.complete_fields == set(ATOMIC_FIELDS)


def test_external_registration_is_listed_by_get_segments(repro):
    for run in repro.shipped.runs + repro.no_atomics.runs:
        assert run.stats["external_listed"] == 1


def test_runtime_flags_are_read_from_the_binary(repro):
    assert repro.flags["suppress_equal_addresses"].value == "true"
    assert repro.flags["history_size"].value == "7"  # set by the runner's TSAN_OPTIONS


def test_second_call_is_served_from_cache(repro):
    again = reproduce(max_attempts=1)  # one round is enough to see the cache
    assert again.shipped.build.cached and again.no_atomics.build.cached
    assert again.shipped.build.folder == repro.shipped.build.folder


def test_reproduce_without_gxx(tmp_path):
    with pytest.raises(CompilerNotFoundError):
        reproduce(path=str(tmp_path))


@pytest.fixture(scope="module")
def edge():
    from explainers.allocator.edgecases import edge_cases

    return edge_cases()


def test_free_with_a_failing_event_record_through_a_storage(edge):
    """2.14.1 lets the backend's exception out of free() inside ~StorageImpl: std::terminate.
    2.15.0 catches both failures, warns once, and retires both blocks."""
    from explainers.releases import release_of

    got = edge["free"]
    if release_of(edge["version"]) == "2.14.1":
        assert got["stdout_lines"] == [] and got["terminated"]["signal"] == "SIGABRT"
        assert got["terminated"]["message"] == [
            "terminate called after throwing an instance of 'std::runtime_error'", "what():  event record failed"]
    else:
        assert got["terminated"] is None and got["stdout_lines"] == ["freed 1", "freed 2"]
        assert got["warnings"] == ["Failed to record an event while freeing a pinned host block; "
                                   "the block will not be reused: event record failed"]
        assert got["block_reused"] is False


def test_empty_cache_with_an_event_queued_in_a_private_pool(edge):
    from explainers.releases import release_of

    got = edge["empty_cache"]
    assert len(got["warnings"]) == 1 and "the current stream is not capturing" in got["warnings"][0]
    if release_of(edge["version"]) == "2.14.1":
        assert (got["empty_cache"], got["code"], got["segments_after"]) == (
            "threw std::system_error", "resource_deadlock_would_occur", 1)
    else:
        assert (got["empty_cache"], got["exception"], got["segments_after"]) == ("returned", "", 0)
    assert edge["unlock_order"]["unlocked"] == ["first", "second"]


def test_edge_cases_program_is_cached(edge):
    from explainers.allocator.edgecases import edge_cases

    assert edge_cases()["compiled"] is False


def test_statistics_race_only_in_2_14_1():
    from explainers.allocator.statsrace import stats_races
    from explainers.releases import release_of

    got = stats_races(100)
    for mode, threads in (("pools", ["default pool", "private pool"]), ("getstats", ["getStats", "private pool"])):
        run = got[mode]
        assert run["done"]
        if release_of(got["version"]) == "2.14.1":
            assert run["returncode"] == 66 and run["races"] and run["reports"] == len(run["races"])
            assert all(r["threads"] == threads and r["fields"] for r in run["races"])
        else:
            assert (run["returncode"], run["reports"], run["races"]) == (0, 0, [])
    if release_of(got["version"]) == "2.14.1":
        fields = {f for r in got["pools"]["races"] for f in r["fields"]}
        assert {"allocations", "allocated_bytes", "active_bucket_stats"} <= fields


def test_cuda_backend_record_stream_can_throw():
    from explainers.allocator.edgecases import CUDA_EVENT_RECORD_NAME, cuda_record_failure

    got = cuda_record_failure()
    assert CUDA_EVENT_RECORD_NAME in got["record_stream_calls"]
    assert "cudaEventRecordWithFlags" in got["event_record_calls"]
    assert got["check_failure"]["returncode"] == -6
    assert got["check_failure"]["message"][0] == (
        "terminate called after throwing an instance of 'c10::AcceleratorError'")


def test_cuda_backend_free_override():
    from explainers.allocator.edgecases import CUDA_FREE_MESSAGES, cuda_free_override

    got = cuda_free_override()
    assert any(c.startswith("at::CachingHostAllocatorImpl<c10::cuda::CUDAStream,") and c.endswith("::free(void*)")
               for c in got["free_calls"])
    assert got["messages"] == list(CUDA_FREE_MESSAGES)
    assert "std::atomic<bool> m_pinned_free_catch_all{false};" in [t for _, t in got["config"]]


def test_shipped_header_is_clean_on_the_other_release():
    from explainers.releases import ReleaseNotProvisioned, run_under

    try:
        got = run_under("2.14.1", "explainers.allocator.runner:shipped_runs", 2)
    except ReleaseNotProvisioned:
        pytest.skip("torch 2.14.1 has no environment here")
    assert got["version"].startswith("2.14.1") and len(got["runs"]) == 2
    assert all(r["returncode"] == 0 and r["reports"] == 0 and r["stats"]["snapshots"] > 0 for r in got["runs"])


def test_shipped_runs_rejects_a_bad_count():
    from explainers.allocator.runner import shipped_runs

    with pytest.raises(ValueError):
        shipped_runs(0)
