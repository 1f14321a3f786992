"""The torch releases every page is verified on, and library calls under another release.

``SUPPORTED`` lists them newest first; the first is the primary: the published
site is built and stamped with it.  Adding a release is one line here.  Each
release has its own environment, ``env-<release>`` under the cache root, made
by ``nox``.  :func:`run_under` calls a function of this package in another
release's environment and returns its (JSON) result, so one page can show what
two releases do side by side.

A release not listed yet can be tried as a *candidate*: ``$TORCH_EXPLAINERS_CANDIDATE``
(set by ``nox -s candidate -- X.Y.Z`` for its builds only) adds it to ``SUPPORTED``
in its place by version, so stamps, :func:`run_under` and :func:`env_python` take it;
``PRIMARY``, the release the site is published with, stays the first listed one.
An assertion that compares releases names the release it fails on:
:func:`check_each_release`.

>>> SUPPORTED[0] == PRIMARY
True
>>> env_python("2.14.1").parts[-3:]
('env-2.14.1', 'bin', 'python')
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["CANDIDATE_ENV", "PRIMARY", "SUPPORTED", "ReleaseNotProvisioned", "cache_root",
           "candidate", "check_each_release", "env_python", "on_each_release", "release_of", "run_under",
           "with_candidate"]

SUPPORTED: tuple[str, ...] = (
    "2.15.0",
    "2.14.1",
)
PRIMARY = SUPPORTED[0]
# The variable that adds a candidate release (``nox -s candidate`` sets it for its builds).
CANDIDATE_ENV = "TORCH_EXPLAINERS_CANDIDATE"
_LISTED = SUPPORTED

_ROOT = Path(__file__).resolve().parents[1]
_RELEASE = re.compile(r"\d+\.\d+\.\d+")


def _newest_first(release: str) -> tuple[int, ...]:
    return tuple(-int(part) for part in release.split("."))


def with_candidate(listed: tuple[str, ...], release: str | None) -> tuple[str, ...]:
    """``listed`` with ``release`` added in its place by version, newest first.

    >>> with_candidate(("2.15.0", "2.14.1"), "2.16.0")
    ('2.16.0', '2.15.0', '2.14.1')
    >>> with_candidate(("2.15.0",), "2.14.1")
    ('2.15.0', '2.14.1')
    >>> with_candidate(("2.15.0", "2.14.1"), None)
    ('2.15.0', '2.14.1')
    >>> with_candidate(("2.15.0",), "2.16")
    Traceback (most recent call last):
    ...
    ValueError: a candidate release is X.Y.Z, not '2.16'
    """
    if not release or release in listed:
        return tuple(listed)
    if not _RELEASE.fullmatch(release):
        raise ValueError(f"a candidate release is X.Y.Z, not {release!r}")
    return tuple(sorted((*listed, release), key=_newest_first))


def candidate() -> str | None:
    """The candidate release named by ``$TORCH_EXPLAINERS_CANDIDATE`` (read at each call, so
    ``nox`` can set it after importing this module), or ``None``.

    >>> os.environ[CANDIDATE_ENV] = "2.16.0"
    >>> candidate(), _supported()
    ('2.16.0', ('2.16.0', '2.15.0', '2.14.1'))
    >>> del os.environ[CANDIDATE_ENV]
    >>> candidate() is None
    True
    """
    release = os.environ.get(CANDIDATE_ENV) or None
    return None if release in _LISTED else release


def _supported() -> tuple[str, ...]:
    return with_candidate(_LISTED, candidate())


SUPPORTED = _supported()


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
    supported = _supported()
    if not isinstance(release, str) or release not in supported:
        raise ValueError(f"{release!r} is not a supported torch release; supported: {', '.join(supported)}")
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


def check_each_release(claim: str, seen: dict[str, Any], holds: Any) -> None:
    """Assert ``claim`` on each release's value in ``seen`` (release -> what it did); the
    ``AssertionError`` names every release it fails on and the value seen on each release,
    so a build on any release blames the right one (``nox -s candidate`` reports both).

    ``holds(release, value)`` says whether the claim holds for that release's value.  A
    value ``None`` (a release not built on this machine, see :func:`on_each_release`) is
    not checked.

    >>> check_each_release("the sum is 6", {"2.15.0": 6, "2.14.1": 6}, lambda r, v: v == 6)
    >>> check_each_release("the sum is 6", {"2.15.0": 6, "2.14.1": 7}, lambda r, v: v == 6)
    Traceback (most recent call last):
    ...
    AssertionError: the sum is 6 [fails on torch 2.14.1; seen: torch 2.15.0: 6; torch 2.14.1: 7]
    """
    broke = [r for r, v in seen.items() if v is not None and not holds(r, v)]
    if broke:
        values = "; ".join(f"torch {r}: {_short(v)}" for r, v in seen.items())
        raise AssertionError(f"{claim} [fails on torch {', '.join(broke)}; seen: {values}]")


def _short(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _child() -> None:
    """The child side of :func:`run_under`: read the call from stdin, print its result last."""
    import importlib

    call = json.loads(sys.stdin.read())
    module, function = call["target"].split(":")
    result = getattr(importlib.import_module(module), function)(*call["args"], **call["kwargs"])
    sys.stdout.write("\n@@result@@\n" + json.dumps(result))


if __name__ == "__main__":
    _child()
