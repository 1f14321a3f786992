"""Run a snippet the way a reader who pasted it would: alone, in an empty folder, in a fresh Python.

The Snippets page shows each snippet's result with :func:`run_pasted`, and
``tests/test_copy_paste.py`` runs what the page's copy buttons copy the same way.
The text is saved under the name the page gives it, in a new temporary folder
that holds nothing else, and the command the page shows runs there in bash.
In that command ``python`` is this interpreter in isolated mode (``python -I``:
neither the current folder, ``PYTHONPATH`` nor the user's site-packages is on
``sys.path``), so nothing of this checkout can be imported.

>>> run = run_pasted("print(6 * 7)", "answer.py")
>>> print(run.shown())
$ python answer.py
42
>>> check_pasted("print(6 * 7)", run.shown())
[]
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Pasted", "check_pasted", "imports_of", "needs", "parse_shown", "run_pasted"]

#: The package a pasted snippet must not import: a reader does not have it.
PACKAGE = "explainers"
#: What a Python snippet may need besides the standard library.
ALLOWED = ("numpy", "torch")
_RUNNERS = {".py": "python", ".sh": "bash"}


def imports_of(text: str) -> set[str]:
    """The top-level modules a Python text imports (relative imports as ``"."``).

    >>> sorted(imports_of("import torch.nn as nn\\nfrom numpy import pi\\nfrom . import x"))
    ['.', 'numpy', 'torch']
    """
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add("." if node.level else node.module.split(".")[0])
    return found


def needs(text: str) -> list[str]:
    """What a Python text imports beyond the standard library, sorted.

    >>> needs("from __future__ import annotations\\nimport json, torch\\nimport numpy as np")
    ['numpy', 'torch']
    """
    return sorted(imports_of(text) - set(sys.stdlib_module_names))


@dataclass(frozen=True)
class Pasted:
    """One run of a pasted snippet: the command as shown, and what it did."""

    command: str
    returncode: int
    stdout: str
    stderr: str

    def shown(self) -> str:
        """The command, as typed at a ``$`` prompt, then what it printed."""
        return f"$ {self.command}\n{self.stdout}".rstrip("\n")

    def problems(self, stated: str) -> list[str]:
        """Why this run does not match ``stated``, a result as :meth:`shown` writes it.

        >>> run_pasted("x = torch.ones(1)", "a.py").problems("$ python a.py")[0]
        "exit status 1: NameError: name 'torch' is not defined"
        """
        found = []
        if self.returncode != 0:
            last = (self.stderr.strip().splitlines() or [""])[-1]
            found.append(f"exit status {self.returncode}: {last}")
        elif self.stderr:
            found.append(f"wrote to stderr: {self.stderr[:300]!r}")
        if self.shown() != stated.rstrip("\n"):
            found.append(f"printed {self.shown()!r}, the page states {stated!r}")
        return found


def parse_shown(stated: str) -> tuple[str, str]:
    """``(command, file name)`` from a result written as :meth:`Pasted.shown` writes it.

    >>> parse_shown("$ printf '%s' '{}' | bash statusline.sh\\n")
    ("printf '%s' '{}' | bash statusline.sh", 'statusline.sh')
    >>> parse_shown("42")
    Traceback (most recent call last):
    ...
    ValueError: a stated result starts with '$ ' and the command that runs the snippet, not '42'
    """
    first = stated.split("\n", 1)[0]
    names = [w for w in shlex.split(first[2:]) if Path(w).suffix in _RUNNERS] if first.startswith("$ ") else []
    if not names:
        raise ValueError("a stated result starts with '$ ' and the command that runs the snippet, "
                         f"not {first!r}")
    return first[2:], names[-1]


def run_pasted(text: str, filename: str, command: str | None = None,
               timeout: float = 300, python: str | Path | None = None) -> Pasted:
    """Save ``text`` as ``filename`` in an empty folder and run ``command`` there.

    ``command`` defaults to ``python <filename>`` or ``bash <filename>``, by the
    file's suffix; ``python`` in it runs this interpreter with ``-I``, or the
    interpreter ``python`` names (another release's environment, say).

    >>> run_pasted("import explainers", "a.py").returncode
    1
    >>> run_pasted("echo hi", "a.txt")
    Traceback (most recent call last):
    ...
    ValueError: a.txt: a snippet is saved as .py or .sh
    """
    suffix = Path(filename).suffix
    if suffix not in _RUNNERS or Path(filename).name != filename:
        raise ValueError(f"{filename}: a snippet is saved as {' or '.join(_RUNNERS)}")
    command = command or f"{_RUNNERS[suffix]} {filename}"
    with tempfile.TemporaryDirectory() as bindir, tempfile.TemporaryDirectory() as folder:
        shim = Path(bindir) / "python"
        # Run the environment's own `python` when it has one (every venv does), so that a
        # script reading its interpreter's name sees the `python` the page's command shows.
        interpreter = Path(python or sys.executable)
        interpreter = interpreter.with_name("python") if interpreter.with_name("python").is_file() else interpreter
        shim.write_text(f'#!/bin/sh\nexec {shlex.quote(str(interpreter))} -I "$@"\n')
        shim.chmod(0o755)
        (Path(folder) / filename).write_text(text, encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
        proc = subprocess.run(["bash", "-c", command], cwd=folder, env=env, capture_output=True,
                              text=True, timeout=timeout, check=False)
    # A traceback names the file by its place in the temporary folder; show its name only.
    stderr = re.sub(re.escape(folder) + "/", "", proc.stderr)
    return Pasted(command, proc.returncode, proc.stdout, stderr)


def check_pasted(text: str, stated: str) -> list[str]:
    """Why ``text``, pasted alone and run as ``stated`` says, does not give the stated result.

    ``stated`` is a result as :meth:`Pasted.shown` writes it: the command, then
    the output.  A Python text must also import nothing of this project and
    nothing beyond the standard library, torch and numpy (a reader who
    installed the project could otherwise run it and never notice).

    >>> check_pasted("from explainers.render import render", "$ python a.py")[0]
    'a.py imports explainers, which a reader does not have'
    >>> check_pasted("import torch\\nprint(torch.ones(2).sum().item())", "$ python a.py\\n2.0")
    []
    """
    command, filename = parse_shown(stated)
    found = []
    if filename.endswith(".py"):
        try:
            imported = imports_of(text)
        except SyntaxError as e:
            return [f"{filename} is not Python: {e}"]
        if PACKAGE in imported or "." in imported:
            found.append(f"{filename} imports {PACKAGE}, which a reader does not have")
        extra = [m for m in needs(text) if m not in ALLOWED and m not in (PACKAGE, ".")]
        if extra:
            found.append(f"{filename} needs {extra}, beyond the standard library, torch and numpy")
    return found + run_pasted(text, filename, command).problems(stated)
