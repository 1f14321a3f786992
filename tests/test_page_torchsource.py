"""Tests of explainers.page.torchsource: excerpts of the installed torch's files."""


from pathlib import Path

import pytest
import torch

from explainers.page.torchsource import (
    installed_conditionals,
    installed_source,
    open_conditionals,
    quote_installed,
    source_of,
    torch_lines,
    torch_lines_many,
)


def test_installed_source_excerpts():
    assert "acc_type" in installed_source("include/ATen/AccumulateType.h")
    text = quote_installed("include/ATen/native/ReduceOpsUtils.h", "inline ScalarType get_dtype_from_self(")
    assert text.splitlines()[-1].rstrip().endswith("}") and "promote_integers" in text
    py = quote_installed("backends/mkldnn/__init__.py", "fp32_precision = ContextProp(")
    assert len(py.splitlines()) == 4 and '"generic", "all"' in py
    with pytest.raises(FileNotFoundError):
        installed_source("include/not/there.h")


def test_source_of_reads_the_installed_source():
    from torch import _tensor_str

    path, line, text = source_of(_tensor_str._Formatter.format)
    assert path == "_tensor_str.py" and text.startswith("def format(self, value):")
    source = (Path(torch.__file__).parent / path).read_text().splitlines()
    assert source[line - 1].strip() == "def format(self, value):"
    path, line, text = source_of(_tensor_str.get_summarized_data, "if dim == 1:", "if not")
    assert text.splitlines()[0] == "if dim == 1:" and "PRINT_OPTS.edgeitems" in text
    assert source[line - 1].strip() == "if dim == 1:" and "if not" not in text
    with pytest.raises(LookupError, match="no line of get_summarized_data starts with 'if never'"):
        source_of(_tensor_str.get_summarized_data, "if dim == 1:", "if never")


def test_torch_lines_many():
    one = ["distributed/tensor/_redistribute.py", ["if _are_we_tracing():"]]
    assert torch_lines_many([one, [*one, "def get_redistribute_planner("]]) == [
        torch_lines(*one), torch_lines(*one, after="def get_redistribute_planner(")]
    with pytest.raises(ValueError, match="an excerpt is"):
        torch_lines_many([["distributed/tensor/_redistribute.py"]])


def test_torch_lines():
    text = torch_lines("distributed/tensor/_redistribute.py",
                         ["def redistribute_local_tensor(", "if _are_we_tracing():"])
    lines = text.splitlines()
    assert lines[0].startswith("distributed/tensor/_redistribute.py:")
    assert lines[1] == "..." and lines[2].endswith("if _are_we_tracing():")
    with pytest.raises(ValueError, match="does not occur"):
        torch_lines("distributed/tensor/_redistribute.py", ["no such text anywhere"])


def test_open_conditionals_tracks_nesting_and_branches():
    src = "\n".join(["#if A", "#ifndef B", "x;", "#elif C", "y;", "#endif", "#else", "z;", "#endif", "w;"])
    assert open_conditionals(src, 3) == [["#if A", "if"], ["#ifndef B", "if"]]
    assert open_conditionals(src, 5) == [["#if A", "if"], ["#ifndef B", "#elif C"]]
    assert open_conditionals(src, 8) == [["#if A", "else"]]
    assert open_conditionals(src, 10) == []
    # a directive's own line is outside it: the stack is of the lines before
    assert open_conditionals("#  ifdef  X\n#endif", 1) == []
    assert open_conditionals("#  ifdef  X\n#endif", 2) == [["#ifdef X", "if"]]


def test_installed_conditionals_reads_the_header():
    got = installed_conditionals("include/ATen/cpu/vec/vec512/vec512_float.h", "Vectorized<float> exp() const {")
    assert ["#if defined(CPU_CAPABILITY_AVX512)", "if"] in got
    with pytest.raises(ValueError):
        installed_conditionals("include/ATen/OpMathType.h", "no such text anywhere")
