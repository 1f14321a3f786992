"""Tests of explainers.precision.knob_actions: the knob-effects table."""

import pytest
import torch

from explainers.precision.knob_actions import (
    ACTIONS,
    IRREVERSIBLE,
    cpu_digest,
    knob_action_table,
    observe,
)
from explainers.precision.knobs import knobs_restored
from explainers.releases import PRIMARY, run_under


def test_cpu_digest_is_deterministic_and_sees_a_change():
    d = cpu_digest()
    assert d == cpu_digest()
    with knobs_restored():
        torch.backends.mkldnn.matmul.fp32_precision = "bf16"
        changed = cpu_digest()
    assert changed["conv"] == d["conv"]
    assert (changed["matmul"] != d["matmul"]) == torch.ops.mkldnn._is_mkldnn_bf16_supported()


def test_observe_default_state():
    seen = observe()
    assert seen["get_float32_matmul_precision()"] == "highest"
    assert (seen["cuda.matmul.allow_tf32"], seen["cudnn.allow_tf32"]) == ("False", "True")
    assert seen["matmul bitwise as default"] and seen["conv bitwise as default"]


def test_irreversible_actions_are_actions():
    assert set(IRREVERSIBLE) <= set(ACTIONS)


def test_table_refuses_a_changed_state():
    with knobs_restored(), pytest.raises(RuntimeError, match="default state"):
        torch.backends.fp32_precision = "tf32"
        knob_action_table(with_env=False)


def test_table_in_a_fresh_process():
    table = run_under(PRIMARY, "explainers.precision.knob_actions:knob_action_table", with_env=False)
    assert list(table) == ["default", *[a for a in ACTIONS if a not in IRREVERSIBLE], *IRREVERSIBLE]
    assert table["cuda.matmul.allow_tf32 = True"]["tree"]["mkldnn.matmul"] == "none"
    assert table['fp32_precision = "bf16"']["cudnn.allow_tf32"] == "raises"
