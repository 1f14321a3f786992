"""FSDP2 on one gloo rank with a custom divide factor: the division is applied twice in some cases."""

from __future__ import annotations

import pytest
import torch

from explainers.precision.fsdp_decision import gradient_divide_factors
from explainers.precision.fsdp_single_rank import single_rank_divisions
from explainers.releases import release_of, run_under

CASES = [["fp32", None, False], ["fp32, force_sum", None, True], ["fp16", "torch.float16", False]]


def test_rejects_a_nonpositive_factor():
    with pytest.raises(ValueError, match="factor must be a positive number"):
        single_rank_divisions(CASES, factor=-1.0)


def test_custom_factor_is_applied_once_or_twice_as_the_helper_predicts():
    # A fresh process: the function forms and destroys its own one-rank world.
    got = run_under(release_of(torch.__version__), "explainers.precision.fsdp_single_rank:single_rank_divisions",
                    CASES, factor=4.0)
    assert got["fp32"] == 4.0
    assert got["fp32, force_sum"] == 16.0
    assert got["fp16"] == pytest.approx(16.0, rel=1e-3)
    # The extra division is the helper's own pre/post factors, applied around the single-rank copy.
    for name, dtype, force in CASES:
        f = gradient_divide_factors(torch.float16 if dtype else torch.float32, 1, factor=4.0,
                                    force_sum_reduction_for_comms=force)
        assert got[name] == pytest.approx(4.0 * (f["pre"] or 1) * (f["post"] or 1), rel=1e-3)
