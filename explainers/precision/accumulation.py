"""Where PyTorch accumulates: probes of the accumulator dtype (``acc_type``) of reductions and matmuls.

The accumulation dtype (``acc_type`` in ``aten/src/ATen/AccumulateType.h``) is
not user-visible, so it is inferred from behaviour: sum values whose exact
total is known and see whether the error is larger than rounding the exact
answer once to the output dtype would give.

>>> import torch
>>> running_sum(torch.bfloat16, 0.1, 5000)   # a bf16 accumulator stalls
32.0
>>> torch.full((5000,), 0.1, dtype=torch.bfloat16).sum().item()  # sum() does not
500.0
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from explainers.page.torchsource import installed_source

__all__ = [
    "running_sum",
    "ulp",
    "AccProbe",
    "PROBE_OPS",
    "HEADER_CPU_ACC",
    "header_acc_types",
    "cancellation_data",
    "PRODUCT_OPS",
    "product_data",
    "probe_accumulator",
    "accumulator_table",
    "emulated_dot_error",
]


_FLOATS = (torch.bfloat16, torch.float16, torch.float32, torch.float64)


def _check_float_dtype(dtype: torch.dtype) -> None:
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__}")
    if dtype not in _FLOATS:
        raise ValueError(f"dtype must be one of {[str(d) for d in _FLOATS]}, got {dtype}")


def running_sum(dtype: torch.dtype, value: float, steps: int) -> float:
    """``acc = acc + value`` ``steps`` times with the accumulator stored in ``dtype``.

    This is what "accumulating in bf16" means: every partial sum is rounded to
    bf16.  Once ``value`` is below half an ulp of ``acc`` the sum stops growing.

    >>> import torch
    >>> running_sum(torch.float16, 0.1, 5000)
    256.0
    >>> running_sum(torch.int32, 1, 2)
    Traceback (most recent call last):
    ...
    ValueError: dtype must be one of ['torch.bfloat16', 'torch.float16', 'torch.float32', 'torch.float64'], got torch.int32
    """
    _check_float_dtype(dtype)
    if not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be a non-negative int, got {steps!r}")
    acc = torch.zeros((), dtype=dtype)
    step = torch.tensor(value, dtype=dtype)
    for _ in range(steps):
        acc = acc + step
    return acc.item()


def ulp(x: float, dtype: torch.dtype) -> float:
    """Spacing of ``dtype`` values at ``|x|`` (the gap to the next value away from zero).

    >>> import torch
    >>> ulp(1.0, torch.bfloat16), ulp(1.0, torch.float16), ulp(1e6, torch.float32)
    (0.0078125, 0.0009765625, 0.0625)
    """
    _check_float_dtype(dtype)
    t = torch.tensor(abs(x), dtype=dtype)
    return float(torch.nextafter(t, torch.tensor(float("inf"), dtype=dtype)) - t)


@dataclass(frozen=True)
class AccProbe:
    """What one probe saw: an op's error, in ulps of its output dtype."""

    op: str
    dtype: torch.dtype
    n: int
    result: float
    exact: float
    err_ulps: float

    @property
    def verdict(self) -> str:
        """``"wider"`` (error within the final rounding), ``"same"`` (error of several ulps), or ``"unclear"``."""
        if self.err_ulps <= 0.5 + 1e-9:
            return "wider"
        if self.err_ulps >= 2.0:
            return "same"
        return "unclear"


def _sum(x):
    return x.sum()


def _mean(x):
    return x.mean()


def _nansum(x):
    return x.nansum()


def _cumsum_last(x):
    return x.cumsum(0)[-1]


def _prod(x):
    return x.prod()


def _cumprod_last(x):
    return x.cumprod(0)[-1]


def _var(x):
    return x.var()


def _std(x):
    return x.std()


def _norm(x):
    return torch.linalg.vector_norm(x)


def _dot_ones(x):
    return torch.dot(x, torch.ones_like(x))


def _mm(x):
    return (x[None, :] @ torch.ones_like(x)[:, None])[0, 0]


#: The reductions probed, with their exact (fp64) counterpart applied to the same values.
#: ``prod`` and ``cumprod[-1]`` run on :func:`product_data`, the rest on :func:`cancellation_data`.
PROBE_OPS: dict[str, tuple[Callable, Callable]] = {
    "sum": (_sum, _sum),
    "mean": (_mean, _mean),
    "nansum": (_nansum, _nansum),
    "cumsum[-1]": (_cumsum_last, _sum),
    "prod": (_prod, _prod),
    "cumprod[-1]": (_cumprod_last, _prod),
    "var": (_var, _var),
    "std": (_std, _std),
    "linalg.vector_norm": (_norm, _norm),
    "dot": (_dot_ones, _sum),
    "mm": (_mm, _sum),
}

