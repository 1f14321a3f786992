"""Slow: compile the harness with g++ -fsanitize=thread and check both verdicts."""

from __future__ import annotations

import pytest

from explainers.allocator.errors import CompilerNotFoundError
from explainers.allocator.runner import reproduce

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def repro():
    # Default cache: shared with the docs build, so CI compiles once.
    return reproduce()


def test_shipped_header_is_clean(repro):
    run = repro.shipped.final
    assert run.returncode == 0
    assert run.log.reports == [] and "ThreadSanitizer" not in run.tsan_text
    # The workload really ran: allocations, snapshots and toggles all happened.
    assert run.stats["snapshots"] > 0 and run.stats["toggles"] > 0 and run.stats["max_segments"] > 0


def test_reverted_header_shows_both_families(repro):
    run = repro.reverted.final
    assert run.returncode == 66  # TSAN's exit code when it reported something
    assert {"A", "B"} <= run.families
    assert len(repro.reverted.runs) <= 4


def test_second_call_is_served_from_cache(repro):
    again = reproduce()
    assert again.shipped.build.cached and again.reverted.build.cached
    assert again.shipped.build.folder == repro.shipped.build.folder


def test_reproduce_without_gxx(tmp_path):
    with pytest.raises(CompilerNotFoundError):
        reproduce(path=str(tmp_path))
