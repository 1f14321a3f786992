"""Tests of explainers.precision.knobs (knobs_restored, the fp32_precision tree) and .knob_effects."""

import os
from pathlib import Path

import pytest
import torch

from explainers.precision.hardware import fresh_python
from explainers.precision.knob_effects import (
    arithmetic_verdict,
    cuda_matmul_knobs_effect,
    legacy_getter_matrix,
    legacy_matmul_precision,
    mkldnn_fp32_matmul_errors,
    sdpa_math_reduction_effect,
)
from explainers.precision.knobs import (
    DEFAULT,
    fp32_precision_stored,
    fp32_precision_tree,
    knobs_restored,
)
from explainers.releases import SUPPORTED, env_python

REPO = Path(__file__).resolve().parents[1]


def _in_fresh_python(body: str) -> str:
    # The cuDNN leaves' internal default cannot be set again once replaced, so tests that
    # replace it (or need it untouched) run in a process of their own.
    return fresh_python("import torch\n" + body, env={"PYTHONPATH": str(REPO)})


def test_knobs_restored_puts_everything_back_after_error():
    before_tree, before_stored = fp32_precision_tree(), fp32_precision_stored()
    mm = torch.backends.cuda.matmul
    with pytest.raises(RuntimeError, match="boom"), knobs_restored():
        torch.backends.fp32_precision = "tf32"
        torch.backends.mkldnn.matmul.fp32_precision = "bf16"
        torch.set_float32_matmul_precision("medium")
        mm.allow_bf16_reduced_precision_reduction = False
        mm.allow_fp16_accumulation = True
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)
        raise RuntimeError("boom")
    assert fp32_precision_tree() == before_tree and fp32_precision_stored() == before_stored
    assert legacy_matmul_precision() == "highest"
    assert mm.allow_bf16_reduced_precision_reduction is True
    assert mm.allow_fp16_accumulation is False
    assert torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed() is False


def test_root_still_reaches_cudnn_leaves_after_a_restore():
    out = _in_fresh_python(
        "from explainers.precision.knobs import knobs_restored\n"
        "with knobs_restored():\n"
        "    torch.backends.fp32_precision = 'tf32'\n"
        "torch.backends.fp32_precision = 'ieee'\n"
        "print(torch.backends.cudnn.conv.fp32_precision, torch.backends.cudnn.rnn.fp32_precision)\n"
    )
    assert out.split() == ["ieee", "ieee"]


def test_knobs_restored_says_when_the_internal_default_is_lost():
    out = _in_fresh_python(
        "from explainers.precision.knobs import knobs_restored, KnobsNotRestorableError\n"
        "try:\n"
        "    with knobs_restored():\n"
        "        torch.backends.cudnn.allow_tf32 = False\n"
        "except KnobsNotRestorableError as e:\n"
        "    print('raised', 'cudnn.conv' in str(e) and 'cudnn.rnn' in str(e))\n"
        "print(torch.backends.fp32_precision, torch.get_float32_matmul_precision())\n"
    )
    assert out.split() == ["raised", "True", "none", "highest"]


def test_stored_values_are_probed_without_side_effects():
    stored = fp32_precision_stored()
    assert stored["cuda.conv"] == stored["cuda.rnn"] == DEFAULT
    with knobs_restored():
        torch.backends.mkldnn.fp32_precision = "ieee"  # writes the generic root
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        inner = fp32_precision_stored()
        assert inner == fp32_precision_stored()
        assert (inner["generic.all"], inner["cuda.matmul"], inner["mkldnn.all"]) == ("ieee", "tf32", "none")
        assert inner["cuda.conv"] == DEFAULT and fp32_precision_tree()["cuda.conv"] == "ieee"
    assert fp32_precision_stored() == stored


def test_split_k_halves_are_restored():
    mm = torch.backends.cuda.matmul
    with knobs_restored():
        mm.allow_fp16_reduced_precision_reduction = (False, False)
        with knobs_restored():
            mm.allow_fp16_reduced_precision_reduction = False  # a bool resets split-K to True
            assert mm.allow_fp16_reduced_precision_reduction_split_k is True
        assert torch._C._get_cublas_allow_fp16_reduced_precision_reduction() == (False, False)
    assert torch._C._get_cublas_allow_fp16_reduced_precision_reduction() == (True, True)


