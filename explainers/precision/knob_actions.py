"""The knob-effects table: what each precision action a user takes writes, reports and changes on CPU.

One row per action (a legacy ``allow_tf32`` flag, a ``set_float32_matmul_precision``
level, an ``fp32_precision`` setter, ``cudnn.flags()``, the
``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE`` environment variable): what every node of the
``fp32_precision`` tree then reports, what the three legacy getters answer, and
whether an fp32 matmul and an fp32 convolution on this CPU still give the default
result bit for bit.

Two actions replace the cuDNN leaves' internal default for good, so
:func:`knob_action_table` runs them last, and is meant to run in a process of its
own (``explainers.releases.run_under``).

>>> sorted(observe())[:3]
['conv bitwise as default', 'cpu_digest', 'cuda.matmul.allow_tf32']
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

import torch
import torch.nn.functional as F

from explainers.precision.hardware import fresh_python
from explainers.precision.knobs import KnobsNotRestorableError, fp32_precision_tree, knobs_restored

__all__ = ["ENV_OVERRIDE", "ACTIONS", "IRREVERSIBLE", "cpu_digest", "observe", "knob_action_table"]

#: The environment variable ATen reads at start-up for the legacy matmul precision.
ENV_OVERRIDE = "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"

_B = torch.backends


def _set(obj: object, attr: str, value: object) -> Callable[[], None]:
    return lambda: setattr(obj, attr, value)


def _highest_then_root_tf32() -> None:
    torch.set_float32_matmul_precision("highest")
    _B.fp32_precision = "tf32"


def _cudnn_flags_then_root_ieee() -> None:
    with _B.cudnn.flags():
        pass
    _B.fp32_precision = "ieee"


def _root_tf32_mkldnn_flags_then_root_ieee() -> None:
    _B.fp32_precision = "tf32"
    # mkldnn.set_flags writes the mkldnn node itself (the property writes the root).
    with _B.mkldnn.flags(enabled=False):
        pass
    _B.fp32_precision = "ieee"


def _cudnn_allow_tf32_off_then_root_tf32() -> None:
    _B.cudnn.allow_tf32 = False
    _B.fp32_precision = "tf32"


#: A ``mkldnn.flags()`` block between two root settings (its ``set_flags`` writes the mkldnn node).
MKLDNN_FLAGS_THEN_IEEE = 'fp32_precision = "tf32"; with mkldnn.flags(enabled=False): ...; fp32_precision = "ieee"'

#: The actions, by the code a user writes; each runs from the default state.
ACTIONS: dict[str, Callable[[], None]] = {
    'cuda.matmul.allow_tf32 = True': _set(_B.cuda.matmul, "allow_tf32", True),
    'set_float32_matmul_precision("highest")': lambda: torch.set_float32_matmul_precision("highest"),
    'set_float32_matmul_precision("high")': lambda: torch.set_float32_matmul_precision("high"),
    'set_float32_matmul_precision("medium")': lambda: torch.set_float32_matmul_precision("medium"),
    'set_float32_matmul_precision("highest"); fp32_precision = "tf32"': _highest_then_root_tf32,
    'fp32_precision = "tf32"': _set(_B, "fp32_precision", "tf32"),
    'fp32_precision = "bf16"': _set(_B, "fp32_precision", "bf16"),
    'cuda.matmul.fp32_precision = "tf32"': _set(_B.cuda.matmul, "fp32_precision", "tf32"),
    'cudnn.fp32_precision = "tf32"': _set(_B.cudnn, "fp32_precision", "tf32"),
    'mkldnn.fp32_precision = "tf32"': _set(_B.mkldnn, "fp32_precision", "tf32"),
    'mkldnn.fp32_precision = "bf16"': _set(_B.mkldnn, "fp32_precision", "bf16"),
    'mkldnn.matmul.fp32_precision = "bf16"': _set(_B.mkldnn.matmul, "fp32_precision", "bf16"),
    'mkldnn.conv.fp32_precision = "bf16"': _set(_B.mkldnn.conv, "fp32_precision", "bf16"),
    'with cudnn.flags(): ...; fp32_precision = "ieee"': _cudnn_flags_then_root_ieee,
    'cudnn.allow_tf32 = False; fp32_precision = "tf32"': _cudnn_allow_tf32_off_then_root_tf32,
    MKLDNN_FLAGS_THEN_IEEE: _root_tf32_mkldnn_flags_then_root_ieee,
}

#: The actions after which the cuDNN leaves no longer hold their internal default.
IRREVERSIBLE = ('with cudnn.flags(): ...; fp32_precision = "ieee"', 'cudnn.allow_tf32 = False; fp32_precision = "tf32"')


def _answer(read: Callable[[], object]) -> str:
    try:
        return str(read())
    except RuntimeError:
        return "raises"


def cpu_digest() -> dict[str, str]:
    """SHA-1 of an fp32 matmul (64 x 256 @ 256 x 64) and an fp32 conv2d on this CPU, fixed inputs.

    >>> d = cpu_digest()
    >>> sorted(d), d == cpu_digest()
    (['conv', 'matmul'], True)
    """
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 256, generator=g), torch.randn(256, 64, generator=g)
    x, w = torch.randn(1, 16, 32, 32, generator=g), torch.randn(16, 16, 3, 3, generator=g)
    return {name: hashlib.sha1(t.contiguous().numpy().tobytes()).hexdigest()
            for name, t in (("matmul", a @ b), ("conv", F.conv2d(x, w)))}


def observe(default_digest: dict[str, str] | None = None) -> dict[str, object]:
    """What the tree reports, what the legacy getters answer, and whether CPU fp32 results are the default's.

    ``default_digest`` is :func:`cpu_digest` in the default state (computed now when omitted).
    """
    digest = cpu_digest()
    default_digest = default_digest or digest
    return {
        "tree": fp32_precision_tree(),
        "get_float32_matmul_precision()": _answer(torch.get_float32_matmul_precision),
        "cuda.matmul.allow_tf32": _answer(lambda: _B.cuda.matmul.allow_tf32),
        "cudnn.allow_tf32": _answer(lambda: _B.cudnn.allow_tf32),
        "matmul bitwise as default": digest["matmul"] == default_digest["matmul"],
        "conv bitwise as default": digest["conv"] == default_digest["conv"],
        "cpu_digest": digest,
    }


def _env_row(default_digest: dict[str, str]) -> dict[str, object]:
    code = ("import json\nfrom explainers.precision.knob_actions import observe\n"
            f"print(json.dumps(observe({default_digest!r})))")
    return json.loads(fresh_python(code, env={ENV_OVERRIDE: "1"}).strip().splitlines()[-1])


def knob_action_table(with_env: bool = True) -> dict[str, dict[str, object]]:
    """Run every action of :data:`ACTIONS` from the default state; return what :func:`observe` sees after each.

    The key ``"default"`` holds the default state; ``f"{ENV_OVERRIDE}=1"`` a fresh
    process started with that variable set (when ``with_env``).  The
    :data:`IRREVERSIBLE` actions run last, the second after the first, because
    no Python call can give the cuDNN leaves their internal default back; this
    process keeps their explicit values afterwards.
    """
    if any(v != "none" for k, v in fp32_precision_tree().items() if k not in ("cuda.conv", "cuda.rnn")):
        raise RuntimeError("knob_action_table needs the default state; run it in a fresh process")
    default_digest = cpu_digest()
    table = {"default": observe(default_digest)}
    for name, action in ACTIONS.items():
        if name in IRREVERSIBLE:
            continue
        with knobs_restored():
            action()
            table[name] = observe(default_digest)
    for name in IRREVERSIBLE:
        try:
            with knobs_restored():
                ACTIONS[name]()
                table[name] = observe(default_digest)
        except KnobsNotRestorableError:
            pass
    if with_env:
        table[f"{ENV_OVERRIDE}=1"] = _env_row(default_digest)
    return table
