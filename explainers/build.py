"""The staged, strict site build that ``nox -s docs`` runs, importable for tests.

Sphinx writes into ``_build/staging`` (seeded with the last good doctrees and
executed notebooks, so only changed pages are read and run) and the result replaces
``_build/html`` only when the build succeeds: a failed build leaves the last
good site byte for byte as it was.  ``noxfile.py`` and the fault-injection
tests (``tests/test_faults.py``) call the same :func:`build_site`, so the tests
exercise the real path.

This module imports nothing beyond the standard library: nox imports it from
its own interpreter.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BuildResult", "PUBLISHED", "build_site", "inputs_digest", "sphinx_command", "tree_digest"]

# What a successful build publishes from staging into `_build/`.  MyST-NB
# writes executed notebooks and glue data next to the output folder.
PUBLISHED = ("html", "doctrees", "jupyter_execute")
# The digest of the inputs the published site was built from (see inputs_digest).
INPUTS_FILE = "html-inputs.sha256"
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
    >>> tree_digest(d / "missing")
    Traceback (most recent call last):
    ...
    FileNotFoundError: no such directory: ...missing
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


def build_site(docs: Path, python: str | os.PathLike, extra: list[str] | tuple[str, ...] = (),
               env: dict[str, str] | None = None, capture: bool = False,
               timeout: float | None = None, prefix: list[str] | tuple[str, ...] = (),
               skip_unchanged: str | None = None) -> BuildResult:
    """Build ``docs`` into ``docs/_build/staging``; replace ``docs/_build/html`` only on success.

    ``env`` is the whole environment of the build (default: this process's).
    ``capture=True`` returns sphinx's output instead of streaming it.
    ``prefix`` runs the command under a wrapper (e.g. ``["unshare", "-rn", ...]``).
    ``skip_unchanged``, a string naming the Python environment, makes a build
    whose :func:`inputs_digest` equals the published site's a no-op: Sphinx
    would re-read files and execute nothing, so the site would not change.

    >>> build_site(Path("/nonexistent/docs"), "python")
    Traceback (most recent call last):
    ...
    ValueError: /nonexistent/docs has no conf.py: not a Sphinx source folder
    """
    docs = Path(docs)
    if not (docs / "conf.py").is_file():
        raise ValueError(f"{docs} has no conf.py: not a Sphinx source folder")
    build = docs / "_build"
    site, staging = build / "html", build / "staging"
    cmd = [*prefix, *sphinx_command(python, docs, staging / "html", staging / "doctrees", extra)]
    digest = None if skip_unchanged is None else inputs_digest(docs, cmd, skip_unchanged)
    recorded = build / INPUTS_FILE
    if (digest and (site / "index.html").is_file() and recorded.is_file()
            and recorded.read_text().strip() == digest):
        return BuildResult(True, "", f"Site is up to date (no input changed since its build): "
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
    try:
        proc = subprocess.run(
            cmd, env=env, timeout=timeout, text=True,
            stdout=subprocess.PIPE if capture else None,
            stderr=subprocess.STDOUT if capture else None,
        )
        code, output = proc.returncode, proc.stdout or ""
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout or ""
        code, output = -1, (out.decode(errors="replace") if isinstance(out, bytes) else out)
        output += f"\nbuild killed after {timeout} s"
    if code != 0:
        where = site / "index.html"
        kept = (f"The last good site is unchanged at {where}." if where.exists()
                else "There is no previous site.")
        return BuildResult(False, output,
                           f"The docs build FAILED (see the warnings above, each names its page). {kept}")
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
