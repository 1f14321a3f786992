"""A throw-away copy of the project, its builds, and which pages each build executed.

Every build the benchmark times runs on a copy made by :class:`Tree`, so the
checkout's own site, execution cache and sources are never touched, and an
edit made to measure a rebuild (a page, an ``explainers`` module) is made to
the copy.  Builds run exactly as ``nox -s docs`` runs them: the arguments and
environment come from the copy's own ``noxfile.py``.
"""

from __future__ import annotations

import importlib.util
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ROOT", "Build", "BuildFailed", "Tree", "executed_pages", "failure_lines", "edit_last_code_cell", "mystnb_pages"]

ROOT = Path(__file__).resolve().parents[1]
#: What a docs build needs from the checkout.
COPIED = ("docs", "explainers", "tools", ".github", "noxfile.py", "pyproject.toml", "constraints.txt", "README.md")
_IGNORE = shutil.ignore_patterns("_build", "jupyter_execute", "__pycache__", ".ipynb_checkpoints")

# MyST-NB 1.4 logs one line per page it runs: "<path>.md: Executed notebook in 16.07 seconds [mystnb]"
# (a page served from the cache logs "Using cached notebook" instead).
_EXECUTED = re.compile(r"^(?P<path>\S+?\.(?:md|ipynb)): Executed notebook in (?P<s>[\d.]+) seconds", re.M)


class BuildFailed(RuntimeError):
    """A build exited non-zero; the message carries the end of its output."""


def failure_lines(log: str, limit: int = 40) -> str:
    """What a failed build's log says failed.

    ``nox -s docs`` ends a failed build with one verdict line that names each failing
    page and why (``tools.sitebuild``): that line is the answer.  A bare ``sphinx-build``
    (the floor builds) has no verdict, so its warning and error lines stand in.  The
    log's last lines are nox echoing the command and the environment, which name no page.

    >>> print(failure_lines("ok\\nAssertionError: the claim\\n"
    ...                     "torch 2.15.0: The docs build FAILED (a.md: AssertionError: the claim). No site.\\n"
    ...                     "nox > Session docs failed."))
    torch 2.15.0: The docs build FAILED (a.md: AssertionError: the claim). No site.
    >>> print(failure_lines("ok\\n/x/docs/a.md: WARNING: Executing notebook failed: CellExecutionError\\n"
    ...                     "AssertionError: the claim\\nnox > Session docs failed."))
    /x/docs/a.md: WARNING: Executing notebook failed: CellExecutionError
    AssertionError: the claim
    """
    from tools.sitebuild import FAILED

    verdict = [line for line in log.splitlines() if FAILED in line]
    if verdict:
        return "\n".join(verdict)
    keep = re.compile(r"WARNING|ERROR|Error:|Error\b.*:|Traceback|Timeout|timed out|exceeded")
    return "\n".join([line for line in log.splitlines() if keep.search(line)][:limit])


def executed_pages(log: str, docs: Path) -> dict[str, float]:
    """Pages a build's log says were executed, as docname -> seconds.

    >>> log = "/x/docs/render.md: Executed notebook in 16.07 seconds [mystnb]\\n"
    >>> log += "/x/docs/verification.md: Using cached notebook: ID=2 [mystnb]\\n"
    >>> executed_pages(log, Path("/x/docs"))
    {'render': 16.07}
    """
    out = {}
    for m in _EXECUTED.finditer(log):
        path = Path(m["path"])
        try:
            name = path.relative_to(docs).with_suffix("").as_posix()
        except ValueError:
            continue
        out[name] = float(m["s"])
    return out


def mystnb_pages(docs: Path) -> list[str]:
    """Docnames of the executable pages (MyST notebooks) under ``docs``."""
    return sorted(
        p.relative_to(docs).with_suffix("").as_posix()
        for p in docs.rglob("*.md")
        if "_build" not in p.parts and "file_format: mystnb" in p.read_text(encoding="utf-8")
    )


_CELL = re.compile(r"^(?P<fence>`{3,})\{code-cell\}[^\n]*\n", re.M)


