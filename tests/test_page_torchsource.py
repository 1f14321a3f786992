"""Tests of explainers.page.torchsource: excerpts of the installed torch's files."""


import pytest

from explainers.page.torchsource import installed_source, quote_installed


def test_installed_source_excerpts():
    assert "acc_type" in installed_source("include/ATen/AccumulateType.h")
    text = quote_installed("include/ATen/native/ReduceOpsUtils.h", "inline ScalarType get_dtype_from_self(")
    assert text.splitlines()[-1].rstrip().endswith("}") and "promote_integers" in text
    py = quote_installed("backends/mkldnn/__init__.py", "fp32_precision = ContextProp(")
    assert len(py.splitlines()) == 4 and '"generic", "all"' in py
    with pytest.raises(FileNotFoundError):
        installed_source("include/not/there.h")
