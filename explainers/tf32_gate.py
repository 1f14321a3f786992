"""The CPU TF32 settings and PyTorch's gate for them: AMX-FP16, checked before oneDNN is asked.

``use_mkldnn_tf32_matmul()`` in ``aten/src/ATen/native/mkldnn/Matmul.cpp`` (torch 2.14.1
and 2.15.0) returns ``cpuinfo_has_x86_amx_fp16()`` and the mkldnn matmul leaf being
``TF32`` on x86, and ``false`` elsewhere; only then does an fp32 matmul go to oneDNN
with ``fpmath_mode`` tf32.  This module reads the CPU's answer and runs the two settings.

>>> sorted(TF32_PROBES) == sorted(tf32_settings_bitwise(m=8, k=64, n=8))
True
"""

from __future__ import annotations

import torch

from explainers.precision.knobs import knobs_restored

__all__ = ["TF32_PROBES", "amx_fp16", "tf32_settings_bitwise"]

#: The two CPU settings that ask for TF32 in an fp32 matmul, as statements for
#: :func:`explainers.precision.hardware.onednn_calls` (over fp32 ``a`` and ``b``).
TF32_PROBES: dict[str, str] = {
    "mkldnn.matmul.fp32_precision = 'tf32'": (
        "torch.backends.mkldnn.matmul.fp32_precision = 'tf32'; a @ b; "
        "torch.backends.mkldnn.matmul.fp32_precision = 'none'"
    ),
    "set_float32_matmul_precision('high')": (
        "torch.set_float32_matmul_precision('high'); a @ b; torch.set_float32_matmul_precision('highest')"
    ),
}


def amx_fp16() -> bool:
    """Whether this CPU has AMX-FP16, as cpuinfo (the library the gate asks) tells ``torch.cpu``.

    ``False`` where ``torch.cpu.get_capabilities()`` has no ``amx_fp16`` entry (non-x86).

    >>> isinstance(amx_fp16(), bool)
    True
    """
    return bool(torch.cpu.get_capabilities().get("amx_fp16", False))


def tf32_settings_bitwise(m: int = 256, k: int = 1024, n: int = 256, seed: int = 0) -> dict[str, bool]:
    """For each CPU TF32 setting: is one fp32 ``a @ b`` bit for bit what it is without it?

    The settings are :data:`TF32_PROBES`' two; each is made inside
    :func:`~explainers.precision.knobs.knobs_restored`.  Without AMX-FP16 the gate
    keeps both away from oneDNN, so both answers are ``True``.

    >>> sorted(tf32_settings_bitwise(m=8, k=64, n=8))
    ["mkldnn.matmul.fp32_precision = 'tf32'", "set_float32_matmul_precision('high')"]
    """
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=g)
    b = torch.randn(k, n, generator=g)
    default = a @ b
    same = {}
    with knobs_restored():
        torch.backends.mkldnn.matmul.fp32_precision = "tf32"
        same["mkldnn.matmul.fp32_precision = 'tf32'"] = torch.equal(a @ b, default)
    with knobs_restored():
        torch.set_float32_matmul_precision("high")
        same["set_float32_matmul_precision('high')"] = torch.equal(a @ b, default)
    return same
