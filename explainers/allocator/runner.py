"""Build and run both variants: the shipped header as often as the other may run.

:func:`reproduce` is the page's one call.  It checks the toolchain, builds the
two binaries in parallel (or takes them from the cache) and then runs them in
rounds, at most ``max_attempts`` of them:

- "atomics removed" runs in each round until one run has reported a race, with
  both stacks restored, on every one of the four fields the overlay made plain
  (and so both race families).  TSAN reports only interleavings that happened,
  so a single short run can miss one, most often under load.
- "shipped" runs in every round, ``max_attempts`` times in all: at least as
  many runs as the other build can take, so its clean verdict rests on no
  fewer runs than the other build's races.

Each run is bounded by ``iterations`` and ``max_seconds`` inside the harness
and by a subprocess timeout outside.

>>> run_command(500, 2.0, "harness-shipped")
'TSAN_OPTIONS=halt_on_error=0:history_size=7 ./harness-shipped 500 2'
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .build import LOCAL_HEADERS, Build, BuildSpec, build, check_tsan, find_compiler, tsan_cache
from .errors import HarnessFailedError, TsanRuntimeError
from .overlay import ATOMIC_FIELDS
from .races import RaceRecord, classify, group_by_family, load_sources
from .torchpaths import TorchInstall, find_torch
from .tsan import RuntimeFlag, TsanLog, parse_flag_help, parse_tsan

__all__ = ["RACE_CPP", "Run", "VariantResult", "Reproduction", "run_command", "run_build", "run_tsan", "runtime_flags",
           "reproduce", "shipped_runs", "reader_script"]

#: Keep running after the first report so one run can show every race, and
#: keep the longest per-thread access history TSAN offers (history_size=7,
#: about 4M accesses) so that the earlier access of a race can be restored.
TSAN_OPTIONS = "halt_on_error=0:history_size=7"

#: The smallest racy program: two threads increment ``counter`` with no lock.  The main
#: thread first waits, through a relaxed atomic (which orders nothing, so the race stays),
#: until the other thread has written: TSAN checks and updates an address's shadow
#: without a lock, and in runs where the two writes could overlap in time it sometimes
#: reported nothing.
RACE_CPP = """#include <atomic>
#include <thread>
int counter = 0;
std::atomic<bool> written{false};
int main() {
  std::thread t([] {
    counter++;
    written.store(true, std::memory_order_relaxed);
  });
  // relaxed: no happens-before, only "not at the same time"
  while (!written.load(std::memory_order_relaxed)) std::this_thread::yield();
  counter++;
  t.join();
  return counter == 2 ? 0 : 1;
}
"""

_SUMMARY_RX = re.compile(r"^harness: (.*)$", re.M)


def run_command(iterations: int, max_seconds: float, binary: str) -> str:
    """The shell line that runs a built harness (in its build folder)."""
    return f"TSAN_OPTIONS={TSAN_OPTIONS} ./{binary} {iterations} {max_seconds:g}"


@dataclass
class Run:
    """One execution of a harness binary."""

    command: str
    returncode: int
    stats: dict[str, int]  # the harness's own summary line
    tsan_text: str  # stderr: TSAN's reports, verbatim
    seconds: float
    log: TsanLog
    records: list[RaceRecord]

    @property
    def families(self) -> set[str]:
        return {r.family for r in self.records}

    @property
    def fields(self) -> set[str]:
        """The fields this run reported races on."""
        return {r.field for r in self.records}

    @property
    def complete_fields(self) -> set[str]:
        """The fields with a race whose two stacks were both restored."""
        return {r.field for r in self.records if r.complete}


@dataclass
class VariantResult:
    """A variant's build and its runs (the last one is the one that counts)."""

    build: Build
    runs: list[Run] = field(default_factory=list)

    @property
    def final(self) -> Run:
        return self.runs[-1]


@dataclass
class Reproduction:
    """Everything the page shows."""

    torch: TorchInstall
    compiler: str
    shipped: VariantResult
    no_atomics: VariantResult  # the "atomics removed" build
    seconds: float
    max_attempts: int  # the number of rounds: shipped runs in each, the other until complete
    flags: dict[str, RuntimeFlag]  # the TSAN runtime's flags, from TSAN_OPTIONS=help=1

    def grouped(self) -> dict[str, list[RaceRecord]]:
        return group_by_family(self.no_atomics.final.records)


