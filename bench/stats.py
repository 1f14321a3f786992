"""Repeated samples, their summary, and one figure of the results table."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = ["Summary", "Figure", "summarize", "NOT_YET"]

#: Status of a figure whose component has not landed in the checkout.
NOT_YET = "not available yet"


@dataclass(frozen=True)
class Summary:
    """Median, min and max of ``n`` samples."""

    median: float
    lo: float
    hi: float
    n: int


def summarize(samples: Sequence[float]) -> Summary:
    """Median with min and max.

    >>> summarize([3.0, 1.0, 2.0])
    Summary(median=2.0, lo=1.0, hi=3.0, n=3)
    >>> summarize([])
    Traceback (most recent call last):
    ...
    ValueError: summarize: no samples
    """
    if not samples:
        raise ValueError("summarize: no samples")
    return Summary(statistics.median(samples), min(samples), max(samples), len(samples))


@dataclass
class Figure:
    """One row of the results table.

    ``goal`` is ``(op, value)`` with ``op`` in ``"<="`` / ``"=="``, or
    ``None`` for a figure that is only reported.  ``samples`` are the raw
    measurements in ``unit``; ``status`` is filled by :meth:`judge` unless the
    figure could not be measured (``NOT_YET`` or ``"failed: ..."``).
    """

    key: str
    label: str
    unit: str
    goal: tuple[str, float] | None = None
    goal_text: str = "reported"
    samples: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)  # CPU seconds of the same runs, where measured
    status: str = ""
    note: str = ""  # why a goal is missed and what would fix it, or how it was measured
    check: Callable[[Figure], bool] | None = None  # a goal that is not a number (e.g. "only that page")
    detail: str = ""  # e.g. which pages executed

    @property
    def summary(self) -> Summary | None:
        return summarize(self.samples) if self.samples else None

    def judge(self) -> Figure:
        """Set ``status`` from the median against the goal.

        >>> Figure("x", "x", "s", ("<=", 5.0), "≤ 5 s", [4.0, 6.0, 4.5]).judge().status
        'met'
        >>> Figure("x", "x", "s", ("<=", 5.0), "≤ 5 s", [6.0]).judge().status
        'missed'
        >>> Figure("x", "x", "s", samples=[1.0]).judge().status
        'reported'
        """
        if self.status:
            return self
        if not self.samples and self.check is None:
            self.status = "failed: no samples"
            return self
        ok = True
        if self.goal is not None and self.samples:
            op, value = self.goal
            med = self.summary.median
            ok = med <= value if op == "<=" else med == value
        if self.check is not None:
            ok = ok and self.check(self)
        if self.goal is None and self.check is None:
            self.status = "reported"
        else:
            self.status = "met" if ok else "missed"
        return self
