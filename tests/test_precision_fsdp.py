"""FSDP2's gradient reduction dtype and op, observed on a real 2-rank gloo world on CPU."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
import time

import pytest
import torch
from torch.distributed import ReduceOp

from explainers.precision.fsdp_data import dtype_name, op_name, parse_dtype
from explainers.precision.fsdp_decision import (
    cleared_grad_dtype_outcomes,
    gradient_divide_factors,
    leaf_grad_dtype,
    reduce_dtype_source,
)
from explainers.precision.fsdp_launch import (
    fsdp_reduce_dtypes,
    fsdp_reduce_dtypes_many,
    fsdp_reduce_report,
)
from explainers.precision.fsdp_tables import fsdp_runs_by_policy, fsdp_table, short_dtypes
from explainers.releases import SUPPORTED, release_of

BF16, FP16, FP32 = "torch.bfloat16", "torch.float16", "torch.float32"
RELEASE = release_of(torch.__version__)
# With param_dtype=bf16, per release and reduce_dtype: the dtype of the gradients FSDP2
# copies in, and of the buffer it copies them into (the reduce-scatter's dtype).
EXPECTED = {
    "2.14.1": {None: (BF16, BF16), FP32: (BF16, FP32), FP16: (BF16, FP16)},
    "2.15.0": {None: (BF16, FP32), FP32: (BF16, FP32), FP16: (FP16, FP16)},
}
# The dtype of the gradient FSDP2 holds after one backward with gradient sync off.
HELD = {
    "2.14.1": {None: BF16, FP32: FP32, FP16: FP16},
    "2.15.0": {None: FP32, FP32: FP32, FP16: FP16},
}


@contextlib.contextmanager
def _capture_everything():
    """Collect what this process writes to stdout/stderr, by fd and by sys.std*."""
    got = {}
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as f, io.StringIO() as py:
        old = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = py
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            yield got
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            sys.stdout, sys.stderr = old
            f.seek(0)
            got["fd"], got["sys"] = f.read().decode(errors="replace"), py.getvalue()


@pytest.fixture(scope="module")
def launch():
    """One launch, five policies: bf16 compute with reduce_dtype None / fp32 / fp16; all fp32;
    bf16 compute with every parameter's grad_dtype set to None."""
    with _capture_everything() as written:
        report = fsdp_reduce_report(
            [["bfloat16", None], ["bfloat16", "float32"], ["bfloat16", "float16"], ["float32", None],
             ["bfloat16", None, None]],
            timeout=420,  # ~15 s idle; minutes on a loaded 2-core box
        )
    return report, written


@pytest.fixture(scope="module")
def observed(launch):
    return launch[0]["runs"]


def _common(r):
    assert r["backend"] == "gloo" and r["device"] == "cpu" and r["world_size"] == 2
    assert r["param_dtype"] == BF16 and r["orig_dtype"] == FP32
    # The parameters are all-gathered in param_dtype; the gradients FSDP2 copies in,
    # and the buffer it copies them into, are the release's.
    assert r["all_gather_dtypes"] == [BF16]
    assert (r["unsharded_grad_dtype"], r["copy_in_dtype"]) == EXPECTED[RELEASE][r["reduce_dtype"]]
    assert r["reduce_scatter_dtype"] == r["copy_in_dtype"]
    assert len(r["reduce_scatters"]) == 1, "fully_shard on the root alone: one group"
    assert r["all_reduces"] == [], "plain FSDP (no HSDP) issues no gradient all-reduce"
    rs = r["reduce_scatters"][0]
    assert rs["entry"] == "torch.distributed.reduce_scatter_single"
    # What reached the c10d dispatcher carries the same dtype as the Python call.
    assert [op["name"] for op in rs["c10d_ops"]] == ["c10d._reduce_scatter_base_.default"]
    assert set(rs["c10d_ops"][0]["dtypes"]) == {rs["input_dtype"]}
    assert rs["output_dtype"] == rs["input_dtype"] == r["reduce_scatter_dtype"]
    # The sharded .grad is the parameters' dtype, and really the ranks' mean.
    assert r["sharded_grad_dtype"] == FP32
    assert r["grad_is_rank_mean"] is True
    assert r["param_grad_dtype"] == "unset"
    # With gradient sync off, reduce_dtype (or on 2.15.0 the parameters' dtype) sets the held gradient.
    assert r["no_sync_grad_dtype"] == HELD[RELEASE][r["reduce_dtype"]]
    # What it holds is the unsharded gradient: the two Linear layers' 108 elements, not a 54-element shard.
    assert (r["no_sync_held_numel"], r["param_numel"], r["shard_numel"]) == (108, 108, 54)


