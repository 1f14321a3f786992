"""The walkthrough, per-rank views, uneven from_local and their rendering (simulated)."""

import ast
import json
import logging

import numpy as np
import pytest
import torch
from torch.distributed.tensor import DTensor, Replicate, Shard

from explainers.mesh import uneven
from explainers.mesh.draw import PAD, rank_listing, render_step, stacked_locals
from explainers.mesh.simulated import simulated_mesh
from explainers.mesh.steps import Step, merge_steps, per_rank_int, rank_local, snapshot
from explainers.mesh.uneven import from_local, redistribute, redistribute_log
from explainers.mesh.walkthrough import FRAGMENT, uneven_safe_line, walkthrough

R, S = Replicate(), Shard


@pytest.fixture(scope="module")
def steps15():
    with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
        return walkthrough(mesh, 15)


@pytest.fixture(scope="module")
def steps16():
    with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
        return walkthrough(mesh, 16)


def _r(a, b):
    return list(range(a, b))


# The per-rank table for 15 elements, worked out by hand with torch.chunk sizes.
EXPECTED_15 = {
    "start": [_r(0, 15)] * 8,
    "shard K": [_r(0, 8), _r(8, 15)] * 4,
    "shard N": [_r(0, 4), _r(8, 12), _r(4, 8), _r(12, 15)] * 2,
    "shard M": [[0, 1], [8, 9], [4, 5], [12, 13], [2, 3], [10, 11], [6, 7], [14]],
    "unshard N": [[0, 1, 4, 5], [8, 9, 12, 13]] * 2 + [[2, 3, 6, 7], [10, 11, 14]] * 2,
    "unshard K": [[0, 1, 4, 5, 8, 9, 12, 13]] * 4 + [[2, 3, 6, 7, 10, 11, 14]] * 4,
}


