"""Eager against torch.compile (inductor on CPU builds C++: the compiling tests are slow)."""

import logging

import pytest

from explainers.compile_divergence import (
    ISSUES,
    ISSUES_STATE_AS_OF,
    STEP_NAMES,
    SeedRun,
    emulate_precision_casts_comment,
    inductor_config_comment,
    issue_163449,
    issue_163449_inputs,
    issue_163449_settings,
    issue_163449_steps,
    issue_runs_table,
    measure_per_op_rounding,
    run_issue_163449,
    silence_cuda_home_warning,
    summarize_issue_runs,
    t10_rest_max,
    welford_statements,
)


def test_issue_table_lists_the_three_fuzzer_reports():
    assert set(ISSUES) == {163449, 163457, 163420}
    assert all(info["title"].startswith("[Fuzzer][Eager/Compile Divergence]")
               for info in ISSUES.values())
    # states as read on GitHub, dated
    assert {info["status"] for info in ISSUES.values()} == {"closed"}
    assert ISSUES_STATE_AS_OF.split()[-1].isdigit()
    assert "emulate_precision_casts = True" in ISSUES[163449]["what"]
    assert "of the three" in ISSUES[163449]["what"] and "five" not in ISSUES[163449]["what"]


def test_filter_drops_only_the_cuda_home_message():
    silence_cuda_home_warning()
    silence_cuda_home_warning()  # idempotent
    log = logging.getLogger("torch.utils.cpp_extension")
    assert len([f for f in log.filters if type(f).__name__ == "_DropNoCudaRuntime"]) == 1
    rec = log.makeRecord(
        log.name,
        logging.WARNING,
        __file__,
        1,
        "No CUDA runtime is found, using CUDA_HOME='%s'",
        ("/x",),
        None,
    )
    assert not log.filter(rec)
    assert log.filter(
        log.makeRecord(log.name, logging.WARNING, __file__, 1, "something else", (), None)
    )


def test_config_comment_is_read_from_the_installed_torch():
    import inspect

    import torch._inductor.config as cfg

    text, line = emulate_precision_casts_comment()
    lines = inspect.getsource(cfg).splitlines()
    assert lines[line - 1].lstrip().startswith("#")
    assert "downcast-upcast" in text and "#" not in text
    saved, saved_line = inductor_config_comment("emulate_precision_casts_on_saved_tensors")
    assert saved_line != line and "saved for backward" in saved
    with pytest.raises(LookupError, match="no top-level setting nope"):
        inductor_config_comment("nope")


def test_welford_statements_dedup_and_filter():
    code = ("    Welford<float> a = Welford<float>();\n    x = 1;\n"
            "    Welford<float> a = Welford<float>();\n"
            "    a = welford_combine(a, welford_vec_reduce_all(v));\n")
    assert welford_statements([code, code]) == (
        "Welford<float> a = Welford<float>();",
        "a = welford_combine(a, welford_vec_reduce_all(v));")
    assert welford_statements(["int x = 0;"]) == ()


def test_steps_graph_is_the_issue_graph():
    import torch

    for seed in range(3):
        args = issue_163449_inputs(seed, requires_grad=False)
        steps = issue_163449_steps(*args)
        assert len(steps) == len(STEP_NAMES)
        assert torch.equal(steps[-1], issue_163449(*args))
        assert steps[1].dtype == torch.bfloat16 and steps[2].dtype == torch.float32


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
                   0.0, True, True)
    off = SeedRun(1, 1120.0, 2.0, 2.1, 1.8, 2.2, 2.0, 1.8, ("t7 = t6.var()", "pow(t4, t7)", "t11"),
                  2.0, True, 0.2, 1.0, False, False)
    s = summarize_issue_runs([same, off])
    assert s.compiled_equal == 1 and s.step_differs["pow(t4, t7)"] == 1
    assert s.output_differs_only_with_inner_pow and s.t7_max_ulps == 2.0
    assert s.no_emulation_equal_t4_fp32 == 2 and s.t4_range == (1120.0, 1144.0)
    assert s.no_emulation_closer == 1  # 2.15 is closer to 2.1 than eager's 2.0; 1.8 to 2.2 is not
    # pow ulps only over seeds whose pow differs; one seed breaks "pow follows t7"
    assert s.pow_ulps_range == (1.0, 1.0) and not s.pow_follows_compiled_t7
    assert s.eager_var_fp64_rounded == 1


def test_issue_runs_table():
    runs = [SeedRun(s, 1144.0, 2.0 + s, 2.0 + s, 0.123456789, 2.1, 2.0, 2.15, (), 0.0, True, 0.3,
                    0.0, True, True) for s in (3, 4)]
    assert issue_runs_table(runs).splitlines() == [
        "| seed | eager | compiled, as filed | compiled, no emulation | fp64 |",
        "|---|---|---|---|---|",
        "| 3 | 5 | 5 | 0.123457 | 2.1 |",
        "| 4 | 6 | 6 | 0.123457 | 2.1 |",
    ]


def test_t10_rest_max_is_the_largest_over_seeds():
    import torch

    runs = [SeedRun(s, 1144.0, 2.0, 2.0, 2.2, 2.1, 2.0, 2.2, (), 0.0, True, 0.3, 0.0, True, True)
            for s in range(4)]
    rests = []
    for s in range(4):
        a = issue_163449_inputs(s, requires_grad=False)
        rests.append((a[3].var(dim=0).var() + torch.relu(a[4])).item())
    assert t10_rest_max(runs) == max(rests) and t10_rest_max(runs[:1]) == rests[0]
    assert 0 < t10_rest_max(runs) < 2  # var of var of U(0, 1) draws, plus relu of one U(0, 1)


@pytest.mark.slow
def test_per_op_rounding():
    import torch._inductor.config as cfg

    before = cfg.emulate_precision_casts
    r = measure_per_op_rounding(size=256)
    assert cfg.emulate_precision_casts == before
    assert r.eager_is_two_roundings and r.addcmul_is_one_rounding
    assert r.compiled_is_one_rounding and r.emulated_is_eager
    assert r.elements_differ > 0 and r.eager_closer == 0
    assert len(r.kernel_body_emulated) > len(r.kernel_body)


@pytest.mark.slow
def test_issue_163449_on_cpu():
    import torch._inductor.config as cfg

    before = cfg.emulate_precision_casts
    code = []
    s = summarize_issue_runs(run_issue_163449(range(8), steps_code=code))
    assert cfg.emulate_precision_casts == before
    # eager var is fp64 rounded once; the compiled var is an fp32 Welford reduction
    assert s.eager_var_fp64_rounded == 8
    assert any(st.startswith("Welford<") for st in welford_statements(code))
    assert s.pow_follows_compiled_t7
    # as filed (emulation on): no divergence of the issue's size, t3 and t4 equal
    assert s.compiled_max_rel < 1e-3
    assert s.step_differs["t3 = addmm"] == s.step_differs["t4 = t3.norm()"] == 0
    assert s.steps_final_matches and s.output_differs_only_with_inner_pow
    # emulation off: a gap of percents, and compile is eager with an fp32 norm
    assert s.no_emulation_rel[1] > 0.05 and s.no_emulation_vs_t4_fp32 < 1e-3
    assert s.t4_ulp_effect[0] > 0.05
