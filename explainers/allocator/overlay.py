"""The "fix reverted" overlay: re-declare only the fixed fields as plain, racy types.

The shipped header declares four fields ``std::atomic<T>``; the fix for the
two snapshot data races made them atomic.  The overlay is a copy of the
*installed* header, made at build time, in which exactly those four
declarations read ``PlainAtomic<T>`` instead.  ``PlainAtomic`` (defined in
``harness.cpp`` before the include) has ``std::atomic``'s interface
(``load``, ``store``, ...) but performs ordinary loads and stores, so every
use site stays byte-for-byte the shipped code and only the synchronization
disappears.  The substitution never adds or removes a line, so line numbers
in TSAN reports are those of the installed header.

The transformation is one regular expression, also usable as ``sed -E``:

>>> revert_line("  std::atomic<bool> allocated_{false}; // in-use flag")
'  PlainAtomic<bool> allocated_{false}; // in-use flag'
"""

from __future__ import annotations

import re
import shlex

from .errors import SnapshotCodeMissingError

__all__ = ["FIXED_FIELDS", "PATTERN", "REPLACEMENT", "revert_line", "revert_fix", "sed_command"]

#: The fields whose declarations the fix changed to ``std::atomic``.
FIXED_FIELDS = ("allocated_", "record_history_", "context_recorder_", "record_context_")

#: ``std::atomic<T> field{`` for one of the fixed fields (POSIX ERE and Python alike).
PATTERN = r"std::atomic<([^>]*)> (" + "|".join(FIXED_FIELDS) + r")\{"
#: Keep the type argument and the field name, swap the template.
REPLACEMENT = r"PlainAtomic<\1> \2{"


def revert_line(line: str) -> str:
    """Apply the substitution to one line (other fields and lines are untouched).

    >>> revert_line("  std::atomic<bool> active_{false};")
    '  std::atomic<bool> active_{false};'
    """
    return re.sub(PATTERN, REPLACEMENT, line)


def revert_fix(header_text: str) -> tuple[str, list[tuple[int, str, str]]]:
    """Return the overlay text and the changed lines as ``(line_no, before, after)``.

    Every fixed field must be declared exactly once; otherwise the header is
    not the one this explainer is about (a pre-fix header declares them
    ``bool``/plain, a pre-#182407 header lacks the profiling fields):

    >>> revert_fix("bool allocated_{false};")
    Traceback (most recent call last):
    ...
    explainers.allocator.errors.SnapshotCodeMissingError: expected exactly one std::atomic declaration of each fixed field; found allocated_: 0, record_history_: 0, context_recorder_: 0, record_context_: 0 (this header is not the fixed 2.14 header; pip install torch==2.14.1)
    """
    rx = re.compile(PATTERN)
    counts = {f: 0 for f in FIXED_FIELDS}
    changes: list[tuple[int, str, str]] = []
    out_lines = []
    for no, line in enumerate(header_text.split("\n"), start=1):
        new = rx.sub(REPLACEMENT, line)
        if new != line:
            for m in rx.finditer(line):
                counts[m.group(2)] += 1
            changes.append((no, line, new))
        out_lines.append(new)
    if any(c != 1 for c in counts.values()):
        found = ", ".join(f"{f}: {c}" for f, c in counts.items())
        raise SnapshotCodeMissingError(
            "expected exactly one std::atomic declaration of each fixed field; found "
            f"{found} (this header is not the fixed 2.14 header; pip install torch==2.14.1)"
        )
    return "\n".join(out_lines), changes


def sed_command(src: str, dst: str) -> str:
    """The same transformation as a shell command (what the page prints).

    >>> print(sed_command('"$TORCH/include/x.h"', "overlay/x.h"))  # doctest: +NORMALIZE_WHITESPACE
    sed -E 's/std::atomic<([^>]*)> (allocated_|record_history_|context_recorder_|record_context_)\\{/PlainAtomic<\\1> \\2{/' "$TORCH/include/x.h" > overlay/x.h
    """
    expr = shlex.quote(f"s/{PATTERN}/{REPLACEMENT}/")
    return f"sed -E {expr} {src} > {dst}"
