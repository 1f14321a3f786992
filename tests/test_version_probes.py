"""The Versions page's probes: each runs under each supported release and says what that release does."""

from __future__ import annotations

import pytest

from explainers.releases import SUPPORTED, run_under
from explainers.version_numerics import fires, readers


@pytest.mark.parametrize("release", SUPPORTED)
def test_unsorted_ranks_keep_their_order_and_each_collective_reports(release):
    got = run_under(release, "explainers.version_probes:unsorted_ranks")
    assert got["ranks"] == [1, 0]
    for name in ("all_reduce", "broadcast", "broadcast_group_src", "all_gather"):
        assert isinstance(got[name], dict | list) or got[name].startswith("AssertionError"), got


@pytest.mark.parametrize("release", SUPPORTED)
def test_numerics_values_find_the_lowering_reader_and_strict_fires_there(release):
    got = run_under(release, "explainers.version_numerics:numerics_values")
    assert any(r["file"] == "torch/_inductor/lowering.py" for r in got["readers"])
    assert any(w.startswith("torch/_inductor/lowering.py:") for w in got["fires"]["strict"])
    assert got["fires"]["default"] == []
    assert "aten.sum.dim_IntList" in got["reductions"]["targets"]


def test_readers_record_comparisons_and_plain_reads(tmp_path):
    pkg = tmp_path / "torch"
    pkg.mkdir()
    (pkg / "a.py").write_text("def f(c):\n    if c.numerics in ('x', 'y'):\n        return c.numerics\n")
    found = readers(pkg)
    assert [(r["line"], r["op"], r["value"]) for r in found] == [(2, "In", ["x", "y"]), (3, None, None)]
    assert fires(found[0], "x") and not fires(found[0], "z")
    assert not fires(found[1], "x")


@pytest.mark.parametrize("release", SUPPORTED)
def test_preconditions_report_triton_and_the_zero_bias_pass(release):
    got = run_under(release, "explainers.version_numerics:preconditions")
    assert got["triton_required"] and got["triton_required"][0].startswith("triton")
    assert isinstance(got["reduction_ordering"], bool) and isinstance(got["zero_bias_pass"], bool)


@pytest.mark.parametrize("release", SUPPORTED)
def test_uniform_dtype_sweep_runs_every_case(release):
    from explainers.version_fsdp2 import CASES

    got = run_under(release, "explainers.version_fsdp2:uniform_dtype_sweep")
    assert set(got) == set(CASES)
    assert all(v.startswith(("ok: ", "AssertionError: ")) for v in got.values()), got
    assert got["reduce_dtype=None, both Linears used first"] == "ok: float32, float32, float32, float32"


def test_outcome_sorts_the_set_in_a_message():
    from explainers.version_fsdp2 import _outcome

    assert _outcome(AssertionError("got {b, a}\nmore"), []) == "AssertionError: got {a, b}"
    assert _outcome(None, ["float32"]) == "ok: float32"


def test_sweep_covers_each_reduce_dtype_both_ways():
    from explainers.version_fsdp2 import CASES

    assert len(CASES) == 10
    assert {rd for rd, _ in CASES.values()} == {None, "bfloat16", "float16", "float32", "float64"}
    assert {skip for _, skip in CASES.values()} == {False, True}


@pytest.mark.parametrize("release", SUPPORTED)
def test_numerics_patch_override_starts_on(release):
    got = run_under(release, "explainers.version_probes:numerics_patch_override")
    assert set(got) == {"before", "patched", "assigned"}
    # TORCHINDUCTOR_EMULATE_PRECISION_CASTS=1 turns the flag on on both releases
    assert got["before"] is True
    # 2.15.0's strict implication overrides both; on 2.14.1 both turn it off
    assert got["patched"] is got["assigned"] is (release == "2.15.0")