#: The ops whose probe multiplies instead of adding.
PRODUCT_OPS = frozenset({"prod", "cumprod[-1]"})

# C++ spellings in AccumulateType.h of the dtypes the probe uses.
_CPP_DTYPES = {
    "BFloat16": torch.bfloat16,
    "Half": torch.float16,
    "float": torch.float32,
    "double": torch.float64,
}


def header_acc_types(device: str = "CPU") -> dict[torch.dtype, torch.dtype]:
    """The ``acc_type`` table of the installed ``ATen/AccumulateType.h`` for ``device``.

    Parsed from its ``CPU_ACC_TYPE(t, acc_t)`` / ``CUDA_ACC_TYPE(t, acc_t)``
    lines, the table the templates use (the header's prose comment says
    ``double`` for every floating type on CPU; the table does not).  Only the
    floating dtypes the probe uses are kept.

    >>> import torch
    >>> header_acc_types()[torch.bfloat16], header_acc_types("CUDA")[torch.float32]
    (torch.float32, torch.float32)
    >>> header_acc_types("XPU")
    Traceback (most recent call last):
    ...
    ValueError: device must be 'CPU' or 'CUDA', got 'XPU'
    """
    import re

    if device not in ("CPU", "CUDA"):
        raise ValueError(f"device must be 'CPU' or 'CUDA', got {device!r}")
    text = installed_source("include/ATen/AccumulateType.h")
    table = {}
    for t, acc in re.findall(rf"^{device}_ACC_TYPE\((\w+), (\w+)\)", text, flags=re.M):
        if t in _CPP_DTYPES and acc in _CPP_DTYPES:
            table[_CPP_DTYPES[t]] = _CPP_DTYPES[acc]
    if set(table) != set(_CPP_DTYPES.values()):
        raise RuntimeError(f"AccumulateType.h: no {device}_ACC_TYPE line for some of {list(_CPP_DTYPES)}")
    return table


#: CPU column of the installed AccumulateType.h (Half/BFloat16 -> float, float -> double).
HEADER_CPU_ACC: dict[torch.dtype, torch.dtype] = header_acc_types("CPU")


# (n, L) per dtype: half the values are L + u, half -L + u, u ~ U[0, 1).  The
# running partial sums reach about n*L/2 while the exact total is only about
# n/2, so an accumulator in the input dtype loses the small parts (in any
# summation order that does not pair +L with -L), while the next wider type
# holds every partial sum exactly.
_PROBE_DATA = {
    torch.bfloat16: (10_000, 16.0),
    torch.float16: (10_000, 16.0),
    torch.float32: (1_000_000, 1024.0),
}