def test_legacy_tf32_flags_and_unreadable_legacy_value_are_restored():
    with knobs_restored():
        torch.backends.cuda.matmul.allow_tf32 = True      # writes the legacy value and the tree
        assert legacy_matmul_precision() == "high"
    assert torch._C._get_cublas_allow_tf32() is False and legacy_matmul_precision() == "highest"
    with knobs_restored():
        torch.backends.cuda.matmul.fp32_precision = "tf32"  # the legacy getter now refuses
        assert legacy_matmul_precision().startswith("RuntimeError")
        stored = fp32_precision_stored()
        with knobs_restored():
            torch.set_float32_matmul_precision("medium")
        assert fp32_precision_stored() == stored
        assert legacy_matmul_precision().startswith("RuntimeError")
    assert legacy_matmul_precision() == "highest"


def test_knobs_restored_keeps_inheritance():
    # After restoring, a child left at "none" must still follow its parent.
    with knobs_restored():
        torch.backends.fp32_precision = "ieee"
    with knobs_restored():
        torch.backends.fp32_precision = "tf32"
        assert fp32_precision_tree()["mkldnn.conv"] == "tf32"
        assert fp32_precision_tree()["cuda.conv"] == "tf32"


def test_setters_that_reach_further():
    # torch 2.14.1: torch.backends.mkldnn.fp32_precision's setter writes ("generic", "all"),
    # and torch.backends.cudnn.fp32_precision is the ("cuda", "all") node.
    with knobs_restored():
        torch.backends.mkldnn.fp32_precision = "tf32"
        assert fp32_precision_tree()["cuda.matmul"] == "tf32"
    with knobs_restored():
        torch.backends.cudnn.fp32_precision = "tf32"
        tree = fp32_precision_tree()
        assert tree["cuda.matmul"] == "tf32" and tree["mkldnn.matmul"] == "none"


def test_flag_effects():
    assert all(cuda_matmul_knobs_effect(size=8, k=512).values())
    e = sdpa_math_reduction_effect(shape=(1, 2, 128, 32))
    assert e[True] > e[False]
    with pytest.raises(ValueError, match="float16 and bfloat16"):
        sdpa_math_reduction_effect(torch.float32)
    errs = mkldnn_fp32_matmul_errors(m=16, k=256, n=16)
    assert errs["ieee"] < 1e-4 < errs["bf16 inputs"]
    assert torch.backends.mkldnn.matmul.fp32_precision == "none"


def test_arithmetic_verdict():
    assert arithmetic_verdict(1e-4, 5e-5, 0.4) == "fp32"
    assert arithmetic_verdict(0.3, 5e-5, 0.4) == "bf16"
    with pytest.raises(ValueError, match="not within 10x"):
        arithmetic_verdict(0.004, 5e-5, 0.4)
    with pytest.raises(ValueError, match="too close"):
        arithmetic_verdict(0.01, 0.01, 0.1)


def test_legacy_getter_raises_in_exactly_three_combinations():
    rows = legacy_getter_matrix()
    assert len(rows) == 18
    for r in rows:
        refuses = ((r["cuda.matmul"] == "tf32" and r["legacy"] == "highest")
                   or (r["mkldnn.matmul"] == "bf16" and r["legacy"] != "medium")
                   or (r["mkldnn.matmul"] == "tf32" and r["legacy"] != "high"))
        assert r["getter"].startswith("RuntimeError") == refuses, r
        if not refuses:
            assert r["getter"] == r["legacy"], r
    # knobs_restored put everything back
    assert legacy_matmul_precision() == "highest"
    assert torch.backends.cuda.matmul.fp32_precision == "none"


_LEGACY_FLAGS_CHILD = """
import torch
from explainers.precision.knobs import fp32_precision_tree
b = torch.backends
b.cuda.matmul.allow_tf32 = True
t = fp32_precision_tree()
print(t["cuda.matmul"], t["mkldnn.matmul"], torch.get_float32_matmul_precision())
b.cuda.matmul.allow_tf32 = False
b.cudnn.allow_tf32 = False
b.fp32_precision = "tf32"
print(fp32_precision_tree()["cuda.conv"])
try:
    b.cudnn.allow_tf32
except RuntimeError as exc:
    print("raises" if "mix of the legacy and new APIs" in str(exc) else "other")
"""


@pytest.mark.parametrize("release", SUPPORTED)
def test_legacy_allow_tf32_flags(release):
    # knobs.py's comment: cuda.matmul.allow_tf32 writes the legacy value and cuda.matmul only;
    # cudnn.allow_tf32 keeps a field of its own, which the tree's root does not update, so
    # after the root says tf32 the two disagree and the legacy getter raises.
    import subprocess

    out = subprocess.run(
        [str(env_python(release)), "-c", _LEGACY_FLAGS_CHILD], capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    ).stdout.split()
    assert out == ["tf32", "none", "high", "tf32", "raises"]
