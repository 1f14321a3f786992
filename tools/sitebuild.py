"""The staged, strict site build that ``nox -s docs`` runs: ``python tools/sitebuild.py``.

Sphinx writes into ``_build/staging`` (seeded with the last good doctrees and
executed notebooks, so only changed pages are read and run) and the result replaces
``_build/html`` only when the build succeeds: a failed build leaves the last
good site byte for byte as it was.  ``noxfile.py`` runs this file as a script, and
the build tests (``tests/test_faults.py``, ``tests/test_build_skip.py``) import
:func:`build_site`, so the tests exercise the real path.

A failed build's verdict names each failing page: for a page whose code failed,
the exception and the cell, as ``docs/_ext/strict_exec.py`` reads them from
MyST-NB's execution data (it writes them to the file this build names in
``$TORCH_EXPLAINERS_FAILURES``); for any other page, how many warnings Sphinx
wrote against it in its warning file (``-w``).

This is site machinery, not part of the ``explainers`` package: it is not shipped,
and editing it changes no page's inputs.  It imports only the standard library.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BuildResult", "FAILED", "FAILURES_ENV", "UP_TO_DATE", "PUBLISHED", "build_site", "inputs_digest", "main",
           "sphinx_command", "tree_digest"]

# What a successful build publishes from staging into `_build/`.  MyST-NB
# writes executed notebooks and glue data next to the output folder.
PUBLISHED = ("html", "doctrees", "jupyter_execute")
# The digest of the inputs the published site was built from (see inputs_digest).
INPUTS_FILE = "html-inputs.sha256"
# Where docs/_ext/strict_exec.py writes {page: why} for the pages whose code failed.
FAILURES_ENV = "TORCH_EXPLAINERS_FAILURES"
# How a failed build's one-line verdict starts (read back by the benchmark).
FAILED = "The docs build FAILED"
# How the verdict starts when the gate finds no input changed (read back by tools/rebuild_rules.py).
UP_TO_DATE = "Site is up to date"
# A located line of Sphinx's warning file: "/abs/docs/page.md:12: WARNING: ...".
_LOCATED = re.compile(r"^(\S+?\.(?:md|ipynb|rst))(?::\d+)?: (?:WARNING|ERROR|CRITICAL): ", re.M)
# Never inputs: build outputs, notebook execution folders, editor and bytecode caches.
_NOT_INPUTS = {"_build", "jupyter_execute", "__pycache__", ".ipynb_checkpoints"}


@dataclass
class BuildResult:
    """What a build did: ``ok``, the captured ``output`` (empty when streamed), a one-line ``message``."""

    ok: bool
    output: str
    message: str


def sphinx_command(python: str | os.PathLike, docs: Path, outdir: Path, doctrees: Path,
                   extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The strict ``sphinx-build`` command line.

    ``-n`` nitpicky, ``-W`` warnings are errors, ``--keep-going`` lists every
    warning, ``-T`` full tracebacks, ``-a`` writes every page even when only
    some were re-read: each page's sidebar and next/previous links come from
    the whole toctree, so an incremental build that adds a page would
    otherwise leave stale navigation on the unchanged ones.

    >>> from pathlib import Path
    >>> cmd = sphinx_command("python", Path("docs"), Path("out"), Path("dt"), ["-j", "2"])
    >>> " ".join(cmd)
    'python -m sphinx -b html -n -W --keep-going -T -a -d dt -j 2 docs out'
    """
    return [str(python), "-m", "sphinx", "-b", "html", "-n", "-W", "--keep-going", "-T", "-a",
            "-d", str(doctrees), *extra, str(docs), str(outdir)]


def tree_digest(root: Path) -> str:
    """A SHA-256 over every file's relative path and bytes under ``root`` (symlinks as links).

    >>> import tempfile
    >>> from pathlib import Path
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "a.html").write_text("x")
    >>> before = tree_digest(d)
    >>> _ = (d / "a.html").write_text("y")
    >>> before == tree_digest(d)
    False
    >>> tree_digest(Path("/nonexistent/site"))
    Traceback (most recent call last):
    ...
    FileNotFoundError: no such directory: /nonexistent/site
    """
    if not root.is_dir():
        raise FileNotFoundError(f"no such directory: {root}")
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix().encode()
        if path.is_symlink():
            h.update(b"L" + rel + b"\0" + os.readlink(path).encode() + b"\0")
        elif path.is_file():
            h.update(b"F" + rel + b"\0" + path.read_bytes() + b"\0")
        else:
            h.update(b"D" + rel + b"\0")
    return h.hexdigest()


