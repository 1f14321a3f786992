"""What gloo does with a message shorter than the buffer posted for it: two real processes.

    python -m torch.distributed.run --nproc-per-node 2 -m explainers.mesh.gloo_short

Rank 0 sends ``[7.0]``; rank 1 receives into a buffer of three ``-1.0`` and prints
what it then holds as JSON.  Gloo's TCP transport refuses a message *longer* than the
posted buffer (``op.preamble.length <= op.nbytes`` in ``gloo/transport/tcp/pair.cc``,
which aborts the process); :func:`short_message` shows the other direction.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["short_message"]

_REPO_ROOT = Path(__file__).resolve().parents[2]


def _rank_main() -> int:
    import datetime

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    try:
        if dist.get_rank() == 0:
            dist.send(torch.tensor([7.0]), 1)
        else:
            buf = torch.full((3,), -1.0)
            dist.recv(buf, 0)
            print("RESULT " + json.dumps({"received_into_3": buf.tolist()}), flush=True)
        dist.barrier()  # both ranks finish: nothing was refused
    finally:
        dist.destroy_process_group()
    return 0


def short_message(timeout: float = 300.0) -> dict:
    """Launch the two processes; ``{"received_into_3": [...], "returncode": 0}``.

    >>> short_message()
    {'received_into_3': [7.0, -1.0, -1.0], 'returncode': 0}
    """
    from explainers.mesh.launch import free_port

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO_ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
           "--master-addr=127.0.0.1", f"--master-port={free_port()}", "-m", "explainers.mesh.gloo_short"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    results = [json.loads(line[len("RESULT "):]) for line in proc.stdout.splitlines()
               if line.startswith("RESULT ")]
    if len(results) != 1:
        raise RuntimeError(f"gloo_short printed {len(results)} results (exit {proc.returncode}):\n"
                           + (proc.stdout + proc.stderr)[-3000:])
    return {**results[0], "returncode": proc.returncode}


if __name__ == "__main__":
    if "RANK" not in os.environ:
        raise SystemExit("run me under torchrun: python -m torch.distributed.run --nproc-per-node 2 ...")
    raise SystemExit(_rank_main())
