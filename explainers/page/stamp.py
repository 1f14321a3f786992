"""The verification stamp every executed page carries near its title.

A page calls :func:`begin_page` in its first (hidden) cell and :func:`end_page`
in its last.  ``end_page`` glues one MyST string, ``page_stamp``, that the page
pastes under its title, so the stamp is produced by the execution itself:
torch version and build, Python version, the device, the date and how long
the page took to execute.

>>> begin_page()
>>> text = end_page(display=False)
>>> text.startswith("{bdg-success}`verified on ")
True
>>> "torch " in text and "Python " in text
True
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import time

__all__ = ["begin_page", "end_page", "environment", "stamp_text"]

_started: float | None = None


def begin_page() -> None:
    """Start the page's execution clock.

    Also seeds torch's RNG, so random examples are the same on every build.

    >>> begin_page()
    """
    global _started
    _started = time.perf_counter()
    import torch

    torch.manual_seed(0)


def environment() -> dict[str, str]:
    """Describe where the code ran, as label -> value.

    ``verified on`` lists the torch releases this build executes every page on
    (``$TORCH_EXPLAINERS_VERIFIED_ON``, set by ``nox``: the primary release for
    ``nox -s docs``, every supported release for ``nox -s docs -- --all-releases``
    and ``nox -s tests``; a build replaces the site only when every page's claims
    held on each of them), or just this torch's release.

    >>> env = environment()
    >>> sorted(env)
    ['date', 'device', 'python', 'threads', 'torch', 'verified on']
    >>> env["device"].startswith("cuda") or " kernels, " in env["device"]  # e.g. AVX2 kernels
    True
    """
    import torch

    if torch.version.cuda:
        build = f"CUDA {torch.version.cuda} build"
    elif getattr(torch.version, "hip", None):
        build = f"ROCm {torch.version.hip} build"
    else:
        build = "CPU build"
    if torch.cuda.is_available():
        device = f"cuda ({torch.cuda.get_device_name(0)})"
    else:
        # The vector kernels torch dispatched to (AVX2, AVX512, ...): low-order bits of
        # some figures, e.g. fp32 results of exp, differ between them.
        isa = torch.backends.cpu.get_cpu_capability()
        device = f"cpu ({platform.machine()}, {isa} kernels, {os.cpu_count()} cores)"
    return {
        "torch": f"{torch.__version__} ({build})",
        "python": platform.python_version(),
        "device": device,
        "threads": str(torch.get_num_threads()),
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "verified on": verified_on(torch.__version__),
    }


def verified_on(version: str) -> str:
    """The releases a page's claims are verified on, as words, this build's own first.

    >>> import os
    >>> os.environ["TORCH_EXPLAINERS_VERIFIED_ON"] = "2.15.0,2.14.1"
    >>> verified_on("2.15.0+cu132")
    'torch 2.15.0 and 2.14.1'
    >>> del os.environ["TORCH_EXPLAINERS_VERIFIED_ON"]
    >>> verified_on("2.14.1+cu130")
    'torch 2.14.1'
    """
    own = version.split("+", 1)[0]
    listed = [r for r in os.environ.get("TORCH_EXPLAINERS_VERIFIED_ON", "").split(",") if r]
    ordered = [own, *[r for r in listed if r != own]]
    return "torch " + (" and ".join([", ".join(ordered[:-1]), ordered[-1]]) if len(ordered) > 1 else own)


def stamp_text(env: dict[str, str], seconds: float) -> str:
    """Format the stamp as MyST (a sphinx-design badge and one line).

    >>> stamp_text({"torch": "2.15.0 (CPU build)", "python": "3.11.7", "device": "cpu", "threads": "2",
    ...             "date": "2026-12-02 12:00 UTC", "verified on": "torch 2.15.0 and 2.14.1"}, 1.234)
    '{bdg-success}`verified on torch 2.15.0 and 2.14.1` torch 2.15.0 (CPU build) · Python 3.11.7 · cpu · 2026-12-02 12:00 UTC · executed in 1.2 s'
    """
    return (
        f"{{bdg-success}}`verified on {env['verified on']}` "
        f"torch {env['torch']} · Python {env['python']} · "
        f"{env['device']} · {env['date']} · executed in {seconds:.1f} s"
    )


def end_page(display: bool = True) -> str:
    """Glue ``page_stamp`` (and ``page_seconds``) for the page, and return the text.

    ``display=False`` skips the glue, for use outside a notebook.
    """
    if _started is None:
        raise RuntimeError("end_page() called before begin_page(): put begin_page() in the first cell")
    seconds = time.perf_counter() - _started
    text = stamp_text(environment(), seconds)
    if display:
        from IPython.display import Markdown
        from myst_nb import glue

        glue("page_stamp", Markdown(text), display=False)
        glue("page_seconds", round(seconds, 1), display=False)
    return text
