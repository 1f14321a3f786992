"""The g++ ThreadSanitizer command that compiles a C++ file against the installed torch.

A whole program that needs only Python's standard library: it finds the torch
package without importing it.  The command it prints needs an installed torch,
whose wheel ships the C++ headers under ``include/`` and ``libc10`` under
``lib/``.  It compiles as C++20: torch's headers need it (``ATen/ATen.h``
stops with ``#error C++20 or later compatible compiler is required`` in torch
2.14.1 and 2.15.0, and ``c10/util/intrusive_ptr.h`` uses ``operator<=>``).
The g++ line names the torch folder as ``$TORCH``, never as a path; the line
before it sets ``TORCH`` with the interpreter that ran this script::

    python tsan_command.py race.cpp         # prints the line that sets TORCH, and the g++ line
    python tsan_command.py race.cpp --run   # runs the g++ line, TORCH set to the torch
                                            # this Python finds under -I: race.cpp becomes ./race

>>> print(compile_command("race.cpp"))
g++ -std=c++20 -fsanitize=thread -g1 -O1 -Wno-interference-size -I"$TORCH/include" race.cpp -o race -L"$TORCH/lib" -lc10 -Wl,-rpath,"$TORCH/lib"
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

__all__ = ["FLAGS", "compile_command", "main", "set_torch", "torch_folder"]

#: -std=c++20 is what torch's headers need (and what torch's own CMake config and
#: torch.utils.cpp_extension use);
#: -O1 keeps TSAN runs fast and stacks short (inlined frames still show);
#: -g1 (line tables, no variable info) is all TSAN's symbolizer needs to name
#: files and lines; -Wno-interference-size silences g++ 12's warning
#: "use of 'std::hardware_destructive_interference_size' [-Winterference-size]",
#: which torch's CachingHostAllocator.h gives at each of its alignas() of it.
FLAGS = ("-std=c++20", "-fsanitize=thread", "-g1", "-O1", "-Wno-interference-size")


def set_torch(python: str | None = None) -> str:
    """A shell line that sets and exports ``TORCH``, the folder of the torch that ``python`` imports.

    ``python`` defaults to the full path of the interpreter running this script,
    so the line asks the Python that ran it, whatever ``python`` means in the
    shell.  That Python runs in isolated mode (``-I``), so a ``torch/`` folder in
    the current directory, ``PYTHONPATH`` and the user's site-packages do not
    change the answer (a torch installed with ``pip install --user`` is not
    found).  The answer goes to ``torch_dir`` first: when that Python has no
    torch, it prints its ``ModuleNotFoundError``, the line's status is 1 and
    ``TORCH`` keeps whatever value it had (``TORCH="$(...)"`` would set it to
    the empty string, and ``export TORCH="$(...)"`` would also hide the failure).

    >>> print(set_torch("/opt/py/bin/python3"))
    torch_dir="$(/opt/py/bin/python3 -I -c 'import os, torch; print(os.path.dirname(torch.__file__))')" && export TORCH="$torch_dir"
    >>> print(set_torch("/opt/my py/python"))
    torch_dir="$('/opt/my py/python' -I -c 'import os, torch; print(os.path.dirname(torch.__file__))')" && export TORCH="$torch_dir"
    """
    python = shlex.quote(python or sys.executable or "python3")
    return (f'torch_dir="$({python} -I -c '
            "'import os, torch; print(os.path.dirname(torch.__file__))')\" && export TORCH=\"$torch_dir\"")


# Run under -I by torch_folder(): prints the package folder, or nothing when torch is missing.
_FIND_TORCH = ("import importlib.util as u; s = u.find_spec('torch'); "
               "print(s.submodule_search_locations[0] if s and s.submodule_search_locations else '')")


def torch_folder(python: str | None = None) -> Path:
    """The folder of the torch package that ``python`` finds in isolated mode (``-I``).

    ``python`` defaults to the interpreter running this script.  It is asked in a
    child process started with ``-I``, as :func:`set_torch`'s line asks it, so
    ``--run``, the check for a missing torch and the printed line name the same
    torch: a ``torch/`` folder in the current directory or in this script's
    folder, ``PYTHONPATH`` and the user's site-packages are not looked at.  The
    child finds torch with ``importlib.util.find_spec``, without importing it.

    >>> (torch_folder() / "include" / "c10").is_dir()
    True
    """
    found = subprocess.run(
        [python or sys.executable or "python3", "-I", "-c", _FIND_TORCH],
        capture_output=True, text=True, check=False).stdout.strip()
    if not found:
        raise ModuleNotFoundError("torch is not installed in this Python: pip install torch")
    return Path(found)


def compile_command(
    source: str,
    binary: str | None = None,
    flags: tuple[str, ...] = FLAGS,
    includes: tuple[str, ...] = (),
) -> str:
    """The ``g++`` line that builds ``source`` into ``binary``, run with ``$TORCH`` set.

    ``binary`` defaults to the file name without ``.cpp``; ``includes`` are
    ``-I`` options searched before torch's headers.

    >>> compile_command("h.cpp", "h-2", ("-O1",), ("-Ioverlay",))
    'g++ -O1 -Ioverlay -I"$TORCH/include" h.cpp -o h-2 -L"$TORCH/lib" -lc10 -Wl,-rpath,"$TORCH/lib"'
    >>> compile_command("h.cpp", "bad name")
    Traceback (most recent call last):
    ...
    ValueError: compile_command: 'h.cpp' and 'bad name' must be file names without spaces
    """
    binary = Path(source).stem if binary is None else binary
    if not source or not binary or any(c.isspace() for c in source + binary):
        raise ValueError(f"compile_command: {source!r} and {binary!r} must be file names without spaces")
    return " ".join(["g++", *flags, *includes, '-I"$TORCH/include"', source, "-o", binary,
                     '-L"$TORCH/lib"', "-lc10", '-Wl,-rpath,"$TORCH/lib"'])


def main(argv: list[str]) -> int:
    """Print the commands for ``argv[0]``, or with ``--run`` compile it in the current folder.

    >>> main(["race.c"])
    2
    """
    run = "--run" in argv
    files = [a for a in argv if a != "--run"]
    if len(files) != 1 or not files[0].endswith(".cpp"):
        print("usage: python tsan_command.py FILE.cpp [--run]", file=sys.stderr)
        return 2
    command = compile_command(files[0])
    try:
        folder = torch_folder()
    except ModuleNotFoundError as exc:
        print(f"tsan_command.py: {exc}", file=sys.stderr)
        return 1
    if not run:
        # The folder is found by the shell that runs the command, by asking this interpreter.
        print(f"{set_torch()}\n{command}")
        return 0
    # --run does not use the export line: TORCH is the torch this interpreter finds in
    # isolated mode, the one the export line would name.
    env = dict(os.environ, TORCH=str(folder))
    return subprocess.run(["bash", "-e", "-c", command], env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
