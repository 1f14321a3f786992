"""What the matmul knobs do on CPU: the legacy getter's answers, the cuBLAS knobs, oneDNN's bf16 mode, math SDPA.

Every knob is flipped inside :func:`explainers.precision.knobs.knobs_restored`,
so each measurement leaves the process as it found it.

>>> all(cuda_matmul_knobs_effect(size=8, k=256).values())   # cuBLAS knobs: no effect on CPU
True
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from explainers.precision.knobs import knobs_restored

__all__ = [
    "legacy_matmul_precision",
    "legacy_getter_matrix",
    "sdpa_math_reduction_effect",
    "cuda_matmul_knobs_effect",
    "mkldnn_fp32_matmul_errors",
    "arithmetic_verdict",
]


def legacy_matmul_precision() -> str:
    """``torch.get_float32_matmul_precision()``, or ``"RuntimeError: ..."`` when it refuses.

    In torch 2.14.1 it refuses in three combinations (see :func:`legacy_getter_matrix`):
    ``cuda.matmul`` is ``tf32`` while the legacy value is ``"highest"``; ``mkldnn.matmul``
    is ``bf16`` while it is not ``"medium"``; ``mkldnn.matmul`` is ``tf32`` while it is
    not ``"high"``.

    >>> legacy_matmul_precision()
    'highest'
    """
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError as exc:
        return f"RuntimeError: {str(exc).splitlines()[0]}"


def legacy_getter_matrix() -> list[dict[str, str]]:
    """What ``torch.get_float32_matmul_precision()`` answers for every legacy value and matmul leaf.

    For each legacy setting (``"highest"``, ``"high"``, ``"medium"``) it sets
    ``torch.backends.cuda.matmul.fp32_precision`` to ``ieee`` or ``tf32`` and
    ``torch.backends.mkldnn.matmul.fp32_precision`` to ``ieee``, ``tf32`` or
    ``bf16``, inside :func:`knobs_restored`, and records the getter's answer
    (:func:`legacy_matmul_precision`: the legacy value, or the error).

    >>> rows = legacy_getter_matrix()
    >>> len(rows), rows[0]
    (18, {'legacy': 'highest', 'cuda.matmul': 'ieee', 'mkldnn.matmul': 'ieee', 'getter': 'highest'})
    """
    rows = []
    for legacy in ("highest", "high", "medium"):
        for cuda in ("ieee", "tf32"):
            for mkldnn in ("ieee", "tf32", "bf16"):
                with knobs_restored():
                    torch.set_float32_matmul_precision(legacy)
                    torch.backends.cuda.matmul.fp32_precision = cuda
                    torch.backends.mkldnn.matmul.fp32_precision = mkldnn
                    answer = legacy_matmul_precision()
                rows.append({"legacy": legacy, "cuda.matmul": cuda, "mkldnn.matmul": mkldnn,
                             "getter": answer})
    return rows


def _max_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).abs().max())


def sdpa_math_reduction_effect(
    dtype: torch.dtype = torch.bfloat16, shape: tuple[int, ...] = (1, 4, 256, 64), seed: int = 0
) -> dict[bool, float]:
    """Max error vs fp64 of math-backend SDPA in ``dtype``, with the reduction flag off and on.

    ``torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp`` sits in the
    ``cuda`` namespace but the math backend reads it on CPU too.

    >>> import torch
    >>> e = sdpa_math_reduction_effect(shape=(1, 1, 64, 16))
    >>> sorted(e)
    [False, True]
    >>> sdpa_math_reduction_effect(torch.float32)
    Traceback (most recent call last):
    ...
    ValueError: the flag only concerns float16 and bfloat16, got torch.float32
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"the flag only concerns float16 and bfloat16, got {dtype}")
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(*shape, generator=g).to(dtype) for _ in range(3))
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    out = {}
    with knobs_restored():
        for flag in (False, True):
            torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(flag)
            with sdpa_kernel(SDPBackend.MATH):
                out[flag] = _max_err(F.scaled_dot_product_attention(q, k, v), ref)
    return out


