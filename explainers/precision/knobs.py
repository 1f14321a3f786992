"""The global precision knobs: the ``fp32_precision`` tree, and a ``with`` block that puts every knob back.

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
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import torch

__all__ = [
    "FP32_PRECISION_NODES",
    "DEFAULT",
    "fp32_precision_tree",
    "fp32_precision_stored",
    "python_name",
    "knobs_restored",
    "KnobsNotRestorableError",
]


#: The ``(backend, op)`` pairs of the fp32_precision tree (torch 2.14.1 and 2.15.0), parents first.
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


# torch.set_float32_matmul_precision(x) writes these two leaves (measured, torch 2.14.1 and
# 2.15.0). The
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
    # rewrites them.  torch.backends.cuda.matmul.allow_tf32 reads and writes the legacy
    # value and the cuda.matmul leaf (not mkldnn.matmul), which this restores.
    # torch.backends.cudnn.allow_tf32 is different: ATen keeps a field of its own for it
    # (allow_tf32_cudnn in Context.h), and its setter also writes the cuDNN conv and rnn
    # leaves, replacing their internal default.  That field is not saved here: a body that
    # sets it has also replaced that default, which the restore reports as not restorable
    # (tests/test_precision_knobs.py runs both flags in a fresh process, on 2.14.1 and 2.15.0).
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
            "default (follow the parent, else the legacy 'tf32'); torch 2.14.1 and 2.15.0 cannot set "
            "that default from Python, so it now holds an explicit value. Everything else was restored."
        )
