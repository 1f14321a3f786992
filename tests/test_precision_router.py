"""Tests of explainers.precision.router and .topk_router: the two MoE router formulations compared."""

import pytest
import torch

from explainers.precision.router import (
    _ulp,
    compare_routers,
    dense_weights,
    find_tied_row,
    k1_router_gradients,
    renorm_backward_forms,
    router_table,
    topk_tie_note,
)
from explainers.precision.topk_router import full_softmax_then_renorm, topk_softmax

ROUTERS = [topk_softmax, full_softmax_then_renorm]


@pytest.mark.parametrize("fn", ROUTERS)
def test_k_larger_than_experts(fn):
    with pytest.raises(ValueError, match=r"k=9 is larger than the number of experts \(8"):
        fn(torch.zeros(2, 8), 9)


@pytest.mark.parametrize("fn", ROUTERS)
@pytest.mark.parametrize("k", [0, -1])
def test_k_not_positive(fn, k):
    with pytest.raises(ValueError, match="k must be >= 1"):
        fn(torch.zeros(2, 8), k)


@pytest.mark.parametrize("fn", ROUTERS)
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_integer_logits(fn, dtype):
    with pytest.raises(TypeError, match="floating-point"):
        fn(torch.zeros(2, 8, dtype=dtype), 2)


@pytest.mark.parametrize("fn", ROUTERS)
def test_non_int_k_and_non_tensor(fn):
    with pytest.raises(TypeError, match="k must be an int"):
        fn(torch.zeros(2, 8), 2.0)
    with pytest.raises(TypeError, match="k must be an int"):
        fn(torch.zeros(2, 8), True)
    with pytest.raises(TypeError, match="torch.Tensor"):
        fn([[0.0, 1.0]], 1)


def test_equal_in_fp64_values_and_grads():
    g = torch.Generator().manual_seed(1)
    base = torch.randn(32, 16, generator=g, dtype=torch.float64)
    up = torch.randn(32, 4, generator=g, dtype=torch.float64)
    grads, outs = [], []
    for fn in ROUTERS:
        x = base.clone().requires_grad_(True)
        idx, w = fn(x, 4)
        (dense_weights(idx, w, 16)[:, :4] * up).sum().backward()
        outs.append(dense_weights(idx, w, 16))
        grads.append(x.grad)
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=1e-15)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-12, atol=1e-15)


def test_weights_sum_to_one_and_k_matches():
    x = torch.randn(5, 10)
    for fn in ROUTERS:
        idx, w = fn(x, 3)
        assert idx.shape == w.shape == (5, 3)
        torch.testing.assert_close(w.sum(-1), torch.ones(5))


def test_bf16_ties_make_sets_differ():
    # bf16 has 8 significant bits, so logits collide at the k-th place.
    c = compare_routers(torch.bfloat16, tokens=4096, n_experts=256, k=8)
    assert 0 < c.rows_different_set < c.rows_tied_at_k
    # every differing token is a tie, in the logits and in the probabilities
    assert c.rows_different_without_tie == 0 and c.rows_tied_logits_not_probs == 0
    row = find_tied_row(torch.bfloat16, tokens=4096, n_experts=256, k=8)
    assert row is not None
    assert row["logit_rank_k"] == row["logit_rank_k_plus_1"]


def test_no_ties_in_fp32():
    c = compare_routers(torch.float32, tokens=1024, n_experts=64, k=4)
    assert c.rows_tied_at_k == c.rows_tied_probs_at_k == c.rows_different_set == 0


def test_ulp_is_the_spacing_at_the_value_not_at_one():
    x = torch.tensor([1.0, 0.1, 0.5, 0.75], dtype=torch.float64)
    assert _ulp(x, torch.float32).tolist() == [2**-23, 2**-27, 2**-24, 2**-24]
    assert _ulp(x, torch.bfloat16).tolist() == [2**-7, 2**-11, 2**-8, 2**-8]


