"""The launcher: run the mesh walkthrough on real gloo processes, collect and store what every
rank held.

The comparison test, and anyone checking the simulated page against real
PyTorch, uses :func:`launch_walkthrough`: one ``torchrun --nproc-per-node 8``
launch of :mod:`explainers.mesh.torchrun` (gloo on CPU), which returns the
walkthrough's steps and the page's probes with all 8 ranks merged, and how long
it took.  :func:`launch_verbatim` runs the fragment exactly as written and
returns how each rank ended, including ranks that died inside a collective.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from explainers.mesh.fsdp import FsdpLayout
from explainers.mesh.gathers import GatherProbe, merge_probes
from explainers.mesh.steps import Step, merge_steps
from explainers.mesh.walkthrough import FRAGMENT

__all__ = [
    "RealRun",
    "VerbatimRun",
    "failed_ranks",
    "free_port",
    "launch_verbatim",
    "launch_walkthrough",
    "real_run",
    "real_verbatim",
    "record_key",
]

_REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for ``MASTER_PORT``).

    >>> 0 < free_port() < 65536
    True
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class RealRun:
    """The result of one real multi-process walkthrough."""

    steps: list[Step]  # every rank merged in
    wall_s: float  # the whole launch: interpreters, imports, rendezvous, walkthrough, probes
    walkthrough_s: float  # the slowest rank's walkthrough() call alone
    nproc: int
    probes: list[GatherProbe] = field(default_factory=list)  # every rank merged in
    fsdp: FsdpLayout | None = None  # every rank's rows merged in
    #: explainers.mesh.rooted.broadcast_probe: {"m": {rank: whose tensor it holds}, ...}
    broadcast: dict[str, dict[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class VerbatimRun:
    """How each rank of one real launch of the fragment, as written, ended."""

    returncode: int  # of the torchrun launcher
    started: dict[int, list[int]]  # rank -> indices into FRAGMENT of the lines it started
    ended: dict[int, dict]  # rank -> {"values": ...} or {"error": type, "message": ...}
    gloo: list[str]  # the launcher output lines in which gloo refused a message
    exitcodes: dict[int, int] = field(default_factory=dict)  # failed ranks, from the summary

    def last_line(self, rank: int) -> str | None:
        """The label of the last fragment line ``rank`` started, e.g. ``"unshard N"``."""
        lines = self.started.get(rank)
        return FRAGMENT[lines[-1]][1] if lines else None


def _launch(numel: int, nproc: int, timeout: float, out: Path, extra: list[str]) -> tuple[int, str]:
    """One ``torchrun`` launch of :mod:`explainers.mesh.torchrun`; (return code, output)."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        "--master-addr=127.0.0.1",
        f"--master-port={free_port()}",
        "-m",
        "explainers.mesh.torchrun",
        f"--numel={numel}",
        f"--out={out}",
        "--quiet",
        *extra,
    ]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO_ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    # A new session, so that on timeout the launcher and its workers can be
    # killed together by their process-group id.
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        raise RuntimeError(
            f"torchrun {' '.join(extra) or 'walkthrough'} (numel={numel}) did not finish in "
            f"{timeout} s:\n" + output[-3000:]
        ) from None
    return proc.returncode, output


_FAILURE = re.compile(r"rank\s*:\s*(\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)")


def failed_ranks(output: str) -> dict[int, int]:
    """``{rank: exit code}`` from the failure summary that ``torch.distributed.run`` prints.

    >>> failed_ranks("  rank      : 7 (local_rank: 7)\\n  exitcode  : -6 (pid: 1)")
    {7: -6}
    """
    return {int(r): int(c) for r, c in _FAILURE.findall(output)}


