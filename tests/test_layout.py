"""The package's layout: one job per module, and every module there for a page.

`explainers/` holds what the pages explain and the helpers they import; site
machinery lives in `tools/` and `docs/_ext/`, and test helpers in `tests/`.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "explainers"
MAX_LINES = 410  # "about 400": one job per module

sys.path.insert(0, str(ROOT / "docs" / "_ext"))
from explainer_deps import imported_modules  # noqa: E402

sys.path.pop(0)


def _name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "__pycache__" not in p.parts}


def _uses(path: Path) -> set[str]:
    """Modules a module imports, or starts by name (``python -m``, ``run_under("mod:fn")``)."""
    text = path.read_text(encoding="utf-8")
    named = set(re.findall(r"explainers(?:\.\w+)+", text))
    package = _name(path) if path.name == "__init__.py" else _name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
            named.add(f"{base}.{node.module}" if node.module else base)
            named.update(f"{base}.{node.module}.{a.name}" if node.module else f"{base}.{a.name}"
                         for a in node.names)
    return named


def reached_from_pages() -> set[str]:
    """Every module a page reaches, through imports or by name."""
    todo = set()
    for page in (ROOT / "docs").glob("*.md"):
        cells = "\n".join(re.findall(r"^```\{code-cell\}[^\n]*\n(.*?)^```", page.read_text(encoding="utf-8"),
                                     flags=re.S | re.M))
        todo |= imported_modules(cells) | set(re.findall(r"explainers(?:\.\w+)+", cells))
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        for i in range(1, name.count(".") + 2):  # a module's parents run when it is imported
            prefix = ".".join(name.split(".")[:i])
            if prefix in MODULES and prefix not in seen:
                seen.add(prefix)
                todo |= _uses(MODULES[prefix])
    return seen


def test_every_module_is_reached_from_a_page():
    unused = sorted(set(MODULES) - reached_from_pages())
    assert not unused, f"modules no page reaches (imported only by tests or tooling?): {unused}"


def test_no_module_is_over_about_400_lines():
    long = {n: len(p.read_text(encoding="utf-8").splitlines()) for n, p in MODULES.items()}
    over = {n: k for n, k in long.items() if k > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines, more than one job: {over}"


def test_every_module_states_its_job_in_its_first_docstring_line():
    missing = [n for n, p in MODULES.items()
               if not (ast.get_docstring(ast.parse(p.read_text(encoding="utf-8"))) or "").strip()]
    assert not missing, f"modules without a docstring stating their job: {missing}"


def test_no_site_machinery_in_the_package():
    imports = {n: _uses(p) | {m for m in re.findall(r"^\s*(?:from|import) (\w+)", p.read_text(), re.M)}
               for n, p in MODULES.items()}
    machinery = {"sphinx", "nox", "tools"}
    found = {n: sorted(machinery & u) for n, u in imports.items() if machinery & u}
    assert not found, f"site machinery imported inside explainers/: {found}"


def test_the_reach_check_finds_a_module_no_page_reaches(tmp_path, monkeypatch):
    stray = tmp_path / "stray.py"
    stray.write_text('"""A module no page reaches."""\n', encoding="utf-8")
    monkeypatch.setitem(MODULES, "explainers.stray", stray)
    assert "explainers.stray" not in reached_from_pages()
    assert "explainers.render" in reached_from_pages()