def test_max_ulps_matches_numpy_spacing():
    # Independent of explainers.precision.router._ulp: numpy's spacing at each fp32 reference weight.
    np = pytest.importorskip("numpy")
    c = compare_routers(torch.float32, tokens=64, n_experts=16, k=4)
    logits = torch.randn(64, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 2.0
    idx, w = topk_softmax(logits.float(), 4)
    ridx, rw = topk_softmax(logits.float().double(), 4)
    assert torch.equal(idx.sort(-1).values, ridx.sort(-1).values)
    ref = torch.zeros(64, 16, dtype=torch.float64).scatter(-1, ridx, rw).gather(-1, idx)
    ulps = np.abs(w.double().numpy() - ref.numpy()) / np.spacing(ref.numpy().astype(np.float32))
    assert c.max_ulps_a == pytest.approx(float(ulps.max()), rel=1e-12)


def test_renorm_backward_is_the_division_backward_order():
    gen = torch.Generator().manual_seed(3)
    w, g = torch.rand(2048, 1, generator=gen) + 0.01, torch.randn(2048, 1, generator=gen)
    forms = renorm_backward_forms(w, g)
    assert forms == {"g / w - g * ((w / w) / w)": True, "g * (1/w - w/w**2)": False}


def test_compare_routers_counts_the_union_of_a_and_b32_misses():
    c = compare_routers(torch.bfloat16, tokens=256, n_experts=64, k=4)
    assert max(c.rows_a_not_reference, c.rows_b32_not_reference) <= c.rows_a_or_b32_not_reference
    assert c.rows_a_or_b32_not_reference <= c.rows_a_not_reference + c.rows_b32_not_reference


def test_a_is_within_half_an_ulp_in_bf16():
    c = compare_routers(torch.bfloat16, tokens=1024, n_experts=64, k=4)
    assert c.max_ulps_a < 0.501 < 1 < c.max_ulps_b


def test_fp32_agrees_and_b_rounds_more_in_bf16():
    c32 = compare_routers(torch.float32, tokens=512, n_experts=64, k=4)
    assert c32.rows_different_set == 0 and c32.max_abs_a_minus_b < 1e-6
    cb16 = compare_routers(torch.bfloat16, tokens=512, n_experts=64, k=4)
    assert cb16.max_err_b > cb16.max_err_a


def test_softmax_dtype_casts_once_at_the_end():
    g = torch.Generator().manual_seed(3)
    logits = (torch.randn(64, 32, generator=g) * 2).bfloat16()
    idx, w = full_softmax_then_renorm(logits, 4, softmax_dtype=torch.float32)
    p, i32 = torch.topk(torch.softmax(logits.float(), dim=-1), 4, dim=-1)
    assert w.dtype == torch.bfloat16 and torch.equal(idx, i32)
    assert torch.equal(w, (p / p.sum(-1, keepdim=True)).bfloat16())
    with pytest.raises(TypeError, match="softmax_dtype must be a floating-point dtype"):
        full_softmax_then_renorm(logits, 4, softmax_dtype="float32")


def test_b32_rounds_like_a_in_bf16():
    c = compare_routers(torch.bfloat16, tokens=1024, n_experts=64, k=4)
    assert c.max_ulps_b32 < 0.501 < 1 < c.max_ulps_b
    assert c.rows_a_not_reference == c.rows_b32_not_reference == 0
    assert c.rows_b_not_reference == c.rows_different_set
    assert c.max_sum_drift_b32 <= c.max_sum_drift_a < c.max_sum_drift_b


def test_k1_gradient():
    g = k1_router_gradients()
    assert torch.equal(g["topk_softmax"], torch.zeros_like(g["topk_softmax"]))
    assert g["full_softmax_then_renorm"].abs().max() < 1e-6
    assert g["softmax_top1_no_renorm"].abs().max() > 1e-3


def test_router_table_rows_and_fp32_has_no_b_prime():
    cmps = [compare_routers(dt, tokens=256, n_experts=32, k=4) for dt in (torch.float32, torch.bfloat16)]
    lines = router_table(cmps).splitlines()
    assert lines[0] == ("| dtype | router | tokens whose expert set differs from the reference's "
                        "| max error, ulps | max abs(sum - 1) |")
    assert [line.split(" | ")[:2] for line in lines[2:]] == [
        ["| float32", "A"], ["| float32", "B"], ["| bfloat16", "A"], ["| bfloat16", "B"], ["| bfloat16", "B′"]]
    bf16 = cmps[1]
    assert lines[-1] == (f"| bfloat16 | B′ | {bf16.rows_b32_not_reference} | {bf16.max_ulps_b32:.2g} "
                         f"| {bf16.max_sum_drift_b32:.2g} |")


def test_topk_tie_note():
    assert "tied elements are not guaranteed" in topk_tie_note()
    assert topk_tie_note(".. note:: a b. .. note:: If tied,\n   any order.  Args: x") == "If tied, any order."
    with pytest.raises(ValueError, match="no note about ties"):
        topk_tie_note("no notes here")