def inputs_digest(docs: Path, command: list[str] | tuple[str, ...], environment: str = "") -> str:
    """A SHA-256 over everything a build of ``docs`` reads that can change its output.

    That is the page sources and Sphinx configuration (``docs/`` without build
    outputs), the book's code (the ``explainers/`` folder beside ``docs/``), the
    build's command line, and ``environment``: a string naming the Python
    environment (its packages, torch among them), which the caller provides.
    Byte contents only: a bare ``touch`` changes nothing.

    >>> import tempfile
    >>> from pathlib import Path
    >>> root = Path(tempfile.mkdtemp())
    >>> (root / "docs" / "_build").mkdir(parents=True)
    >>> _ = (root / "docs" / "index.md").write_text("# Home")
    >>> before = inputs_digest(root / "docs", ["sphinx"], "env 1")
    >>> _ = (root / "docs" / "_build" / "page.html").write_text("output, not input")
    >>> inputs_digest(root / "docs", ["sphinx"], "env 1") == before
    True
    >>> (root / "explainers").mkdir()
    >>> _ = (root / "explainers" / "render.py").write_text("x = 1")
    >>> inputs_digest(root / "docs", ["sphinx"], "env 1") == before
    False
    >>> before = inputs_digest(root / "docs", ["sphinx"], "env 1")
    >>> inputs_digest(root / "docs", ["sphinx"], "env 2") == before
    False
    """
    h = hashlib.sha256()
    h.update("\0".join(map(str, command)).encode() + b"\0\0" + environment.encode() + b"\0\0")
    for root in (Path(docs), Path(docs).parent / "explainers"):
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root)
            if _NOT_INPUTS & set(rel.parts) or not path.is_file():
                continue
            h.update(f"{root.name}/{rel.as_posix()}".encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def failed_pages(report: Path, warnings: Path, docs: Path) -> dict[str, str]:
    """The pages a failed build blames, each with why, for the one-line verdict.

    ``report`` is strict_exec's ``{page: why}`` for the pages whose code failed;
    ``warnings`` is Sphinx's warning file, which names every other page that
    failed the strict build (under ``-W`` a warning is an error).  Either may be
    missing: a build can fail before it executes anything.

    >>> import json, tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "failed.json").write_text(json.dumps({"c.md": "AssertionError: no longer holds"}))
    >>> _ = (d / "warnings.txt").write_text(
    ...     "/x/docs/a.md:3: WARNING: unknown document: 'b' [ref.doc]\\n"
    ...     "/x/docs/c.md: WARNING: Executing notebook failed: CellExecutionError [mystnb.exec]\\n")
    >>> failed_pages(d / "failed.json", d / "warnings.txt", Path("/x/docs"))
    {'c.md': 'AssertionError: no longer holds', 'a.md': '1 warning'}
    >>> failed_pages(d / "none.json", d / "none.txt", Path("/x/docs"))
    {}
    """
    import json

    out: dict[str, str] = json.loads(report.read_text()) if report.is_file() else {}
    warned: dict[str, int] = {}
    for m in _LOCATED.finditer(warnings.read_text(errors="replace") if warnings.is_file() else ""):
        path = Path(m[1])
        page = path.relative_to(docs).as_posix() if path.is_relative_to(docs) else m[1]
        warned[page] = warned.get(page, 0) + 1
    for page, n in warned.items():
        out.setdefault(page, f"{n} warning{'s' if n > 1 else ''}")  # a failed page's warning is its failure
    return out


def _run(cmd: list[str], env: dict[str, str] | None, timeout: float | None,
         echo: bool) -> tuple[int, str]:
    """Run ``cmd``, returning (exit code, output); with ``echo`` the output also streams
    to this process's stdout as it comes.  Killed after ``timeout`` seconds (code -1)."""
    import sys
    import threading

    proc = subprocess.Popen(cmd, env=env, text=True, errors="replace",
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    killed = threading.Event()

    def kill() -> None:
        killed.set()
        proc.kill()

    timer = threading.Timer(timeout, kill) if timeout else None
    if timer:
        timer.start()
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if echo:
                sys.stdout.write(line)
                sys.stdout.flush()
        code = proc.wait()
    finally:
        if timer:
            timer.cancel()
    output = "".join(lines)
    if killed.is_set():
        return -1, output + f"\nbuild killed after {timeout} s"
    return code, output


def build_site(docs: Path, python: str | os.PathLike, extra: list[str] | tuple[str, ...] = (),
               env: dict[str, str] | None = None, capture: bool = False,
               timeout: float | None = None, prefix: list[str] | tuple[str, ...] = (),
               skip_unchanged: str | None = None, build: Path | None = None) -> BuildResult:
    """Build ``docs`` into ``docs/_build/staging``; replace ``docs/_build/html`` only on success.

    ``build`` moves all of that (staging, html, doctrees, executed notebooks) to
    another folder, e.g. one per torch release.

    ``env`` is the whole environment of the build (default: this process's).
    Sphinx's output is returned; unless ``capture=True`` it also streams as it comes.
    ``prefix`` runs the command under a wrapper (e.g. ``["unshare", "-rn", ...]``).
    ``skip_unchanged``, a string naming the Python environment, makes a build
    whose :func:`inputs_digest` equals the published site's a no-op: Sphinx
    would re-read files and execute nothing, so the site would not change.
    A failed build's ``message`` names each failing page and why (:func:`failed_pages`).

    >>> build_site(Path("/nonexistent/docs"), "python")
    Traceback (most recent call last):
    ...
    ValueError: /nonexistent/docs has no conf.py: not a Sphinx source folder
    """
    docs = Path(docs)
    if not (docs / "conf.py").is_file():
        raise ValueError(f"{docs} has no conf.py: not a Sphinx source folder")
    build = Path(build) if build is not None else docs / "_build"
    site, staging = build / "html", build / "staging"
    report, warnfile = staging / "failed-pages.json", staging / "warnings.txt"
    cmd = [*prefix, *sphinx_command(python, docs, staging / "html", staging / "doctrees",
                                    ["-w", str(warnfile), *extra])]
    digest = None if skip_unchanged is None else inputs_digest(docs, cmd, skip_unchanged)
    recorded = build / INPUTS_FILE
    if (digest and (site / "index.html").is_file() and recorded.is_file()
            and recorded.read_text().strip() == digest):
        return BuildResult(True, "", f"{UP_TO_DATE} (no input changed since its build): "
                                     f"{site / 'index.html'}")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    # Start from the last good doctrees and executed notebooks (with their
    # .glue.json, read by the claims test), so only changed pages are read and
    # executed.  The HTML is not carried over: with -a every page is written
    # afresh, so files the site no longer uses (old images) do not linger.
    for name in ("doctrees", "jupyter_execute"):
        if (build / name).exists():
            shutil.copytree(build / name, staging / name, symlinks=True)
    env = {**(os.environ if env is None else env), FAILURES_ENV: str(report)}
    code, output = _run(cmd, env, timeout, echo=not capture)
    if code != 0:
        where = site / "index.html"
        kept = (f"The last good site is unchanged at {where}." if where.exists()
                else "There is no previous site.")
        failed = failed_pages(report, warnfile, docs.resolve())
        named = ("; ".join(f"{page}: {why}" for page, why in failed.items()) if failed
                 else "see the output above")
        return BuildResult(False, output, f"{FAILED} ({named}). {kept}")
    recorded.unlink(missing_ok=True)  # the site is being replaced: its old inputs no longer hold
    for name in PUBLISHED:
        if not (staging / name).exists():
            continue
        old = build / f"{name}.old"
        if old.exists():
            shutil.rmtree(old)
        if (build / name).exists():
            (build / name).rename(old)
        (staging / name).rename(build / name)
        if old.exists():
            shutil.rmtree(old)
    shutil.rmtree(staging, ignore_errors=True)
    if digest:
        recorded.write_text(digest + "\n")
    return BuildResult(True, output, f"Site built: {site / 'index.html'}")


def main(argv: list[str] | None = None) -> int:
    """``python tools/sitebuild.py [options] DOCS [-- SPHINX-ARGS...]``: build, print the verdict.

    Exits 0 when the site was built or is up to date, 1 when the build failed.

    >>> main(["/nonexistent/docs"])
    Traceback (most recent call last):
    ...
    ValueError: /nonexistent/docs has no conf.py: not a Sphinx source folder
    """
    import argparse
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    ours, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(prog="tools/sitebuild.py", description=__doc__.split("\n")[0])
    parser.add_argument("docs", type=Path, help="the Sphinx source folder")
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter that runs Sphinx, and so the pages' kernels")
    parser.add_argument("--build", type=Path, help="the build folder (default: DOCS/_build)")
    parser.add_argument("--skip-unchanged", metavar="ENVIRONMENT",
                        help="a text naming the Python environment; a build whose inputs and "
                             "environment match the published site's builds nothing")
    parser.add_argument("--label", default="", help="what the verdict line starts with")
    args = parser.parse_args(ours)
    result = build_site(args.docs, args.python, extra, build=args.build,
                        skip_unchanged=args.skip_unchanged)
    print(f"{args.label}: {result.message}" if args.label else result.message, flush=True)
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
