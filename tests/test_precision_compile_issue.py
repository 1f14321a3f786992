"""Tests of explainers.precision.compile_issue, pytorch/pytorch#163449 on CPU (the compiling test is slow)."""

import pytest

from explainers.precision.compile_issue import (
    STEP_NAMES,
    SeedRun,
    issue_163449,
    issue_163449_inputs,
    issue_163449_settings,
    issue_163449_steps,
    issue_runs_table,
    run_issue_163449,
    summarize_issue_runs,
    t10_rest_max,
)
from explainers.precision.compile_rounding import welford_statements


def test_steps_graph_is_the_issue_graph():
    import torch

    for seed in range(3):
        args = issue_163449_inputs(seed, requires_grad=False)
        steps = issue_163449_steps(*args)
        assert len(steps) == len(STEP_NAMES)
        assert torch.equal(steps[-1], issue_163449(*args))
        assert steps[1].dtype == torch.bfloat16 and steps[2].dtype == torch.float32
        assert steps[2].shape == (4, 5, 2) and steps[3].shape == ()  # t6, then t7


def test_settings_are_restored():
    import torch._dynamo.config as dcfg
    import torch._inductor.config as icfg

    before = (dcfg.capture_scalar_outputs, dcfg.capture_dynamic_output_shape_ops,
              icfg.emulate_precision_casts)
    with pytest.raises(KeyError), issue_163449_settings(False):
        assert dcfg.capture_scalar_outputs and not icfg.emulate_precision_casts
        raise KeyError("boom")
    assert (dcfg.capture_scalar_outputs, dcfg.capture_dynamic_output_shape_ops,
            icfg.emulate_precision_casts) == before


def test_summary_needs_runs():
    with pytest.raises(ValueError, match="at least one seed"):
        summarize_issue_runs([])
    with pytest.raises(ValueError, match="at least one seed"):
        run_issue_163449([])


def test_summary_counts():
    same = SeedRun(0, 1144.0, 2.0, 2.0, 2.15, 2.1, 2.0, 2.15, ("t7 = t6.var()",), 1.0, True, 0.3,
                   0.0, True, True, True)
    off = SeedRun(1, 1120.0, 2.0, 2.1, 1.8, 2.2, 2.0, 1.8, ("t7 = t6.var()", "pow(t4, t7)", "t11"),
                  2.0, True, 0.2, 1.0, False, False, False)
    s = summarize_issue_runs([same, off])
    assert s.compiled_equal == 1 and s.step_differs["pow(t4, t7)"] == 1
    assert s.output_differs_only_with_inner_pow and s.t7_max_ulps == 2.0
    assert s.no_emulation_equal_t4_fp32 == 2 and s.t4_range == (1120.0, 1144.0)
    assert s.no_emulation_closer == 1  # 2.15 is closer to 2.1 than eager's 2.0; 1.8 to 2.2 is not
    # pow ulps only over seeds whose pow differs; one seed breaks "pow follows t7"
    assert s.pow_ulps_range == (1.0, 1.0) and not s.pow_follows_compiled_t7
    assert s.eager_var_fp64_rounded == 1 and s.t6_fp32_welford == 1
    # the first differing intermediate, in graph order, of each seed
    assert s.first_differs["t7 = t6.var()"] == 2 and s.first_differs["pow(t4, t7)"] == 0


def test_issue_runs_table():
    runs = [SeedRun(s, 1144.0, 2.0 + s, 2.0 + s, 0.123456789, 2.1, 2.0, 2.15, (), 0.0, True, 0.3,
                    0.0, True, True, True) for s in (3, 4)]
    assert issue_runs_table(runs).splitlines() == [
        "| seed | eager | compiled, as filed | compiled, no emulation | fp64 |",
        "|---|---|---|---|---|",
        "| 3 | 5 | 5 | 0.123457 | 2.1 |",
        "| 4 | 6 | 6 | 0.123457 | 2.1 |",
    ]


def test_t10_rest_max_is_the_largest_over_seeds():
    import torch

    runs = [SeedRun(s, 1144.0, 2.0, 2.0, 2.2, 2.1, 2.0, 2.2, (), 0.0, True, 0.3, 0.0, True, True, True)
            for s in range(4)]
    rests = []
    for s in range(4):
        a = issue_163449_inputs(s, requires_grad=False)
        rests.append((a[3].var(dim=0).var() + torch.relu(a[4])).item())
    assert t10_rest_max(runs) == max(rests) and t10_rest_max(runs[:1]) == rests[0]
    assert 0 < t10_rest_max(runs) < 2  # var of var of U(0, 1) draws, plus relu of one U(0, 1)


@pytest.mark.slow
def test_issue_163449_on_cpu():
    import torch._inductor.config as cfg

    before = cfg.emulate_precision_casts
    code = []
    s = summarize_issue_runs(run_issue_163449(range(8), steps_code=code))
    assert cfg.emulate_precision_casts == before
    # inputs in [0, 1): eager var is fp64 rounded once; compiled var is an fp32 Welford reduction
    assert s.eager_var_fp64_rounded == 8
    assert any(st.startswith("Welford<") for st in welford_statements(code))
    assert s.pow_follows_compiled_t7
    # as filed (emulation on): no divergence of the issue's size, t3 and t4 equal
    assert s.compiled_max_rel < 1e-3
    assert s.step_differs["t3 = addmm"] == s.step_differs["t4 = t3.norm()"] == 0
    # t6 is where they part, and it is the fp32 Welford recurrence
    assert s.first_differs["t6 = t5.var(dim=0)"] == s.t6_fp32_welford == 8
    assert s.steps_final_matches and s.output_differs_only_with_inner_pow
    # emulation off: a gap of percents, and compile is eager with an fp32 norm
    assert s.no_emulation_rel[1] > 0.05 and s.no_emulation_vs_t4_fp32 < 1e-3
    assert s.t4_ulp_effect[0] > 0.05
