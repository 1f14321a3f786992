"""Tests of explainers.precision.hardware: oneDNN's log, strings in libtorch, a fresh Python."""


import pytest

from explainers.precision.hardware import OneDNNCall, _parse_verbose, fresh_python, library_message


def test_onednn_log_lines_are_parsed():
    line = ("onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx512_core,undef,"
            "src:f32::blocked:ab::f0 wei:f32::blocked:ab::f0 dst:f32::blocked:ab::f0,"
            "attr-scratchpad:user attr-fpmath:bf16,,256x1024:1024x256,9.698")
    call = _parse_verbose(line)
    assert call == OneDNNCall("matmul", "brg_matmul:avx512_core", "src:f32 wei:f32 dst:f32",
                              "attr-scratchpad:user attr-fpmath:bf16")
    assert call.fpmath == "bf16"
    assert _parse_verbose("onednn_verbose,v1,info,cpu,runtime:OpenMP,nthr:2") is None


def test_library_message_and_fresh_python():
    assert "avx512bw, avx512vl and avx512dq" in library_message("mkldnn_matmul bf16 path needs")
    with pytest.raises(LookupError):
        library_message("certainly not in libtorch")
    with pytest.raises(RuntimeError, match="child Python failed"):
        fresh_python("import sys; sys.exit(3)")


def test_tf32_settings_reach_onednn_only_with_amx_fp16():
    from explainers.precision.hardware import onednn_calls
    from explainers.tf32_gate import TF32_PROBES, amx_fp16, tf32_settings_bitwise

    calls = onednn_calls(TF32_PROBES, m=32, k=64, n=32)
    assert list(calls) == list(TF32_PROBES)
    same = tf32_settings_bitwise(m=32, k=64, n=32)
    assert len(same) == 2
    if not amx_fp16():
        assert not any(calls.values()) and all(same.values())
