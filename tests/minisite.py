"""A tiny copy of the site for build-level tests: the real conf.py, extensions and
static files, the real `explainers` package, and a few small pages.

The pages do not import torch, so a build costs a Sphinx start plus one short
kernel per executed page.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

from tools.sitebuild import BuildResult, build_site

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

FRONT = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
    format_version: 0.13
kernelspec:
  display_name: Python 3 (ipykernel)
  language: python
  name: python3
file_format: mystnb
---
"""


def page(title: str, *cells: str, prose: str = "A small page.") -> str:
    """A MyST notebook page with one code cell per entry of ``cells``."""
    body = "\n\n".join(f"```{{code-cell}} ipython3\n{c.strip()}\n```" for c in cells)
    return f"{FRONT}\n# {title}\n\n{prose}\n\n{body}\n"


def make_tree(dst: Path, pages: dict[str, str]) -> Path:
    """Create ``dst/docs`` (real config) and ``dst/explainers`` (a copy); return ``dst/docs``."""
    docs = dst / "docs"
    docs.mkdir(parents=True)
    shutil.copy2(DOCS / "conf.py", docs / "conf.py")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("_ext", "_static"):
        shutil.copytree(DOCS / name, docs / name, ignore=ignore)
    shutil.copytree(ROOT / "explainers", dst / "explainers", ignore=ignore)
    toc = "\n".join(pages)
    (docs / "index.md").write_text(f"# Mini site\n\n```{{toctree}}\n{toc}\n```\n")
    for name, text in pages.items():
        (docs / f"{name}.md").write_text(text)
    return docs


def build(docs: Path, timeout_cell: int = 60, extra_env: dict[str, str] | None = None,
          prefix: list[str] | tuple[str, ...] = (), extra: tuple[str, ...] = (),
          timeout: float = 300, skip_unchanged: str | None = None) -> BuildResult:
    """Run the real staged build (`tools/sitebuild.py`) on a tree, capturing its output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NB_EXECUTION")}
    env.update({
        "PYTHONPATH": str(docs.parent),
        "PYTHONHASHSEED": "0",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        "MPLBACKEND": "agg",
        "NB_EXECUTION_MODE": "cache",
        "NB_EXECUTION_TIMEOUT": str(timeout_cell),
        **(extra_env or {}),
    })
    return build_site(docs, sys.executable, list(extra), env=env, capture=True,
                      timeout=timeout, prefix=prefix, skip_unchanged=skip_unchanged)


def executed_pages(output: str) -> set[str]:
    """The pages a build executed (not served from the cache), from MyST-NB's log."""
    return {Path(m).stem for m in re.findall(r"^(\S+\.md): Executed notebook", output, re.M)}