def test_every_supported_release_has_expectations():
    assert set(EXPECTED) == set(HELD) == set(SUPPORTED)


@pytest.mark.slow
def test_reduce_dtype_none_follows_the_release(observed):
    r = observed[0]
    _common(r)
    assert r["reduce_dtype"] is None
    # 2.14.1 reduces in the gradients' dtype, bf16; 2.15.0 in the parameters' dtype, fp32.
    assert r["reduce_scatter_dtype"] == {"2.14.1": BF16, "2.15.0": FP32}[RELEASE]
    assert r["reduce_op"] == "AVG"
    rs = r["reduce_scatters"][0]
    assert rs["pre_divide"] is None and rs["post_divide"] is None


@pytest.mark.slow
def test_report_is_plain_json_with_the_releases_source(launch):
    report = launch[0]
    assert json.loads(json.dumps(report)) == report
    assert report["release"] == RELEASE and report["torch_version"] == torch.__version__
    assert report["source"] == reduce_dtype_source()


@pytest.mark.slow
def test_reduce_dtype_fp32_reduces_in_fp32(observed):
    r = observed[1]
    _common(r)
    assert r["reduce_dtype"] == FP32
    assert r["reduce_scatter_dtype"] == FP32
    assert r["reduce_op"] == "AVG"


@pytest.mark.slow
def test_reduce_dtype_fp16_sums_after_dividing(observed):
    # fp16 risks overflow: FSDP2 divides before a SUM instead of using AVG.
    r = observed[2]
    _common(r)
    assert r["reduce_scatter_dtype"] == FP16
    assert r["reduce_op"] == "SUM"
    rs = r["reduce_scatters"][0]
    assert rs["pre_divide"] == 2.0 and rs["post_divide"] is None


@pytest.mark.slow
def test_parent_writes_nothing(launch):
    assert launch[1] == {"fd": "", "sys": ""}, "the ranks' output must be captured, never printed"


@pytest.mark.slow
def test_no_mixed_precision_stays_fp32(observed):
    r = observed[3]
    # param_dtype equal to the parameters' dtype: no mixed precision, all fp32.
    assert r["param_dtype"] == FP32 and r["reduce_dtype"] is None
    assert r["all_gather_dtypes"] == [FP32] and r["unsharded_grad_dtype"] == r["copy_in_dtype"] == FP32
    assert r["reduce_scatter_dtype"] == FP32 and r["sharded_grad_dtype"] == FP32
    assert r["reduce_op"] == "AVG" and r["grad_is_rank_mean"] is True


@pytest.mark.slow
def test_explicit_grad_dtype_none(observed):
    r = observed[4]
    assert r["param_grad_dtype"] is None and r["reduce_dtype"] is None
    # 2.15.0 reduces a grad_dtype=None parameter's gradient in its own dtype and does not cast the
    # reduced shard; 2.14.1's FSDP2 does not read grad_dtype at all.
    assert (r["unsharded_grad_dtype"], r["reduce_scatter_dtype"], r["no_sync_grad_dtype"]) == (BF16, BF16, BF16)
    assert r["sharded_grad_dtype"] == {"2.14.1": FP32, "2.15.0": BF16}[RELEASE]
    assert r["reduce_op"] == "AVG" and r["grad_is_rank_mean"] is True


