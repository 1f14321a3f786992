"""The execution floor: each page's code run as a plain Python script.

A page's code cells (read with jupytext, as MyST-NB reads them) run one after
the other in one fresh ``python`` process, in the page's folder, with the
build's environment.  Cells tagged ``raises-exception`` may raise, as on the
page.  What this leaves out is exactly the notebook machinery: the kernel's
start-up and messaging, and the rich display of each cell's result.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["page_cells", "DRIVER", "run_page"]

#: Runs the cells given as JSON ``[[source, may_raise], ...]`` in one namespace.
DRIVER = r"""
import json, linecache, sys
cells = json.load(open(sys.argv[1]))
ns = {"__name__": "__main__"}
for i, (src, may_raise) in enumerate(cells):
    name = f"<cell {i}>"
    # As IPython does: tracebacks and inspect can read the cell's source lines.
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    code = compile(src, name, "exec")
    try:
        exec(code, ns)
    except Exception:
        if not may_raise:
            raise
"""


def page_cells(path: Path) -> list[tuple[str, bool]]:
    """The code cells of a MyST notebook as ``(source, may_raise)``.

    IPython magics are translated to plain Python where IPython can do that;
    a page that needs a running IPython shell fails its floor run and says so.
    """
    import jupytext
    from IPython.core.inputtransformer2 import TransformerManager

    nb = jupytext.read(path, fmt="md:myst")
    tm = TransformerManager()
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        src = cell.source
        if any(line.lstrip().startswith(("%", "!")) for line in src.splitlines()):
            src = tm.transform_cell(src)
        cells.append((src, "raises-exception" in cell.metadata.get("tags", [])))
    return cells


def run_page(path: Path, python: str, env: dict[str, str], timeout: float = 600) -> tuple[float, float]:
    """Wall and CPU seconds of one plain-Python run of the page; RuntimeError if it fails."""
    import resource

    cells = page_cells(path)
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as tmp:
        spec = Path(tmp) / "cells.json"
        spec.write_text(json.dumps(cells))
        driver = Path(tmp) / "driver.py"
        driver.write_text(DRIVER)
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        res = subprocess.run(
            [python, str(driver), str(spec)], cwd=path.parent, env=env,
            capture_output=True, text=True, timeout=timeout,
        )
        seconds = time.perf_counter() - start
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        raise RuntimeError(f"{path.name} as a plain script failed:\n{res.stderr[-2000:]}")
    return seconds, (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)


if __name__ == "__main__":  # python -m bench.floor docs/render.md
    import os

    wall, cpu = run_page(Path(sys.argv[1]).resolve(), sys.executable, dict(os.environ))
    print(f"{wall:.2f} s wall, {cpu:.2f} s CPU")
