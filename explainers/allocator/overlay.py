"""The "atomics removed" overlay: re-declare the four atomic fields as plain types.

The shipped header declares four fields ``std::atomic<T>`` because threads
that hold no common lock share them: ``getSegments`` (the snapshot) reads a
block's ``allocated_``, which ``get_free_block`` writes under a different lock,
and ``recordHistory`` writes the three profiling fields, which the
``allocate``/``free`` fast paths read with no lock at all.  The
overlay is a copy of the *installed* header, made at build time, in which
exactly those four declarations read ``PlainAtomic<T>`` instead.
``PlainAtomic`` (defined in ``harness.cpp`` before the include) has
``std::atomic``'s interface (``load``, ``store``, ...) but performs ordinary
loads and stores, so every use site stays byte-for-byte the shipped code and
only the atomicity disappears.  The substitution never adds or removes a line,
so line numbers in TSAN reports are those of the installed header.

This is *not* the code as it was before the fields became atomic: it keeps
everything else the shipped header does (the order of the stores in
``recordHistory``, the recorder that is never cleared, the locking around
``context_when_allocated_``).  It shows what the atomics alone prevent.

The transformation is one regular expression, also usable as ``sed -E``:

>>> remove_atomics_line("  std::atomic<bool> allocated_{false}; // in-use flag")
'  PlainAtomic<bool> allocated_{false}; // in-use flag'
"""

from __future__ import annotations

import re
import shlex

from .errors import SnapshotCodeMissingError

__all__ = ["ATOMIC_FIELDS", "PATTERN", "REPLACEMENT", "remove_atomics_line", "remove_atomics",
           "sed_command"]

#: The fields the shipped header declares ``std::atomic``: threads with no common lock share them.
ATOMIC_FIELDS = ("allocated_", "record_history_", "context_recorder_", "record_context_")

#: ``std::atomic<T> field{`` for one of the four fields (POSIX ERE and Python alike).
PATTERN = r"std::atomic<([^>]*)> (" + "|".join(ATOMIC_FIELDS) + r")\{"
#: Keep the type argument and the field name, swap the template.
REPLACEMENT = r"PlainAtomic<\1> \2{"


def remove_atomics_line(line: str) -> str:
    """Apply the substitution to one line (other fields and lines are untouched).

    >>> remove_atomics_line("  std::atomic<bool> active_{false};")
    '  std::atomic<bool> active_{false};'
    """
    return re.sub(PATTERN, REPLACEMENT, line)


def remove_atomics(header_text: str) -> tuple[str, list[tuple[int, str, str]]]:
    """Return the overlay text and the changed lines as ``(line_no, before, after)``.

    Every one of the four fields must be declared ``std::atomic`` exactly once;
    otherwise the header is not the one this explainer is about (a header
    before pytorch/pytorch#182407 lacks the profiling fields altogether):

    >>> remove_atomics("bool allocated_{false};")
    Traceback (most recent call last):
    ...
    explainers.allocator.errors.SnapshotCodeMissingError: expected exactly one std::atomic declaration of each of the four fields; found allocated_: 0, record_history_: 0, context_recorder_: 0, record_context_: 0 (this header is not a header with the snapshot code, 2.14 or later; pip install torch==2.15.0)
    """
    rx = re.compile(PATTERN)
    counts = {f: 0 for f in ATOMIC_FIELDS}
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
            "expected exactly one std::atomic declaration of each of the four fields; found "
            f"{found} (this header is not a header with the snapshot code, 2.14 or later; "
            "pip install torch==2.15.0)"
        )
    return "\n".join(out_lines), changes


def sed_command(src: str, dst: str) -> str:
    """The same transformation as a shell command (what the page prints).

    >>> print(sed_command('"$TORCH/include/x.h"', "overlay/x.h"))  # doctest: +NORMALIZE_WHITESPACE
    sed -E 's/std::atomic<([^>]*)> (allocated_|record_history_|context_recorder_|record_context_)\\{/PlainAtomic<\\1> \\2{/' "$TORCH/include/x.h" > overlay/x.h
    """
    expr = shlex.quote(f"s/{PATTERN}/{REPLACEMENT}/")
    return f"sed -E {expr} {src} > {dst}"