class _AsWritten(ast.NodeTransformer):
    """Undo uneven_safe_line's two replacements, independently of how it makes them."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == "from_local":
            func = ast.Attribute(ast.Name("DTensor", ast.Load()), "from_local", ast.Load())
            return ast.Call(func, node.args, node.keywords)
        if isinstance(node.func, ast.Name) and node.func.id == "redistribute":
            x, placements, log = node.args
            assert isinstance(log, ast.Name) and log.id == "log" and not node.keywords
            func = ast.Attribute(x, "redistribute", ast.Load())
            return ast.Call(func, [], [ast.keyword("placements", placements)])
        return node


@pytest.mark.parametrize("line", [code for _, _, code in FRAGMENT])
def test_uneven_safe_line_replaces_the_two_calls_and_nothing_else(line):
    runs = uneven_safe_line(line)
    assert "DTensor" not in runs
    undone = ast.fix_missing_locations(_AsWritten().visit(ast.parse(runs)))
    assert ast.dump(undone) == ast.dump(ast.parse(line))


def test_uneven_safe_line_refuses_other_redistribute_calls():
    with pytest.raises(ValueError, match=r"expected .redistribute\(placements=...\), got x.redistribute\(mesh, \[R\]\)"):
        uneven_safe_line("y = x.redistribute(mesh, [R])")


def test_walkthrough_15_matches_the_hand_made_table(steps15):
    for step in steps15[:6]:
        assert [s.values for s in step.ranks] == EXPECTED_15[step.label], step.label
    assert steps15[6].locals() == steps15[4].locals()
    assert steps15[7].locals() == steps15[3].locals()


def test_walkthrough_labels_code_and_collectives(steps15):
    assert [(s.phase, s.label) for s in steps15] == [(p, label) for p, label, _ in FRAGMENT]
    # Which collectives each step ran is the page's claim (docs/mesh.md asserts it); here:
    # one Redistribution recorded per step after the start.
    assert steps15[0].redistribution is None
    assert all(s.redistribution is not None for s in steps15[1:])
    assert [s.submesh for s in steps15] == [
        ("m", "n", "k"), ("m", "n"), ("m",), None, ("n",), ("n", "k"), ("n",), None,
    ]  # fmt: skip
    assert "arange_nd(15)" in steps15[0].code


def test_walkthrough_16_is_even(steps16):
    for step in steps16:
        assert len({s.shape for s in step.ranks}) == 1, step.label
    assert steps16[-1].locals()[7] == [14, 15]
    assert "arange_nd(16)" in steps16[0].code


def test_coordinates_and_placements(steps15):
    for s in steps15[1].ranks:
        m, n, k = s.coordinate
        assert s.rank == 4 * m + 2 * n + k
        assert s.placements == ("R", "R")
    assert all(s.placements is None for s in steps15[3].ranks)


def test_render_pads_uneven_with_marker(steps15, steps16):
    text = render_step(steps15[3])
    assert text.count(PAD) == 1  # only rank 7 is short
    assert text.splitlines()[-1].split() == ["10", "11", "14", PAD]
    arr16 = stacked_locals(steps16[3])
    assert arr16.dtype == np.int64 and arr16.shape == (2, 2, 2, 2)
    assert stacked_locals(steps15[3]).dtype == object
    assert render_step(steps16[3]).splitlines() == [
        " 0   1     4   5",
        " 8   9    12  13",
        "",
        " 2   3     6   7",
        "10  11    14  15",
    ]


def test_listing(steps15):
    lines = rank_listing(steps15[3]).splitlines()
    assert len(lines) == 8
    assert lines[7].startswith("rank 7  (m=1, n=1, k=1)  local tensor")
    assert lines[7].endswith("(1,)   14")


def test_step_json_round_trip_and_merge(steps15):
    back = [Step.from_dict(json.loads(json.dumps(s.to_dict()))) for s in steps15]
    assert back == steps15
    # Split into per-rank runs, as real processes would produce, and merge back.
    runs = [
        [Step(**{**s.__dict__, "ranks": tuple(r for r in s.ranks if r.rank == k)}) for s in back]
        for k in range(8)
    ]
    assert merge_steps(runs) == steps15
    with pytest.raises(ValueError, match="holds 1 of 8 ranks"):
        stacked_locals(runs[0][0])
    with pytest.raises(ValueError, match="same rank appears in two runs"):
        merge_steps([runs[0], runs[0]])
    with pytest.raises(ValueError, match="disagree on the sequence"):
        merge_steps([runs[0], runs[1][:-1]])
    with pytest.raises(ValueError, match="at least one run"):
        merge_steps([])


def test_from_local_uneven_two_sharded_mesh_dims():
    with simulated_mesh((2, 2), ("a", "b")) as mesh:
        # torch.chunk(arange(7), 2) -> 4 + 3; each chunked again over b.
        local = rank_local([[0, 1], [2, 3], [4, 5], [6]])
        x = from_local(local, mesh, [S(0), S(0)])
        assert x.shape == (7,) and x.stride() == (1,)
        assert x.full_tensor()._local_tensors[3].tolist() == list(range(7))
        naive = DTensor.from_local(local, mesh, [S(0), S(0)])
        assert per_rank_int(naive.shape[0])[3] == 4  # 1 x 4: the assumption from_local avoids


def test_from_local_2d_local_and_replicate():
    with simulated_mesh((2,), ("k",)) as mesh:
        x = from_local(rank_local([[[1, 2], [3, 4]], [[5, 6]]]), mesh, [S(0)])
        assert x.shape == (3, 2) and x.stride() == (2, 1)
        y = from_local(torch.ones(3), mesh)
        assert y.placements == (R,) and y.shape == (3,)


def test_per_rank_sizes_patch_is_scoped():
    import torch.distributed.tensor._redistribute as rd

    original = rd._are_we_tracing
    with uneven._per_rank_sizes():
        assert rd._are_we_tracing is original  # no LocalTensorMode: nothing patched
    with simulated_mesh((2,), ("k",)):
        with uneven._per_rank_sizes():
            assert rd._are_we_tracing() is True
        assert rd._are_we_tracing is original
        with pytest.raises(KeyError), uneven._per_rank_sizes():
            raise KeyError
        assert rd._are_we_tracing is original


def test_redistribute_log_restores_logger():
    logger = logging.getLogger("torch.distributed.tensor._redistribute")
    before = (logger.propagate, list(logger.handlers))
    with redistribute_log() as messages:
        logger.warning("x")
    assert messages == ["x"]
    assert (logger.propagate, list(logger.handlers)) == before


def test_snapshot_of_plain_tensor():
    with simulated_mesh((2,), ("k",)) as mesh:
        snap = snapshot(rank_local([[1], [2, 3]]), mesh, "mine")
    assert snap.submesh is None and snap.label == "mine"
    assert render_step(snap).splitlines() == ["1  ·", "2  3"]


# -- bad input --------------------------------------------------------------------------


def test_bad_inputs_name_the_problem():
    with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
        t = torch.arange(4)
        with pytest.raises(ValueError, match=r"S\(1\) on mesh dim 'm' shards tensor dim 1"):
            from_local(t, mesh, [S(1), R, R])
        x = from_local(t, mesh)
        with pytest.raises(ValueError, match=r"S\(2\) on mesh dim 'k' shards tensor dim 2"):
            redistribute(x, [R, R, S(2)])
        with pytest.raises(ValueError, match="2 placements given for a 3-D mesh"):
            from_local(t, mesh, [R, R])
        with pytest.raises(TypeError, match=r"write Shard\(0\), not Shard"):
            from_local(t, mesh, [Shard, R, R])
        with pytest.raises(TypeError, match="expects a torch.Tensor"):
            from_local([1, 2], mesh)
        with pytest.raises(TypeError, match="expects a DTensor"):
            redistribute(t, [R, R, R])
        # torch's own error for a mesh dim name that does not exist is clear:
        with pytest.raises(KeyError, match=r"Invalid mesh_dim_names \('x',\).*\['m', 'n', 'k'\]"):
            mesh["x"]
        with pytest.raises(ValueError, match="positive int"):
            walkthrough(mesh, 0)
    with (
        simulated_mesh((2, 2, 2), ("a", "b", "c")) as mesh,
        pytest.raises(ValueError, match=r'named \("m", "n", "k"\)'),
    ):
        walkthrough(mesh, 15)
    with pytest.raises(TypeError, match="per_rank_int expects"):
        per_rank_int(1.5, world_size=2)
