"""``free()`` when recording an event fails, compiled against the installed torch and run.

``free_failure.cpp`` instantiates the allocator template with a backend whose
``record_stream`` throws (a CUDA backend's throws when ``cudaEventRecord``
fails), frees a block that was used on a second stream, allocates the same
size again and prints one JSON line.  :func:`free_with_failing_event` compiles
it with ``g++`` (no sanitizer) against the installed torch's headers and
``libc10``, caches the binary per torch version, header, source and compiler,
and returns that line as a dictionary.  It takes and returns plain JSON data,
so the page calls it for the other release with
:func:`explainers.releases.run_under`.

>>> print(script())  # doctest: +NORMALIZE_WHITESPACE
g++ -std=c++17 -O1 -Wno-interference-size -I"$TORCH/include" free_failure.cpp -o free-failure
    -L"$TORCH/lib" -lc10 -Wl,-rpath,"$TORCH/lib"
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from .build import _compiler_version, cache_root, find_compiler
from .errors import HarnessFailedError
from .torchpaths import check_snapshot_code, find_torch

__all__ = ["SOURCE", "FLAGS", "script", "free_with_failing_event"]

#: The program, shipped with this package.
SOURCE = Path(__file__).with_name("free_failure.cpp")
#: No sanitizer: this is about what free() does, not about races.
FLAGS = ("-std=c++17", "-O1", "-Wno-interference-size")
_BINARY = "free-failure"


def script() -> str:
    """The compile command, run in the build folder with ``$TORCH`` set to the torch package."""
    return " ".join(["g++", *FLAGS, '-I"$TORCH/include"', SOURCE.name, "-o", _BINARY,
                     '-L"$TORCH/lib"', "-lc10", '-Wl,-rpath,"$TORCH/lib"'])


def free_with_failing_event() -> dict[str, Any]:
    """Build (or reuse) and run ``free_failure.cpp`` against the installed torch.

    Returns ``version`` (torch's), ``free_threw`` and ``exception`` (whether
    ``free()`` let the backend's exception out, and its message),
    ``warnings`` (the c10 warnings emitted) and ``block_reused`` (whether the
    next allocation of the same size got the block back).
    """
    torch = find_torch()
    header = torch.header.read_text()
    check_snapshot_code(header, str(torch.header))
    gxx = find_compiler()
    compiler = _compiler_version(gxx)
    h = hashlib.sha256()
    for part in (torch.version, header, SOURCE.read_text(), script(), str(torch.root), compiler):
        h.update(hashlib.sha256(part.encode()).digest())
    release = torch.version.split("+", 1)[0]
    folder = cache_root() / f"{_BINARY}-{release}-{h.hexdigest()[:20]}"
    binary = folder / _BINARY
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "build.json").is_file():
            shutil.copyfile(SOURCE, folder / SOURCE.name)
            env = dict(os.environ, TORCH=str(torch.root))
            env["PATH"] = os.path.dirname(gxx) + os.pathsep + env.get("PATH", "")
            res = subprocess.run(["bash", "-e", "-c", script()], cwd=folder, env=env,
                                 capture_output=True, text=True, timeout=600)
            if res.returncode != 0:
                raise HarnessFailedError(f"compiling {SOURCE.name} failed (exit {res.returncode}):\n"
                                         f"{res.stderr[-3000:]}")
            # Written last: its presence marks a complete build.
            (folder / "build.json").write_text(json.dumps({"script": script(), "compiler": compiler}))
    res = subprocess.run([str(binary)], cwd=folder, capture_output=True, text=True, timeout=60)
    if res.returncode != 0 or not res.stdout.strip():
        raise HarnessFailedError(f"{_BINARY} exited {res.returncode}:\n{(res.stdout + res.stderr)[-3000:]}")
    return {"version": torch.version, **json.loads(res.stdout.strip().splitlines()[-1])}