@pytest.mark.slow
def test_timeout_kills_the_ranks():
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="did not finish in 0.5 s"):
        fsdp_reduce_dtypes(timeout=0.5)
    assert time.monotonic() - start < 30


def test_failing_rank_is_reported(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'no torch here' >&2\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(RuntimeError, match=r"(?s)FSDP2 rank failed.*rank 1 \(exit 3\).*no torch"):
        fsdp_reduce_dtypes(python=fake)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"world_size": 1}, ValueError, "at least 2"),
        ({"world_size": True}, TypeError, "world_size must be an int"),
        ({"world_size": 2.0}, TypeError, "world_size must be an int"),
        ({"world_size": 9}, ValueError, "at most 8"),
        ({"param_dtype": "bf16"}, TypeError, "param_dtype must be a torch.dtype or None, got str"),
        ({"reduce_dtype": torch.int32}, ValueError, "reduce_dtype must be a floating-point"),
        ({"timeout": 0}, ValueError, "timeout must be a positive"),
        ({"python": "/nonexistent/python"}, FileNotFoundError, "interpreter not found"),
    ],
)
def test_bad_input(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        fsdp_reduce_dtypes(**kwargs)


@pytest.mark.parametrize(
    ("policies", "exc", "match"),
    [
        ([], ValueError, "policies is empty"),
        ("bf16", TypeError, "sequence of"),
        ([(torch.bfloat16,)], TypeError, r"policies\[0\] must be a"),
        ([(None, None), (torch.bfloat16, 3)], TypeError, r"policies\[1\] reduce_dtype"),
        ([(None, None, None, None)], TypeError, r"policies\[0\] must be a"),
        ([(torch.bfloat16, None, torch.int64)], ValueError, r"policies\[0\] grad_dtype must be a floating"),
    ],
)
def test_bad_policies(policies, exc, match):
    with pytest.raises(exc, match=match):
        fsdp_reduce_dtypes_many(policies)


@pytest.mark.parametrize(
    ("policies", "exc", "match"),
    [
        ("bfloat16", TypeError, "list of"),
        ([["bfloat16"]], TypeError, r"policies\[0\] must be a pair"),
        ([["bfloat16", 16]], TypeError, r"policies\[0\] must be a pair"),
        ([["bfloat16", None, None, None]], TypeError, r"policies\[0\] must be a pair or triple"),
        ([["bfloat16", "fp16"]], ValueError, "not a torch dtype name: 'fp16'"),
        ([["bfloat16", "int32"]], ValueError, "floating-point"),
    ],
)
def test_report_bad_policies(policies, exc, match):
    with pytest.raises(exc, match=match):
        fsdp_reduce_report(policies)


def test_reduce_dtype_source_is_the_releases():
    text = "\n".join(e["text"] for e in reduce_dtype_source())
    if RELEASE == "2.14.1":
        assert "reduce_dtype = reduce_dtype or grad_dtype" in text
        assert "self.unsharded_accumulated_grad = unsharded_grad.to(self.reduce_dtype)" in text
    else:
        assert "return self.orig_dtype" in text and "torch.promote_types" in text
        assert "versionchanged:: 2.15" in text
        assert "if grad is not None or self.reduce_grads:" in text
        assert "p.unsharded_grad_dtype or g.dtype" in text
    # every excerpt is numbered lines of an installed file under FSDP2
    for e in reduce_dtype_source():
        assert e["path"].startswith("distributed/fsdp/_fully_shard/")
        assert all(line.split()[0].isdigit() for line in e["text"].splitlines())


def test_leaf_grad_dtype():
    assert leaf_grad_dtype(torch.bfloat16, torch.float16) == torch.float16
    assert leaf_grad_dtype(torch.bfloat16, torch.float32) == torch.float32
    with pytest.raises(ValueError, match="grad_dtype must be a floating-point"):
        leaf_grad_dtype(torch.bfloat16, torch.int64)


def test_cleared_grad_dtype_keeps_an_existing_wider_gradient():
    out = cleared_grad_dtype_outcomes(torch.float16, torch.float64)
    assert out == {"first": torch.float64, "accumulated": torch.float64, "in_place": True,
                   "values": [4.0] * 4, "fresh": torch.float16}
    with pytest.raises(ValueError, match="wide_dtype must be a floating-point"):
        cleared_grad_dtype_outcomes(torch.bfloat16, torch.int32)
    with pytest.raises(TypeError, match="param_dtype must be a torch.dtype"):
        cleared_grad_dtype_outcomes(None, torch.float32)


def test_helpers():
    assert dtype_name(torch.bfloat16) == BF16 and dtype_name(None) is None
    assert parse_dtype(BF16) is torch.bfloat16 and parse_dtype("float32") is torch.float32
    with pytest.raises(ValueError, match="not a torch dtype name"):
        parse_dtype("torch.Tensor")  # an attribute of torch, but not a dtype
    with pytest.raises(TypeError):
        dtype_name("torch.float32")
    assert op_name(ReduceOp.AVG) == "AVG"
    assert op_name(ReduceOp.PREMUL_SUM(0.25)) == "PREMUL_SUM(0.25)"
    with pytest.raises(TypeError, match="not a torch.distributed.ReduceOp"):
        op_name("AVG")


def _run(reduce_dtype, copy_in, held, op="AVG", pre=None, grad_dtype="unset"):
    return {"param_dtype": BF16, "reduce_dtype": reduce_dtype, "param_grad_dtype": grad_dtype,
            "unsharded_grad_dtype": BF16, "copy_in_dtype": copy_in, "reduce_scatter_dtype": copy_in,
            "reduce_op": op, "reduce_scatters": [{"pre_divide": pre, "post_divide": None}],
            "sharded_grad_dtype": FP32, "no_sync_grad_dtype": held, "all_gather_dtypes": [BF16]}


FAKE_REPORTS = {
    "2.14.1": {"release": "2.14.1", "runs": [_run(None, BF16, BF16), _run(FP16, FP16, FP16, "SUM", 2.0)]},
    "2.15.0": {"release": "2.15.0", "runs": [_run(None, FP32, FP32), _run(None, BF16, BF16, grad_dtype=None)]},
}


def test_short_dtypes_only_touches_dtype_names():
    run = _run(FP32, FP32, FP32, grad_dtype=None)
    short = short_dtypes(run)
    assert short["reduce_dtype"] == short["copy_in_dtype"] == "float32" and short["param_dtype"] == "bfloat16"
    assert short["param_grad_dtype"] is None and short_dtypes(_run(None, BF16, BF16))["param_grad_dtype"] == "unset"
    assert short["all_gather_dtypes"] == [BF16] and short["reduce_scatters"] is run["reduce_scatters"]
    assert run["copy_in_dtype"] == FP32  # the input is not changed


def test_fsdp_runs_by_policy():
    by = fsdp_runs_by_policy(FAKE_REPORTS, ["None", "other"])
    assert list(by) == ["2.14.1", "2.15.0"] and list(by["2.15.0"]) == ["None", "other"]
    assert by["2.14.1"]["other"]["reduce_scatter_dtype"] == "float16" and by["2.15.0"]["None"]["reduce_dtype"] is None
    with pytest.raises(ValueError, match="zip"):
        fsdp_runs_by_policy(FAKE_REPORTS, ["None"])


def test_fsdp_table():
    # rows: policy by policy, and each policy's releases in the reports' order
    assert fsdp_table(FAKE_REPORTS).splitlines() == [
        "| policy | torch | gradients copied in | buffer, reduce-scatter | op | divided before | sharded `.grad` "
        "| held, sync off |",
        "|---|---|---|---|---|---|---|---|",
        "| `reduce_dtype=None` | 2.14.1 | bfloat16 | bfloat16 | AVG |  | float32 | bfloat16 |",
        "| `reduce_dtype=None` | 2.15.0 | bfloat16 | float32 | AVG |  | float32 | float32 |",
        "| `reduce_dtype=float16` | 2.14.1 | bfloat16 | float16 | SUM | 2 | float32 | float16 |",
        "| `reduce_dtype=None`, `grad_dtype = None` | 2.15.0 | bfloat16 | bfloat16 | AVG |  | float32 | bfloat16 |",
    ]
    with pytest.raises(ValueError, match="at least one row"):
        fsdp_table({})


@pytest.mark.parametrize("n", [2, 3, 4, 8, 16, 64, 128])
def test_fp16_divides_by_n_in_two_parts(n):
    f = gradient_divide_factors(torch.float16, n)
    assert f["reduce_scatter"] == "SUM"
    assert f["pre"] * f["post"] == n
    assert f["pre"] & (f["pre"] - 1) == 0    # a power of two


def test_bf16_fp32_use_avg_except_one_rank_and_forced_sum():
    assert gradient_divide_factors(torch.bfloat16, 4) == {"pre": None, "post": None, "reduce_scatter": "AVG"}
    assert gradient_divide_factors(torch.float32, 1)["reduce_scatter"] == "SUM"
    forced = gradient_divide_factors(torch.float32, 4, force_sum_reduction_for_comms=True)
    assert forced == {"pre": None, "post": 4.0, "reduce_scatter": "SUM"}
    assert gradient_divide_factors(torch.bfloat16, 4, device_type="mtia") == forced


def test_custom_divide_factor():
    # a factor equal to the reduce-scatter group's size still gives AVG; another one PREMUL_SUM
    assert gradient_divide_factors(torch.float32, 4, factor=4.0)["reduce_scatter"] == "AVG"
    assert gradient_divide_factors(torch.float32, 4, factor=8.0)["reduce_scatter"] == "PREMUL_SUM(0.125)"
    f = gradient_divide_factors(torch.float16, 4, factor=8.0)
    assert f["reduce_scatter"] == "SUM" and f["pre"] * f["post"] == 8


def test_gradient_divide_factors_bad_input():
    with pytest.raises(ValueError, match="floating"):
        gradient_divide_factors(torch.int64, 2)
    with pytest.raises(ValueError, match="data_parallel_size"):
        gradient_divide_factors(torch.float16, 0)
    with pytest.raises(TypeError, match="data_parallel_size"):
        gradient_divide_factors(torch.float16, True)
    with pytest.raises(ValueError, match="factor must be a positive number"):
        gradient_divide_factors(torch.float16, 2, factor=0)


def test_predivide_rule_is_fsdp2s_loop():
    import pytest
    import torch

    from explainers.precision.fsdp_decision import gradient_divide_factors, predivide_rule

    for n in range(1, 257):
        f = gradient_divide_factors(torch.float16, n)
        assert f["pre"] == predivide_rule(n), n
        assert f["pre"] * f["post"] == n
    assert [predivide_rule(n) for n in (3, 5, 7, 99)] == [2, 2, 2, 2]  # odd: always 2
    with pytest.raises(ValueError, match="world_size"):
        predivide_rule(0)


def test_excerpt_listing_marks_cuts_and_new_files():
    from explainers.precision.fsdp_tables import excerpt_listing

    text = excerpt_listing([{"path": "p/a.py", "text": "1  a\n2  b"}, {"path": "p/a.py", "text": "3  c"},
                            {"path": "p/a.py", "text": "9  d"}, {"path": "p/b.py", "text": "4  e"}], strip="p/")
    assert text.splitlines() == ["a.py:", "1  a", "2  b", "3  c", "    \u22ee  (lines 4-8 not shown)", "9  d",
                                 "", "b.py:", "4  e"]
