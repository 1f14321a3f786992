"""The CPU softmax of a bf16 or fp16 row shorter than one fp32 vector, rebuilt from scalar fp32 steps.

ATen's CPU softmax over the last dimension of a bf16 or fp16 tensor
(``_vec_softmax_lastdim`` for reduced floating types, in
``aten/src/ATen/native/cpu/SoftMaxKernel.cpp``) widens the row to fp32,
exponentiates and sums it in fp32 vectors over the row's whole vectors, and
finishes the values left over one at a time: a scalar ``std::exp`` per value,
each added to the sum after the vector lanes are reduced.  A row shorter than
one vector (:func:`fp32_lanes` values) is all leftover, so its softmax is

1. ``m``: the largest value, in fp32;
2. ``e[j] = expf(x[j] - m)``, with the C library's ``expf``;
3. ``s = e[0] + e[1] + ...``, left to right in fp32;
4. ``e[j] * (1 / s)`` in fp32, rounded once to the row's dtype.

:func:`short_row_softmax` runs exactly those steps, calling glibc's ``expf``
through :mod:`ctypes`.

>>> import torch
>>> x = (torch.arange(-3.0, 4.0) / 3).to(torch.float16)
>>> torch.equal(short_row_softmax(x), torch.softmax(x, dim=-1))
True
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

__all__ = ["at_capability", "fp32_lanes", "fp32_rows_off", "libm_expf", "one_rounding_off", "save_b_prime", "short_row_softmax",
           "short_rows_off", "sleef_expf16"]

_LIBM = ctypes.CDLL(ctypes.util.find_library("m"))
_LIBM.expf.restype = ctypes.c_float
_LIBM.expf.argtypes = [ctypes.c_float]

#: fp32 values per ATen CPU vector, by the capability torch reports: ``VECTOR_WIDTH``
#: in ``ATen/cpu/vec/vec_base.h`` is 64 bytes under AVX512 and 32 bytes otherwise on x86
_LANES = {"AVX512": 16, "AVX2": 8, "DEFAULT": 8}


def fp32_lanes(capability: str | None = None) -> int:
    """fp32 values in one of ATen's CPU vectors at ``capability`` (default: the one torch runs).

    >>> fp32_lanes("AVX512"), fp32_lanes("AVX2"), fp32_lanes("DEFAULT")
    (16, 8, 8)
    """
    return _LANES[capability or torch.backends.cpu.get_cpu_capability()]


def libm_expf(x: torch.Tensor) -> torch.Tensor:
    """The C library's ``expf`` of every value of an fp32 tensor, one call per value.

    >>> libm_expf(torch.tensor([0.0, 1.0, -200.0])).tolist()
    [1.0, 2.7182817459106445, 0.0]
    """
    if x.dtype != torch.float32:
        raise TypeError(f"libm_expf takes fp32 values, got {x.dtype}")
    return torch.tensor([_LIBM.expf(v) for v in x.flatten().tolist()], dtype=torch.float32).reshape(x.shape)


# Sleef_expf16_u10 takes and returns a __m512 in a register, which ctypes cannot pass: a
# three-line C++ shim, compiled once with g++, calls it over an array, 16 values at a time.
_SHIM = r"""
#include <immintrin.h>
#include <stdint.h>
typedef __m512 (*exp16_t)(__m512);
extern "C" void exp16_all(void *fn, const float *in, float *out, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) _mm512_storeu_ps(out + i, ((exp16_t)fn)(_mm512_loadu_ps(in + i)));
}
"""


def _shim() -> ctypes.CDLL:
    from explainers.releases import cache_root

    so = cache_root() / "sleef-shim" / f"exp16-{hashlib.sha256(_SHIM.encode()).hexdigest()[:12]}.so"
    if not so.exists():
        gxx = shutil.which("g++")
        if gxx is None:
            raise RuntimeError("sleef_expf16 compiles a small shim and needs g++ on PATH")
        so.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            src, out = Path(tmp) / "shim.cpp", Path(tmp) / "shim.so"
            src.write_text(_SHIM)
            subprocess.run([gxx, "-O2", "-mavx512f", "-shared", "-fPIC", str(src), "-o", str(out)], check=True)
            os.replace(out, so)  # atomic: a concurrent build never loads half a file
    return ctypes.CDLL(str(so))


@functools.cache
def _sleef_expf16_address() -> int:
    lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
    return ctypes.cast(lib.Sleef_expf16_u10, ctypes.c_void_p).value


def sleef_expf16(x: torch.Tensor) -> torch.Tensor:
    """``Sleef_expf16_u10`` from this torch's ``libtorch_cpu.so`` on every value of an fp32 tensor.

    It is the function ``Vectorized<float>::exp()`` calls under AVX512
    (``ATen/cpu/vec/vec512/vec512_float.h``); the values are fed 16 at a time,
    zero-padded.  Needs a CPU with AVX512F.

    >>> sleef_expf16(torch.tensor([0.0, 1.0, -200.0])).tolist()
    [1.0, 2.7182817459106445, 0.0]
    """
    if x.dtype != torch.float32:
        raise TypeError(f"sleef_expf16 takes fp32 values, got {x.dtype}")
    fn = _sleef_expf16_address()
    flat = x.contiguous().flatten()
    buf = torch.cat([flat, flat.new_zeros((-flat.numel()) % 16)]).contiguous()
    out = torch.empty_like(buf)
    _shim().exp16_all(ctypes.c_void_p(fn), ctypes.c_void_p(buf.data_ptr()), ctypes.c_void_p(out.data_ptr()),
                      ctypes.c_int64(buf.numel()))
    return out[:flat.numel()].reshape(x.shape)


def short_row_softmax(x: torch.Tensor, *, exp=libm_expf) -> torch.Tensor:
    """Softmax over the last dim of ``x`` (bf16 or fp16) by the four scalar steps of the module docstring.

    ``exp`` computes step 2 (default: glibc's ``expf``); passing another
    function (:func:`sleef_expf16`, say) is the ablation of that step.  On an
    fp32 row the result stays fp32.

    >>> short_row_softmax(torch.tensor([[0.0, 0.0]], dtype=torch.bfloat16)).tolist()
    [[0.5, 0.5]]
    """
    x32 = x.float()
    e = exp(x32 - x32.amax(dim=-1, keepdim=True))
    s = e[..., 0]
    for j in range(1, x.shape[-1]):
        s = s + e[..., j]
    return (e * (1 / s).unsqueeze(-1)).to(x.dtype)


def short_rows_off(dtype: torch.dtype, lengths: Iterable[int], *, rows: int = 4096, scale: float = 2.0,
                   seed: int = 0, exp=libm_expf) -> dict[int, tuple[int, int]]:
    """Per row length: values where ``torch.softmax`` in ``dtype`` differs from :func:`short_row_softmax`.

    Each length gets ``rows`` rows of N(0, ``scale``²) draws rounded to
    ``dtype``; ``exp`` is :func:`short_row_softmax`'s step 2.  Returns
    ``{length: (values that differ, values)}``.

    >>> short_rows_off(torch.bfloat16, (3, 5), rows=64)
    {3: (0, 192), 5: (0, 320)}
    """
    g = torch.Generator().manual_seed(seed)
    out = {}
    for n in lengths:
        x = (torch.randn(rows, n, generator=g, dtype=torch.float64) * scale).to(dtype)
        out[n] = (int((torch.softmax(x, dim=-1) != short_row_softmax(x, exp=exp)).sum()), x.numel())
    return out


def fp32_rows_off(lengths: list[int], *, rows: int = 4096, scale: float = 2.0, seed: int = 0) -> dict[str, list[int]]:
    """:func:`short_rows_off` for fp32 rows with the C library's ``expf``, in JSON's terms, for :func:`at_capability`.

    At the DEFAULT capability ``Vectorized<float>::exp()`` maps ``std::exp``,
    so the fp32 softmax of a row shorter than one vector is the four steps
    with ``expf``; under AVX512 it calls Sleef instead and differs.

    >>> at_capability("default", "explainers.softmax_tail:fp32_rows_off", lengths=[1, 7], rows=64)
    {'1': [0, 64], '7': [0, 448]}
    """
    return {str(n): list(v) for n, v in short_rows_off(torch.float32, lengths, rows=rows, scale=scale,
                                                         seed=seed).items()}


def one_rounding_off(dtype: str, seeds: Iterable[int], n_experts: Iterable[int], *, tokens: int = 4096,
                     k: int = 8, scale: float = 2.0) -> dict[str, Any]:
    """Router A's weights against the fp32 softmax rounded once, and against :func:`short_row_softmax`.

    Over every (seed, n_experts): A is ``topk_softmax`` of
    :mod:`explainers.precision.topk_router` on N(0, ``scale``²) logits in
    ``dtype`` (a name: ``"float16"``); its softmax runs over rows of ``k``
    values.  Returns the capability torch ran at, the weights, and the
    weights that differ from each rebuild: the fp32 kernel's output rounded
    once, :func:`short_row_softmax`, and :func:`short_row_softmax` with
    :func:`sleef_expf16` in place of ``expf``; and the weights where that last
    rebuild differs from the fp32 kernel's output rounded once.  Needs AVX512F
    (for :func:`sleef_expf16`).

    >>> r = one_rounding_off("bfloat16", range(2), (32,), tokens=64, k=4)
    >>> r["weights"], r["off_short_row"]
    (512, 0)
    """
    from explainers.precision.router import _router_logits
    from explainers.precision.topk_router import topk_softmax

    dt = getattr(torch, dtype)
    weights = off_once = off_short = off_sleef = sleef_not_fp32 = 0
    for n in n_experts:
        for seed in seeds:
            logits = _router_logits(tokens, n, scale, seed).to(dt)
            _, wa = topk_softmax(logits, k)
            vals, _ = torch.topk(logits, k, dim=-1)
            weights += wa.numel()
            once = torch.softmax(vals.float(), dim=-1).to(dt)
            off_once += int((wa != once).sum())
            off_short += int((wa != short_row_softmax(vals)).sum())
            sleef = short_row_softmax(vals, exp=sleef_expf16)
            off_sleef += int((wa != sleef).sum())
            sleef_not_fp32 += int((sleef != once).sum())
    return {"capability": torch.backends.cpu.get_cpu_capability(), "weights": weights,
            "off_fp32_once": off_once, "off_short_row": off_short, "off_short_row_sleef": off_sleef,
            "sleef_rebuild_off_fp32_once": sleef_not_fp32}


def save_b_prime(dtype: str, seeds: Iterable[int], n_experts: Iterable[int], out: str, *, tokens: int = 4096,
                 k: int = 8, scale: float = 2.0) -> str:
    """Save router B′'s experts and weights over every (seed, n_experts) to ``out``; return the capability.

    B′ is ``full_softmax_then_renorm(logits, k, softmax_dtype=torch.float32)``
    of :mod:`explainers.precision.topk_router` on the logits of
    :func:`one_rounding_off`; the file holds the concatenated expert indices
    and weights (``torch.save``), so runs at two capabilities
    (:func:`at_capability`) can be compared bit for bit.

    >>> import tempfile, torch
    >>> path = tempfile.mkdtemp() + "/b.pt"
    >>> save_b_prime("bfloat16", range(1), (16,), path, tokens=8, k=2) in {"DEFAULT", "AVX2", "AVX512"}
    True
    >>> [t.shape for t in torch.load(path)]
    [torch.Size([16]), torch.Size([16])]
    """
    from explainers.precision.router import _router_logits
    from explainers.precision.topk_router import full_softmax_then_renorm

    dt = getattr(torch, dtype)
    experts, weights = [], []
    for n in n_experts:
        for seed in seeds:
            idx, w = full_softmax_then_renorm(_router_logits(tokens, n, scale, seed).to(dt), k,
                                              softmax_dtype=torch.float32)
            experts.append(idx.flatten())
            weights.append(w.flatten())
    torch.save([torch.cat(experts), torch.cat(weights)], out)
    return torch.backends.cpu.get_cpu_capability()


def at_capability(capability: str, target: str, **kwargs: Any) -> Any:
    """Call ``explainers.<module>:<function>(**kwargs)`` in a fresh interpreter whose ATen kernels run at ``capability``.

    ``ATEN_CPU_CAPABILITY`` (``default``, ``avx2``, ``avx512``, ...) is read
    once per process, so each capability needs its own; arguments and result
    cross as JSON.

    >>> at_capability("default", "explainers.softmax_tail:fp32_lanes")
    8
    """
    module, _, function = target.partition(":")
    if not (module.startswith("explainers.") and function.isidentifier()):
        raise ValueError(f"target must be 'explainers.<module>:<function>', not {target!r}")
    code = ("import importlib, json, sys\n"
            "a = json.loads(sys.argv[1])\n"
            "f = getattr(importlib.import_module(a['module']), a['function'])\n"
            "print(json.dumps(f(**a['kwargs'])))\n")
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability,
           "PYTHONPATH": os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH"))))}
    args = json.dumps({"module": module, "function": function, "kwargs": kwargs})
    out = subprocess.run([sys.executable, "-c", code, args], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])
