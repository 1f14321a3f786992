"""Run the status-line script (``explainers/statusline/statusline.sh``) the way Claude Code would.

The snippet page shows that exact file, and ``tests/test_statusline.py`` and
the page's own cells run it through :func:`run_statusline`: bash, jq, the JSON
on stdin.  :func:`jq_manual_url` names the manual of the jq that ran it.

>>> run_statusline('{"context_window": {"remaining_percentage": 42}}').stdout
'Context: 42% remaining'
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

__all__ = ["SCRIPT", "TABLE_COPY", "jq_manual_url", "run_statusline"]

SCRIPT = Path(__file__).resolve().parent / "statusline.sh"

# A version of the script as copied, verbatim, from a markdown table.  Inside a
# table cell a pipe is written `\|` (GFM spec, tables extension); pasted into
# bash, `\|` is a literal `|` argument to echo, not a pipe.
TABLE_COPY = r"""#!/usr/bin/env bash
# Claude Code status line - shows context window remaining percentage

input=$(cat)
remaining=$(echo "$input" \| jq -r '.context_window.remaining_percentage // empty')

if [ -n "$remaining" ]; then
printf 'Context: %s%% remaining' "$remaining"
fi
"""


def run_statusline(stdin: str | bytes, script: str | Path = SCRIPT,
                   timeout: float = 10.0) -> subprocess.CompletedProcess:
    """Pipe ``stdin`` into ``bash script``; return the finished process (text stdout/stderr).

    ``stdin`` may be bytes, so input that is not text (a raw NUL byte) can be
    sent as is.  ``script`` may also be the text of a script rather than a path
    to one, so :data:`TABLE_COPY` and its variants can be run the same way.

    >>> p = run_statusline('{"context_window": {"remaining_percentage": null}}')
    >>> (p.returncode, p.stdout, p.stderr)
    (0, '', '')
    >>> run_statusline(42)
    Traceback (most recent call last):
    ...
    TypeError: stdin must be str or bytes, not int
    """
    if not isinstance(stdin, str | bytes):
        raise TypeError(f"stdin must be str or bytes, not {type(stdin).__name__}")
    for tool in ("bash", "jq"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} is not installed: the status-line snippet needs bash and jq")
    data = stdin.encode() if isinstance(stdin, str) else stdin
    cmd = ["bash", str(script)] if isinstance(script, Path) else ["bash", "-c", script]
    proc = subprocess.run(cmd, input=data, capture_output=True, timeout=timeout, check=False)
    return subprocess.CompletedProcess(
        proc.args, proc.returncode,
        proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace"),
    )


def jq_manual_url() -> str:
    """The jq manual for the installed jq's release, from ``jq --version``.

    The manual is published per minor release (``jq-1.7.1`` is documented at
    ``/manual/v1.7/``), so the page links the one that matches the jq it ran.

    >>> jq_manual_url().startswith("https://jqlang.org/manual/v1.")
    True
    """
    if shutil.which("jq") is None:
        raise RuntimeError("jq is not installed: the status-line snippet needs bash and jq")
    out = subprocess.run(["jq", "--version"], capture_output=True, text=True, check=True).stdout
    match = re.fullmatch(r"jq-(\d+)\.(\d+)(?:\.\d+)?\S*\s*", out)
    if match is None:
        raise RuntimeError(f"cannot read a jq release from `jq --version`: {out!r}")
    return f"https://jqlang.org/manual/v{match[1]}.{match[2]}/"