def run_build(b: Build, iterations: int, max_seconds: float, sources) -> Run:
    """Run one built harness and parse what TSAN printed.

    Some kernels randomize mmap so widely that TSAN's fixed shadow layout does
    not fit ("unexpected memory mapping"); then the run is retried once under
    ``setarch -R`` (ASLR off for that process only), and the command shows it.
    """
    if not isinstance(iterations, int) or iterations <= 0:
        raise ValueError(f"iterations must be a positive int, got {iterations!r}")
    if not (0 < max_seconds <= 60):
        raise ValueError(f"max_seconds must be in (0, 60], got {max_seconds!r}")
    command = run_command(iterations, max_seconds, b.spec.binary)
    argv = [str(b.executable), str(iterations), f"{max_seconds:g}"]
    t0 = time.perf_counter()
    res, launcher = run_tsan(argv, b.folder, timeout=max_seconds * 4 + 30)
    seconds = time.perf_counter() - t0
    if launcher:
        command = command.replace("./", " ".join(launcher) + " ./", 1)
    m = _SUMMARY_RX.search(res.stdout)
    if m is None or res.returncode not in (0, 66):
        raise HarnessFailedError(
            f"{command} exited {res.returncode} without its summary line:\n{res.stderr[-3000:]}"
        )
    stats = {k: int(v) for k, v in (kv.split("=") for kv in m.group(1).split())}
    log = parse_tsan(res.stderr)
    records = [classify(r, sources) for r in log.data_races]
    return Run(command, res.returncode, stats, res.stderr, seconds, log, records)


