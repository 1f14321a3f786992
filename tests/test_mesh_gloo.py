"""The simulated walkthrough and probes against 8 real gloo processes (torchrun), per rank."""

import pytest
import torch
from torch.distributed.tensor import Shard, distribute_tensor
from torch.distributed.tensor.placement_types import _StridedShard

from explainers.mesh.gathers import gather_probes
from explainers.mesh.launch import (
    launch_verbatim,
    launch_walkthrough,
    real_run,
    real_verbatim,
    save_record,
    save_verbatim,
)
from explainers.mesh.rooted import broadcast_probe
from explainers.mesh.simulated import simulated_mesh
from explainers.mesh.steps import snapshot
from explainers.mesh.walkthrough import walkthrough
from explainers.releases import release_of

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("numel", [15, 16])
def test_simulated_matches_real_gloo(numel):
    with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
        simulated = walkthrough(mesh, numel)
        probes = gather_probes(mesh)
        broadcast = broadcast_probe(mesh)
    real = launch_walkthrough(numel, timeout=420)  # ~30 s idle; minutes on a loaded 2-core box
    assert [s.label for s in real.steps] == [s.label for s in simulated]
    for sim, got in zip(simulated, real.steps, strict=True):
        # Every field of every rank: coordinate, placements, local shape, values;
        # and the collectives that the step's redistribute ran.
        assert got.ranks == sim.ranks, f"step {sim.phase}/{sim.label} differs"
        assert got.redistribution == sim.redistribution, f"step {sim.label}: collectives differ"
        assert got.submesh == sim.submesh
    # The table really holds 8 distinct ranks and uneven data where expected.
    last = real.steps[-1].locals()
    assert sorted(last) == list(range(8))
    assert last[7] == ([14] if numel == 15 else [14, 15])
    # The multi-dim redistributes: counts, warnings and every rank's values, including
    # the wrong ones of the merged uneven all-gather, are those of the simulation.
    assert real.probes == probes
    assert [p.correct for p in real.probes] == [True, True, True, False]
    # distribute_tensor's broadcast from group rank 1: every rank holds the tensor of the
    # rank with coordinate 1 on the broadcast dims.  The simulation of 2.15.0 agrees on
    # every mesh; that of 2.14.1 only on k, whose groups are consecutive ranks.
    assert real.broadcast["k"] == {0: 1, 1: 1, 2: 3, 3: 3, 4: 5, 5: 5, 6: 7, 7: 7}
    assert real.broadcast["m,n,k"] == dict.fromkeys(range(8), 7)
    if release_of(torch.__version__) == "2.14.1":
        assert [d for d in real.broadcast if real.broadcast[d] == broadcast[d]] == ["k"]
    else:
        assert real.broadcast == broadcast
    # FSDP2 over TP: the rows each rank holds are those of [_StridedShard(0, 2), Shard(0)].
    weight = torch.arange(16).unsqueeze(1).expand(16, 2).contiguous()
    with simulated_mesh((4, 2), ("dp", "tp")) as mesh42:
        strided = snapshot(
            distribute_tensor(
                weight, mesh42, [_StridedShard(0, split_factor=2), Shard(0)], src_data_rank=None
            ),
            mesh42,
        )
    assert real.fsdp.placements == ("_S(0, sf=2)", "S(0)")
    assert real.fsdp.rows == {s.rank: [row[0] for row in s.values] for s in strided.ranks}
    # Keep the verified run for the page (see explainers.mesh.launch.real_run).
    save_record(real, numel)
    assert real_run(numel).steps == real.steps
    assert real_run(numel).probes == real.probes and real_run(numel).fsdp == real.fsdp
    assert real_run(numel).broadcast == real.broadcast


def test_fragment_as_written_fails_in_unshard_n_on_real_gloo():
    run = launch_verbatim(15, timeout=420)
    assert run.returncode != 0
    # Rank 7 (one element after "shard M") dies inside the all-gather of "unshard N",
    # aborted by gloo's size check; no Python exception, so no result file.
    assert run.last_line(7) == "unshard N" and 7 not in run.ended
    assert run.exitcodes.get(7) == -6
    assert any("Received data size doesn't match expected size" in line for line in run.gloo)
    assert any("terminate called after throwing an instance of 'gloo::EnforceNotMet'" in line
               for line in run.gloo)
    # Plain ints on real ranks: nobody meets the simulation's unhashable SymInt, and
    # every rank got past "shard N" (line 2).
    assert all(e.get("error") != "TypeError" for e in run.ended.values())
    assert all(max(lines) >= 3 for lines in run.started.values())
    save_verbatim(run, 15)
    assert real_verbatim(15).started == run.started


def test_fsdp2_over_tp_on_gloo_holds_the_nested_layout_for_uneven_rows():
    from explainers.fsdp_tp_real import launch_fsdp_tp
    from explainers.strided_model import distribute_model, nested_model

    real = launch_fsdp_tp([9, 16], timeout=420)
    assert real[9] == nested_model(9) != distribute_model(9)
    assert real[16] == nested_model(16) == distribute_model(16)
    assert sorted(v for rows in real[9].values() for v in rows) == list(range(9)), "every row on one rank"
