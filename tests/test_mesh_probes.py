"""The mesh probes in the simulation: the trace, the fragment as written, the gathers, broadcast
and scatter, FSDP2's layout and the observations by release."""

import pytest
import torch
import torch.distributed.tensor._redistribute as rd
from torch.distributed._local_tensor import _c10d as emulation
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

from explainers.mesh.fsdp import FsdpLayout, fsdp_tp_layout
from explainers.mesh.gathers import (
    FULL_TENSOR_CASES,
    GatherProbe,
    full_tensor_probe,
    gather_probes,
    merge_probes,
    padded_gather,
    planned_mesh_dims,
    uneven_gather_sweep,
)
from explainers.mesh.rooted import broadcast_probe, replay_broadcast, scatter_probe
from explainers.mesh.simulated import make_mesh, simulated_mesh, simulated_world
from explainers.mesh.steps import rank_local
from explainers.mesh.trace import replaced_functions, simulation_trace
from explainers.mesh.walkthrough import fragment_code, run_fragment, walkthrough

R, S = Replicate(), Shard


@pytest.fixture(scope="module")
def probes():
    with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
        return gather_probes(mesh)


def test_trace_counts_and_restores():
    before = (emulation._local_functional_all_gather_into_tensor, rd._gen_transform_infos_non_cached)
    with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
        with simulation_trace() as seen:
            steps = walkthrough(mesh, 15)
        assert seen.backend == "fake"
        # Every redistribute of the walkthrough planned without the cache.
        assert seen.cached_plans == 0 and seen.uncached_plans == len(steps) - 1
        # Two unshard all-gathers, plus from_local's size all-gathers.
        assert seen.emulated["_local_functional_all_gather_into_tensor"] >= 2
    assert (emulation._local_functional_all_gather_into_tensor,
            rd._gen_transform_infos_non_cached) == before


def test_trace_records_what_broadcast_and_scatter_received():
    before = (emulation._local_broadcast_, emulation._local_scatter_)
    with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh, simulation_trace() as seen:
        distribute_tensor(rank_local([[r, r] for r in range(8)]), mesh["n"], [R], src_data_rank=1)
        distribute_tensor(torch.arange(4), mesh["k"], [S(0)], src_data_rank=0)
    assert seen.emulated == {"_local_broadcast_": 1, "_local_scatter_": 1}
    assert seen.rooted == [
        {"op": "broadcast", "ranks": [0, 2], "root": 1, "group_offsets": [0, 1, 4, 5]},
        {"op": "scatter", "ranks": [0, 1], "root": 0, "group_offsets": [0, 2, 4, 6],
         "scatter_lists": 1},
    ]
    assert (emulation._local_broadcast_, emulation._local_scatter_) == before


def test_trace_needs_a_simulated_world():
    with pytest.raises(RuntimeError, match="observes a simulated world"), simulation_trace():
        pass


def test_fragment_as_written():
    with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
        steps16 = walkthrough(mesh, 16)
        out = run_fragment(mesh, 16)
        assert {r: t.tolist() for r, t in out._local_tensors.items()} == steps16[-1].locals()
        started = []
        with pytest.raises(TypeError, match="unhashable type: non-nested SymInt"):
            run_fragment(mesh, 15, started.append)
        assert started == [0, 1, 2]  # stops in "shard N"
    assert "arange_nd(15)" in fragment_code(15) and fragment_code(15).count("\n") == 7


def test_fragment_bad_input():
    with (
        simulated_mesh((2, 2), ("a", "b")) as mesh,
        pytest.raises(ValueError, match=r'named \("m", "n", "k"\)'),
    ):
        run_fragment(mesh, 16)
    with pytest.raises(ValueError, match="positive int"):
        fragment_code(0)


