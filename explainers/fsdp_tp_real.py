"""Where FSDP2 over tensor parallelism puts a weight's rows, on eight real gloo processes, for any row count.

:func:`explainers.mesh.fsdp.fsdp_tp_layout` shards a ``Linear(2, rows)`` with
``ColwiseParallel`` over ``tp`` and ``fully_shard`` over ``dp`` on a 4×2 mesh
``(dp, tp)``.  In a simulated world its rows are wrong (FSDP2 reads its shard
index from ``ProcessGroup.rank()``), so the rows come from real processes:
:func:`launch_fsdp_tp` runs one ``torchrun --nproc-per-node 8`` launch of this
module (gloo on CPU), each rank building the layout for every row count and
writing its rows; :func:`real_fsdp_tp` stores the result per torch release and
code, so a page launches it once.

>>> _record_name((9, 16), "2.15.0+cu132", "abc")
'fsdp-tp-9-16-torch2.15.0+cu132-abc.json'
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["launch_fsdp_tp", "real_fsdp_tp"]

_ROOT = Path(__file__).resolve().parents[1]


def _record_name(sizes: Sequence[int], torch_version: str, key: str) -> str:
    version = re.sub(r"[^0-9A-Za-z.+]", "_", torch_version)
    return f"fsdp-tp-{'-'.join(map(str, sizes))}-torch{version}-{key}.json"


def _code_key() -> str:
    """This file and every module of :mod:`explainers.mesh` (which builds the layout)."""
    h = hashlib.sha256()
    for path in [Path(__file__), *sorted((_ROOT / "explainers" / "mesh").glob("*.py"))]:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def launch_fsdp_tp(sizes: Sequence[int], timeout: float = 300.0) -> dict[int, dict[int, list[int]]]:
    """FSDP2+TP's rows on each of 8 gloo ranks, for each row count: ``{rows: {rank: [row, ...]}}``.

    Raises ``RuntimeError`` with the launcher's output if the launch fails or
    runs past ``timeout`` seconds.
    """
    from explainers.mesh.launch import free_port

    with tempfile.TemporaryDirectory(prefix="fsdp-tp-") as tmp:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=8", "--master-addr=127.0.0.1",
               f"--master-port={free_port()}", "-m", "explainers.fsdp_tp_real", f"--out={tmp}",
               "--sizes=" + ",".join(map(str, sizes))]
        env = {**os.environ, "OMP_NUM_THREADS": "1",
               "PYTHONPATH": os.pathsep.join(p for p in (str(_ROOT), os.environ.get("PYTHONPATH")) if p)}
        # a new session, so that on timeout the launcher and its workers die together
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            raise RuntimeError(f"torchrun fsdp_tp_real did not finish in {timeout} s:\n{output[-3000:]}") from None
        if proc.returncode != 0:
            raise RuntimeError(f"torchrun fsdp_tp_real exited {proc.returncode}:\n{output[-3000:]}")
        per_rank = {r: json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in range(8)}
    return {n: {r: per_rank[r][str(n)] for r in range(8)} for n in sizes}


def real_fsdp_tp(sizes: Sequence[int], timeout: float = 300.0) -> dict[int, dict[int, list[int]]]:
    """:func:`launch_fsdp_tp`, stored under the cache root's ``mesh-runs`` per torch release and code."""
    import torch

    from explainers.releases import cache_root

    path = cache_root() / "mesh-runs" / _record_name(sizes, torch.__version__, _code_key())
    if path.exists():
        data = json.loads(path.read_text())
        return {int(n): {int(r): rows for r, rows in by_rank.items()} for n, by_rank in data.items()}
    result = launch_fsdp_tp(sizes, timeout=timeout)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(_record_name(sizes, torch.__version__, "*")):
        stale.unlink(missing_ok=True)  # written by older code with this torch: never read again
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(path)  # atomic: a reader never sees half a record
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m explainers.fsdp_tp_real", description=__doc__)
    parser.add_argument("--out", type=Path, required=True, help="directory for rank<r>.json")
    parser.add_argument("--sizes", required=True, help="comma-separated row counts")
    args = parser.parse_args(argv)
    if "RANK" not in os.environ:
        parser.error("run me under torchrun: python -m torch.distributed.run --nproc-per-node 8 ...")
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from explainers.mesh.fsdp import fsdp_tp_layout

    dist.init_process_group("gloo")
    try:
        mesh = init_device_mesh("cpu", (4, 2), mesh_dim_names=("dp", "tp"))
        rank = dist.get_rank()
        rows = {n: fsdp_tp_layout(mesh, rows=n).rows[rank] for n in map(int, args.sizes.split(","))}
        (args.out / f"rank{rank}.json").write_text(json.dumps(rows))
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
