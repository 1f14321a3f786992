"""Tests of explainers.precision.compile_rounding (Inductor on CPU builds C++: the compiling test is slow)."""

import pytest

from explainers.precision.compile_rounding import (
    emulate_precision_casts_comment,
    inductor_config_comment,
    measure_per_op_rounding,
    welford_statements,
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