def test_probes(probes):
    assert [p.comms for p in probes] == [{"all_gather_into_tensor": n} for n in (3, 1, 3, 1)]
    assert [p.correct for p in probes] == [True, True, True, False]
    assert "flatten mesh dimensions" in probes[0].warnings[0]
    assert "non-ascending order all_gather" in probes[2].warnings[0]
    assert probes[3].ranks[0].values == [0, 1, 2, 3, 4, 5, 6, 0, 7, 8, 9, 0, 10]


def test_probes_survive_json_and_merge(probes):
    import json

    back = [GatherProbe.from_dict(json.loads(json.dumps(p.to_dict()))) for p in probes]
    assert back == probes
    runs = [[GatherProbe(**{**p.__dict__, "ranks": (p.ranks[k],)}) for p in back] for k in range(8)]
    assert merge_probes(runs) == probes
    with pytest.raises(ValueError, match="same rank appears"):
        merge_probes([runs[0], runs[0]])
    odd = [GatherProbe(**{**p.__dict__, "comms": {}}) for p in runs[1]]
    with pytest.raises(ValueError, match="processes disagree"):
        merge_probes([runs[0], odd])
    with pytest.raises(ValueError, match="at least one run"):
        merge_probes([])
    layout = FsdpLayout(("_S(0, sf=2)", "S(0)"), {3: [10, 11]})
    assert FsdpLayout.from_dict(json.loads(json.dumps(layout.to_dict()))) == layout


def test_probes_need_the_mnk_mesh():
    with simulated_mesh((2, 4), ("m", "n")) as mesh, pytest.raises(ValueError, match="2x2x2"):
        gather_probes(mesh)


def test_planned_mesh_dims():
    with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
        x = distribute_tensor(torch.arange(16), mesh, [S(0), S(0), R], src_data_rank=None)
        assert planned_mesh_dims(x, [R, R, R]) == (1, 0)
        with pytest.raises(TypeError, match="expects a DTensor"):
            planned_mesh_dims(torch.arange(2), [R, R, R])



def test_replay_broadcast():
    # The 2.14.1 rule takes group_offset + root - offset; copying in place, a group reads a
    # source that an earlier group already overwrote.  The 2.15.0 rule stays in the group.
    over_n = [{"ranks": [0, 2], "root": 1, "group_offsets": [0, 1, 4, 5]}]
    assert replay_broadcast(over_n, lookup=False) == [1, 1, 1, 1, 5, 5, 5, 5]
    assert replay_broadcast(over_n, lookup=False, in_place=False) == [1, 2, 1, 2, 5, 6, 5, 6]
    assert replay_broadcast(over_n, lookup=True) == [2, 3, 2, 3, 6, 7, 6, 7]
    # A handle that does not start at 0: 2.14.1 subtracts its first rank.
    shifted = [{"ranks": [1, 3], "root": 1, "group_offsets": [0, 1]}]
    assert replay_broadcast(shifted, lookup=False, world=4) == [0, 1, 0, 1]
    assert replay_broadcast(shifted, lookup=True, world=4) == [2, 3, 2, 3]
    assert replay_broadcast([], lookup=True, world=3) == [0, 1, 2]
    with pytest.raises(ValueError, match="not a group rank"):
        replay_broadcast([{"ranks": [0, 4], "root": 2, "group_offsets": [0]}], lookup=True)
    with pytest.raises(ValueError, match="outside 8 ranks"):
        replay_broadcast([{"ranks": [0, 4], "root": 1, "group_offsets": [7]}], lookup=False)