def cancellation_data(dtype: torch.dtype, n: int, big: float, seed: int = 0) -> torch.Tensor:
    """``n`` values in ``dtype``: the first half ``big + u``, the rest ``-big + u``, ``u ~ U[0, 1)``.

    >>> import torch
    >>> x = cancellation_data(torch.float32, 4, 8.0)
    >>> [int(v) for v in x.floor()]
    [8, 8, -8, -8]
    """
    if n < 2:
        raise ValueError(f"n must be >= 2, got {n}")
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(n, generator=g, dtype=torch.float64)
    sign = torch.ones(n, dtype=torch.float64)
    sign[n // 2 :] = -1
    return (sign * big + u).to(dtype)


# n per dtype for the product probe: values 1 + 4 ulp(1) * v, v ~ U[-1, 1), whose running
# product wanders around 1 (it neither overflows nor underflows) while every multiplication
# in the input dtype rounds.
_PRODUCT_N = {torch.bfloat16: 2000, torch.float16: 2000, torch.float32: 10_000}


def product_data(dtype: torch.dtype, n: int, seed: int = 0) -> torch.Tensor:
    """``n`` values in ``dtype`` within 4 ulps of 1 (``1 + 4 ulp(1) v``, ``v ~ U[-1, 1)``).

    Their exact product (fp64 on the same values) stays near 1, so a product
    accumulated in ``dtype`` rounds at every step while one accumulated wider
    rounds once.

    >>> import torch
    >>> x = product_data(torch.bfloat16, 1000)
    >>> bool(((x - 1).abs() <= 4 * 2**-7).all()), len(set(x.tolist())) > 4
    (True, True)
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    g = torch.Generator().manual_seed(seed)
    v = 2 * torch.rand(n, generator=g, dtype=torch.float64) - 1
    return (1 + 4 * ulp(1.0, dtype) * v).to(dtype)


def probe_accumulator(op: str, dtype: torch.dtype, seed: int = 0) -> AccProbe:
    """Run ``op`` on its probe data (:func:`cancellation_data`, or :func:`product_data` for products) in ``dtype``; measure its error in output ulps.

    The exact answer comes from fp64 on the same (already rounded) values.  If
    the op accumulated in a wider type, its only error is the final rounding to
    ``dtype``: at most half an ulp.  Accumulating in ``dtype`` itself costs
    many ulps on this data.

    >>> import torch
    >>> probe_accumulator("sum", torch.bfloat16).verdict
    'wider'
    >>> probe_accumulator("cumsum[-1]", torch.float32).verdict
    'wider'
    >>> probe_accumulator("prod", torch.float16).verdict   # CPU prod multiplies in the input dtype
    'same'
    >>> probe_accumulator("median", torch.float32)
    Traceback (most recent call last):
    ...
    ValueError: unknown op 'median'; choose from ['sum', 'mean', 'nansum', 'cumsum[-1]', 'prod', 'cumprod[-1]', 'var', 'std', 'linalg.vector_norm', 'dot', 'mm']
    """
    if op not in PROBE_OPS:
        raise ValueError(f"unknown op {op!r}; choose from {list(PROBE_OPS)}")
    if dtype not in _PROBE_DATA:
        raise ValueError(
            f"dtype must be one of {[str(d) for d in _PROBE_DATA]} (nothing wider to compare with), got {dtype}"
        )
    if op in PRODUCT_OPS:
        n = _PRODUCT_N[dtype]
        x = product_data(dtype, n, seed)
    else:
        n, big = _PROBE_DATA[dtype]
        x = cancellation_data(dtype, n, big, seed)
    fn, exact_fn = PROBE_OPS[op]
    result = float(fn(x))
    exact = float(exact_fn(x.double()))
    return AccProbe(op, dtype, n, result, exact, abs(result - exact) / ulp(exact, dtype))


def accumulator_table(
    ops: Sequence[str] | None = None,
    dtypes: Sequence[torch.dtype] = (torch.bfloat16, torch.float16, torch.float32),
) -> list[dict]:
    """Probe every op and dtype; each row also carries what AccumulateType.h's CPU column says.

    ``agrees`` is ``True`` when the probe saw a wider accumulator, as the header
    predicts for every floating dtype on CPU.

    >>> import torch
    >>> rows = accumulator_table(["sum"], [torch.float16])
    >>> rows[0]["probe"], rows[0]["header_cpu"], rows[0]["agrees"]
    ('wider than float16', 'float32', True)
    """
    rows = []
    for op in ops or list(PROBE_OPS):
        for dtype in dtypes:
            p = probe_accumulator(op, dtype)
            name = str(dtype).removeprefix("torch.")
            probe = {"wider": f"wider than {name}", "same": name, "unclear": "unclear"}[p.verdict]
            rows.append(
                {
                    "op": op,
                    "dtype": name,
                    "n": p.n,
                    "err_ulps": p.err_ulps,
                    "probe": probe,
                    "header_cpu": str(HEADER_CPU_ACC[dtype]).removeprefix("torch."),
                    "agrees": p.verdict == "wider",
                }
            )
    return rows


def emulated_dot_error(k: int = 4096, size: int = 32, seed: int = 0) -> dict[str, float]:
    """Max error against fp64 of ``size x k @ k x size`` with the accumulator in bf16 vs fp32.

    Products are formed exactly (bf16 x bf16 fits in fp32); the running sum
    over ``k`` is stored either in bf16 (rounded every step) or in fp32.  Also
    reports the fp32 sum rounded once to bf16, the exact (fp64) sum rounded once
    to bf16 (the error no bf16 output can avoid), and ``torch.mm`` on the bf16
    inputs.

    >>> e = emulated_dot_error(k=256, size=4)
    >>> e["bf16_accumulator"] > e["fp32_accumulator"]
    True
    """
    if k < 1 or size < 1:
        raise ValueError(f"k and size must be >= 1, got k={k}, size={size}")
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(size, k, generator=g).bfloat16()
    b = torch.randn(k, size, generator=g).bfloat16()
    ref = a.double() @ b.double()
    acc16 = torch.zeros(size, size, dtype=torch.bfloat16)
    acc32 = torch.zeros(size, size, dtype=torch.float32)
    af, bf = a.float(), b.float()
    for i in range(k):
        prod = af[:, i, None] * bf[None, i, :]  # exact in fp32
        acc16 = (acc16.float() + prod).bfloat16()
        acc32 = acc32 + prod
    return {
        "bf16_accumulator": float((acc16.double() - ref).abs().max()),
        "fp32_accumulator": float((acc32.double() - ref).abs().max()),
        "fp32_accumulator, rounded to bf16": float((acc32.bfloat16().double() - ref).abs().max()),
        "exact, rounded to bf16": float((ref.bfloat16().double() - ref).abs().max()),
        "torch.mm (bf16 out)": float(((a @ b).double() - ref).abs().max()),
    }
