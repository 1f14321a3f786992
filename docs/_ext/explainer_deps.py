"""Dependency-aware execution cache for MyST-NB pages.

MyST-NB's ``cache`` mode keys a page on its code cells only, so editing an
imported ``explainers`` module leaves stale outputs (MyST-NB #299, open).
This extension closes the gap in two steps, both at ``source-read``:

1. It finds the ``explainers`` modules a page imports, follows their own
   imports transitively, and registers every file of those modules (for a
   subpackage, every file in its folder, so a C++ harness counts too) plus
   torch's ``version.py`` as Sphinx dependencies.  Sphinx then re-reads the
   page, and only that page, when one of them changes.
2. It appends a hidden cell holding a hash of those files, the torch
   version and the releases this build verifies (``$TORCH_EXPLAINERS_VERIFIED_ON``,
   which the page's stamp names), so jupyter-cache's key changes and the page
   is re-executed.  The releases are also a Sphinx config value that rebuilds
   the environment, so a primary-only build followed by an all-releases build
   re-reads every page instead of keeping stamps that name fewer releases.

Only what a page imports counts: site machinery (this folder, ``tools/``) is
never part of a page's key.

>>> files, digest = page_dependencies("from explainers.render import render", ROOT)
>>> sorted(str(p.relative_to(ROOT)) for p in files if p.is_relative_to(ROOT))
['explainers/__init__.py', 'explainers/render.py']
>>> any(p.name == "version.py" and p.parent.name == "torch" for p in files)
True
>>> len(digest)
16
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
import re
from pathlib import Path

__all__ = ["imported_modules", "module_closure", "page_dependencies", "page_key", "dependency_cell"]

#: The checkout: ``explainers/`` is beside ``docs/``.
ROOT = Path(__file__).resolve().parents[2]
_FROM = re.compile(r"^[ \t]*from[ \t]+(explainers(?:\.\w+)*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#;]+)", re.MULTILINE)
_IMPORT = re.compile(r"^[ \t]*import[ \t]+([^\n#;]+)", re.MULTILINE)
MARKER = "# explainers-deps:"
#: The releases a build verifies every page on, as nox sets them (comma-separated).
VERIFIED_ENV = "TORCH_EXPLAINERS_VERIFIED_ON"


def imported_modules(code: str) -> set[str]:
    """The ``explainers`` modules named by import statements in ``code``.

    ``from explainers import mesh`` names the submodule ``explainers.mesh``
    (an imported attribute such as ``render`` in ``from explainers.render
    import render`` is also listed; :func:`module_closure` skips names that
    are not modules).

    >>> sorted(imported_modules("import torch\\nfrom explainers.mesh import x\\nimport explainers.render"))
    ['explainers.mesh', 'explainers.mesh.x', 'explainers.render']
    >>> sorted(imported_modules("from explainers import (mesh,\\n    render as r)\\nimport os, explainers.releases as rel"))
    ['explainers', 'explainers.mesh', 'explainers.releases', 'explainers.render']
    """
    found: set[str] = set()
    for module, names in _FROM.findall(code):
        found.add(module)
        for name in names.strip("()").replace("\n", " ").split(","):
            if name.split():
                found.add(f"{module}.{name.split()[0]}")
    for names in _IMPORT.findall(code):
        for name in names.split(","):
            first = name.split()[0] if name.split() else ""
            if first == "explainers" or first.startswith("explainers."):
                found.add(first)
    return found


def _module_path(name: str, root: Path) -> Path | None:
    base = root.joinpath(*name.split("."))
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    return None


def _imports_of(path: Path, name: str) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            found.add(mod)
            # `from explainers import mesh` names a submodule, not an attribute.
            found.update(f"{mod}.{a.name}" for a in node.names)
    return {m for m in found if m == "explainers" or m.startswith("explainers.")}


def module_closure(names: set[str], root: Path) -> set[Path]:
    """Every file the named modules depend on, following imports transitively.

    A module inside a subpackage brings the subpackage's whole folder (C++
    sources, data) and its parents' ``__init__.py``, since importing it runs them.

    >>> sorted(p.name for p in module_closure({"explainers.releases"}, ROOT))
    ['__init__.py', 'releases.py']
    """
    files: set[Path] = set()
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))
        path = _module_path(name, root)
        if path is None:
            continue  # an attribute such as `explainers.render.render`
        if path.name == "__init__.py" and name != "explainers":
            files.update(p for p in path.parent.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        files.add(path)
        todo.extend(_imports_of(path, name))
    return files


def _torch_version_file() -> Path | None:
    # find_spec does not import torch: this stays cheap inside Sphinx.
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).with_name("version.py")
    return path if path.is_file() else None


def page_dependencies(text: str, root: Path) -> tuple[list[Path], str]:
    """The files a page's code depends on, and a 16-hex-digit hash of their contents."""
    files = sorted(module_closure(imported_modules(text), root))
    torch_version = _torch_version_file()
    if torch_version is not None:
        files.append(torch_version)
    h = hashlib.sha256()
    for path in files:
        label = path.relative_to(root) if path.is_relative_to(root) else Path("torch") / path.name
        h.update(str(label).encode() + b"\0" + path.read_bytes() + b"\0")
    return files, h.hexdigest()[:16]


def dependency_cell(digest: str) -> str:
    """The hidden MyST code cell that carries ``digest`` into the cache key.

    >>> print(dependency_cell("abc"))
    ```{code-cell} ipython3
    :tags: [remove-cell]
    # explainers-deps: abc
    ```
    <BLANKLINE>
    """
    return f"```{{code-cell}} ipython3\n:tags: [remove-cell]\n{MARKER} {digest}\n```\n"


def page_key(digest: str, verified_on: str) -> str:
    """The cache key's extra part: the dependencies' ``digest`` and the releases verified.

    Two builds that verify different releases never share an execution, since the
    page's stamp names them.

    >>> page_key("abc", "2.15.0") == page_key("abc", "2.15.0,2.14.1")
    False
    >>> len(page_key("abc", ""))
    16
    """
    return hashlib.sha256(f"{digest}\0{verified_on}".encode()).hexdigest()[:16]


def _on_source_read(app, docname: str, source: list[str]) -> None:
    text = source[0]
    if "file_format: mystnb" not in text:
        return
    files, digest = page_dependencies(text, ROOT)
    for path in files:
        app.env.note_dependency(str(path))
    key = page_key(digest, app.config.explainers_verified_on)
    source[0] = text.rstrip("\n") + "\n\n" + dependency_cell(key)


def setup(app):
    # "env": a change of the verified releases makes Sphinx re-read every page.
    app.add_config_value("explainers_verified_on", os.environ.get(VERIFIED_ENV, ""), "env", [str])
    app.connect("source-read", _on_source_read)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
