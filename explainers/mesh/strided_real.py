"""The uneven-size table of :mod:`explainers.mesh.strided` on 8 real gloo processes.

Each rank of one ``torchrun --nproc-per-node 8`` launch (:mod:`explainers.mesh.torchrun`
with ``--strided``) builds the three encodings of the right-to-left state for every size
(the same calls as the simulated table: ``distribute_tensor`` with ``_StridedShard``,
``redistribute`` from ``[R, R, R]``, and the shard order ``k, n, m``), then redistributes
each back to ``[R, R, R]``, and appends what it held to ``rank<r>.jsonl`` after each size.
A collective that gets inputs of different sizes makes gloo abort the process
(``gloo::EnforceNotMet``), and ``torchrun`` then stops every rank: :func:`launch_strided`
records that size as aborted, with gloo's message, and launches again with the sizes
after it.  :func:`real_strided` stores the result under :func:`explainers.mesh.launch.record_key`,
so the page and the tests launch it once per torch release and code.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from explainers.mesh.strided import ENCODINGS, outcome

__all__ = ["compare", "format_real", "launch_strided", "rank_rows", "real_strided"]


def rank_rows(mesh: Any, sizes: Sequence[int], out: Path, rank: int) -> None:
    """On one real rank: for each size, what this rank holds in each encoding and back.

    Appends one JSON line per size to ``out/rank<rank>.jsonl`` as soon as the size is
    done (flushed), so the sizes before a size that aborts the process are kept.
    """
    from torch.distributed.tensor import Replicate

    from explainers.mesh.strided import _encodings

    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"rank{rank}.jsonl", "a") as f:
        for numel in sizes:
            row: dict[str, Any] = {"numel": numel}
            for name, x in _encodings(mesh, numel).items():
                try:
                    back = x.redistribute(x.device_mesh, [Replicate()] * 3).to_local().tolist()
                except Exception as e:  # noqa: BLE001 - what the rank got is the record
                    back = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
                row[name] = {"local": x.to_local().tolist(), "back": back}
            f.write(json.dumps(row) + "\n")
            f.flush()


def _gloo_lines(output: str) -> list[str]:
    """The launcher output's lines in which gloo refused a message, each once, in order.

    >>> _gloo_lines("a\\nwhat(): [enforce fail at pair.cc:464] Received data size doesn't "
    ...             "match expected size.\\nb")
    ["what(): [enforce fail at pair.cc:464] Received data size doesn't match expected size."]
    """
    seen: list[str] = []
    for line in output.splitlines():
        line = line.strip()
        if ("EnforceNotMet" in line or "doesn't match expected size" in line) and line not in seen:
            seen.append(line)
    return seen


def _merge(numel: int, per_rank: dict[int, dict], nproc: int) -> dict:
    row: dict[str, Any] = {"numel": numel, "aborted": None}
    for name in ENCODINGS:
        layout = {str(r): per_rank[r][name]["local"] for r in range(nproc)}
        backs = {r: per_rank[r][name]["back"] for r in range(nproc)}
        errors = sorted({b for b in backs.values() if isinstance(b, str)})
        row[name] = {"layout": layout,
                     "back": {"rank0": None if errors else backs[0],
                              "outcome": errors[0] if errors else outcome(backs, numel)}}
    return row


def launch_strided(sizes: Sequence[int], nproc: int = 8, timeout: float = 600.0) -> list[dict]:
    """One row per size from real gloo processes; a size that aborts the launch is a row too.

    A row has ``numel``, ``aborted`` (``None``, or ``{"gloo": [...], "exitcodes": {...}}``)
    and, when not aborted, ``layout`` and ``back`` (rank 0's values, the outcome) for
    each of :data:`explainers.mesh.strided.ENCODINGS`.
    """
    from explainers.mesh.launch import _launch, failed_ranks

    if nproc != 8:
        raise ValueError(f"the table's mesh is 2x2x2: nproc must be 8, got {nproc}")
    rows: list[dict] = []
    todo = list(sizes)
    while todo:
        with tempfile.TemporaryDirectory(prefix="mesh-strided-") as tmp:
            out = Path(tmp)
            code, output = _launch(0, nproc, timeout, out, ["--strided", ",".join(map(str, todo))])
            done: dict[int, dict[int, dict]] = {}
            for r in range(nproc):
                path = out / f"rank{r}.jsonl"
                for line in path.read_text().splitlines() if path.exists() else ():
                    d = json.loads(line)
                    done.setdefault(d["numel"], {})[r] = d
        finished = [n for n in todo if len(done.get(n, {})) == nproc]
        if finished != todo[:len(finished)]:
            raise RuntimeError(f"ranks finished sizes out of order: {finished} of {todo}")
        rows += [_merge(n, done[n], nproc) for n in finished]
        rest = todo[len(finished):]
        if code == 0:
            if rest:
                raise RuntimeError(f"torchrun --strided exited 0 without sizes {rest}:\n{output[-3000:]}")
            break
        if not rest:
            raise RuntimeError(f"torchrun --strided exited {code} after every size:\n{output[-3000:]}")
        gloo = _gloo_lines(output)
        if not gloo:  # not a collective mismatch: a real failure of the harness
            raise RuntimeError(f"torchrun --strided (numel={rest[0]}) exited {code}:\n{output[-3000:]}")
        rows.append({"numel": rest[0], "aborted": {
            "gloo": gloo, "exitcodes": {str(r): c for r, c in failed_ranks(output).items()}}})
        todo = rest[1:]
    return rows


def real_strided(sizes: Sequence[int], timeout: float = 600.0) -> list[dict]:
    """:func:`launch_strided` for ``sizes``: stored, or launched now and stored.

    Records live with the walkthrough's in ``mesh-runs`` under the cache root, keyed by
    :func:`explainers.mesh.launch.record_key` (the package's code, torch, Python, the sizes).
    """
    from explainers.mesh.launch import _store, _stored

    key = "-".join(map(str, sizes))
    data = _stored("strided", key)
    if data is not None:
        return data["rows"]
    rows = launch_strided(sizes, timeout=timeout)
    _store("strided", key, {"rows": rows})
    return rows


def compare(real: Sequence[dict], simulated: Sequence[dict]) -> list[dict]:
    """Per size: does each encoding's real layout and way back equal the simulation's?

    ``layout`` and ``back`` are ``True`` / ``False`` per encoding, or the row is
    ``{"numel": n, "aborted": True, "simulated": <the simulated outcome of distribute>}``.

    >>> sim = [{"numel": 4, **{e: {"layout": {"0": [0]}, "back": {"rank0": [0], "outcome": "right"}}
    ...                        for e in ENCODINGS}}]
    >>> real = [{"numel": 4, "aborted": None, **{e: {"layout": {"0": [0]},
    ...          "back": {"rank0": [0], "outcome": "right"}} for e in ENCODINGS}}]
    >>> compare(real, sim)[0]["distribute"]
    {'layout': True, 'back': True}
    """
    by_size = {r["numel"]: r for r in simulated}
    out = []
    for row in real:
        sim = by_size[row["numel"]]
        if row["aborted"]:
            out.append({"numel": row["numel"], "aborted": True,
                        "simulated": sim["distribute"]["back"]["outcome"]})
            continue
        out.append({"numel": row["numel"], "aborted": False, **{
            e: {"layout": row[e]["layout"] == sim[e]["layout"],
                "back": {k: row[e]["back"][k] for k in ("rank0", "outcome")}
                == {k: sim[e]["back"][k] for k in ("rank0", "outcome")}}
            for e in ENCODINGS}})
    return out


def format_real(real: Sequence[dict]) -> str:
    """The real rows as text: per size, each encoding's way back to ``[R, R, R]``, or the abort.

    >>> rows = [{"numel": 9, "aborted": {"gloo": ["x"], "exitcodes": {"5": -6}}},
    ...         {"numel": 14, "aborted": None, **{e: {"back": {"outcome": o}}
    ...          for e, o in zip(ENCODINGS, ("wrong", "right", "right"))}}]
    >>> print(format_real(rows))
    numel  distribute_tensor  redistribute  shard_order
        9  every rank stopped: gloo aborted a rank (SIGABRT)
       14  wrong              right         right
    """
    lines = ["numel  distribute_tensor  redistribute  shard_order"]
    for r in real:
        if r["aborted"]:
            # Which rank gloo aborts first varies from run to run: the table does not name it.
            lines.append(f"{r['numel']:>5}  every rank stopped: gloo aborted a rank (SIGABRT)")
            continue
        cells = [r[e]["back"]["outcome"].split(":")[0] for e in ENCODINGS]
        lines.append(f"{r['numel']:>5}  {cells[0]:<17}  {cells[1]:<12}  {cells[2]}")
    return "\n".join(lines)
