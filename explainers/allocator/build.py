"""Compile the harness with ``g++ -fsanitize=thread``, cached by content hash.

A build is described by a :class:`BuildSpec`: the variant, the torch install
and the flags.  Its shell script (:meth:`BuildSpec.script`) is literally what
runs, through ``bash`` with ``TORCH`` set to the torch package folder, so the
command the page prints is the command that produced the binary.  Its ``g++``
line comes from :mod:`~explainers.allocator.tsan_command`, the single-file
program a reader can copy.

Products live in :func:`tsan_cache`, the ``tsan`` folder of the project's one
cache root (:func:`explainers.releases.cache_root`), one folder per SHA-256 of the torch
version, the header, the harness and the headers it includes from this package
(:data:`LOCAL_HEADERS`), the script (flags included) and the compiler version:
each supported torch release compiles against its own headers, so two releases
never share a binary.

>>> spec = BuildSpec("shipped", TorchInstall(Path("/t"), "2.14.1"))
>>> print(spec.script())  # doctest: +NORMALIZE_WHITESPACE
g++ -std=c++20 -fsanitize=thread -g1 -O1 -Wno-interference-size -I"$TORCH/include" harness.cpp
    -o harness-shipped -L"$TORCH/lib" -lc10 -Wl,-rpath,"$TORCH/lib"
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from explainers.releases import cache_root

from .errors import CompilerNotFoundError, HarnessFailedError, TsanUnsupportedError
from .overlay import remove_atomics, sed_command
from .torchpaths import HEADER_RELPATH, TorchInstall, check_snapshot_code
from .tsan_command import FLAGS, compile_command

__all__ = [
    "VARIANTS",
    "FLAGS",
    "HARNESS",
    "LOCAL_HEADERS",
    "BuildSpec",
    "Build",
    "tsan_cache",
    "find_compiler",
    "check_tsan",
    "build",
    "Program",
    "build_program",
]

#: The two builds: the header as installed, and the overlay with the four atomics made plain.
VARIANTS = ("shipped", "atomics removed")

#: The harness source shipped with this package.
HARNESS = Path(__file__).with_name("harness.cpp")

#: The headers of this package that the programs include (``#include "fake_backend.h"``).
#: They are copied next to each source in its build folder, where the quoted include
#: finds them (no ``-I`` needed), and their content is part of every cache key, so a
#: change to one rebuilds every program.
LOCAL_HEADERS = (Path(__file__).with_name("fake_backend.h"),)

_GXX_HINT = "install a C++ compiler with ThreadSanitizer (Debian/Ubuntu: apt-get install g++)"
_TSAN_HINT = (
    "install the ThreadSanitizer runtime for this g++ "
    "(Debian/Ubuntu: apt-get install libtsan2 for g++ 12 or later, libtsan0 for older g++)"
)


def tsan_cache() -> Path:
    """Folder for build products: ``tsan`` under the project's cache root.

    >>> tsan_cache() == cache_root() / "tsan"
    True
    """
    return cache_root() / "tsan"


def find_compiler(path: str | None = None) -> str:
    """Return the full path of ``g++`` on *path* (default ``$PATH``).

    >>> find_compiler(path="/nonexistent")
    Traceback (most recent call last):
    ...
    explainers.allocator.errors.CompilerNotFoundError: g++ not found on PATH='/nonexistent'; install a C++ compiler with ThreadSanitizer (Debian/Ubuntu: apt-get install g++)
    """
    gxx = shutil.which("g++", path=path)
    if gxx is None:
        shown = path if path is not None else os.environ.get("PATH", "")
        raise CompilerNotFoundError(f"g++ not found on PATH={shown!r}; {_GXX_HINT}")
    return gxx


def _compiler_version(gxx: str) -> str:
    out = subprocess.run([gxx, "--version"], capture_output=True, text=True, timeout=30)
    return out.stdout.splitlines()[0] if out.stdout else "unknown"


def check_tsan(gxx: str, cache: Path | None = None) -> str:
    """Check that *gxx* can build and run a ``-fsanitize=thread`` program; return its version line.

    The probe result is cached per compiler version, so this costs one
    ``g++ --version`` after the first call.

    >>> check_tsan(find_compiler()).startswith("g++")
    True
    """
    version = _compiler_version(gxx)
    cache = cache or tsan_cache()
    marker = cache / "probe" / hashlib.sha256(f"{gxx}\n{version}".encode()).hexdigest()[:16]
    if marker.is_file():
        return version
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.cpp"
        src.write_text("#include <thread>\nint main() { std::thread t([] {}); t.join(); }\n")
        res = subprocess.run(
            [gxx, "-fsanitize=thread", "-pthread", str(src), "-o", str(Path(tmp) / "probe")],
            capture_output=True, text=True, timeout=120,
        )
        if res.returncode != 0:
            detail = (res.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise TsanUnsupportedError(
                f"{gxx} ({version}) cannot build with -fsanitize=thread: {detail}; {_TSAN_HINT}"
            )
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(version + "\n")
    return version


@dataclass(frozen=True)
class BuildSpec:
    """One variant to build against one torch installation.

    >>> BuildSpec("neither", TorchInstall(Path("/t"), "x"))
    Traceback (most recent call last):
    ...
    ValueError: variant must be one of ('shipped', 'atomics removed'), got 'neither'
    """

    variant: str
    torch: TorchInstall
    flags: tuple[str, ...] = FLAGS

    def __post_init__(self):
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {self.variant!r}")

    @property
    def binary(self) -> str:
        """File name of the executable, e.g. ``harness-atomics-removed``.

        >>> BuildSpec("atomics removed", TorchInstall(Path("/t"), "x")).binary
        'harness-atomics-removed'
        """
        return "harness-" + self.variant.replace(" ", "-")

    def script(self) -> str:
        """The shell commands, run in the build folder with ``$TORCH`` set.

        >>> print(BuildSpec("atomics removed", TorchInstall(Path("/t"), "x")).script())  # doctest: +NORMALIZE_WHITESPACE
        mkdir -p overlay/ATen/core
        sed -E 's/std::atomic<([^>]*)> (allocated_|record_history_|context_recorder_|record_context_)\\{/PlainAtomic<\\1> \\2{/'
            "$TORCH/include/ATen/core/CachingHostAllocator.h" > overlay/ATen/core/CachingHostAllocator.h
        g++ -std=c++20 -fsanitize=thread -g1 -O1 -Wno-interference-size -Ioverlay -I"$TORCH/include" harness.cpp
            -o harness-atomics-removed -L"$TORCH/lib" -lc10 -Wl,-rpath,"$TORCH/lib"
        """
        lines = []
        includes: tuple[str, ...] = ()
        if self.variant == "atomics removed":
            lines.append("mkdir -p overlay/ATen/core")
            lines.append(
                sed_command(f'"$TORCH/include/{HEADER_RELPATH}"', f"overlay/{HEADER_RELPATH}")
            )
            includes = ("-Ioverlay",)
        lines.append(compile_command(HARNESS.name, self.binary, self.flags, includes))
        return "\n".join(lines)

    def key(self, compiler_version: str) -> str:
        """SHA-256 over torch version, header, harness, local headers, script and compiler version.

        The version is hashed on its own as well as through the header, so two
        releases never share a cached binary even where their headers agree:

        >>> from dataclasses import replace
        >>> from explainers.allocator.torchpaths import find_torch
        >>> t = find_torch()
        >>> BuildSpec("shipped", t).key("g++") != BuildSpec("shipped", replace(t, version="0.0")).key("g++")
        True
        """
        h = hashlib.sha256()
        for part in (
            self.torch.version.encode(),
            self.torch.header.read_bytes(),
            HARNESS.read_bytes(),
            *(f.read_bytes() for f in LOCAL_HEADERS),
            self.script().encode(),
            str(self.torch.root).encode(),
            compiler_version.encode(),
        ):
            h.update(hashlib.sha256(part).digest())
        return h.hexdigest()


@dataclass(frozen=True)
class Build:
    """A built variant: where it is, how it was made, whether the cache served it."""

    spec: BuildSpec
    folder: Path
    cached: bool
    compile_seconds: float
    overlay_changes: tuple[tuple[int, str, str], ...]

    @property
    def executable(self) -> Path:
        return self.folder / self.spec.binary


def build(spec: BuildSpec, gxx: str, compiler_version: str, cache: Path | None = None) -> Build:
    """Build *spec* (or reuse the cached binary) and return the :class:`Build`.

    The header is checked for the snapshot code first, so an older torch fails
    with a message rather than a compiler error.  The overlay change list is
    computed in Python from the same regular expression the ``sed`` line uses,
    and after the build the two overlays are compared byte for byte.
    """
    header_text = spec.torch.header.read_text()
    check_snapshot_code(header_text, str(spec.torch.header))
    # Validates the four atomic declarations for both variants (a header that
    # lacks them would make "shipped" silently racy) and gives the diff the page shows.
    overlay_text, changes = remove_atomics(header_text)
    if spec.variant == "shipped":
        changes = []

    cache = cache or tsan_cache()
    # The release in the name too, for whoever looks into the cache folder.
    release = spec.torch.version.split("+", 1)[0]
    folder = cache / f"{spec.binary}-{release}-{spec.key(compiler_version)[:20]}"
    meta = folder / "build.json"
    if meta.is_file() and (folder / spec.binary).is_file():
        info = json.loads(meta.read_text())
        return Build(spec, folder, True, info["compile_seconds"], tuple(map(tuple, changes)))

    folder.mkdir(parents=True, exist_ok=True)
    # Build in place (debug info records this folder, so TSAN's file names stay
    # valid), under a lock so two processes never write the same folder.
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if meta.is_file() and (folder / spec.binary).is_file():
            info = json.loads(meta.read_text())
            return Build(spec, folder, True, info["compile_seconds"], tuple(map(tuple, changes)))
        for src in (HARNESS, *LOCAL_HEADERS):
            shutil.copyfile(src, folder / src.name)
        env = dict(os.environ, TORCH=str(spec.torch.root))
        env["PATH"] = os.path.dirname(gxx) + os.pathsep + env.get("PATH", "")
        t0 = time.perf_counter()
        res = subprocess.run(
            ["bash", "-e", "-c", spec.script()], cwd=folder, env=env,
            capture_output=True, text=True, timeout=300,
        )
        seconds = time.perf_counter() - t0
        if res.returncode != 0:
            err = TsanUnsupportedError if "tsan" in res.stderr.lower() else HarnessFailedError
            raise err(
                f"building the {spec.variant!r} harness failed (exit {res.returncode}):\n"
                f"{res.stderr[-3000:]}" + (f"\n{_TSAN_HINT}" if err is TsanUnsupportedError else "")
            )
        if spec.variant == "atomics removed":
            made = (folder / "overlay" / HEADER_RELPATH).read_text()
            if made != overlay_text:
                raise RuntimeError("sed and Python disagree on the overlay; please report this")
        # Written last: its presence marks a complete build.
        meta.write_text(json.dumps({"compile_seconds": seconds, "script": spec.script(),
                                    "compiler": compiler_version}))
        return Build(spec, folder, False, seconds, tuple(map(tuple, changes)))


@dataclass(frozen=True)
class Program:
    """A single-file program built against one torch installation (see :func:`build_program`)."""

    folder: Path
    executable: Path
    cached: bool
    compile_seconds: float
    script: str


def build_program(source: Path, binary: str, flags: tuple[str, ...], torch: TorchInstall,
                  cache: Path | None = None, path: str | None = None) -> Program:
    """Compile *source* (one ``.cpp`` file of this package) against *torch*, or reuse the binary.

    Like :func:`build`, the folder is keyed by a SHA-256 of the torch version, the
    allocator header, the source and :data:`LOCAL_HEADERS`, the command and the
    compiler version, and named with the release, so each supported release compiles
    once and never shares a binary with another.  With ``-fsanitize=thread`` among
    *flags* the toolchain is probed first (:func:`check_tsan`), so a missing libtsan
    fails with what to install.

    >>> build_program(Path("no_such.cpp"), "x", (), TorchInstall(Path("/t"), "2.15.0"))
    Traceback (most recent call last):
    ...
    FileNotFoundError: no_such.cpp does not exist
    """
    if not source.is_file():
        raise FileNotFoundError(f"{source} does not exist")
    gxx = find_compiler(path)
    cache = cache or tsan_cache()
    compiler = check_tsan(gxx, cache) if "-fsanitize=thread" in flags else _compiler_version(gxx)
    header_text = torch.header.read_text()
    check_snapshot_code(header_text, str(torch.header))
    script = compile_command(source.name, binary, flags)
    h = hashlib.sha256()
    for part in (torch.version.encode(), header_text.encode(), source.read_bytes(),
                 *(f.read_bytes() for f in LOCAL_HEADERS), script.encode(),
                 str(torch.root).encode(), compiler.encode()):
        h.update(hashlib.sha256(part).digest())
    release = torch.version.split("+", 1)[0]
    folder = cache / f"{binary}-{release}-{h.hexdigest()[:20]}"
    meta, executable = folder / "build.json", folder / binary
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if meta.is_file() and executable.is_file():
            info = json.loads(meta.read_text())
            return Program(folder, executable, True, info["compile_seconds"], script)
        for src in (source, *LOCAL_HEADERS):
            shutil.copyfile(src, folder / src.name)
        env = dict(os.environ, TORCH=str(torch.root))
        env["PATH"] = os.path.dirname(gxx) + os.pathsep + env.get("PATH", "")
        t0 = time.perf_counter()
        res = subprocess.run(["bash", "-e", "-c", script], cwd=folder, env=env,
                             capture_output=True, text=True, timeout=600)
        seconds = time.perf_counter() - t0
        if res.returncode != 0:
            raise HarnessFailedError(f"compiling {source.name} failed (exit {res.returncode}):\n"
                                     f"{res.stderr[-3000:]}")
        # Written last: its presence marks a complete build.
        meta.write_text(json.dumps({"compile_seconds": seconds, "script": script, "compiler": compiler}))
        return Program(folder, executable, False, seconds, script)
