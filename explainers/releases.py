"""The torch releases every page is verified on, and library calls under another release.

``SUPPORTED`` lists them newest first; the first is the primary: the published
site is built and stamped with it.  Adding a release is one line here.  Each
release has its own environment, ``env-<release>`` under the cache root, made
by ``nox``.  :func:`run_under` calls a function of this package in another
release's environment and returns its (JSON) result, so one page can show what
two releases do side by side.

>>> SUPPORTED[0] == PRIMARY
True
>>> env_python("2.14.1").parts[-3:]
('env-2.14.1', 'bin', 'python')
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["PRIMARY", "SUPPORTED", "ReleaseNotProvisioned", "cache_root", "env_python", "on_each_release",
           "release_of", "run_under"]

SUPPORTED: tuple[str, ...] = (
    "2.15.0",
    "2.14.1",
)
PRIMARY = SUPPORTED[0]

_ROOT = Path(__file__).resolve().parents[1]


class ReleaseNotProvisioned(RuntimeError):
    """The environment of a supported release does not exist on this machine."""


def cache_root() -> Path:
    """Where the environments and other build caches live: ``$TORCH_EXPLAINERS_CACHE``,
    default ``~/.cache/torch-explainers``.

    >>> cache_root().name in ("torch-explainers", os.path.basename(os.environ.get("TORCH_EXPLAINERS_CACHE", "")))
    True
    """
    base = os.environ.get("TORCH_EXPLAINERS_CACHE")
    return Path(base) if base else Path.home() / ".cache" / "torch-explainers"


def _check(release: str) -> str:
    if not isinstance(release, str) or release not in SUPPORTED:
        raise ValueError(f"{release!r} is not a supported torch release; supported: {', '.join(SUPPORTED)}")
    return release


def env_python(release: str) -> Path:
    """The Python of ``release``'s environment (it may not exist yet).

    >>> env_python("1.0")
    Traceback (most recent call last):
    ...
    ValueError: '1.0' is not a supported torch release; supported: 2.15.0, 2.14.1
    """
    return cache_root() / f"env-{_check(release)}" / "bin" / "python"


def release_of(version: str) -> str:
    """The supported release a ``torch.__version__`` string belongs to (local tags dropped).

    >>> release_of("2.14.1+cu130")
    '2.14.1'
    >>> release_of("2.13.0")
    Traceback (most recent call last):
    ...
    ValueError: '2.13.0' is not a supported torch release; supported: 2.15.0, 2.14.1
    """
    return _check(version.split("+", 1)[0])


def run_under(release: str, target: str, *args: Any, run_timeout: float = 900, **kwargs: Any) -> Any:
    """Call ``module:function`` of this package with JSON-able arguments in ``release``'s
    environment, in a fresh process, and return its JSON-able result.

    The child imports this checkout's ``explainers`` and the other release's torch; it is
    killed after ``run_timeout`` seconds (a name no target's own keyword uses).
    Raises :class:`ReleaseNotProvisioned` when that environment is missing, and
    ``RuntimeError`` with the child's output when the call fails.

    >>> run_under("2.14.1", "os.path.join", "a")
    Traceback (most recent call last):
    ...
    ValueError: target must be 'explainers.<module>:<function>', not 'os.path.join'
    """
    _check(release)
    module, sep, function = target.partition(":")
    if not (sep and module.startswith("explainers.") and function.isidentifier()):
        raise ValueError(f"target must be 'explainers.<module>:<function>', not {target!r}")
    python = env_python(release)
    if not python.exists():
        raise ReleaseNotProvisioned(
            f"torch {release} has no environment at {python.parent.parent}: "
            f"run `nox -s docs -- --all-releases` (or `nox -s tests`) to create it")
    env = {**os.environ, "PYTHONPATH": str(_ROOT), "PYTHONHASHSEED": "0"}
    payload = json.dumps({"target": target, "args": list(args), "kwargs": kwargs})
    proc = subprocess.run([str(python), "-m", "explainers.releases"], input=payload, text=True,
                          capture_output=True, env=env, timeout=run_timeout, cwd=_ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"{target} under torch {release} failed (exit {proc.returncode}):\n"
                           f"{(proc.stdout + proc.stderr)[-3000:]}")
    return json.loads(proc.stdout.rsplit("\n@@result@@\n", 1)[-1])


def on_each_release(target: str, *args: Any, here: Any = None, **kwargs: Any) -> dict[str, Any]:
    """``target``'s result on every supported release whose environment exists, newest first.

    ``here``, when given, is the result already computed in this process (this torch's
    release is then not launched again).  A release with no environment on this machine
    maps to ``None`` (``nox`` creates every release's environment; a reader running a page
    by hand may have only one): a page shows it as not built here, and asserts only what
    it ran.

    >>> on_each_release("explainers.nothing:here", here=1)  # doctest: +SKIP
    {'2.15.0': 1, '2.14.1': ...}
    """
    import torch

    this = release_of(torch.__version__)
    out: dict[str, Any] = {}
    for release in SUPPORTED:
        if release == this and here is not None:
            out[release] = here
        elif env_python(release).exists():
            out[release] = run_under(release, target, *args, **kwargs)
        else:
            out[release] = None
    return out


def _child() -> None:
    """The child side of :func:`run_under`: read the call from stdin, print its result last."""
    import importlib

    call = json.loads(sys.stdin.read())
    module, function = call["target"].split(":")
    result = getattr(importlib.import_module(module), function)(*call["args"], **call["kwargs"])
    sys.stdout.write("\n@@result@@\n" + json.dumps(result))


if __name__ == "__main__":
    _child()
