"""What the matmul knobs do on CPU: the legacy getter, the cuBLAS knobs, oneDNN bf16, math SDPA, refused values.

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
    "sdpa_math_paths",
    "setter_refusals",
    "cuda_matmul_knobs_effect",
    "mkldnn_fp32_matmul_errors",
    "arithmetic_verdict",
]


def legacy_matmul_precision() -> str:
    """``torch.get_float32_matmul_precision()``, or ``"RuntimeError: ..."`` when it refuses.

    In torch 2.14.1 and 2.15.0 it refuses in three combinations (see :func:`legacy_getter_matrix`):
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
    q, k, v = _sdpa_inputs(dtype, shape, seed)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    return {flag: _max_err(out, ref) for flag, out in _math_sdpa_by_flag(q, k, v).items()}


def _sdpa_inputs(dtype: torch.dtype, shape: tuple[int, ...], seed: int) -> list[torch.Tensor]:
    if dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"the flag only concerns float16 and bfloat16, got {dtype}")
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g).to(dtype) for _ in range(3)]


def _math_sdpa_by_flag(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> dict[bool, torch.Tensor]:
    # The math backend's output with the reduction flag off and on, the flag restored after.
    from torch.nn.attention import SDPBackend, sdpa_kernel

    out = {}
    with knobs_restored():
        for flag in (False, True):
            torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(flag)
            with sdpa_kernel(SDPBackend.MATH):
                out[flag] = F.scaled_dot_product_attention(q, k, v)
    return out


def _sdpa_steps(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    # The math backend's steps: both operands scaled by sqrt(1/sqrt(d)), then matmul,
    # softmax, matmul; each op on q, k, v's dtype rounds its own result to that dtype.
    s = (1 / q.size(-1) ** 0.5) ** 0.5
    attn = (q * s) @ (k.transpose(-2, -1) * s)
    return F.softmax(attn, dim=-1) @ v


def sdpa_math_paths(
    dtype: torch.dtype = torch.bfloat16, shape: tuple[int, ...] = (1, 4, 256, 64), seed: int = 0
) -> dict[str, bool]:
    """Which computation math-backend SDPA in ``dtype`` is, bit for bit, with the flag off and on.

    With ``allow_fp16_bf16_reduction_math_sdp(False)`` (the default) the math
    backend converts q, k and v to fp32, runs every step there and rounds the
    output once; with ``True`` it runs the same steps on the ``dtype`` tensors,
    so each op rounds its stored result to ``dtype``.  Returns, for each flag
    value, whether the output equals each of the two rebuilds.

    >>> import torch
    >>> sdpa_math_paths(torch.float16, shape=(1, 1, 32, 16))  # doctest: +NORMALIZE_WHITESPACE
    {'flag off = fp32 steps, rounded once': True, 'flag off = steps in the dtype': False,
     'flag on = fp32 steps, rounded once': False, 'flag on = steps in the dtype': True}
    >>> sdpa_math_paths(torch.float32)
    Traceback (most recent call last):
    ...
    ValueError: the flag only concerns float16 and bfloat16, got torch.float32
    """
    q, k, v = _sdpa_inputs(dtype, shape, seed)
    models = {
        "fp32 steps, rounded once": _sdpa_steps(q.float(), k.float(), v.float()).to(dtype),
        "steps in the dtype": _sdpa_steps(q, k, v),
    }
    return {f"flag {'on' if flag else 'off'} = {name}": torch.equal(got, model)
            for flag, got in _math_sdpa_by_flag(q, k, v).items() for name, model in models.items()}


def setter_refusals(values: list[str]) -> dict[str, dict[str, str | None]]:
    """What each ``fp32_precision`` setter answers to each of ``values``: the error, or ``None``.

    ``{value: {attribute: RuntimeError message or None}}``, every setter tried
    inside :func:`knobs_restored`; JSON-able, for :func:`explainers.releases.run_under`.

    >>> r = setter_refusals(["bf16", "fp8"])
    >>> r["bf16"]["torch.backends.mkldnn.matmul.fp32_precision"], r["fp8"]["torch.backends.fp32_precision"]
    (None, 'Unknown precision: fp8')
    >>> setter_refusals("bf16")
    Traceback (most recent call last):
    ...
    TypeError: values must be a list of strings, got 'bf16'
    """
    from explainers.precision.knobs import FP32_PRECISION_NODES, python_name

    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        raise TypeError(f"values must be a list of strings, got {values!r}")
    out: dict[str, dict[str, str | None]] = {}
    for value in values:
        out[value] = {}
        for backend, op in FP32_PRECISION_NODES:
            name = python_name(f"{backend}.{op}")
            owner = torch
            for part in name.split(".")[1:-1]:
                owner = getattr(owner, part)
            with knobs_restored():
                try:
                    owner.fp32_precision = value
                except RuntimeError as exc:
                    out[value][name] = str(exc).splitlines()[0]
                else:
                    out[value][name] = None
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
