"""The bf16-vs-fp32 all-reduce in a simulated world."""

import pytest
import torch
import torch.distributed as dist

from explainers.precision.collectives import (
    allreduce,
    allreduce_errors,
    allreduce_matches_fold,
    pairwise_sum,
    rank_gradients,
)


def test_allreduce_is_a_sum_and_world_closes():
    grads = {r: torch.full((3,), float(r + 1)) for r in range(4)}
    assert allreduce(grads, torch.float32).tolist() == [10.0, 10.0, 10.0]
    assert not dist.is_initialized()


def test_bf16_comm_rounds_each_hop():
    # 256 + 1 + 1 in bf16: 256 + 1 rounds back to 256 (8 significant bits), twice.
    grads = {0: torch.tensor([256.0]), 1: torch.tensor([1.0]), 2: torch.tensor([1.0])}
    assert allreduce(grads, torch.bfloat16).item() == 256.0
    assert allreduce(grads, torch.float32).item() == 258.0


def test_pairwise_order_rounds_differently():
    grads = {r: torch.tensor([256.0 if r == 0 else 1.0]) for r in range(4)}
    assert allreduce(grads, torch.bfloat16).item() == 256.0       # 256 + 1 + 1 + 1, each rounded
    assert pairwise_sum(grads, torch.bfloat16).item() == 258.0    # (256 + 1) + (1 + 1)
    assert pairwise_sum(grads, torch.float32).item() == 259.0
    with pytest.raises(ValueError, match="at least one rank"):
        pairwise_sum({}, torch.float32)


def test_errors_grow_with_world_in_bf16_only():
    small, large = allreduce_errors(2, n=512), allreduce_errors(32, n=512)
    assert large["bf16 comm"] > small["bf16 comm"]
    assert small["bf16, pairwise order"] == small["bf16 comm"]     # two ranks: one addition
    assert large["bf16, pairwise order"] < large["bf16 comm"]
    assert large["fp32 comm"] < 1e-6


def test_bad_inputs():
    with pytest.raises(ValueError, match="world_size"):
        rank_gradients(0)
    with pytest.raises(ValueError, match="keyed 0"):
        allreduce({1: torch.ones(1)}, torch.float32)
    with pytest.raises(ValueError, match="comm_dtype"):
        allreduce({0: torch.ones(1)}, torch.int32)


def test_simulated_allreduce_is_the_left_fold_over_ranks():
    assert allreduce_matches_fold(8, n=512) == {"rank order": True, "reversed order": False}


def test_shared_gradients_correlate_and_default_is_unchanged():
    from explainers.precision.collectives import rank_gradients as rg

    plain = rg(3, n=64, seed=5)
    assert all(torch.equal(plain[r], rg(3, n=64, seed=5, shared=0.0)[r]) for r in range(3))
    g = rg(2, n=8192, seed=1, shared=0.99)
    corr = float(torch.corrcoef(torch.stack([g[0].float(), g[1].float()]))[0, 1])
    assert 0.97 < corr < 0.99
    with pytest.raises(ValueError, match="shared"):
        rg(2, shared=1.0)


def test_correlated_chain_error_outgrows_the_pairwise_order():
    e = allreduce_errors(64, n=1024, shared=0.99)
    assert e["bf16 comm"] > 2 * e["bf16, pairwise order"]


def test_fp32_inexact_counts_over_seeds():
    from explainers.precision.collectives import fp32_inexact_counts

    # Seeds chosen from a sweep: some draws at 2 ranks are exact in fp32, 16 ranks mostly not.
    counts = fp32_inexact_counts([2, 16], seeds=range(20), n=4096)
    assert 0 < counts[2] < counts[16] <= 20


def test_bf16_avg_scale_bias():
    from explainers.precision.collectives import bf16_avg_scale_bias

    for n in (3, 6, 12, 24, 48, 96):
        assert bf16_avg_scale_bias(n)["bias"] == 2.0 ** -9
    for n in (1, 2, 64):
        assert bf16_avg_scale_bias(n) == {"scale": 1.0 / n, "bias": 0.0}
    assert bf16_avg_scale_bias(7)["bias"] < 0
    with pytest.raises(ValueError, match="world_size"):
        bf16_avg_scale_bias(0)


def test_avg_errors_powers_of_two_and_bias():
    from explainers.precision.collectives import avg_errors

    for n in (2, 8):
        e = avg_errors(n, n=256)
        assert len(set(e.values())) == 1, "a power-of-two scalar is exact: the three averages agree"
    e = avg_errors(3, n=4096)
    assert e["pre-multiplied, bf16 1/N"] > e["SUM, then / N"]
    assert e["pre-multiplied, bf16 1/N"] > e["pre-multiplied, exact 1/N"]
    with pytest.raises(ValueError, match="world_size"):
        avg_errors(0)


def test_nccl_wheel_reads_torch_metadata():
    from importlib import metadata

    from explainers.precision.collectives import nccl_wheel

    w = nccl_wheel()
    nccl_reqs = [r for r in metadata.requires("torch") or [] if r.lower().startswith("nvidia-nccl")]
    assert w["requirement"] == (nccl_reqs[0] if nccl_reqs else None)
    if w["requirement"] is not None and w["installed"] is not None:
        assert f"=={w['installed']}" in w["requirement"]