def run_tsan(argv: list[str], cwd: Path, timeout: float,
             options: str = TSAN_OPTIONS) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run a TSAN-built program with ``TSAN_OPTIONS=options``; return the result and the launcher.

    Some kernels randomize mmap so widely that TSAN's fixed shadow layout does
    not fit ("unexpected memory mapping"); then the program is run once more
    under ``setarch -R`` (ASLR off for that process only), and the launcher
    returned is that prefix (``[]`` when the plain run worked).
    """
    env = dict(os.environ, TSAN_OPTIONS=options)
    for launcher in ([], ["setarch", platform.machine(), "-R"]):
        res = subprocess.run(launcher + argv, cwd=cwd, env=env, capture_output=True, text=True,
                             timeout=timeout)
        if "unexpected memory mapping" not in res.stderr:
            return res, launcher
    raise TsanRuntimeError(
        "ThreadSanitizer could not map its shadow memory even with ASLR off; "
        "lower vm.mmap_rnd_bits (sudo sysctl vm.mmap_rnd_bits=28) or use g++ 13 or later"
    )


def runtime_flags(b: Build) -> dict[str, RuntimeFlag]:
    """The TSAN runtime's flags and their values, as the built binary prints them.

    ``TSAN_OPTIONS=help=1`` makes the runtime list every flag with its
    description and current value on stderr; the harness then does one
    round of work and exits.
    """
    res = subprocess.run(
        [str(b.executable), "1", "0.01"], cwd=b.folder, capture_output=True, text=True,
        env=dict(os.environ, TSAN_OPTIONS=TSAN_OPTIONS + ":help=1"), timeout=60,
    )
    if "unexpected memory mapping" in res.stderr:
        res = subprocess.run(
            ["setarch", platform.machine(), "-R", str(b.executable), "1", "0.01"], cwd=b.folder,
            capture_output=True, text=True, env=dict(os.environ, TSAN_OPTIONS=TSAN_OPTIONS + ":help=1"),
            timeout=60,
        )
    return parse_flag_help(res.stderr)


def reproduce(
    iterations: int = 2000,
    max_seconds: float = 3.0,
    max_attempts: int = 8,
    torch_root: str | Path | None = None,
    cache: Path | None = None,
    path: str | None = None,
) -> Reproduction:
    """Build (or reuse) both variants and run them; see the module docstring.

    *path* overrides ``$PATH`` when looking for ``g++`` (tests use it).
    """
    if not isinstance(max_attempts, int) or max_attempts < 1:
        raise ValueError(f"max_attempts must be a positive int, got {max_attempts!r}")
    t0 = time.perf_counter()
    gxx = find_compiler(path)
    torch = find_torch(torch_root)
    cache = cache or tsan_cache()
    version = check_tsan(gxx, cache)
    specs = [BuildSpec("shipped", torch), BuildSpec("atomics removed", torch)]
    with ThreadPoolExecutor(2) as pool:
        shipped_b, plain_b = pool.map(lambda s: build(s, gxx, version, cache), specs)
    # Reports point at the overlay or the installed header; same line numbers.
    ring = torch.include / "c10" / "core" / "RingBuffer.h"
    sources = load_sources(torch.header, *([ring] if ring.is_file() else []))

    shipped = VariantResult(shipped_b)
    plain = VariantResult(plain_b)
    with ThreadPoolExecutor(1) as pool:
        for _ in range(max_attempts):
            # The two builds run side by side on the machine's cores.
            fut = pool.submit(run_build, shipped_b, iterations, max_seconds, sources)
            # A run that misses a field (seen on a loaded CI machine: no report
            # on `context_recorder_`) would make the page's findings depend on
            # luck; runs take well under a second when they find everything.
            if not plain.runs or not set(ATOMIC_FIELDS) <= plain.final.complete_fields:
                plain.runs.append(run_build(plain_b, iterations, max_seconds, sources))
            shipped.runs.append(fut.result())
    flags = runtime_flags(shipped_b)
    return Reproduction(torch, version, shipped, plain, time.perf_counter() - t0, max_attempts, flags)


def shipped_runs(runs: int = 8, iterations: int = 2000, max_seconds: float = 3.0,
                 torch_root: str | Path | None = None) -> dict:
    """Build (or reuse) the shipped harness alone and run it *runs* times, as plain JSON.

    For another release through :func:`explainers.releases.run_under`: ``version``
    and, per run, ``returncode``, ``reports`` (how many TSAN reports) and ``stats``
    (the harness's summary counters).
    """
    if not isinstance(runs, int) or runs < 1:
        raise ValueError(f"runs must be a positive int, got {runs!r}")
    gxx = find_compiler()
    torch = find_torch(torch_root)
    cache = tsan_cache()
    b = build(BuildSpec("shipped", torch), gxx, check_tsan(gxx, cache), cache)
    ring = torch.include / "c10" / "core" / "RingBuffer.h"
    sources = load_sources(torch.header, *([ring] if ring.is_file() else []))
    out = []
    for _ in range(runs):
        run = run_build(b, iterations, max_seconds, sources)
        out.append({"returncode": run.returncode, "reports": len(run.log.reports), "stats": run.stats})
    return {"version": torch.version, "runs": out}


def reader_script(torch: TorchInstall, iterations: int = 2000, max_seconds: float = 3.0) -> str:
    """The whole reproduction as one copy-ready shell script.

    It is assembled from the very strings the runner executes
    (:meth:`BuildSpec.script` and :func:`run_command`); only the first line,
    which finds torch, is added.

    >>> s = reader_script(TorchInstall(Path("/t"), "2.14.1"), 2000, 3.0)
    >>> s.splitlines()[2].startswith("TORCH=$(python -c")
    True
    >>> sum(ln.startswith("g++ ") for ln in s.splitlines()), s.count("./harness-")
    (2, 2)
    """
    lines = [
        f"# In a folder holding {' and '.join(['harness.cpp', *(f.name for f in LOCAL_HEADERS)])} "
        "(shown above);",
        f"# needs g++ with libtsan and torch {torch.version.split('+')[0]}.",
        "TORCH=$(python -c 'import os, torch; print(os.path.dirname(torch.__file__))')",
    ]
    for variant in ("shipped", "atomics removed"):
        spec = BuildSpec(variant, torch)
        lines += ["", f"# {variant}", spec.script(), run_command(iterations, max_seconds, spec.binary)]
    return "\n".join(lines)
