"""Tests of explainers.precision.compile_flag (reads the installed torch; no compile)."""

import ast

import pytest

from explainers.precision.compile_flag import (
    _qualnames,
    config_reads,
    op_calls,
    watch_saved_tensor_casts,
)


def test_qualnames_give_the_innermost_definition_its_full_name():
    tree = ast.parse("class A:\n    def f(self):\n        def g():\n            return 1\n")
    assert _qualnames(tree) == [(1, 4, "A"), (2, 4, "A.f"), (3, 4, "A.f.g")]


def test_config_reads_counts_attribute_reads_only():
    reads = config_reads("emulate_precision_casts")
    texts = [text for _, _, _, text in reads]
    assert all("config.emulate_precision_casts" in text for text in texts)
    # the settings's own definition in config.py is an assignment, not a read of config.<name>
    assert not any(path == "_inductor/config.py" for path, _, _, _ in reads)
    # a longer setting's name is another attribute
    assert not any("emulate_precision_casts_on_saved_tensors" in text for text in texts)


def test_config_reads_name_the_cpp_convert_cache_guards():
    where = {(path, fn) for path, _, fn, _ in config_reads("emulate_precision_casts")}
    assert {("_inductor/codegen/cpp.py", "CppOverrides.to_dtype"),
            ("_inductor/codegen/cpp.py", "CppVecOverrides.to_dtype")} <= where


def test_op_calls_of_an_op_nobody_emits():
    assert op_calls("no_such_op_anywhere") == []


def test_watch_restores_on_error():
    from torch._inductor import lowering
    from torch._inductor.codegen.cpp import CppOverrides, CppVecOverrides

    before = (lowering._has_saved_lowp_output_use, CppOverrides.__dict__["to_dtype"],
              CppVecOverrides.__dict__["to_dtype"])
    with pytest.raises(KeyError), watch_saved_tensor_casts():
        raise KeyError("boom")
    assert before == (lowering._has_saved_lowp_output_use, CppOverrides.__dict__["to_dtype"],
                      CppVecOverrides.__dict__["to_dtype"])