def edit_last_code_cell(text: str, marker: str) -> str:
    """Append a comment line to the page's last code cell, changing its code.

    A code change is what makes MyST-NB's cache execute the page again (a
    change to prose or a bare ``touch`` re-reads it without executing).

    >>> page = "# T\\n\\n```{code-cell} ipython3\\n:tags: [remove-cell]\\nx = 1\\n```\\n"
    >>> print(edit_last_code_cell(page, "# bench 1"))
    # T
    <BLANKLINE>
    ```{code-cell} ipython3
    :tags: [remove-cell]
    x = 1
    # bench 1
    ```
    <BLANKLINE>
    >>> edit_last_code_cell("no cells", "# x")
    Traceback (most recent call last):
    ...
    ValueError: edit_last_code_cell: the page has no code cell
    """
    cells = list(_CELL.finditer(text))
    if not cells:
        raise ValueError("edit_last_code_cell: the page has no code cell")
    last = cells[-1]
    close = re.compile(rf"^{last['fence']}\s*$", re.M).search(text, last.end())
    if close is None:
        raise ValueError("edit_last_code_cell: the last code cell is not closed")
    return text[: close.start()] + marker + "\n" + text[close.start() :]


@dataclass
class Build:
    """One timed build."""

    seconds: float
    executed: dict[str, float]  # docname -> MyST-NB's execution seconds
    log: str = field(repr=False)
    cpu: float = 0.0  # user + system seconds of the build and every process it waited for


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def _load_noxfile(path: Path):
    import nox.registry

    # Each load registers the sessions again; nox 2026.10.20 warns that this will become
    # an error.  Only the module's constants and functions are used here, not its sessions.
    nox.registry.reset()
    spec = importlib.util.spec_from_file_location(f"_bench_noxfile_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Tree:
    """A copy of the project at ``where`` (replaced if it exists)."""

    def __init__(self, where: Path, source: Path = ROOT) -> None:
        self.root = Path(where).resolve()
        if self.root.exists():
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True)
        for name in COPIED:
            src = source / name
            if src.is_dir():
                shutil.copytree(src, self.root / name, ignore=_IGNORE)
            elif src.is_file():
                shutil.copy2(src, self.root / name)
        self.docs = self.root / "docs"
        self.noxfile = _load_noxfile(self.root / "noxfile.py")
        self._edits = 0

    # -- builds --------------------------------------------------------------------------

    def clean(self) -> None:
        """Remove the build folder, the execution cache included: the next build is cold."""
        shutil.rmtree(self.docs / "_build", ignore_errors=True)
        shutil.rmtree(self.docs / "jupyter_execute", ignore_errors=True)

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.noxfile.RUN_ENV)
        env.update(extra or {})
        return env

    def _run(self, cmd: list[str], env: dict[str, str], timeout: float) -> Build:
        cpu0, start = _cpu(resource.RUSAGE_CHILDREN), time.perf_counter()
        res = subprocess.run(
            cmd, cwd=self.root, env=env, capture_output=True, text=True, timeout=timeout
        )
        seconds = time.perf_counter() - start
        cpu = _cpu(resource.RUSAGE_CHILDREN) - cpu0
        log = res.stdout + res.stderr
        if res.returncode != 0:
            raise BuildFailed(f"{' '.join(cmd[:6])} ... exited {res.returncode}:\n{failure_lines(log)}\n{log[-1500:]}")
        return Build(seconds, executed_pages(log, self.docs), log, cpu)

    def nox_docs(self, extra: list[str] | None = None, env: dict[str, str] | None = None,
                 timeout: float = 1800) -> Build:
        """``nox -s docs`` on the copy, end to end (nox, staging copy, sphinx, kernels)."""
        nox = shutil.which("nox")
        cmd = [nox] if nox else [sys.executable, "-m", "nox"]
        cmd += ["--nocolor", "-f", str(self.root / "noxfile.py"), "-s", "docs"]
        if extra:
            cmd += ["--", *extra]
        return self._run(cmd, {**os.environ, **(env or {})}, timeout)

    def sphinx(self, extra: list[str] | None = None, env: dict[str, str] | None = None,
               strict: bool = True, out: str = "html", timeout: float = 1800,
               in_process: bool = False) -> Build:
        """``sphinx-build`` alone, with the noxfile's arguments, into ``_build/<out>``.

        ``in_process=True`` runs Sphinx in this interpreter (which must be the
        shared environment's): after the first build, Sphinx and its extensions
        are already imported, which is what makes the regression test cheap.
        The kernels still start as separate processes.
        """
        build = self.docs / "_build"
        extra = list(extra or [])
        if in_process and not any(a.startswith(("-j", "--jobs")) for a in extra):
            extra = ["-j", "1", *extra]  # never fork the calling process (pytest) into workers
        from tools.sitebuild import sphinx_command

        # The copy's strict command line, without the interpreter: ["-m", "sphinx", ...].
        # MyST-NB writes executed notebooks beside the HTML folder (outdir.parent / "jupyter_execute"):
        # a second build into _build/<out> would overwrite the site's, which the next staged build
        # starts from, so any other output gets a folder of its own.
        outdir, doctrees = ((build / "html", build / "html-doctrees") if out == "html"
                            else (build / out / "html", build / out / "doctrees"))
        args = sphinx_command(self.noxfile.PY, self.docs, outdir, doctrees, extra)[1:]
        if not strict:
            args = [a for a in args if a != "-W"]
        if in_process:
            return self._run_in_process(args[2:], self.env(env))  # drop "-m sphinx"
        return self._run([str(self.noxfile.PY), *args], self.env(env), timeout)

    def _run_in_process(self, args: list[str], env: dict[str, str]) -> Build:
        import contextlib
        import io

        from sphinx.cmd.build import build_main

        # conf.py puts the tree on sys.path and imports `explainer_deps` (and
        # through it `explainers`) by name: undo both afterwards, so the
        # caller's own `explainers` is not replaced by the tree's.
        sys.modules.pop("explainer_deps", None)
        saved_path, saved_modules = list(sys.path), set(sys.modules)
        saved = dict(os.environ)
        buf = io.StringIO()
        cpu0 = _cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        try:
            os.environ.clear()
            os.environ.update(env)  # the kernels inherit it
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                rc = build_main(args)
        finally:
            os.environ.clear()
            os.environ.update(saved)
            sys.path[:] = saved_path
            for name in set(sys.modules) - saved_modules:
                if name.split(".")[0] in ("explainers", "explainer_deps"):
                    del sys.modules[name]
        seconds = time.perf_counter() - start
        cpu = _cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN) - cpu0
        log = buf.getvalue()
        if rc != 0:
            raise BuildFailed(f"sphinx-build (in process) exited {rc}:\n{log[-4000:]}")
        return Build(seconds, executed_pages(log, self.docs), log, cpu)

    def env_is_current(self) -> bool:
        """Whether ``nox -s docs`` would reuse the shared environment (no pip install)."""
        import hashlib

        nf = self.noxfile
        reqs = nf._requirements()
        key = hashlib.sha256(
            ("\n".join(reqs) + (self.root / "constraints.txt").read_text() + sys.version).encode()
        ).hexdigest()
        stamp = nf.ENV / ".torch-explainers-stamp"
        return nf.PY.exists() and stamp.exists() and stamp.read_text() == key

    # -- edits ---------------------------------------------------------------------------

    def pages(self) -> list[str]:
        return mystnb_pages(self.docs)

    def edit_page(self, docname: str) -> None:
        """Change the code of ``docname``'s last cell (a comment), so it must execute again."""
        self._edits += 1
        path = self.docs / f"{docname}.md"
        path.write_text(edit_last_code_cell(path.read_text(encoding="utf-8"), f"# bench edit {self._edits}"))

    def touch_page(self, docname: str) -> None:
        """Bump the page's mtime only: Sphinx re-reads it, MyST-NB's cache serves it."""
        path = self.docs / f"{docname}.md"
        t = time.time() + 1
        os.utime(path, (t, t))

    def edit_module(self, relpath: str) -> None:
        """Append a comment to an ``explainers`` file (relative to the project root)."""
        self._edits += 1
        path = self.root / relpath
        with path.open("a", encoding="utf-8") as f:
            f.write(f"\n# bench edit {self._edits}\n")

    def importers(self, relpath: str) -> set[str]:
        """Pages whose dependency closure (the copy's ``docs/_ext/explainer_deps.py``) contains the file."""
        extension = self.docs / "_ext" / "explainer_deps.py"
        spec = importlib.util.spec_from_file_location("_bench_explainer_deps", extension)
        deps = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(deps)
        page_dependencies = deps.page_dependencies

        target = (self.root / relpath).resolve()
        out = set()
        for page in self.pages():
            files, _ = page_dependencies((self.docs / f"{page}.md").read_text(encoding="utf-8"), self.root)
            if target in {f.resolve() for f in files}:
                out.add(page)
        return out

    def modules(self) -> list[str]:
        """``explainers`` files a page can depend on: top-level modules and each subpackage's ``__init__``."""
        pkg = self.root / "explainers"
        mods = [p for p in pkg.glob("*.py") if p.name != "__init__.py"]
        mods += [p for p in pkg.glob("*/__init__.py")]
        return sorted(p.relative_to(self.root).as_posix() for p in mods)