def test_scatter_probe():
    with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
        from_zero = scatter_probe(mesh, 0)
        from_one = scatter_probe(mesh, 1)
        with pytest.raises(ValueError, match="group rank"):
            scatter_probe(mesh, True)
    # Rank (m, n, k) holds chunk m of the tensor of rank (0, n, k).
    assert from_zero == {"held": [[10 * (r % 4) + 2 * (r // 4) + i for i in range(2)]
                                  for r in range(8)], "error": None}
    # Both releases: c10d passes no inputs for a root other than group.rank(), a plain 0.
    assert from_one == {"held": None, "error": "AssertionError in _local_scatter_"}
    with simulated_mesh((2, 4), ("m", "n")) as mesh, pytest.raises(ValueError, match="2x2x2"):
        scatter_probe(mesh, 0)



def test_fsdp_layout_refuses_other_meshes():
    with simulated_world(2), pytest.raises(ValueError, match=r'named \("dp", "tp"\)'):
        fsdp_tp_layout(make_mesh((2,), ("x",)))


def test_replaced_functions_inside_and_after():
    before = replaced_functions()
    with simulated_world(2):
        inside = replaced_functions()
    assert replaced_functions() == before
    assert inside["DeviceMesh._sym_get_coordinate"] == "_LocalDeviceMesh._sym_get_coordinate"
    assert inside["torch.manual_seed"] == "_LocalRandom.torch_manual_seed"
    assert not any(q.startswith("_Local") for q in before.values())


def test_padded_gather():
    assert padded_gather([2, 2, 2, 1, 2, 1, 2, 1], 13) == [0, 1, 2, 3, 4, 5, 6, 0, 7, 8, 9, 0, 10]
    assert padded_gather([1, 0, 1, 0], 2) == [0, 0]
    assert padded_gather([2, 2, 2, 2, 2, 2, 2, 1], 15) == list(range(15))
    with pytest.raises(ValueError, match="add up to 5"):
        padded_gather([2, 2], 5)
    with pytest.raises(ValueError, match="none may exceed"):
        padded_gather([3, 1], 4)
    with pytest.raises(ValueError, match="non-negative"):
        padded_gather([], 0)


def test_uneven_gather_sweep(probes):
    with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
        sweep = uneven_gather_sweep(mesh, [8, 12, 13])
    assert [p.correct for p in sweep] == [True, False, False]
    assert all(p.comms == {"all_gather_into_tensor": 1} for p in sweep)
    # The 13-element point is the fourth gather probe, rank by rank.
    assert [list(h) for h in sweep[2].held] == [r.values for r in probes[3].ranks]
    with simulated_mesh((2, 4), ("m", "n")) as mesh, pytest.raises(ValueError, match="2x2x2"):
        uneven_gather_sweep(mesh, [8])


def test_fsdp_layout_simulated_keeps_dp_zero_rows():
    with simulated_mesh((4, 2), ("dp", "tp")) as mesh:
        layout = fsdp_tp_layout(mesh)
    assert layout.placements == ("_S(0, sf=2)", "S(0)")
    # ProcessGroup.rank() is 0 for every simulated rank: every dp rank keeps dp 0's rows.
    assert layout.rows == {r: [0, 1] if r % 2 == 0 else [8, 9] for r in range(8)}


def _group_rank_1(dims):
    """What real processes hold after a broadcast from group rank 1 along ``dims`` of the
    2x2x2 mesh: the tensor of the rank whose coordinate is 1 on each of those dims."""
    held = {}
    for r in range(8):
        coord = [(r >> 2) & 1, (r >> 1) & 1, r & 1]
        for d in dims:
            coord["mnk".index(d)] = 1
        held[r] = 4 * coord[0] + 2 * coord[1] + coord[2]
    return held


def test_broadcast_probe_by_release():
    from explainers.releases import release_of

    with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
        held = broadcast_probe(mesh)
        from_zero = broadcast_probe(mesh, 0)
        with pytest.raises(ValueError, match="group rank"):
            broadcast_probe(mesh, 2)
    assert list(held) == ["m", "n", "k", "m,n,k"]
    assert held["k"] == _group_rank_1("k")  # consecutive ranks: right on both releases
    assert from_zero["m,n,k"] == dict.fromkeys(range(8), 0)
    if release_of(torch.__version__) == "2.14.1":
        # source = first rank of the group + root - offset, where offset, the first rank of
        # the handle (rank 0's group), is 0: a rank outside the group on m and n.  The loop
        # copies in place, group after group, so over m the group {3, 7} reads rank 4 after
        # rank 4 took rank 1's value: 1, not 4.
        assert held["m"] == {0: 1, 1: 2, 2: 3, 3: 1, 4: 1, 5: 2, 6: 3, 7: 1}
        assert all(held[d][r] != _group_rank_1(d)[r] for d in ("m", "n") for r in range(8))
        assert held["m,n,k"] == dict.fromkeys(range(8), 2)
    else:
        assert all(held[d] == _group_rank_1(d.split(",")) for d in held)
    with simulated_mesh((2, 4), ("m", "n")) as mesh, pytest.raises(ValueError, match="2x2x2"):
        broadcast_probe(mesh)


def test_release_observations_agree_but_for_the_broadcast():
    """Every observation of the page is the same on every supported release, except the
    simulated broadcast from group rank 1, which 2.15.0 fixed; a replay of each release's
    loop, from the calls the emulation received, gives that release's broadcast."""
    from explainers.releases import SUPPORTED, run_under

    obs = {rel: run_under(rel, "explainers.mesh.observations:release_observations") for rel in SUPPORTED}
    assert {rel: o["torch"].split("+")[0] for rel, o in obs.items()} == {r: r for r in SUPPORTED}
    same = [{k: v for k, v in o.items() if k not in ("torch", "broadcast")} for o in obs.values()]
    assert all(s == same[0] for s in same)
    assert same[0]["sweep_right"] == [7, 8, 15, 16]
    assert same[0]["fragment15"] == {
        "line": "shard N", "error": "TypeError: unhashable type: non-nested SymInt"}
    right = {d: [_group_rank_1(d.split(","))[r] for r in range(8)] for d in ("m", "n", "k", "m,n,k")}
    assert obs["2.15.0"]["broadcast"] == right
    assert obs["2.14.1"]["broadcast"]["k"] == right["k"]
    assert obs["2.14.1"]["broadcast"]["m,n,k"] == [2] * 8
    calls = same[0]["broadcast_calls"]
    for rel, lookup in (("2.15.0", True), ("2.14.1", False)):
        assert {m: replay_broadcast(c, lookup=lookup) for m, c in calls.items()} == obs[rel]["broadcast"]
    # Scatter from group rank 1 fails on both: the emulation receives no inputs.
    assert same[0]["scatter"]["1"]["error"] == "AssertionError in _local_scatter_"
    assert [c["scatter_lists"] for c in same[0]["scatter"]["1"]["calls"]] == [0]
    assert set(same[0]["emulated"]) == {
        "_local_functional_all_gather_into_tensor", "_local_broadcast_", "_local_scatter_"}


@pytest.mark.parametrize("numel", [13, 14, 15])
def test_full_tensor_probe_matches_the_merged_gather(numel):
    got = full_tensor_probe(numel)
    assert list(got) == list(FULL_TENSOR_CASES)
    with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
        sizes = [len(v) for v in rank_states_of(mesh, numel)]
    assert got["flattened mesh"]["all_gathers"] == 1
    assert got["flattened mesh"]["rank0"] == padded_gather(sizes, numel)
    assert got["flattened mesh"]["right"] == (padded_gather(sizes, numel) == list(range(numel)))
    for case in FULL_TENSOR_CASES[1:]:
        assert got[case] == {"all_gathers": 3, "rank0": list(range(numel)), "right": True}


def rank_states_of(mesh, numel):
    x = distribute_tensor(torch.arange(numel), mesh, [S(0)] * 3, src_data_rank=None)
    return [x.to_local()._local_tensors[r].tolist() for r in range(8)]


def test_full_tensor_probe_rejects_bad_numel():
    with pytest.raises(ValueError, match="numel"):
        full_tensor_probe(0)
