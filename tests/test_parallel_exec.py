"""A `-j 2` build from a clean cache runs its pages' kernels at once, each on its own endpoints.

`nox -s docs` builds with `-j auto`: Sphinx forks workers that execute pages
at the same time (docs/_ext/parallel_exec.py).  This builds a tiny site (real
conf.py and extensions, no torch) with two pages, from a clean execution
cache, with `-j 2`.  Each page's kernel writes its own connection info, then
waits until the other page's kernel has written its own: the build succeeds
only if the two kernels ran at the same time.  Their endpoints must differ.
"""

from __future__ import annotations

import json

import pytest
from minisite import build, executed_pages, make_tree, page

pytestmark = pytest.mark.slow

PAGES = ("alpha", "beta")

# What each page's kernel runs: record its endpoints, then wait for the other kernel's.
CELL = """
import json, os, pathlib, time
from ipykernel.connect import get_connection_info

info = get_connection_info(unpack=True)
ports = sorted(info[k] for k in info if k.endswith("_port"))
folder = pathlib.Path(os.environ["KERNEL_ENDPOINTS"])
record = {{"transport": info["transport"], "ip": info["ip"], "ports": ports, "worker": os.getppid()}}
(folder / "{name}.tmp").write_text(json.dumps(record))
(folder / "{name}.tmp").rename(folder / "{name}.json")
deadline = time.monotonic() + 30
while len(list(folder.glob("*.json"))) < {n} and time.monotonic() < deadline:
    time.sleep(0.1)
assert len(list(folder.glob("*.json"))) == {n}, "the other page's kernel did not run at the same time"
"""


def test_a_parallel_build_gives_each_kernel_its_own_endpoints(tmp_path):
    docs = make_tree(tmp_path / "site", {
        name: page(name.title(), CELL.format(name=name, n=len(PAGES))) for name in PAGES})
    endpoints = tmp_path / "endpoints"
    endpoints.mkdir()
    result = build(docs, extra=("-j", "2"), extra_env={"KERNEL_ENDPOINTS": str(endpoints)})
    assert result.ok, result.output[-3000:]
    assert executed_pages(result.output) == set(PAGES)  # from a clean cache: the database held
    kernels = {p.stem: json.loads(p.read_text()) for p in endpoints.glob("*.json")}
    assert set(kernels) == set(PAGES)
    assert kernels["alpha"]["worker"] != kernels["beta"]["worker"], "both pages ran in one worker"
    used = {name: {f"{k['transport']}://{k['ip']}-{port}" for port in k["ports"]}
            for name, k in kernels.items()}
    assert all(len(u) == 5 for u in used.values()), used
    assert used["alpha"].isdisjoint(used["beta"]), used
    # IPC endpoints, not TCP ports that another process's kernel could be handed too.
    assert {k["transport"] for k in kernels.values()} == {"ipc"}
