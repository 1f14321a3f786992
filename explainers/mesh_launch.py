"""Launch the mesh walkthrough on real processes and collect what every rank held.

The comparison test, and anyone checking the simulated page against real
PyTorch, uses :func:`launch_walkthrough`: one ``torchrun --nproc-per-node 8``
launch of :mod:`explainers.mesh_run` (gloo on CPU), which returns the
walkthrough's steps with all 8 ranks merged, and how long it took.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

# mesh_run is the script torchrun launches: imported so that the docs' dependency
# cache (explainers.deps) re-executes the mesh page when it changes.
from explainers import mesh_run  # noqa: F401
from explainers.mesh import Step, merge_steps

__all__ = ["RealRun", "free_port", "launch_walkthrough", "real_run", "record_key"]

_REPO_ROOT = Path(__file__).resolve().parent.parent


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
    wall_s: float  # the whole launch: interpreters, imports, rendezvous, walkthrough
    walkthrough_s: float  # the slowest rank's walkthrough() call alone
    nproc: int
    when: str = ""  # UTC time of the launch
    by: str = ""  # who launched it: "test" or "page"
    cpus: int = 0  # os.cpu_count() of the machine it ran on


def launch_walkthrough(numel: int, nproc: int = 8, timeout: float = 300.0) -> RealRun:
    """Run :func:`explainers.mesh.walkthrough` on ``nproc`` real gloo processes.

    One ``python -m torch.distributed.run`` launch, rendezvous on a free port of
    127.0.0.1; each rank writes its steps to a JSON file, merged here.  Raises
    ``RuntimeError`` with the launcher's output tail if it fails or runs longer
    than ``timeout`` seconds (the whole process group is then killed).
    """
    if nproc != 8:
        raise ValueError(f"the walkthrough's mesh is 2x2x2: nproc must be 8, got {nproc}")
    with tempfile.TemporaryDirectory(prefix="mesh-run-") as tmp:
        out = Path(tmp)
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc-per-node={nproc}",
            "--master-addr=127.0.0.1",
            f"--master-port={free_port()}",
            "-m",
            "explainers.mesh_run",
            f"--numel={numel}",
            f"--out={out}",
            "--quiet",
        ]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_REPO_ROOT), env.get("PYTHONPATH")) if p
        )
        env.setdefault("OMP_NUM_THREADS", "1")
        start = time.perf_counter()
        # A new session, so that on timeout the launcher and its 8 workers can
        # be killed together by their process-group id.
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
                f"torchrun walkthrough (numel={numel}) did not finish in {timeout} s:\n"
                + output[-3000:]
            ) from None
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(
                f"torchrun walkthrough (numel={numel}) exited with {proc.returncode}:\n"
                + output[-3000:]
            )
        payloads = [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]
    runs = [[Step.from_dict(d) for d in p["steps"]] for p in payloads]
    return RealRun(
        steps=merge_steps(runs),
        wall_s=wall,
        walkthrough_s=max(p["seconds"] for p in payloads),
        nproc=nproc,
        when=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        cpus=os.cpu_count() or 0,
    )


def record_key(numel: int) -> str:
    """What a stored real run depends on: the walkthrough's code, torch, and the size.

    >>> record_key(15) == record_key(15) != record_key(16)
    True
    """
    import torch

    h = hashlib.sha256()
    for name in ("mesh.py", "mesh_run.py", "mesh_launch.py"):
        h.update((Path(__file__).parent / name).read_bytes())
    h.update(f"{torch.__version__}|{sys.version_info[:2]}|{numel}".encode())
    return h.hexdigest()[:16]


def _records_dir() -> Path:
    default = Path.home() / ".cache" / "torch-explainers" / "mesh-runs"
    return Path(os.environ.get("TORCH_EXPLAINERS_MESH_RUNS", default))


def save_record(run: RealRun, numel: int) -> Path:
    """Store ``run`` for :func:`real_run`, under its :func:`record_key`."""
    d = _records_dir()
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"walkthrough-{numel}-{record_key(numel)}.json"
    data = {
        "steps": [s.to_dict() for s in run.steps],
        **{k: getattr(run, k) for k in ("wall_s", "walkthrough_s", "nproc", "when", "by", "cpus")},
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)  # atomic: a reader never sees half a record
    for stale in d.glob(f"walkthrough-{numel}-*.json"):
        if stale != path:  # recorded by older code or another torch: never read again
            stale.unlink(missing_ok=True)
    return path


def real_run(numel: int, timeout: float = 300.0) -> RealRun:
    """The real 8-process walkthrough for ``numel``: stored, or launched now.

    The comparison test launches the run and stores it (``by="test"``).  A
    page calls this to reuse that run when nothing it depends on has changed
    (same :func:`record_key`: the walkthrough's code, torch, Python, the size);
    otherwise it launches one itself (``by="page"``, about 25 s on 2 cores)
    and stores it.  Records live in ``$TORCH_EXPLAINERS_MESH_RUNS``, default
    ``~/.cache/torch-explainers/mesh-runs``.
    """
    path = _records_dir() / f"walkthrough-{numel}-{record_key(numel)}.json"
    if path.exists():
        data = json.loads(path.read_text())
        return RealRun(steps=[Step.from_dict(d) for d in data.pop("steps")], **data)
    run = replace(launch_walkthrough(numel, timeout=timeout), by="page")
    save_record(run, numel)
    return run
