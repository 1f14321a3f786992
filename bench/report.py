"""``bench/results.md`` and ``bench/results.svg`` from a list of figures."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from collections.abc import Sequence
from pathlib import Path

from .stats import NOT_YET, Figure

__all__ = ["table", "write_markdown", "write_plot", "fmt"]


def fmt(value: float, unit: str) -> str:
    """A number at a precision that suits its unit.

    >>> fmt(12.345, "s"), fmt(0.04567, "×"), fmt(2.4321, "MB"), fmt(3.0, "requests")
    ('12.3 s', '0.046×', '2.43 MB', '3')
    """
    if unit == "×":
        return f"{value:.2g}×" if value < 0.1 else f"{value:.2f}×"
    if unit == "requests":
        return f"{value:.0f}"
    if unit == "MB":
        return f"{value:.2f} MB"
    if unit == "ms":
        return f"{value:.1f} ms"
    return f"{value:.1f} {unit}" if value >= 1 else f"{value:.2f} {unit}"


_MARK = {"met": "✅ met", "missed": "❌ missed", "reported": "reported", NOT_YET: "⏳ not available yet"}


def table(figs: Sequence[Figure]) -> str:
    """The markdown table of the figures against their goals."""
    rows = ["| figure | goal | median | min | max | runs | CPU time (median) | status |",
            "|---|---|---|---|---|---|---|---|"]
    for f in figs:
        s = f.summary
        cells = [fmt(s.median, f.unit), fmt(s.lo, f.unit), fmt(s.hi, f.unit), str(s.n)] if s else ["—"] * 4
        cells.append(fmt(statistics.median(f.cpu), "s") if f.cpu else "")
        status = _MARK.get(f.status, f.status.split("\n")[0])
        label = f.label + (f"<br><sub>{f.detail}</sub>" if f.detail else "")
        rows.append(f"| {label} | {f.goal_text} | " + " | ".join(cells) + f" | {status} |")
    return "\n".join(rows)


def _git(*args: str, cwd: Path) -> str:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def commit_line() -> str:
    """The checkout's commit and branch, as the copy the benchmark builds is taken."""
    from .tree import ROOT as root

    line = f"`{_git('rev-parse', '--short', 'HEAD', cwd=root)}` on `{_git('branch', '--show-current', cwd=root)}`"
    if _git("status", "--porcelain", "--untracked-files=no", cwd=root):
        line += " (with uncommitted changes)"
    return line


def write_markdown(path: Path, figs: Sequence[Figure], sections: dict[str, str], meta: dict[str, str]) -> str:
    """Write results.md: provenance, the table, then ``sections`` (title -> markdown)."""
    lines = [
        "# Benchmark results",
        "",
        "Written by `nox -s bench` (`python -m bench`); do not edit by hand. Every figure is the "
        + (f"median of {meta.get('runs', '?')} runs with min and max, measured side by side in one session"
           if "sessions merged" not in meta else
           f"median of its runs ({meta.get('runs', '?')}) with min and max, measured side by side in one "
           f"session per group ({meta['sessions merged']} sessions merged)")
        + "; ratios are taken run by run, so both sides of a ratio saw the same machine load.",
        "",
        f"- **commit measured**: {meta.get('commit') or commit_line()}",
        f"- **machine**: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        *[f"- **{k}**: {v}" for k, v in meta.items() if k not in ("runs", "commit", "sessions merged")],
        "",
        "## Figures against the goals",
        "",
        table(figs),
        "",
        "![figures against their goals](results.svg)",
        "",
    ]
    for title, body in sections.items():
        if body.strip():
            lines += [f"## {title}", "", body.strip(), ""]
    text = "\n".join(lines)
    path.write_text(text, encoding="utf-8")
    return text


def write_plot(path: Path, figs: Sequence[Figure]) -> None:
    """Each figure with a numeric goal as median ÷ goal (min–max whiskers), log scale."""
    import matplotlib

    matplotlib.use("agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "torch-explainers-bench"
    rows = [f for f in figs if f.goal and f.goal[0] == "<=" and (f.samples or f.status == NOT_YET)]
    fig, ax = plt.subplots(figsize=(9, 0.42 * len(rows) + 1.2))
    for y, f in enumerate(reversed(rows)):
        label = f.label.replace("`", "")
        label = label if len(label) <= 70 else label[:67] + "..."
        ax.text(-0.01, y, label, transform=ax.get_yaxis_transform(), ha="right", va="center", fontsize=8)
        if not f.samples:
            ax.text(1.0, y, "  not available yet", va="center", fontsize=8, color="0.5")
            continue
        goal = f.goal[1]
        s = f.summary
        med, lo, hi = s.median / goal, s.lo / goal, s.hi / goal
        color = "#2e7d32" if f.status == "met" else "#c62828"
        ax.barh(y, med, color=color, alpha=0.75, height=0.6)
        ax.errorbar(med, y, xerr=[[med - lo], [hi - med]], fmt="none", ecolor="black", capsize=3, lw=1)
    ax.axvline(1.0, color="black", lw=1, ls="--")
    ax.set_xscale("log")
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ticks = [0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlim(0.05, 10)
    ax.set_yticks([])
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel("median ÷ goal (left of the dashed line: goal met); whiskers: min and max")
    fig.savefig(path, bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs)
