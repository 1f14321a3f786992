"""The system programs the site's build and tests run, and the Debian packages that provide them.

``nox`` installs what is missing with ``apt-get`` when it runs as root, before
any page executes; otherwise it stops and prints the one ``apt-get install``
line that would.  ``tests/test_prerequisites.py`` scans the code the pages and
tests run (:func:`programs_run`) and fails when a program is in neither
:data:`PACKAGES` nor :data:`ESSENTIAL`, so a new dependency cannot hide behind
a machine that happens to have it.

This is site machinery (standard library only), loaded by ``noxfile.py`` from
its file.

>>> sorted(set(PACKAGES[p] for p in DOCS))
['binutils', 'g++', 'graphviz', 'jq']
>>> install_line(["graphviz", "jq"])
'sudo apt-get install -y --no-install-recommends graphviz jq'
"""

from __future__ import annotations

import ast
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

__all__ = ["BROWSER", "DOCS", "ESSENTIAL", "PACKAGES", "install_line", "missing_packages",
           "programs_in_code", "programs_run"]

#: Program -> the Debian package that provides it.
PACKAGES: dict[str, str] = {
    "g++": "g++",            # the allocator page's ThreadSanitizer builds
    "nm": "binutils",        # symbol sizes of the installed torch libraries (allocator page)
    "c++filt": "binutils",   # demangled type names (allocator page)
    "objdump": "binutils",   # the calls inside a compiled function (allocator page)
    "dot": "graphviz",       # the allocator page's lock-order figure
    "jq": "jq",              # the status-line snippet (snippets page)
    "chromium": "chromium",  # the browser gate (nox -s browser, part of nox -s tests)
    "npm": "npm",            # fetches axe-core for the browser gate
}
#: What executing the pages needs (`nox -s docs`).
DOCS: tuple[str, ...] = ("g++", "nm", "c++filt", "objdump", "dot", "jq")
#: What the browser gate needs in addition (`nox -s browser`, `nox -s tests`).
BROWSER: tuple[str, ...] = ("chromium", "npm")
#: Programs every Debian system has (essential packages: bash, sed, util-linux, libc-bin for `ldd`, iproute2 for `ip`),
#: the build's own interpreter and package manager, and git (a checkout is a clone).
ESSENTIAL: frozenset[str] = frozenset({"bash", "sh", "sed", "setarch", "unshare", "ip", "apt-get", "python",
                                       "python3", "git", "ldd"})

_RUNNERS = {("subprocess", "run"), ("subprocess", "Popen"), ("subprocess", "check_output"),
            ("subprocess", "check_call"), ("subprocess", "call"), ("shutil", "which")}
_CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```", re.M | re.S)


def _program(node: ast.expr) -> str | None:
    """The program named by a call's first argument: a string, or a list/tuple starting with one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.split()[0] if node.value.split() else None
    if isinstance(node, ast.List | ast.Tuple) and node.elts:
        return _program(node.elts[0])
    return None


def programs_in_code(code: str) -> set[str]:
    """Programs that ``code`` runs by name through ``subprocess`` or looks up with ``shutil.which``
    (a path such as ``./race``, a program the code built, is not looked up on PATH).

    >>> sorted(programs_in_code('import shutil, subprocess\\n'
    ...                         'subprocess.run(["dot", "-Tsvg"])\\nshutil.which("g++", path=None)\\n'
    ...                         'subprocess.run(["./race"])\\nsubprocess.run([sys.executable, "-c", "pass"])'))
    ['dot', 'g++']
    """
    found: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and (node.func.value.id, node.func.attr) in _RUNNERS and node.args):
            name = _program(node.args[0])
            if name is not None and "/" not in name:
                found.add(name)
    return found


def programs_run(root: Path) -> dict[str, set[str]]:
    """Program -> the files under ``root`` that run it: ``explainers/``, ``tools/``, ``tests/``,
    ``docs/_ext/`` and the code cells of ``docs/*.md``."""
    found: dict[str, set[str]] = {}
    sources: list[tuple[Path, str]] = []
    for folder in ("explainers", "tools", "tests", "docs/_ext"):
        sources += [(p, p.read_text()) for p in sorted((root / folder).rglob("*.py"))]
    for page in sorted((root / "docs").glob("*.md")):
        cells = [c for c in _CODE_CELL.findall(page.read_text()) if not c.lstrip().startswith(("%", "!"))]
        sources.append((page, "\n".join(re.sub(r"^:[\w-]+:.*$", "", c, flags=re.M) for c in cells)))
    for path, code in sources:
        try:
            names = programs_in_code(code)
        except SyntaxError:
            continue  # a page's deliberately broken cell (raises-exception) is no program
        for name in names:
            found.setdefault(name, set()).add(path.relative_to(root).as_posix())
    return found


def missing_packages(programs: Iterable[str], path: str | None = None) -> list[str]:
    """The Debian packages to install for the ``programs`` not on ``path`` (default ``$PATH``),
    in the order first needed, each once.

    >>> missing_packages(["dot", "jq", "c++filt", "nm"], path="/nonexistent")
    ['graphviz', 'jq', 'binutils']
    """
    out: list[str] = []
    for program in programs:
        if shutil.which(program, path=path) is None and PACKAGES[program] not in out:
            out.append(PACKAGES[program])
    return out


def install_line(packages: Iterable[str]) -> str:
    """The one command that installs ``packages`` on Debian or Ubuntu."""
    return "sudo apt-get install -y --no-install-recommends " + " ".join(packages)
