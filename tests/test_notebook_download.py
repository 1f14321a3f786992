"""A notebook downloaded from the site runs end to end against the installed project.

The render page's notebook (the quickest page to execute) is taken from the
built site, as its download button serves it, and run with nbclient in a
clean temporary folder, by a kernel of a fresh virtual environment: the
project installed into it with pip (as the notebook's first cell says), the
rest (torch, Jupyter, MyST-NB) from the environment it was made from.  The
checkout is nowhere on the kernel's path: a final cell checks which
`explainers` it imported.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest
from gate_figures import record

pytestmark = [pytest.mark.site, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
PAGE = "render"

# Run by the virtual environment's Python: execute the notebook, then ask the kernel which
# `explainers` it imported.  nbclient raises on an error in a cell not tagged raises-exception.
RUNNER = """
import json, sys
import nbformat
from nbclient import NotebookClient

nb = nbformat.read(sys.argv[1], as_version=4)
nb.cells.append(nbformat.v4.new_code_cell("import explainers; print(explainers.__file__)"))
NotebookClient(nb, timeout=600, kernel_name="python3").execute()
code = [c for c in nb.cells if c.cell_type == "code"]
print(json.dumps({"cells": len(code) - 1, "explainers": code[-1].outputs[0]["text"].strip(),
                  "errors": sum(o.get("output_type") == "error" for c in code for o in c.outputs)}))
"""


def install_project(tmp: Path) -> Path:
    """A venv with this project pip-installed and this environment's packages visible; its Python."""
    source = tmp / "project"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "explainers", source / "explainers", ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    env = tmp / "venv"
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    # `system_site_packages` would show the base interpreter's packages, not this
    # environment's (torch, Jupyter, MyST-NB): a .pth file adds them after the venv's own.
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", "--no-build-isolation", str(source)],
                   check=True, capture_output=True, text=True, timeout=300)
    shutil.rmtree(source)
    return python


def test_the_downloaded_notebook_runs_against_the_installed_project(site, tmp_path):
    notebook = site / "_sources" / f"{PAGE}.ipynb"
    assert notebook.is_file(), f"the site offers no {notebook.name}"
    python = install_project(tmp_path)
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy2(notebook, folder / notebook.name)
    (tmp_path / "runner.py").write_text(RUNNER)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    proc = subprocess.run([str(python), str(tmp_path / "runner.py"), notebook.name], cwd=folder,
                          env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    installed = Path(result["explainers"]).resolve()
    record("notebook", PAGE, result=f"{notebook.name} downloaded from the site ran end to end in a "
           f"clean folder: {result['cells']} code cells, {result['errors']} expected errors, "
           "explainers imported from the pip-installed project")
    assert installed.is_relative_to((tmp_path / "venv").resolve()), (
        f"the kernel imported explainers from {installed}, not the installed project")
