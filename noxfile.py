"""Build and test torch-explainers.

    nox -s docs      build the site strictly (staged: a failed build keeps the last good site)
    nox -s tests     everything CI runs: unit tests, doctests, a full docs build, site checks
    nox -s doctest   doctests in `explainers/` docstrings and in the docs pages
    nox -s lint      ruff
    nox -s docs-live rebuild on change while you write (not a default session)

All sessions share one Python environment per machine (torch is ~5 GB), at
$TORCH_EXPLAINERS_ENV or ~/.cache/torch-explainers/env.  It is created with
pip (the torch wheel is served from the local index; uv and poetry would
download several GB) and updated only when pyproject.toml's dependencies or
constraints.txt change.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tomllib
from pathlib import Path

import nox

nox.needs_version = ">=2025.2.9"
nox.options.sessions = ["lint", "tests"]
nox.options.error_on_external_run = False

ROOT = Path(__file__).resolve().parent
DOCS = ROOT / "docs"
BUILD = DOCS / "_build"
SITE = BUILD / "html"
STAGING = BUILD / "staging"
ENV = Path(os.environ.get("TORCH_EXPLAINERS_ENV", Path.home() / ".cache" / "torch-explainers" / "env"))
PY = ENV / "bin" / "python"

# The book's code is imported from the checkout, not installed: every
# worktree and clone tests its own `explainers` against the shared env.
RUN_ENV = {
    "PYTHONPATH": str(ROOT),
    "PYTHONHASHSEED": "0",
    "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    "MPLBACKEND": "agg",
}


def _requirements() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for group in ("docs", "test"):
        reqs += project["optional-dependencies"][group]
    return reqs


def ensure_env(session: nox.Session) -> None:
    """Create or update the shared environment when its inputs changed."""
    reqs = _requirements()
    key = hashlib.sha256(
        ("\n".join(reqs) + (ROOT / "constraints.txt").read_text() + sys.version).encode()
    ).hexdigest()
    stamp = ENV / ".torch-explainers-stamp"
    if PY.exists() and stamp.exists() and stamp.read_text() == key:
        return
    if not PY.exists():
        session.log(f"Creating the shared environment at {ENV} (torch is ~5 GB; once per machine)")
        ENV.parent.mkdir(parents=True, exist_ok=True)
        session.run(sys.executable, "-m", "venv", str(ENV), external=True)
        session.run(str(PY), "-m", "pip", "install", "-q", "--upgrade", "pip", external=True)
    session.run(
        str(PY), "-m", "pip", "install", "-q", "-c", str(ROOT / "constraints.txt"), *reqs,
        external=True,
    )
    stamp.write_text(key)


def run_py(session: nox.Session, *args: str, **kwargs) -> object:
    return session.run(str(PY), *args, env=RUN_ENV, external=True, **kwargs)


def sphinx_args(outdir: Path, doctrees: Path, extra: list[str]) -> list[str]:
    # -n nitpicky, -W warnings are errors, --keep-going lists every warning, -T tracebacks.
    # -j auto unless the caller chose (`nox -s docs -- -j 1` builds serially): pages
    # execute in one worker per core, which docs/_ext/parallel_exec.py makes safe.
    # Each kernel spends seconds importing torch, so on 2 cores this is the one
    # change that brings a cold build under a minute (bench/results.md).
    jobs = [] if any(a == "-j" or a.startswith(("-j", "--jobs")) for a in extra) else ["-j", "auto"]
    return ["-m", "sphinx", "-b", "html", "-n", "-W", "--keep-going", "-T", *jobs,
            "-d", str(doctrees), *extra, str(DOCS), str(outdir)]


def build_site(session: nox.Session, extra: list[str]) -> None:
    """Build into a staging copy of the site; replace the site only on success."""
    if STAGING.exists():
        shutil.rmtree(STAGING)
    STAGING.mkdir(parents=True)
    # Start from the last good site and its doctrees so the build is incremental.
    for name in ("html", "doctrees"):
        if (BUILD / name).exists():
            shutil.copytree(BUILD / name, STAGING / name, symlinks=True)
    try:
        run_py(session, *sphinx_args(STAGING / "html", STAGING / "doctrees", extra))
    except nox.command.CommandFailed:
        where = SITE / "index.html"
        kept = f"The last good site is unchanged at {where}." if where.exists() else "There is no previous site."
        session.error(f"The docs build FAILED (see the warnings above, each names its page). {kept}")
    for name in ("html", "doctrees"):
        old = BUILD / f"{name}.old"
        if old.exists():
            shutil.rmtree(old)
        if (BUILD / name).exists():
            (BUILD / name).rename(old)
        (STAGING / name).rename(BUILD / name)
        if old.exists():
            shutil.rmtree(old)
    shutil.rmtree(STAGING, ignore_errors=True)
    session.log(f"Site built: {SITE / 'index.html'}")
    session.log(f"View it:    python3 -m http.server --directory {SITE} 8000  ->  http://127.0.0.1:8000/")


@nox.session(python=False)
def docs(session: nox.Session) -> None:
    """Build the HTML site strictly, one worker per core; posargs go to sphinx-build (-j 1: serial)."""
    ensure_env(session)
    build_site(session, list(session.posargs))


@nox.session(name="docs-live", python=False, default=False)
def docs_live(session: nox.Session) -> None:
    """Serve the docs and rebuild on change, without rebuilding in a loop on its own outputs."""
    ensure_env(session)
    run_py(
        session, "-m", "sphinx_autobuild", "-n", "--keep-going",
        "--watch", str(ROOT / "explainers"),
        "--ignore", str(BUILD), "--re-ignore", r"(^|/)jupyter_execute(/|$)",
        "--re-ignore", r"\.ipynb_checkpoints", "--re-ignore", r"__pycache__",
        "-d", str(BUILD / "live-doctrees"), str(DOCS), str(BUILD / "live-html"), *session.posargs,
    )


@nox.session(python=False)
def doctest(session: nox.Session) -> None:
    """Doctests in the library's docstrings, the docs pages and the README."""
    ensure_env(session)
    run_py(
        session, "-m", "pytest", "-p", "no:cacheprovider", "--doctest-modules", "explainers",
        "--doctest-glob=*.md", "README.md", "docs", "--ignore=docs/_build",
        "-o", "testpaths=", *session.posargs,
    )


@nox.session(python=False)
def lint(session: nox.Session) -> None:
    """ruff over the package, tests, docs config and this file."""
    ensure_env(session)
    run_py(session, "-m", "ruff", "check", "explainers", "tests", "docs/conf.py", "docs/_ext", "noxfile.py")


@nox.session(python=False)
def tests(session: nox.Session) -> None:
    """What CI runs: unit tests, doctests, one full strict docs build, checks over the built HTML."""
    ensure_env(session)
    run_py(session, "-m", "pytest", "-m", "not site and not browser", *session.posargs)
    doctest(session)
    build_site(session, [])
    run_py(session, "-m", "pytest", "-m", "site", "-p", "no:cacheprovider")


@nox.session(python=False, default=False)
def bench(session: nox.Session) -> None:
    """Benchmarks: build speed, cache effectiveness, explainer cost; writes bench/results.md.

    Not a default session and not part of `tests` (its regression check of the
    stable ratios is, in tests/test_bench_ratios.py).  posargs go to
    `python -m bench`, e.g. `nox -s bench -- --runs 5 --experiments`.
    """
    ensure_env(session)
    run_py(session, "-m", "bench", *session.posargs)
