"""Rule 1, defer to the hardware: what this CPU offers, and which oneDNN kernel each matmul ran.

>>> sorted(cpu_features())
['amx_int8', 'amx_tile', 'avx512_bf16', 'cpu_capability', 'onednn_bf16_gate', 'onednn_fp16_gate']
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from explainers.checks import is_int

__all__ = [
    "cpu_features",
    "library_message",
    "fresh_python",
    "OneDNNCall",
    "ONEDNN_PROBES",
    "onednn_calls",
]


def cpu_features() -> dict[str, object]:
    """What this CPU offers to the low-precision paths, as torch sees it.

    ``avx512_bf16``/``amx_tile`` come from ``torch.cpu`` (cpuinfo).  ``amx_int8``
    is the ``amx_int8`` entry of ``torch.cpu.get_capabilities()`` (on 2.14.1 and
    2.15.0), which asks cpuinfo, the library whose ``cpuinfo_has_x86_amx_int8()``
    decides ``_scaled_mm``'s oneDNN path; ``False`` where the mapping has no such
    entry (non-x86 CPUs, which have no AMX).  The two
    ``onednn_*_gate`` values are ``torch.ops.mkldnn._is_mkldnn_bf16_supported()``
    and its fp16 twin, the checks PyTorch makes before it sends bf16 (fp16)
    work to oneDNN.

    >>> sorted(cpu_features())
    ['amx_int8', 'amx_tile', 'avx512_bf16', 'cpu_capability', 'onednn_bf16_gate', 'onednn_fp16_gate']
    """
    ops = torch.ops.mkldnn
    return {
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "avx512_bf16": bool(torch.cpu._is_avx512_bf16_supported()),
        "amx_tile": bool(torch.cpu._is_amx_tile_supported()),
        "amx_int8": bool(torch.cpu.get_capabilities().get("amx_int8", False)),
        "onednn_bf16_gate": bool(ops._is_mkldnn_bf16_supported()),
        "onednn_fp16_gate": bool(ops._is_mkldnn_fp16_supported()),
    }


def library_message(fragment: str, library: str = "libtorch_cpu.so") -> str:
    """The NUL-terminated string in the installed torch library that contains ``fragment``.

    For error messages that name a condition, e.g. what oneDNN's bf16 matmul
    path requires of the CPU.  The library is searched, not loaded.

    >>> library_message("mkldnn_matmul bf16 path needs").startswith("mkldnn_matmul: ")
    True
    >>> library_message("no such message, surely")
    Traceback (most recent call last):
    ...
    LookupError: 'no such message, surely' occurs in no string of libtorch_cpu.so
    """
    import mmap

    path = Path(torch.__file__).parent / "lib" / library
    if not path.is_file():
        raise FileNotFoundError(f"{library} is not in the installed torch ({path.parent})")
    needle = fragment.encode()
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        at = data.find(needle)
        if at < 0:
            raise LookupError(f"{fragment!r} occurs in no string of {library}")
        start = data.rfind(b"\0", 0, at) + 1
        end = data.find(b"\0", at)
        return data[start:end].decode("utf-8", "replace")


def fresh_python(code: str, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    """Run ``code`` in a new process of this Python; return its stdout.

    For global state that a running process cannot get back (a fresh
    fp32_precision tree) or that is read at start-up (``ONEDNN_VERBOSE``).
    ``env`` adds to this process's environment.  A failing run raises with
    the end of its stderr.

    >>> fresh_python("print(6 * 7)").strip()
    '42'
    >>> fresh_python("raise SystemExit('no')")
    Traceback (most recent call last):
    ...
    RuntimeError: the child Python failed (exit 1):
    no
    """
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True, text=True, env=dict(os.environ, **(env or {})),
        timeout=timeout, check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the child Python failed (exit {proc.returncode}):\n{proc.stderr[-2000:].strip()}")
    return proc.stdout


@dataclass(frozen=True)
class OneDNNCall:
    """One oneDNN primitive execution, from ``ONEDNN_VERBOSE``: its kind, implementation, attributes."""

    kind: str
    impl: str
    data_types: str
    attrs: str

    @property
    def fpmath(self) -> str | None:
        """The ``attr-fpmath`` mode, e.g. ``"bf16"``, or ``None`` when strict (not printed).

        >>> OneDNNCall("matmul", "x", "f32", "attr-scratchpad:user attr-fpmath:bf16").fpmath
        'bf16'
        """
        for attr in self.attrs.split():
            if attr.startswith("attr-fpmath:"):
                return attr.split(":", 1)[1].split(":")[0]
        return None


#: Matmuls to run under ``ONEDNN_VERBOSE=1``; each is a statement over fp32 ``a`` (m x k),
#: ``b`` (k x n) and ``bias`` (n), the sizes :func:`onednn_calls` is given.
ONEDNN_PROBES: dict[str, str] = {
    "fp32 `a @ b`": "a @ b",
    "fp32 `a @ b`, `mkldnn.matmul.fp32_precision = 'bf16'`": (
        "torch.backends.mkldnn.matmul.fp32_precision = 'bf16'; a @ b; "
        "torch.backends.mkldnn.matmul.fp32_precision = 'none'"
    ),
    "bf16 `a @ b`": "a.bfloat16() @ b.bfloat16()",
    "bf16 `addmm(bias, a, b)`": "torch.addmm(bias.bfloat16(), a.bfloat16(), b.bfloat16())",
    "fp16 `a @ b`": "a.half() @ b.half()",
}

_MARK = "### probe "


def _parse_verbose(line: str) -> OneDNNCall | None:
    # onednn_verbose,v1,primitive,exec,cpu,<kind>,<impl>,<prop>,<mds>,<attrs>,<aux>,<problem>,<time>
    fields = line.split(",")
    if len(fields) < 13 or fields[2:4] != ["primitive", "exec"]:
        return None
    dtypes = " ".join(md.split(":")[0] + ":" + md.split(":")[1] for md in fields[8].split() if ":" in md)
    return OneDNNCall(kind=fields[5], impl=fields[6], data_types=dtypes, attrs=fields[9])


def onednn_calls(
    probes: dict[str, str] | None = None, m: int = 256, k: int = 1024, n: int = 256, timeout: float = 300
) -> dict[str, list[OneDNNCall]]:
    """The oneDNN primitives each probe executes, from a fresh Python run with ``ONEDNN_VERBOSE=1``.

    oneDNN reads ``ONEDNN_VERBOSE`` when it starts, so the probes run in a
    child process; its log lines are parsed into :class:`OneDNNCall` (the
    execution times they carry are dropped).  A probe that does not reach
    oneDNN gets an empty list.  Each probe sees ``a`` (m x k), ``b`` (k x n) and
    ``bias`` (n), fp32.

    >>> calls = onednn_calls({"fp32": "a @ b"}, m=8, k=16, n=8)
    >>> list(calls), calls["fp32"]
    (['fp32'], [])
    >>> onednn_calls(m=0)
    Traceback (most recent call last):
    ...
    ValueError: sizes must be positive ints, got m=0, k=1024, n=256
    """
    if not all(is_int(d) and d > 0 for d in (m, k, n)):
        raise ValueError(f"sizes must be positive ints, got m={m!r}, k={k!r}, n={n!r}")
    probes = ONEDNN_PROBES if probes is None else probes
    lines = [
        "import torch",
        "g = torch.Generator().manual_seed(0)",
        f"a = torch.randn({m}, {k}, generator=g); b = torch.randn({k}, {n}, generator=g)",
        f"bias = torch.randn({n}, generator=g)",
    ]
    for i, stmt in enumerate(probes.values()):
        lines += [f"print({_MARK + str(i)!r}, flush=True)", stmt, "import sys; sys.stdout.flush()"]
    stdout = fresh_python("\n".join(lines), env={"ONEDNN_VERBOSE": "1"}, timeout=timeout)
    names = list(probes)
    calls: dict[str, list[OneDNNCall]] = {name: [] for name in names}
    current = None
    for line in stdout.splitlines():
        if line.startswith(_MARK):
            current = names[int(line[len(_MARK):])]
        elif current is not None and line.startswith("onednn_verbose"):
            call = _parse_verbose(line)
            if call is not None:
                calls[current].append(call)
    return calls
