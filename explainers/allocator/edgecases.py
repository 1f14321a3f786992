"""Two paths the TSAN harness does not take, compiled against the installed torch and run.

``edgecases.cpp`` instantiates the allocator template from the installed header
(no sanitizer) and runs one of three modes, each printing one JSON line:

- ``free``: a backend whose ``record_stream`` throws frees two blocks, each used
  on a second stream, through the ``DataPtr`` deleter of a dying
  ``c10::StorageImpl``, as PyTorch frees pinned memory;
- ``empty-cache``: ``empty_cache()`` while a released private pool's event
  queue holds an event;
- ``unlock-order``: the order in which this C++ library's ``std::scoped_lock``
  unlocks two mutexes.

:func:`edge_cases` builds the program once per torch version, header, source
and compiler (cached), runs the three modes and returns plain JSON, so the page
calls it for the other release with :func:`explainers.releases.run_under`.

>>> print(script())  # doctest: +NORMALIZE_WHITESPACE
g++ -std=c++20 -O1 -Wno-interference-size -I"$TORCH/include" edgecases.cpp -o edgecases
    -L"$TORCH/lib" -lc10 -Wl,-rpath,"$TORCH/lib"
"""

from __future__ import annotations

import json
import re
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from .build import Program, build_program
from .errors import HarnessFailedError
from .torchpaths import TorchInstall, find_torch
from .tsan_command import compile_command

__all__ = ["SOURCE", "FLAGS", "MODES", "script", "run_mode", "edge_cases", "terminate_message", "calls_in",
           "cuda_record_failure", "CUDA_EVENT_RECORD_NAME", "cuda_free_override"]

#: The program, shipped with this package.
SOURCE = Path(__file__).with_name("edgecases.cpp")
#: No sanitizer: these are about what the code does, not about races.  C++20: the
#: installed ``c10/core/StorageImpl.h`` uses C++20 library features.
FLAGS = ("-std=c++20", "-O1", "-Wno-interference-size")
BINARY = "edgecases"
MODES = ("free", "empty-cache", "unlock-order")


def _no_core_dump() -> None:
    # Two of the processes here abort on purpose; keep them from writing a core file.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def script() -> str:
    """The compile command, run in the build folder with ``$TORCH`` set to the torch package."""
    return compile_command(SOURCE.name, BINARY, FLAGS)


def terminate_message(stderr: str) -> list[str]:
    """The lines libstdc++'s default terminate handler wrote, or ``[]``.

    >>> terminate_message("x\\nterminate called after throwing an instance of 'E'\\n  what():  boom\\n")
    ["terminate called after throwing an instance of 'E'", 'what():  boom']
    >>> terminate_message("all fine")
    []
    """
    lines = stderr.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("terminate called after throwing an instance of "):
            return [line] + [ln.strip() for ln in lines[i + 1:i + 2] if ln.strip().startswith("what():")]
    return []


