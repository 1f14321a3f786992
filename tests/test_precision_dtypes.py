"""Tests of explainers.precision.dtypes: output dtypes, refusals, addmm's one rounding."""


import pytest
import torch

from explainers.precision.dtypes import (
    REFUSALS,
    addmm_roundings,
    output_dtype,
    refusal_cases,
    refusal_report,
    refusal_table,
)
from explainers.releases import release_of


def test_output_dtype_and_errors():
    assert output_dtype(lambda x: x.sum(), torch.bool) == "int64"
    assert output_dtype(lambda x: x.sum(), torch.bfloat16) == "bfloat16"
    # 2.15.0 refuses an integer mean with NotImplementedError, a RuntimeError subclass; 2.14.1 with RuntimeError
    refusal = {"2.14.1": "RuntimeError", "2.15.0": "NotImplementedError"}[release_of(torch.__version__)]
    assert output_dtype(lambda x: x.mean(), torch.int8) == f"error: {refusal}"
    assert output_dtype(lambda x: x - x, torch.bool) == "error: NotImplementedError"


def test_refusal_report():
    release = release_of(torch.__version__)
    report = refusal_report()
    assert report["release"] == release and [[c["op"], c["dtype"]] for c in report["cases"]] == [
        list(c) for c in REFUSALS]
    by = {c["op"]: c for c in report["cases"]}
    cls = {"2.14.1": "RuntimeError", "2.15.0": "NotImplementedError"}[release]
    assert all(c["cpu"]["raises"] == cls and c["cpu"]["frames"] == [] for c in report["cases"])
    # mean and var_mean refuse meta and fake tensors in torch._refs.mean, with RuntimeError on both
    for op in ("mean", "var_mean"):
        for where in ("meta", "fake"):
            assert by[op][where]["raises"] == "RuntimeError"
            assert "_refs/__init__.py:mean" in by[op][where]["frames"]
    assert by["nanmean"]["meta"]["raises"] == by["nanmean"]["fake"]["raises"] == cls
    assert by["std"]["meta"] == {"returns": "int32"} and by["argmax"]["fake"] == {"returns": "int64"}
    with pytest.raises(ValueError, match="not a function"):
        refusal_report([["no_such_op", "int32"]])
    with pytest.raises(TypeError, match="pair"):
        refusal_report(["mean"])


def _refusal_case(op, dtype, cpu, meta):
    return {"op": op, "dtype": dtype, "cpu": {"raises": cpu, "message": "m", "frames": []},
            "meta": meta, "fake": meta}


def test_refusal_cases_and_table():
    old = {"release": "2.14.1", "cases": [_refusal_case("mean", "int32", "RuntimeError", {"raises": "RuntimeError"}),
                                          _refusal_case("argmax", "bool", "RuntimeError", {"returns": "int64"})]}
    new = {"release": "2.15.0", "cases": [_refusal_case("mean", "int32", "NotImplementedError", {"raises": "RuntimeError"}),
                                          _refusal_case("argmax", "bool", "NotImplementedError", {"returns": "int64"})]}
    reports = {"2.14.1": old, "2.15.0": new}
    by = refusal_cases(reports)
    assert list(by) == ["2.14.1", "2.15.0"] and list(by["2.15.0"]) == [("mean", "int32"), ("argmax", "bool")]
    assert by["2.14.1"]["argmax", "bool"] is old["cases"][1]
    # rows: case by case, and each case's releases in the reports' order
    assert refusal_table(reports).splitlines() == [
        "| op | torch | CPU tensor | meta tensor | `FakeTensorMode` |",
        "|---|---|---|---|---|",
        "| `mean` of `int32` | 2.14.1 | RuntimeError | RuntimeError | RuntimeError |",
        "| `mean` of `int32` | 2.15.0 | NotImplementedError | RuntimeError | RuntimeError |",
        "| `argmax` of `bool` | 2.14.1 | RuntimeError | returns int64 | returns int64 |",
        "| `argmax` of `bool` | 2.15.0 | NotImplementedError | returns int64 | returns int64 |",
    ]
    # a live report renders: one row per refusal
    live = refusal_report([["mean", "int32"], ["std", "int32"]])
    assert len(refusal_table({live["release"]: live}).splitlines()) == 2 + 2
    with pytest.raises(ValueError, match="at least one row"):
        refusal_table({})


def test_addmm_rounds_once():
    r = addmm_roundings(m=16, k=256, n=16)
    assert r["max error, addmm"] < r["max error, mm + add"]
    assert r["addmm differs from rounded once"] < r["mm + add differs from rounded once"]
    with pytest.raises(ValueError, match="sizes"):
        addmm_roundings(m=0)
