"""The entry point ``torchrun`` runs: the mesh-elimination walkthrough on real processes.

    python -m torch.distributed.run --nproc-per-node 8 -m explainers.mesh.torchrun --numel 15

Each of the 8 processes runs :func:`explainers.mesh.walkthrough.walkthrough` on a real
2x2x2 ``DeviceMesh`` (gloo on CPU, or NCCL with ``--device cuda``).  Rank 0
gathers every rank's locals and prints, for every step, the same drawing and
per-rank listing as the page.  With ``--out DIR`` each rank also writes what it
held at every step to ``DIR/rank<r>.json`` (the comparison test reads those),
together with the page's probes of multi-dim redistributes
(:func:`explainers.mesh.gathers.gather_probes`), of ``distribute_tensor``'s broadcast
from group rank 1 (:func:`explainers.mesh.rooted.broadcast_probe`) and of FSDP2 over
tensor parallelism (:func:`explainers.mesh.fsdp.fsdp_tp_layout`), which run after
the walkthrough.

With ``--verbatim`` each process instead runs the fragment exactly as written
(:func:`explainers.mesh.walkthrough.run_fragment`), appending the index of every line
it starts to ``DIR/rank<r>.progress`` and what it ended with to
``DIR/rank<r>.json``: a rank can die inside a collective without a Python exception.
With ``--strided SIZES`` each process builds the uneven-size table of
:mod:`explainers.mesh.strided_real` instead.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m explainers.mesh.torchrun", description=__doc__)
    parser.add_argument("--numel", type=int, default=15, help="elements of arange_nd(numel)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--out", type=Path, help="directory for rank<r>.json files")
    parser.add_argument("--quiet", action="store_true", help="do not print the table")
    parser.add_argument(
        "--verbatim", action="store_true", help="run the fragment as written (needs --out)"
    )
    parser.add_argument(
        "--strided", metavar="SIZES",
        help="comma-separated sizes: the uneven-size table (explainers.mesh.strided_real; needs --out)",
    )
    args = parser.parse_args(argv)
    if "RANK" not in os.environ:
        parser.error(
            "run me under torchrun: python -m torch.distributed.run --nproc-per-node 8 ..."
        )

    if (args.verbatim or args.strided) and args.out is None:
        parser.error("--verbatim and --strided need --out")

    import datetime

    import torch
    import torch.distributed as dist

    from explainers.mesh.draw import rank_listing, render_step
    from explainers.mesh.simulated import make_mesh
    from explainers.mesh.steps import Step, merge_steps
    from explainers.mesh.walkthrough import walkthrough

    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    # DTensor.from_local imports torch._dynamo lazily (seconds of CPU); import
    # it before the clock starts, so the timing is the walkthrough's own.
    import torch._dynamo  # noqa: F401

    # A bounded timeout: with --verbatim a rank may wait on a peer that died.
    dist.init_process_group(
        "nccl" if args.device == "cuda" else "gloo", timeout=datetime.timedelta(seconds=120)
    )
    try:
        rank = dist.get_rank()
        mesh = make_mesh((2, 2, 2), ("m", "n", "k"), device_type=args.device)
        if args.verbatim:
            return _verbatim(mesh, args.numel, args.out, rank)
        if args.strided:
            from explainers.mesh.strided_real import rank_rows

            rank_rows(mesh, [int(n) for n in args.strided.split(",")], args.out, rank)
            return 0
        start = time.perf_counter()
        steps = walkthrough(mesh, args.numel)
        seconds = time.perf_counter() - start
        if args.out is not None:
            from explainers.mesh.fsdp import fsdp_tp_layout
            from explainers.mesh.gathers import gather_probes
            from explainers.mesh.rooted import broadcast_probe

            probes = gather_probes(mesh)
            broadcast = broadcast_probe(mesh)
            fsdp = fsdp_tp_layout(make_mesh((4, 2), ("dp", "tp"), device_type=args.device))
            args.out.mkdir(parents=True, exist_ok=True)
            payload = {
                "rank": rank,
                "seconds": seconds,
                "steps": [s.to_dict() for s in steps],
                "probes": [p.to_dict() for p in probes],
                "broadcast": broadcast,
                "fsdp": fsdp.to_dict(),
            }
            (args.out / f"rank{rank}.json").write_text(json.dumps(payload))
        gathered: list | None = [None] * dist.get_world_size() if rank == 0 else None
        dist.gather_object([s.to_dict() for s in steps], gathered, dst=0)
        if rank == 0 and not args.quiet:
            runs = [[Step.from_dict(d) for d in run] for run in gathered]
            for step in merge_steps(runs):
                print(f"## {step.phase}: {step.label}\n{step.code}")
                if step.redistribution is not None:
                    print(step.redistribution.sentence())
                print(f"\n{render_step(step)}\n\n{rank_listing(step)}\n")
            print(f"walkthrough on rank 0: {seconds:.3f} s")
    finally:
        dist.destroy_process_group()
    return 0


def _verbatim(mesh, numel: int, out: Path, rank: int) -> int:
    """Run the fragment as written; record each line started, then the result or the error."""
    from explainers.mesh.walkthrough import run_fragment

    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"rank{rank}.progress", "a") as progress:

        def started(i: int) -> None:
            progress.write(f"{i}\n")
            progress.flush()  # in the OS before the collective: survives an abort

        try:
            x = run_fragment(mesh, numel, started)
            result = {"rank": rank, "values": x.tolist()}
        except Exception as e:  # noqa: BLE001  what a rank ended with is the record
            result = {"rank": rank, "error": type(e).__name__, "message": str(e)[:500]}
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