def run_mode(program: Program, mode: str) -> dict[str, Any]:
    """Run one mode of the built program.

    Returns the mode's JSON line as a dictionary, with ``stdout_lines`` (the lines
    before it) and ``terminated``: ``None``, or, when the process died of a signal
    after libstdc++'s terminate handler ran, the signal's name and that handler's
    message.  Anything else that is not a clean exit raises ``HarnessFailedError``.

    >>> run_mode(None, "nothing")
    Traceback (most recent call last):
    ...
    ValueError: mode must be one of ('free', 'empty-cache', 'unlock-order'), got 'nothing'
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    res = subprocess.run([str(program.executable), mode], cwd=program.folder, capture_output=True,
                         text=True, timeout=60, preexec_fn=_no_core_dump)
    lines = res.stdout.splitlines()
    if res.returncode == 0 and lines and lines[-1].startswith("{"):
        return {**json.loads(lines[-1]), "stdout_lines": lines[:-1], "terminated": None}
    message = terminate_message(res.stderr)
    if res.returncode < 0 and message:
        return {"stdout_lines": lines, "terminated": {"signal": signal.Signals(-res.returncode).name,
                                                      "message": message}}
    raise HarnessFailedError(f"{BINARY} {mode} exited {res.returncode}:\n{(res.stdout + res.stderr)[-3000:]}")


def edge_cases(torch_root: str | None = None) -> dict[str, Any]:
    """Build (or reuse) ``edgecases.cpp`` against the installed torch and run every mode.

    Returns ``version`` (torch's), ``compiled`` (whether this call compiled the
    program, rather than the cache serving it) and one entry per mode
    (``free``, ``empty_cache``, ``unlock_order``), each as :func:`run_mode` returns it.
    """
    torch: TorchInstall = find_torch(torch_root)
    program = build_program(SOURCE, BINARY, FLAGS, torch)
    out: dict[str, Any] = {"version": torch.version, "compiled": not program.cached}
    for mode in MODES:
        out[mode.replace("-", "_")] = run_mode(program, mode)
    return out


#: The CUDA backend's ``record_stream``
#: (``at::cuda::(anonymous namespace)::CUDACachingHostAllocatorImpl::record_stream(...)``) and
#: ``c10::cuda::CUDAEvent::record(c10::cuda::CUDAStream const&)``, as the symbol table names them
#: (mangled: searching the table unmangled takes several times longer).
CUDA_RECORD_STREAM = "_ZN2at4cuda12_GLOBAL__N_128CUDACachingHostAllocatorImpl13record_streamE"
CUDA_EVENT_RECORD = "_ZN3c104cuda9CUDAEvent6recordERKNS0_10CUDAStreamE"
#: How ``objdump -C`` names a call of ``CUDAEvent::record``.
CUDA_EVENT_RECORD_NAME = "c10::cuda::CUDAEvent::record(c10::cuda::CUDAStream const&)"
#: ``c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, unsigned int, bool,
#: c10::cuda::CUDAErrorLogCapture*)``, which ``C10_CUDA_CHECK`` calls with a CUDA status.
CUDA_CHECK_SYMBOL = "_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jbPNS0_19CUDAErrorLogCaptureE"

_CALL = re.compile(r"\bcall\s+[0-9a-f]+ <(?P<target>.+?)(?:@plt)?>\s*$")


def calls_in(library: Path, *functions: str) -> dict[str, list[str]]:
    """What each of *functions* (a mangled name, or its start) calls in *library*, demangled.

    Read from the library's symbol table (``nm``, once) and its machine code
    (``objdump``), both from binutils, which ``g++`` needs anyway.  Compiler clones
    (``name.cold``) are left out unless asked for by their full name, and so are
    calls through a pointer; each target is listed once, in order of first call.

    >>> calls_in(Path("/nonexistent.so"), "_Z1fv")
    Traceback (most recent call last):
    ...
    FileNotFoundError: /nonexistent.so does not exist
    """
    if not library.is_file():
        raise FileNotFoundError(f"{library} does not exist")
    nm = subprocess.run(["nm", "-S", "--defined-only", str(library)], capture_output=True,
                        text=True, timeout=120, check=True)
    symbols = [parts for parts in (ln.split() for ln in nm.stdout.splitlines()) if len(parts) == 4]
    out: dict[str, list[str]] = {}
    for name in functions:
        found = [p for p in symbols if p[3].startswith(name) and ("." not in p[3] or p[3] == name)]
        if len(found) != 1:
            raise ValueError(f"{library.name} defines {len(found)} functions named {name}..., not one")
        start, size = int(found[0][0], 16), int(found[0][1], 16)
        dump = subprocess.run(["objdump", "-d", "-C", "--no-show-raw-insn", f"--start-address={start:#x}",
                               f"--stop-address={start + size:#x}", str(library)], capture_output=True,
                              text=True, timeout=120, check=True)
        targets: list[str] = []
        for line in dump.stdout.splitlines():
            m = _CALL.search(line)
            if m and m.group("target") not in targets:
                targets.append(m.group("target"))
        out[name] = targets
    return out


def cuda_record_failure(torch_root: str | None = None) -> dict[str, Any]:
    """What the installed CUDA backend does when recording an event fails.

    Returns ``record_stream_calls`` (what the CUDA host allocator's ``record_stream``
    calls in ``libtorch_cuda.so``), ``event_record_calls`` (what ``CUDAEvent::record``
    calls there) and ``check_failure``: the terminate message of a process that
    called ``c10_cuda_check_implementation`` (``C10_CUDA_CHECK``'s function in
    ``libc10_cuda.so``) with the status ``cudaErrorInvalidValue`` (1) and no handler
    around it, so the exception it throws names its type.  No GPU is needed.
    """
    torch = find_torch(torch_root)
    cuda = torch.lib / "libtorch_cuda.so"
    probe = ("import ctypes, sys\n"
             "check = getattr(ctypes.CDLL(sys.argv[1]), sys.argv[2])\n"
             "check(ctypes.c_int(1), b'CUDAEvent.h', b'record', ctypes.c_uint(0), ctypes.c_bool(False), None)\n")
    res = subprocess.run([sys.executable, "-c", probe, str(torch.lib / "libc10_cuda.so"), CUDA_CHECK_SYMBOL],
                         capture_output=True, text=True, timeout=60, preexec_fn=_no_core_dump)
    calls = calls_in(cuda, CUDA_RECORD_STREAM, CUDA_EVENT_RECORD)
    return {"version": torch.version,
            "record_stream_calls": calls[CUDA_RECORD_STREAM],
            "event_record_calls": calls[CUDA_EVENT_RECORD],
            "check_failure": {"returncode": res.returncode, "message": terminate_message(res.stderr)}}


#: ``at::cuda::(anonymous)::CUDACachingHostAllocatorImpl::free(void*)``, the CUDA backend's override.
CUDA_FREE = "_ZN2at4cuda12_GLOBAL__N_128CUDACachingHostAllocatorImpl4freeEPv"
#: The messages of that override's two ``catch`` branches, as the source at the tags words them.
CUDA_FREE_MESSAGES = ("Exception in pinned allocator free(), rethrowing",
                      "Suppressed exception in pinned allocator free()")


def cuda_free_override(torch_root: str | None = None) -> dict[str, Any]:
    """What the installed CUDA backend's ``free`` override is made of, read without a GPU.

    Returns ``free_calls`` (what ``CUDACachingHostAllocatorImpl::free`` calls in
    ``libtorch_cuda.so``), ``catch_calls`` (what its ``.cold`` clone, where the
    compiler put the ``catch`` handler, calls), ``messages`` (which of :data:`CUDA_FREE_MESSAGES` the
    library contains) and ``config`` (the lines of ``c10/cuda/CUDAAllocatorConfig.h``
    that mention ``pinned_free_catch_all``, as ``(line number, text)``).
    """
    import mmap

    torch = find_torch(torch_root)
    cuda = torch.lib / "libtorch_cuda.so"
    with open(cuda, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        messages = [m for m in CUDA_FREE_MESSAGES if data.find(m.encode() + b"\0") >= 0]
    config = (torch.include / "c10" / "cuda" / "CUDAAllocatorConfig.h").read_text().splitlines()
    calls = calls_in(cuda, CUDA_FREE, CUDA_FREE + ".cold")
    return {"version": torch.version, "free_calls": calls[CUDA_FREE], "catch_calls": calls[CUDA_FREE + ".cold"],
            "messages": messages,
            "config": [(i, line.strip()) for i, line in enumerate(config, 1) if "pinned_free_catch_all" in line]}