def launch_walkthrough(numel: int, nproc: int = 8, timeout: float = 300.0) -> RealRun:
    """Run :func:`explainers.mesh.walkthrough.walkthrough` and the page's probes on ``nproc`` real gloo
    processes.

    One ``python -m torch.distributed.run`` launch, rendezvous on a free port of
    127.0.0.1; each rank writes its steps and probes to a JSON file, merged here.
    Raises ``RuntimeError`` with the launcher's output tail if it fails or runs
    longer than ``timeout`` seconds (the whole process group is then killed).
    """
    if nproc != 8:
        raise ValueError(f"the walkthrough's mesh is 2x2x2: nproc must be 8, got {nproc}")
    with tempfile.TemporaryDirectory(prefix="mesh-run-") as tmp:
        out = Path(tmp)
        start = time.perf_counter()
        code, output = _launch(numel, nproc, timeout, out, [])
        wall = time.perf_counter() - start
        if code != 0:
            raise RuntimeError(
                f"torchrun walkthrough (numel={numel}) exited with {code}:\n" + output[-3000:]
            )
        payloads = [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]
    runs = [[Step.from_dict(d) for d in p["steps"]] for p in payloads]
    layouts = [FsdpLayout.from_dict(p["fsdp"]) for p in payloads]
    broadcast = {
        mesh: dict(sorted((int(r), v) for p in payloads for r, v in p["broadcast"][mesh].items()))
        for mesh in payloads[0]["broadcast"]
    }
    if len({fl.placements for fl in layouts}) != 1:
        raise RuntimeError("the ranks disagree on the FSDP2 weight's placements")
    return RealRun(
        steps=merge_steps(runs),
        wall_s=wall,
        walkthrough_s=max(p["seconds"] for p in payloads),
        nproc=nproc,
        probes=merge_probes([[GatherProbe.from_dict(d) for d in p["probes"]] for p in payloads]),
        fsdp=FsdpLayout(
            layouts[0].placements,
            dict(sorted((r, v) for fl in layouts for r, v in fl.rows.items())),
        ),
        broadcast=broadcast,
    )


def launch_verbatim(numel: int, nproc: int = 8, timeout: float = 300.0) -> VerbatimRun:
    """Run the fragment exactly as written on ``nproc`` real gloo processes.

    Unlike :func:`launch_walkthrough`, a failing launch is the result, not an error:
    the returned :class:`VerbatimRun` says which lines each rank started and how it
    ended (a rank killed by gloo or by the launcher has no ``ended`` entry).
    """
    if nproc != 8:
        raise ValueError(f"the fragment's mesh is 2x2x2: nproc must be 8, got {nproc}")
    with tempfile.TemporaryDirectory(prefix="mesh-verbatim-") as tmp:
        out = Path(tmp)
        code, output = _launch(numel, nproc, timeout, out, ["--verbatim"])
        started, ended = {}, {}
        for r in range(nproc):
            progress = out / f"rank{r}.progress"
            if progress.exists():
                started[r] = [int(line) for line in progress.read_text().split()]
            result = out / f"rank{r}.json"
            if result.exists():
                d = json.loads(result.read_text())
                ended[r] = {k: v for k, v in d.items() if k != "rank"}
    gloo = [
        line.strip()
        for line in output.splitlines()
        if "gloo::EnforceNotMet" in line or "doesn't match expected size" in line
    ]
    return VerbatimRun(
        returncode=code,
        started=started,
        ended=ended,
        gloo=gloo,
        exitcodes=failed_ranks(output),
    )


def record_key(numel: int, torch_version: str | None = None) -> str:
    """What a stored real run depends on: the code of :mod:`explainers.mesh`, torch, Python,
    the size.

    ``torch_version`` defaults to the installed ``torch.__version__``: a run made with one
    torch release is never reused under another.

    >>> record_key(15) == record_key(15) != record_key(16)
    True
    >>> record_key(15, "2.14.1+cu130") != record_key(15, "2.15.0+cu132")
    True
    """
    if torch_version is None:
        import torch

        torch_version = torch.__version__
    h = hashlib.sha256()
    # Every module of the package: the walkthrough, the probes, the entry point and this file.
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    h.update(f"{torch_version}|{sys.version_info[:2]}|{numel}".encode())
    return h.hexdigest()[:16]


