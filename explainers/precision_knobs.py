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
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

__all__ = [
    "FP32_PRECISION_NODES",
    "DEFAULT",
    "fp32_precision_tree",
    "fp32_precision_stored",
    "python_name",
    "knobs_restored",
    "KnobsNotRestorableError",
    "legacy_matmul_precision",
    "legacy_getter_matrix",
    "sdpa_math_reduction_effect",
    "cuda_matmul_knobs_effect",
    "mkldnn_fp32_matmul_errors",
    "arithmetic_verdict",
    "cpu_features",
    "library_message",
    "fresh_python",
    "OneDNNCall",
    "ONEDNN_PROBES",
    "onednn_calls",
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
_ROOT = ("generic", "all")
_PARENT = {
    node: (_ROOT if node[1] == "all" else (node[0], "all"))
    for node in FP32_PRECISION_NODES
    if node != _ROOT
}

#: What :func:`fp32_precision_stored` reports for ATen's internal ``Float32Precision::DEFAULT``
#: ("use legacy backend default unless a parent setting overrides it", ``ATen/Context.h``).
#: ``torch._C._set_fp32_precision_setter`` rejects it (``Unknown precision``), so no
#: Python call can put it back once a node has been set.
DEFAULT = "<default>"

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


def _key(node: tuple[str, str]) -> str:
    return f"{node[0]}.{node[1]}"


def _get(node: tuple[str, str]) -> str:
    return torch._C._get_fp32_precision_getter(*node)


def _set(node: tuple[str, str], value: str) -> None:
    torch._C._set_fp32_precision_setter(*node, value)


def fp32_precision_tree() -> dict[str, str]:
    """Read every node of the fp32_precision tree, keyed ``"backend.op"``.

    The values are what PyTorch reports, i.e. already resolved through
    inheritance: a node left at ``"none"`` reports its nearest set ancestor.

    >>> tree = fp32_precision_tree()
    >>> tree["generic.all"], tree["mkldnn.matmul"]
    ('none', 'none')
    """
    return {_key(n): _get(n) for n in FP32_PRECISION_NODES}


def python_name(node: str) -> str:
    """The attribute a user writes for a ``"backend.op"`` node.

    >>> python_name("mkldnn.matmul")
    'torch.backends.mkldnn.matmul.fp32_precision'
    >>> python_name("cuda.tf32")
    Traceback (most recent call last):
    ...
    ValueError: unknown fp32_precision node 'cuda.tf32'; the nodes are generic.all, cuda.all, ...
    """
    backend, _, op = node.partition(".")
    if (backend, op) not in _PY_NAME:
        raise ValueError(
            f"unknown fp32_precision node {node!r}; the nodes are "
            + ", ".join(_key(n) for n in FP32_PRECISION_NODES[:2])
            + ", ..."
        )
    return _PY_NAME[(backend, op)]


def fp32_precision_stored() -> dict[str, str]:
    """What every node of the tree *holds*, as opposed to what it reports.

    A node holds ``"none"`` (inherit), a precision it was set to, or, for the
    cuDNN conv and rnn leaves of a fresh process, ATen's internal default
    (reported here as :data:`DEFAULT`).  PyTorch only reads resolved values, so
    each node is probed by setting its parent to ``"ieee"`` and then to
    ``"tf32"``: a node that follows both holds ``"none"`` or :data:`DEFAULT`,
    and with every parent at ``"none"`` the first reports ``"none"``, the second
    its legacy default ``"tf32"``.  The parents are written back as found
    (``"none"`` and every precision can be written; only :data:`DEFAULT` cannot).

    >>> stored = fp32_precision_stored()
    >>> stored["generic.all"], stored["cuda.matmul"], stored["cuda.conv"] == DEFAULT
    ('none', 'none', True)
    >>> stored == fp32_precision_stored()    # probing changes nothing
    True
    """
    stored = {_key(_ROOT): _get(_ROOT)}
    try:
        for node in FP32_PRECISION_NODES[1:]:
            parent = _PARENT[node]
            seen = []
            for probe in ("ieee", "tf32"):
                _set(parent, probe)
                seen.append(_get(node))
            if seen != ["ieee", "tf32"]:
                stored[_key(node)] = seen[0]  # set explicitly: ignores its parent
            else:
                # Follows its parent: inherit ("none") or the legacy default. Ask with no parent set.
                _set(parent, "none")
                _set(_ROOT, "none")
                alone = _get(node)
                if alone not in ("none", "tf32"):
                    raise RuntimeError(
                        f"fp32_precision node {_key(node)} reports {alone!r} with no parent set"
                    )
                stored[_key(node)] = "none" if alone == "none" else DEFAULT
            # Put back the parents, so the next node is probed in the real tree.
            _set(_ROOT, stored[_key(_ROOT)])
            if parent != _ROOT:
                _set(parent, stored[_key(parent)])
    finally:
        _set(_ROOT, stored[_key(_ROOT)])
        for mid in (("cuda", "all"), ("mkldnn", "all")):
            if _key(mid) in stored:
                _set(mid, stored[_key(mid)])
    return stored


class KnobsNotRestorableError(RuntimeError):
    """A knob was moved off a default that torch offers no way to set again."""


# torch.set_float32_matmul_precision(x) writes these two leaves (measured, torch 2.14.1). The
# legacy value is a separate field; the getter refuses in three leaf/legacy combinations
# (legacy_getter_matrix); with both leaves at ieee it answers whatever the legacy value is.
_LEGACY_LEAVES = {
    "highest": ("ieee", "ieee"),
    "high": ("tf32", "tf32"),
    "medium": ("tf32", "bf16"),
}
_MATMUL_LEAVES = (("cuda", "matmul"), ("mkldnn", "matmul"))


def _legacy_precision(stored: dict[str, str]) -> str:
    # torch.get_float32_matmul_precision() raises once the tree disagrees with the legacy
    # setting; then set the two matmul leaves as each legacy value would, until one reads.
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError:
        pass
    if any(stored[_key(n)] == DEFAULT for n in _MATMUL_LEAVES):
        raise KnobsNotRestorableError("a matmul leaf holds ATen's internal default; cannot probe")
    found = None
    try:
        for leaves in _LEGACY_LEAVES.values():
            for node, value in zip(_MATMUL_LEAVES, leaves, strict=True):
                _set(node, value)
            try:
                found = torch.get_float32_matmul_precision()
                break
            except RuntimeError:
                continue
    finally:
        for node in _MATMUL_LEAVES:
            _set(node, stored[_key(node)])
    if found is None:
        raise RuntimeError("torch.get_float32_matmul_precision() refused every legacy setting")
    return found


def _restore_tree(stored: dict[str, str]) -> list[str]:
    # Parents first; a DEFAULT node can only be left alone. Returns the DEFAULT nodes the
    # body replaced (they now hold an explicit value that no call can undo).
    lost = []
    now = fp32_precision_stored()
    for node in FP32_PRECISION_NODES:
        want = stored[_key(node)]
        if want == DEFAULT:
            if now[_key(node)] != DEFAULT:
                lost.append(_key(node))
            continue
        _set(node, want)
    return lost


@dataclass(frozen=True)
class _Saved:
    tree: dict[str, str]
    legacy: str
    fp16_reduction: tuple[bool, bool]
    bf16_reduction: tuple[bool, bool]
    fp16_accumulation: bool
    cpu_fp16_reduction: bool
    math_sdp_reduction: bool
    emulate_precision_casts: bool | None


def _save() -> _Saved:
    tree = fp32_precision_stored()
    inductor_cfg = sys.modules.get("torch._inductor.config")
    return _Saved(
        tree=tree,
        legacy=_legacy_precision(tree),
        # (allow_reduced_precision, allow_split_k): the Python setter takes a bool for the
        # first and then resets the second to True, so both are saved and set together.
        fp16_reduction=tuple(torch._C._get_cublas_allow_fp16_reduced_precision_reduction()),
        bf16_reduction=tuple(torch._C._get_cublas_allow_bf16_reduced_precision_reduction()),
        fp16_accumulation=torch._C._get_cublas_allow_fp16_accumulation(),
        cpu_fp16_reduction=torch._C._get_cpu_allow_fp16_reduced_precision_reduction(),
        math_sdp_reduction=torch._C._get_math_sdp_allow_fp16_bf16_reduction(),
        emulate_precision_casts=(
            inductor_cfg.emulate_precision_casts if inductor_cfg is not None else None
        ),
    )


def _restore(saved: _Saved) -> list[str]:
    # The legacy setter writes the two matmul leaves; the tree restore that follows
    # rewrites them.  The legacy allow_tf32 flags (torch.backends.cuda.matmul.allow_tf32,
    # torch.backends.cudnn.allow_tf32) hold nothing of their own in 2.14.1: they read and
    # write these same two settings.
    torch.set_float32_matmul_precision(saved.legacy)
    lost = _restore_tree(saved.tree)
    torch._C._set_cublas_allow_fp16_reduced_precision_reduction(*saved.fp16_reduction)
    torch._C._set_cublas_allow_bf16_reduced_precision_reduction(*saved.bf16_reduction)
    torch._C._set_cublas_allow_fp16_accumulation(saved.fp16_accumulation)
    torch._C._set_cpu_allow_fp16_reduced_precision_reduction(saved.cpu_fp16_reduction)
    torch._C._set_math_sdp_allow_fp16_bf16_reduction(saved.math_sdp_reduction)
    inductor_cfg = sys.modules.get("torch._inductor.config")
    if inductor_cfg is not None and saved.emulate_precision_casts is not None:
        inductor_cfg.emulate_precision_casts = saved.emulate_precision_casts
    return lost


@contextlib.contextmanager
def knobs_restored() -> Iterator[None]:
    """Save the precision knobs; put them back on exit, even after an exception.

    Covers what each node of the fp32_precision tree *holds*
    (:func:`fp32_precision_stored`, so inheritance still works afterwards),
    ``torch.set_float32_matmul_precision`` (probed even when the getter
    refuses), the cuBLAS reduced-precision flags with their split-K halves,
    ``allow_fp16_accumulation``, the CPU fp16 reduction flag, the math-SDPA
    reduction flag and ``torch._inductor.config.emulate_precision_casts`` if
    inductor is loaded.

    The cuDNN conv and rnn leaves start at ATen's internal default, which no
    Python call can set.  If the body replaces it (e.g. by setting
    ``torch.backends.cudnn.conv.fp32_precision``), everything else is still put
    back, and then :class:`KnobsNotRestorableError` says which leaf stays
    changed (unless the body raised: its exception is not masked).

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
    saved = _save()
    try:
        yield
    except BaseException:
        _restore(saved)
        raise
    lost = _restore(saved)
    if lost:
        raise KnobsNotRestorableError(
            f"the body set {', '.join(python_name(n) for n in lost)}, which held ATen's internal "
            "default (follow the parent, else the legacy 'tf32'); torch 2.14.1 cannot set that "
            "default from Python, so it now holds an explicit value. Everything else was restored."
        )


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


def cpu_features() -> dict[str, object]:
    """What this CPU offers to the low-precision paths, as torch sees it.

    ``avx512_bf16``/``amx_tile`` come from ``torch.cpu`` (cpuinfo); the two
    ``onednn_*_gate`` values are ``torch.ops.mkldnn._is_mkldnn_bf16_supported()``
    and its fp16 twin, the checks PyTorch makes before it sends bf16 (fp16)
    work to oneDNN.

    >>> sorted(cpu_features())
    ['amx_tile', 'avx512_bf16', 'cpu_capability', 'onednn_bf16_gate', 'onednn_fp16_gate']
    """
    ops = torch.ops.mkldnn
    return {
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "avx512_bf16": bool(torch.cpu._is_avx512_bf16_supported()),
        "amx_tile": bool(torch.cpu._is_amx_tile_supported()),
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


#: Matmuls to run under ``ONEDNN_VERBOSE=1``; each is a statement over fp32 ``a`` (256x1024)
#: and ``b`` (1024x256).
ONEDNN_PROBES: dict[str, str] = {
    "fp32 `a @ b`": "a @ b",
    "fp32 `a @ b`, `mkldnn.matmul.fp32_precision = 'bf16'`": (
        "torch.backends.mkldnn.matmul.fp32_precision = 'bf16'; a @ b; "
        "torch.backends.mkldnn.matmul.fp32_precision = 'none'"
    ),
    "bf16 `a @ b`": "a.bfloat16() @ b.bfloat16()",
    "bf16 `addmm(bias, a, b)`": "torch.addmm(a[0, :256].bfloat16(), a.bfloat16(), b.bfloat16())",
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


def onednn_calls(probes: dict[str, str] | None = None, timeout: float = 300) -> dict[str, list[OneDNNCall]]:
    """The oneDNN primitives each probe executes, from a fresh Python run with ``ONEDNN_VERBOSE=1``.

    oneDNN reads ``ONEDNN_VERBOSE`` when it starts, so the probes run in a
    child process; its log lines are parsed into :class:`OneDNNCall` (the
    execution times they carry are dropped).  A probe that does not reach
    oneDNN gets an empty list.

    >>> calls = onednn_calls({"fp32": "a @ b"})
    >>> list(calls), calls["fp32"]
    (['fp32'], [])
    """
    probes = ONEDNN_PROBES if probes is None else probes
    lines = [
        "import torch",
        "g = torch.Generator().manual_seed(0)",
        "a = torch.randn(256, 1024, generator=g); b = torch.randn(1024, 256, generator=g)",
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

