"""The global precision knobs: read them, change them inside a ``with`` block, measure what they do on CPU.

Every knob here is process-global state, so everything that changes one goes
through :func:`knobs_restored`, which puts all of them back on exit, also
when the body raises.

>>> import torch
>>> with knobs_restored():
...     torch.backends.fp32_precision = "tf32"
...     torch.backends.mkldnn.matmul.fp32_precision
'tf32'
>>> torch.backends.mkldnn.matmul.fp32_precision
'none'
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F

__all__ = [
    "FP32_PRECISION_NODES",
    "fp32_precision_tree",
    "knobs_restored",
    "legacy_matmul_precision",
    "sdpa_math_reduction_effect",
    "matmul_reduction_flags_effect",
    "mkldnn_fp32_matmul_error",
    "cpu_features",
]

#: The ``(backend, op)`` pairs of the fp32_precision tree (torch 2.14.1), parents first.
FP32_PRECISION_NODES: tuple[tuple[str, str], ...] = (
    ("generic", "all"),
    ("cuda", "all"),
    ("cuda", "matmul"),
    ("cuda", "conv"),
    ("cuda", "rnn"),
    ("mkldnn", "all"),
    ("mkldnn", "matmul"),
    ("mkldnn", "conv"),
    ("mkldnn", "rnn"),
)

# The Python spelling of each node, for display.
_PY_NAME = {
    ("generic", "all"): "torch.backends.fp32_precision",
    ("cuda", "all"): "torch.backends.cudnn.fp32_precision",
    ("cuda", "matmul"): "torch.backends.cuda.matmul.fp32_precision",
    ("cuda", "conv"): "torch.backends.cudnn.conv.fp32_precision",
    ("cuda", "rnn"): "torch.backends.cudnn.rnn.fp32_precision",
    ("mkldnn", "all"): "torch.backends.mkldnn.fp32_precision",
    ("mkldnn", "matmul"): "torch.backends.mkldnn.matmul.fp32_precision",
    ("mkldnn", "conv"): "torch.backends.mkldnn.conv.fp32_precision",
    ("mkldnn", "rnn"): "torch.backends.mkldnn.rnn.fp32_precision",
}


def fp32_precision_tree() -> dict[str, str]:
    """Read every node of the fp32_precision tree, keyed ``"backend.op"``.

    The values are what PyTorch reports, i.e. already resolved through
    inheritance: a node left at ``"none"`` reports its nearest set ancestor.

    >>> tree = fp32_precision_tree()
    >>> tree["generic.all"], tree["mkldnn.matmul"]
    ('none', 'none')
    """
    return {f"{b}.{o}": torch._C._get_fp32_precision_getter(b, o) for b, o in FP32_PRECISION_NODES}


def python_name(node: str) -> str:
    """The attribute a user writes for a ``"backend.op"`` node.

    >>> python_name("mkldnn.matmul")
    'torch.backends.mkldnn.matmul.fp32_precision'
    """
    b, o = node.split(".")
    return _PY_NAME[(b, o)]


def _restore_fp32_tree(saved: dict[str, str]) -> None:
    # The stored (un-inherited) values cannot be read, only the resolved ones.
    # Clear every node, then set, parents first, only the nodes whose
    # resolved value differs: this rebuilds a state that reports `saved`.
    for b, o in FP32_PRECISION_NODES:
        torch._C._set_fp32_precision_setter(b, o, "none")
    for b, o in FP32_PRECISION_NODES:
        want = saved[f"{b}.{o}"]
        if torch._C._get_fp32_precision_getter(b, o) != want:
            torch._C._set_fp32_precision_setter(b, o, want)


@contextlib.contextmanager
def knobs_restored() -> Iterator[None]:
    """Save the precision knobs; restore them on exit, even after an exception.

    Covers the fp32_precision tree, ``torch.set_float32_matmul_precision``
    (where it is readable), the CUDA matmul reduced-precision flags
    (``allow_fp16_reduced_precision_reduction``,
    ``allow_bf16_reduced_precision_reduction``), the math-SDPA reduction flag
    and ``torch._inductor.config.emulate_precision_casts`` if inductor is
    loaded.

    >>> import torch
    >>> try:
    ...     with knobs_restored():
    ...         torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)
    ...         raise KeyError("boom")
    ... except KeyError:
    ...     pass
    >>> torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
    False
    >>> with knobs_restored():
    ...     torch.set_float32_matmul_precision("medium")
    >>> torch.get_float32_matmul_precision(), torch.backends.mkldnn.matmul.fp32_precision
    ('highest', 'none')
    """
    import sys

    m = torch.backends.cuda.matmul
    tree = fp32_precision_tree()
    # The legacy setting is stored apart from the tree; unreadable (RuntimeError)
    # once the two APIs were mixed, and then it cannot be put back as it was.
    try:
        legacy = torch.get_float32_matmul_precision()
    except RuntimeError:
        legacy = None
    fp16_red = m.allow_fp16_reduced_precision_reduction
    bf16_red = m.allow_bf16_reduced_precision_reduction
    sdp = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
    inductor_cfg = sys.modules.get("torch._inductor.config")
    emulate = inductor_cfg.emulate_precision_casts if inductor_cfg is not None else None
    try:
        yield
    finally:
        if legacy is not None:
            # Writes cuda.matmul and mkldnn.matmul too; the tree restore below fixes those.
            torch.set_float32_matmul_precision(legacy)
        _restore_fp32_tree(tree)
        m.allow_fp16_reduced_precision_reduction = fp16_red
        m.allow_bf16_reduced_precision_reduction = bf16_red
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(sdp)
        if inductor_cfg is not None:
            inductor_cfg.emulate_precision_casts = emulate


def legacy_matmul_precision() -> str:
    """``torch.get_float32_matmul_precision()``, or ``"RuntimeError: ..."`` when it refuses.

    It refuses once the legacy and the new API disagree.

    >>> legacy_matmul_precision()
    'highest'
    """
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError as exc:
        return f"RuntimeError: {str(exc).splitlines()[0]}"


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


def matmul_reduction_flags_effect(size: int = 64, k: int = 4096, seed: int = 0) -> dict[str, bool]:
    """Whether CPU ``mm`` output is bitwise identical with the reduced-precision flags on and off.

    >>> all(matmul_reduction_flags_effect(size=8, k=256).values())
    True
    """
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(size, k, generator=g)
    b = torch.randn(k, size, generator=g)
    m = torch.backends.cuda.matmul
    outs: dict[bool, dict[str, torch.Tensor]] = {}
    with knobs_restored():
        for flag in (True, False):
            m.allow_fp16_reduced_precision_reduction = flag
            m.allow_bf16_reduced_precision_reduction = flag
            outs[flag] = {
                "float16": a.half() @ b.half(),
                "bfloat16": a.bfloat16() @ b.bfloat16(),
            }
    return {name: torch.equal(outs[True][name], outs[False][name]) for name in outs[True]}


def mkldnn_fp32_matmul_error(
    setting: str, m: int = 256, k: int = 1024, n: int = 256, seed: int = 0
) -> float:
    """Max error vs fp64 of an fp32 ``mm`` with ``torch.backends.mkldnn.matmul.fp32_precision = setting``.

    Whether ``"bf16"`` changes anything depends on the CPU: oneDNN's bf16 math
    mode is only requested when the CPU supports bf16 (avx512_bf16 or AMX).

    >>> mkldnn_fp32_matmul_error("ieee", m=8, k=64, n=8) < 1e-4
    True
    """
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=g)
    b = torch.randn(k, n, generator=g)
    ref = a.double() @ b.double()
    with knobs_restored():
        torch.backends.mkldnn.matmul.fp32_precision = setting
        return _max_err(a @ b, ref)


def cpu_features() -> dict[str, object]:
    """What this CPU offers to the low-precision paths.

    >>> sorted(cpu_features())
    ['cpu_capability', 'mkldnn_available', 'mkldnn_bf16_supported', 'mkldnn_fp16_supported']
    """
    ops = torch.ops.mkldnn
    return {
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkldnn_available": torch.backends.mkldnn.is_available(),
        "mkldnn_bf16_supported": bool(ops._is_mkldnn_bf16_supported()),
        "mkldnn_fp16_supported": bool(ops._is_mkldnn_fp16_supported()),
    }
