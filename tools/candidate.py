"""Try a torch release not yet supported: ``nox -s candidate -- X.Y.Z`` runs this file.

Every page is executed once per release, the candidate's build first, each with the
candidate among the supported releases (``$TORCH_EXPLAINERS_CANDIDATE``, read by
``explainers.releases``), so the sections that compare releases run it too.  Each
build goes to a folder of its own under the report's folder and keeps going past
failures: every page executes, and a failing cell does not stop its page
(``nb_execution_allow_errors``), so every claim that fails is found, not only each
page's first.  The published site (``docs/_build/html``) is never touched.

The report (``report.md``, and a summary on the terminal) lists each failing claim:
the page, the section (the nearest heading above the failing cell), the builds that
saw it, the release it fails on, the assert's message and, for a claim checked with
``explainers.releases.check_each_release``, the value seen on each release.  The
pages that hold on every build are listed too.

Site machinery like ``tools/sitebuild.py``: not shipped, standard library only.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

if __package__:
    from .sitebuild import build_site, failed_pages
else:  # run as a script: python tools/candidate.py
    from sitebuild import build_site, failed_pages

__all__ = ["CANDIDATE_ENV", "Claim", "broke_on", "main", "notebook_failures", "render_report",
           "run_candidate"]

# explainers.releases reads it; the same name, without importing the package here.
CANDIDATE_ENV = "TORCH_EXPLAINERS_CANDIDATE"
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Claim:
    """One failing claim: where it is, what its assert said, and which builds saw it fail."""

    page: str
    section: str
    cell: str
    error: str
    message: str
    builds: list[str] = field(default_factory=list)


def _failing_line(error: dict, source: str) -> str:
    """The cell's line that raised, from IPython's traceback ("----> 5 check(...)"), else its first line."""
    for frame in error.get("traceback", []):
        m = re.search(r"^-+>\s*\d+\s(.*)$", _ANSI.sub("", frame), re.M)
        if m:
            return m[1].strip()[:100]
    return next((line.strip() for line in source.splitlines() if line.strip()), "")[:100]


def notebook_failures(notebook: dict, page: str) -> list[Claim]:
    """The cells of an executed notebook that raised, each with the nearest heading above it.

    A cell tagged ``raises-exception`` raises on purpose and is not a failure.

    >>> md = lambda text: {"cell_type": "markdown", "source": text, "metadata": {}}
    >>> code = lambda src, *outs, tags=(): {"cell_type": "code", "source": src, "outputs": list(outs),
    ...                                      "metadata": {"tags": list(tags)}}
    >>> err = {"output_type": "error", "ename": "AssertionError", "evalue": "no longer holds",
    ...        "traceback": ["\\x1b[31mAssertionError\\x1b[39m  Traceback", "Cell In[2], line 2\\n      1 y = 2\\n"
    ...                      "\\x1b[32m----> \\x1b[39m\\x1b[32m2\\x1b[39m assert x == 2, 'no longer holds'\\n"]}
    >>> nb = {"cells": [md("# Title\\n\\n## Sizes"), code("x = 1"), md("## Versions\\n```\\n# not a heading\\n```"),
    ...                 code("y = 2\\nassert x == 2, 'no longer holds'", err),
    ...                 code("1 / 0", {**err, "ename": "ZeroDivisionError"}, tags=["raises-exception"])]}
    >>> notebook_failures(nb, "claim.md")
    [Claim(page='claim.md', section='Versions', cell="assert x == 2, 'no longer holds'", error='AssertionError', message='no longer holds', builds=[])]
    >>> notebook_failures({"cells": [code("y = 2\\n1 / 0", {**err, "traceback": []})]}, "p.md")[0].cell
    'y = 2'
    """
    out, section = [], ""
    for cell in notebook.get("cells", []):
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        if cell.get("cell_type") == "markdown":
            fenced = False
            for line in source.splitlines():
                if line.lstrip().startswith(("```", "~~~")):
                    fenced = not fenced
                elif not fenced and (m := _HEADING.match(line)):
                    section = m[2]
            continue
        if "raises-exception" in cell.get("metadata", {}).get("tags", []):
            continue
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                out.append(Claim(page, section, _failing_line(output, source), output.get("ename", ""),
                                 _ANSI.sub("", output.get("evalue", "")).strip()))
    return out


def broke_on(message: str, releases: list[str], builds: list[str]) -> list[str]:
    """The releases a claim fails on: those ``check_each_release`` names ("fails on torch ..."),
    else the release the message starts with ("torch 2.16.0, ...: ", "on 2.16.0 ..."), else the
    releases whose builds saw it fail.

    >>> broke_on("x [fails on torch 2.16.0; seen: torch 2.16.0: 1; torch 2.15.0: 2]",
    ...          ["2.16.0", "2.15.0"], ["2.16.0", "2.15.0"])
    ['2.16.0']
    >>> broke_on("torch 2.16.0, None: the sharded .grad is float32", ["2.16.0", "2.15.0"], ["2.15.0"])
    ['2.16.0']
    >>> broke_on("the claim no longer holds", ["2.16.0", "2.15.0"], ["2.16.0"])
    ['2.16.0']
    >>> broke_on("this build runs torch 2.15.0, not 2.16.0", ["2.16.0", "2.15.0"], ["2.16.0"])
    ['2.16.0']
    """
    named = re.search(r"\[fails on torch ([^;\]]+)", message)
    if named:
        return [r.strip() for r in named[1].split(",")]
    leading = re.match(r"(?:on )?(?:torch )?(\d+\.\d+\.\d+)\b", message)
    if leading and leading[1] in releases:
        return [leading[1]]
    return list(builds)


def _seen(message: str) -> tuple[str, str]:
    """(the claim without check_each_release's bracket, the values seen on each release)."""
    m = re.search(r"\s*\[fails on torch [^;\]]+; seen: (.*)\]$", message, re.S)
    return (message[: m.start()], m[1]) if m else (message, "")


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").strip() or "–"


def render_report(candidate: str, releases: list[str], claims: list[Claim], held: list[str],
                  other: dict[str, dict[str, str]]) -> str:
    """The Markdown report: the failing claims, the pages that failed otherwise, the pages that hold.

    ``other`` maps a release to ``{page: why}`` for pages that failed without a failing cell
    (a timeout, a dead kernel, warnings).

    >>> c = Claim("claim.md", "Versions", "check_each_release(...)", "AssertionError",
    ...           "the minor is 15 [fails on torch 2.14.1; seen: torch 2.15.0: 15; torch 2.14.1: 14]",
    ...           ["2.14.1", "2.15.0"])
    >>> print(render_report("2.14.1", ["2.14.1", "2.15.0"], [c], ["fine.md"], {}))
    # torch 2.14.1 as a candidate release
    <BLANKLINE>
    Every page was executed on torch 2.14.1 (the candidate) and 2.15.0, each build with 2.14.1 among the supported releases. The published site was not touched.
    <BLANKLINE>
    **1 failing claim on 1 page; 1 page holds.**
    <BLANKLINE>
    ## Failing claims
    <BLANKLINE>
    | page | section | fails on | seen by the builds on | claim (the assert's message) | seen on each release | the line that raised |
    |---|---|---|---|---|---|---|
    | claim.md | Versions | torch 2.14.1 | 2.14.1, 2.15.0 | AssertionError: the minor is 15 | torch 2.15.0: 15; torch 2.14.1: 14 | `check_each_release(...)` |
    <BLANKLINE>
    ## Pages that hold on every build
    <BLANKLINE>
    - fine.md
    <BLANKLINE>
    """
    pages = sorted({c.page for c in claims} | {p for by_page in other.values() for p in by_page})
    n = len(claims)
    lines = [f"# torch {candidate} as a candidate release", "",
             "Every page was executed on "
             + _and([f"torch {candidate} (the candidate)", *[r for r in releases if r != candidate]])
             + f", each build with {candidate} among the supported releases. "
             "The published site was not touched.", "",
             f"**{n} failing claim{'s' * (n != 1)} on {len(pages)} page{'s' * (len(pages) != 1)}; "
             f"{len(held)} page{'s' * (len(held) != 1)} hold{'s' * (len(held) == 1)}.**", ""]
    if claims:
        lines += ["## Failing claims", "",
                  "| page | section | fails on | seen by the builds on | claim (the assert's message) "
                  "| seen on each release | the line that raised |",
                  "|---|---|---|---|---|---|---|"]
        for c in claims:
            claim, seen = _seen(c.message)
            blamed = ", ".join(broke_on(c.message, releases, c.builds))
            lines.append(f"| {c.page} | {_cell(c.section)} | torch {blamed} | {', '.join(c.builds)} | "
                         f"{_cell(f'{c.error}: {claim}' if claim else c.error)} | {_cell(seen)} | "
                         f"`{_cell(c.cell)}` |")
        lines.append("")
    failed_otherwise = [(r, p, why) for r, by_page in other.items() for p, why in by_page.items()]
    if failed_otherwise:
        lines += ["## Pages that failed without a failing cell", "",
                  "| page | build on | why |", "|---|---|---|"]
        lines += [f"| {p} | torch {r} | {_cell(why)} |" for r, p, why in failed_otherwise]
        lines.append("")
    lines += ["## Pages that hold on every build", ""]
    lines += [f"- {p}" for p in held] or ["(none)"]
    lines.append("")
    return "\n".join(lines)


def _notebooks(build: Path) -> Path:
    """Where a build's executed notebooks are: its staging folder when the build failed."""
    staged = build / "staging" / "jupyter_execute"
    return staged if staged.is_dir() else build / "jupyter_execute"


@dataclass
class CandidateResult:
    """What :func:`run_candidate` found, and where it wrote the report."""

    report: Path
    claims: list[Claim]
    held: list[str]
    other: dict[str, dict[str, str]]
    summary: str


def run_candidate(docs: Path, candidate: str, pythons: dict[str, str], out: Path,
                  extra: list[str] | tuple[str, ...] = (), env: dict[str, str] | None = None,
                  capture: bool = False, timeout: float | None = None) -> CandidateResult:
    """Execute every page of ``docs`` once per release in ``pythons`` (release -> the Python of
    its environment; the candidate's build runs first), each build in ``out/builds/<release>``,
    and write ``out/report.md``.  ``env`` is the builds' environment (default: this process's);
    the candidate variable and ``NB_EXECUTION_MODE=force`` are added to it.

    >>> run_candidate(Path("/nonexistent/docs"), "2.16.0", {"2.15.0": "python"}, Path("/tmp/x"))
    Traceback (most recent call last):
    ...
    ValueError: the candidate 2.16.0 has no Python among the builds: 2.15.0
    """
    import os

    if candidate not in pythons:
        raise ValueError(f"the candidate {candidate} has no Python among the builds: {', '.join(pythons)}")
    docs, out = Path(docs), Path(out)
    releases = [candidate, *[r for r in pythons if r != candidate]]
    base = dict(os.environ if env is None else env)
    # The other releases' records belong to the site's builds; the Versions page reads none here.
    for name in ("TORCH_EXPLAINERS_RELEASE_RECORDS", "TORCH_EXPLAINERS_RECORD", "TORCH_EXPLAINERS_VERIFIED_ON"):
        base.pop(name, None)
    # force: the execution cache is the site's, keyed without the candidate; nothing is read
    # from it or written to it.  allow_errors: a failing cell does not stop its page.
    base.update({CANDIDATE_ENV: candidate, "NB_EXECUTION_MODE": "force"})
    extra = [*extra, "-D", "nb_execution_allow_errors=1"]
    found: dict[tuple[str, str, str, str], Claim] = {}
    executed: dict[str, set[str]] = {}
    other: dict[str, dict[str, str]] = {}
    for release in releases:
        build = out / "builds" / release
        if build.exists():
            shutil.rmtree(build)
        result = build_site(docs, pythons[release], extra, env=base, capture=capture, timeout=timeout,
                            build=build)
        notebooks = _notebooks(build)
        pages = {}
        for nb in sorted(notebooks.rglob("*.ipynb")) if notebooks.is_dir() else []:
            page = nb.relative_to(notebooks).with_suffix(".md").as_posix()
            pages[page] = notebook_failures(json.loads(nb.read_text(encoding="utf-8")), page)
        executed[release] = set(pages)
        for claims in pages.values():
            for c in claims:
                found.setdefault((c.page, c.section, c.cell, c.message), c).builds.append(release)
        staging = build / "staging"
        blamed = failed_pages(staging / "failed-pages.json", staging / "warnings.txt", docs.resolve())
        failing = {c.page for claims in pages.values() for c in claims}
        other[release] = {p: why for p, why in blamed.items() if p not in failing}
        if not result.ok and not blamed and not failing:
            other[release]["(the build)"] = result.message
    claims = list(found.values())
    broken = {c.page for c in claims} | {p for by_page in other.values() for p in by_page}
    held = sorted(set.intersection(*executed.values()) - broken) if executed else []
    out.mkdir(parents=True, exist_ok=True)
    report = out / "report.md"
    report.write_text(render_report(candidate, releases, claims, held, other), encoding="utf-8")
    pages = sorted({c.page for c in claims})
    lines = [f"candidate torch {candidate}: {len(claims)} failing claim(s) on {len(pages)} page(s), "
             f"{len(held)} page(s) hold; builds on torch {', '.join(releases)}"]
    lines += [f"  {c.page} § {c.section or '(top)'} [fails on torch "
              f"{', '.join(broke_on(c.message, releases, c.builds))}]: {c.error}: {_seen(c.message)[0][:150]}"
              for c in claims]
    lines += [f"  {p} [build on torch {r}]: {why[:150]}" for r, by_page in other.items() for p, why in by_page.items()]
    lines.append(f"report: {report}")
    return CandidateResult(report, claims, held, other, "\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    """``python tools/candidate.py --candidate X.Y.Z --release X.Y.Z=PYTHON [--release R=PYTHON ...]
    --out DIR DOCS [-- SPHINX-ARGS...]``: run the builds, write the report, print the summary.

    Exits 0 when every page holds on every build, 1 when a claim or a page failed.
    """
    import argparse
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    ours, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(prog="tools/candidate.py", description=__doc__.split("\n")[0])
    parser.add_argument("docs", type=Path, help="the Sphinx source folder")
    parser.add_argument("--candidate", required=True, help="the release tried, X.Y.Z")
    parser.add_argument("--release", action="append", required=True, metavar="RELEASE=PYTHON",
                        help="a release to build on and its environment's Python (repeat)")
    parser.add_argument("--out", type=Path, required=True, help="the report's folder")
    args = parser.parse_args(ours)
    pythons = dict(r.split("=", 1) for r in args.release)
    result = run_candidate(args.docs, args.candidate, pythons, args.out, extra)
    print(result.summary, flush=True)
    failed = result.claims or any(result.other.values())
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