def _set_matmul_attr(attr: str, value: bool) -> None:
    setattr(torch.backends.cuda.matmul, attr, value)


# Each cuBLAS knob, the dtype whose CPU matmul it would concern, and how to flip it.
_CUDA_KNOBS = {
    "cuda.matmul.fp32_precision = 'tf32'": (
        torch.float32,
        lambda: setattr(torch.backends.cuda.matmul, "fp32_precision", "tf32"),
    ),
    "allow_fp16_reduced_precision_reduction = False": (
        torch.float16,
        lambda: _set_matmul_attr("allow_fp16_reduced_precision_reduction", False),
    ),
    "allow_bf16_reduced_precision_reduction = False": (
        torch.bfloat16,
        lambda: _set_matmul_attr("allow_bf16_reduced_precision_reduction", False),
    ),
    "allow_fp16_accumulation = True": (
        torch.float16,
        lambda: _set_matmul_attr("allow_fp16_accumulation", True),
    ),
}


def cuda_matmul_knobs_effect(size: int = 64, k: int = 4096, seed: int = 0) -> dict[str, bool]:
    """For each cuBLAS matmul knob: is the CPU ``mm`` it concerns bitwise identical with it flipped?

    Each knob is flipped away from its default inside :func:`knobs_restored`.

    >>> all(cuda_matmul_knobs_effect(size=8, k=256).values())
    True
    """
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(size, k, generator=g)
    b = torch.randn(k, size, generator=g)
    same = {}
    for name, (dtype, flip) in _CUDA_KNOBS.items():
        before = a.to(dtype) @ b.to(dtype)
        with knobs_restored():
            flip()
            after = a.to(dtype) @ b.to(dtype)
        same[name] = torch.equal(before, after)
    return same


def mkldnn_fp32_matmul_errors(m: int = 256, k: int = 1024, n: int = 256, seed: int = 0) -> dict[str, float]:
    """Max error vs fp64 of one fp32 ``mm``: as is, under ``mkldnn.matmul.fp32_precision = "bf16"``,
    and on inputs rounded to bf16 first (the size of error that bf16 arithmetic costs).

    >>> e = mkldnn_fp32_matmul_errors(m=8, k=64, n=8)
    >>> sorted(e)
    ['bf16 inputs', 'bf16 knob', 'ieee']
    >>> e["ieee"] < 1e-4 < e["bf16 inputs"]
    True
    """
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=g)
    b = torch.randn(k, n, generator=g)
    ref = a.double() @ b.double()
    errs = {"ieee": _max_err(a @ b, ref)}
    with knobs_restored():
        torch.backends.mkldnn.matmul.fp32_precision = "bf16"
        errs["bf16 knob"] = _max_err(a @ b, ref)
    errs["bf16 inputs"] = _max_err(a.bfloat16().float() @ b.bfloat16().float(), ref)
    return errs


def arithmetic_verdict(err: float, fp32_err: float, bf16_err: float) -> str:
    """``"fp32"`` or ``"bf16"``: which arithmetic's error ``err`` is of the size of.

    ``err`` must be within a factor 10 of one of the two references, which must
    be at least 100 apart; anything in between is no verdict.

    >>> arithmetic_verdict(9.9e-5, 5e-5, 0.36), arithmetic_verdict(0.2, 5e-5, 0.36)
    ('fp32', 'bf16')
    >>> arithmetic_verdict(0.004, 5e-5, 0.36)
    Traceback (most recent call last):
    ...
    ValueError: error 0.004 is not within 10x of the fp32 (5e-05) or the bf16 (0.36) reference
    """
    if not (fp32_err > 0 and bf16_err > 100 * fp32_err):
        raise ValueError(f"references too close to tell apart: fp32 {fp32_err:.3g}, bf16 {bf16_err:.3g}")
    if err <= 10 * fp32_err:
        return "fp32"
    if err >= bf16_err / 10:
        return "bf16"
    raise ValueError(
        f"error {err:.3g} is not within 10x of the fp32 ({fp32_err:.3g}) or the bf16 ({bf16_err:.3g}) reference"
    )