def _records_dir() -> Path:
    from explainers.releases import cache_root

    return cache_root() / "mesh-runs"


def _record_path(kind: str, numel: int) -> Path:
    """``<kind>-<numel>-torch<version>-<key>.json``: the torch version is in the name too,
    so that storing a run for one release (which removes that release's older records)
    leaves the records of every other release alone."""
    import torch

    version = re.sub(r"[^0-9A-Za-z.+]", "_", torch.__version__)
    return _records_dir() / f"{kind}-{numel}-torch{version}-{record_key(numel)}.json"


def _store(kind: str, numel: int, data: dict) -> Path:
    import torch

    path = _record_path(kind, numel)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({**data, "torch": torch.__version__}))
    tmp.replace(path)  # atomic: a reader never sees half a record
    prefix = path.name[: -len(f"-{record_key(numel)}.json")]
    for stale in path.parent.glob(f"{prefix}-*.json"):
        if stale != path:  # recorded by older code with this torch: never read again
            stale.unlink(missing_ok=True)
    return path


def _stored(kind: str, numel: int) -> dict | None:
    """The stored record, or ``None`` if there is none for this code, size and torch."""
    import torch

    path = _record_path(kind, numel)
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    if data.pop("torch", None) != torch.__version__:  # the key says so too; belt and braces
        return None
    return data


def save_record(run: RealRun, numel: int) -> Path:
    """Store ``run`` for :func:`real_run`, under its :func:`record_key`."""
    data = {
        "steps": [s.to_dict() for s in run.steps],
        "probes": [p.to_dict() for p in run.probes],
        "fsdp": None if run.fsdp is None else run.fsdp.to_dict(),
        "broadcast": run.broadcast,
        **{k: getattr(run, k) for k in ("wall_s", "walkthrough_s", "nproc")},
    }
    return _store("walkthrough", numel, data)


def save_verbatim(run: VerbatimRun, numel: int) -> Path:
    """Store ``run`` for :func:`real_verbatim`, under its :func:`record_key`."""
    return _store("verbatim", numel, asdict(run))


def real_run(numel: int, timeout: float = 300.0) -> RealRun:
    """The real 8-process walkthrough for ``numel``: stored, or launched now.

    The comparison test launches the run and stores it.  A page calls this
    to reuse that run when nothing it depends on has changed (same
    :func:`record_key`: the walkthrough's code, torch, Python, the size);
    otherwise it launches one itself (about 30 s on 2 cores) and stores it.  Records
    live in ``mesh-runs`` under :func:`explainers.releases.cache_root`, one per torch
    version.
    """
    data = _stored("walkthrough", numel)
    if data is not None:
        fsdp = data.pop("fsdp")
        broadcast = {m: {int(r): v for r, v in held.items()} for m, held in data.pop("broadcast").items()}
        return RealRun(
            broadcast=broadcast,
            steps=[Step.from_dict(d) for d in data.pop("steps")],
            probes=[GatherProbe.from_dict(d) for d in data.pop("probes")],
            fsdp=None if fsdp is None else FsdpLayout.from_dict(fsdp),
            **data,
        )
    run = launch_walkthrough(numel, timeout=timeout)
    save_record(run, numel)
    return run


def real_verbatim(numel: int, timeout: float = 300.0) -> VerbatimRun:
    """The real 8-process run of the fragment as written: stored, or launched now.

    Stored and reused like :func:`real_run` (the comparison test stores it).
    """
    data = _stored("verbatim", numel)
    if data is not None:
        data["started"] = {int(r): v for r, v in data["started"].items()}
        data["ended"] = {int(r): v for r, v in data["ended"].items()}
        data["exitcodes"] = {int(r): v for r, v in data["exitcodes"].items()}
        return VerbatimRun(**data)
    run = launch_verbatim(numel, timeout=timeout)
    save_verbatim(run, numel)
    return run
