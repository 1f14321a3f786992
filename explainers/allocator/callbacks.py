"""Code the shipped build runs inside the host allocator's locks through callbacks.

The template's lock table sees only what ``CachingHostAllocator.h`` itself locks.
Two callbacks it runs while holding its locks come from elsewhere in the wheel:

- the **capture filter**: ``get_allocation_pool_for_current_stream`` calls each
  capture's ``std::function<bool(c10::Stream)>`` (``entry.second(stream)``) holding
  ``instance_mutex_`` shared.  For CUDA graphs that filter is the lambda of
  ``at::cuda::CUDAGraph::create_allocate_filter<c10::Stream>`` (torch 2.14/2.15),
  compiled into ``libtorch_cuda.so``;
- the **context destructors**: a ``TraceEntry`` and a ``HostBlock`` hold a
  ``std::shared_ptr<c10::GatheredContext>``; overwriting or resetting one under
  ``alloc_trace_lock`` or ``block->mutex_`` may destroy the context.  The Python
  recorder's context keeps frames that ``PythonTraceback::release`` (an internal
  function of ``libtorch_python.so``, torch 2.14/2.15) hands to a list guarded by
  ``to_free_frames_mutex``.

:func:`callbacks_under_locks` reads both from the installed torch (headers, and the
libraries' machine code with binutils) and returns plain JSON, so the page can run
it for the other release with :func:`explainers.releases.run_under`.

>>> FILTER_INVOKE.endswith("E9_M_invoke"), "PythonTraceback7release" in TRACEBACK_RELEASE
(True, True)
"""

from __future__ import annotations

import subprocess
from typing import Any

from .edgecases import calls_in
from .torchpaths import find_torch

__all__ = ["FILTER_INVOKE", "TRACEBACK_RELEASE", "FREE_FRAMES_MUTEX", "order_in", "callbacks_under_locks"]

#: ``std::function`` invoker of ``CUDAGraph::create_allocate_filter<c10::Stream>``'s lambda (mangled).
FILTER_INVOKE = ("_ZNSt17_Function_handlerIFbN3c106StreamEEZNK2at4cuda9CUDAGraph22create_allocate_filterIS1_EESt8"
                 "functionIFbT_EEvEUlS1_E_E9_M_invoke")
#: ``torch::(anonymous namespace)::PythonTraceback::release`` (mangled, without its parameters).
TRACEBACK_RELEASE = "_ZN5torch12_GLOBAL__N_115PythonTraceback7releaseE"
#: ``torch::(anonymous namespace)::to_free_frames_mutex`` (mangled).
FREE_FRAMES_MUTEX = "_ZN5torch12_GLOBAL__N_1L20to_free_frames_mutexE"


def order_in(text: str, *needles: str) -> bool:
    """Whether every needle occurs in *text*, each first occurring after the one before.

    >>> order_in("lock; call(); check();", "lock;", "call()", "check()"), order_in("b a", "a", "b")
    (True, False)
    """
    at = -1
    for needle in needles:
        at = text.find(needle, at + 1)
        if at < 0:
            return False
    return True


def _function(text: str, signature: str) -> str:
    """The body of the function whose definition line contains *signature* (braces balanced)."""
    start = text.index(signature)
    depth, i = 0, text.index("{", start)
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[start:j + 1]
    raise ValueError(f"unbalanced braces after {signature!r}")


def callbacks_under_locks(torch_root: str | None = None) -> dict[str, Any]:
    """The two callbacks, as the installed torch has them.

    Returns ``version``; ``filter_under_lock`` (the header calls each capture's
    filter after taking ``instance_mutex_`` shared, and ``stream_is_capturing``
    only after a filter matched); ``active_only`` (the installed
    ``captureIdMayInitCtx`` returns an id only when the capture status is
    ``Active``); ``marks_capture`` (both of ``allocate``'s paths mark a block as
    allocated during capture by asking ``stream_is_capturing`` about the current
    stream again); ``filter_calls`` (what the CUDA graph filter calls in
    ``libtorch_cuda.so``); ``context_resets`` (the header resets a block's
    context holding ``block->mutex_``); ``trace_context`` (``TraceEntry`` holds a
    ``shared_ptr<GatheredContext>``); ``release_calls`` (what
    ``PythonTraceback::release`` calls in ``libtorch_python.so``) and
    ``frees_mutex`` (whether that library defines ``to_free_frames_mutex``).
    """
    torch = find_torch(torch_root)
    header = torch.header.read_text()
    pick = _function(header, "get_allocation_pool_for_current_stream() {")
    graphs = (torch.include / "c10" / "cuda" / "CUDAGraphsC10Utils.h").read_text()
    capture_id = _function(graphs, "captureIdMayInitCtx(cudaStream_t stream) {")
    cache = _function(header, "void maybe_cache_block(")
    device = (torch.include / "c10" / "core" / "CachingDeviceAllocator.h").read_text()
    trace = _function(device, "struct TraceEntry {")
    python = torch.lib / "libtorch_python.so"
    nm = subprocess.run(["nm", "--defined-only", str(python)], capture_output=True, text=True, timeout=120,
                        check=True)
    return {
        "version": torch.version,
        "filter_under_lock": order_in(pick, "std::shared_lock<std::shared_mutex> lg(instance_mutex_);",
                                      "if (entry.second(stream)) {",
                                      "if (C10_UNLIKELY(!stream_is_capturing(stream))) {"),
        "active_only": order_in(capture_id, "if (info.status == CaptureStatus::Active) {", "return info.id;",
                                "return std::nullopt;") and capture_id.count("return info.id;") == 1,
        "filter_calls": calls_in(torch.lib / "libtorch_cuda.so", FILTER_INVOKE)[FILTER_INVOKE],
        "marks_capture": header.count("block->was_allocated_during_stream_capture_ = "
                                      "current_stream_is_capturing_fast_path();") == 2
        and "return stream_is_capturing(get_current_stream());" in _function(
            header, "bool current_stream_is_capturing_fast_path() const {"),
        "context_resets": order_in(cache, "std::lock_guard<std::mutex> g(block->mutex_);",
                                   "block->context_when_allocated_.reset();"),
        "trace_context": "std::shared_ptr<GatheredContext> context" in trace,
        "release_calls": calls_in(python, TRACEBACK_RELEASE)[TRACEBACK_RELEASE],
        "frees_mutex": any(line.split()[-1] == FREE_FRAMES_MUTEX for line in nm.stdout.splitlines() if line.split()),
    }
