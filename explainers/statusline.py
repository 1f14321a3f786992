"""Run the status-line snippet (``explainers/snippets/statusline.sh``) the way a reader would.

The snippet page shows that exact file, and ``tests/test_statusline.py`` and
the page's own cells run it through :func:`run_statusline`: bash, jq, the JSON
on stdin.

>>> run_statusline('{"context_window": {"remaining_percentage": 42}}').stdout
'Context: 42% remaining'
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

__all__ = ["NOTES_ORIGINAL", "SCRIPT", "run_statusline"]

SCRIPT = Path(__file__).resolve().parent / "snippets" / "statusline.sh"

# The script as the source notes print it, verbatim.  `\|` is how a pipe is
# escaped inside a markdown table cell; pasted into bash it is a literal `|`
# argument to echo, not a pipe.
NOTES_ORIGINAL = r"""#!/usr/bin/env bash
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

    ``script`` may also be the text of a script rather than a path to one, so
    the notes' original version can be run the same way.

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
