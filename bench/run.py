"""``python -m bench``: measure every figure, write results.md and results.svg, print the table.

    python -m bench                 # every figure, 3 runs each
    python -m bench --runs 5
    python -m bench --only render,mesh
    python -m bench --experiments   # also cold builds under -j 2 / OMP_NUM_THREADS=1
    python -m bench --rerender a/results.json b/results.json   # one report from runs of different groups

Groups: site (cold, floors, overhead, warm, edits), import, render, mesh, tsan,
weight (needs the site group's build), releases (cold build on every supported
torch release against the primary only), experiments (opt-in).

A run writes its ``results.json`` after each group, so a run stopped part-way
keeps the groups it finished; ``--rerender`` with several files merges runs of
the same commit (a figure measured again replaces the earlier one).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

from . import figures as F
from .report import commit_line, fmt, table, write_markdown, write_plot
from .stats import NOT_YET, Figure
from .tree import ROOT

BENCH = ROOT / "bench"
GROUPS = ("site", "import", "render", "mesh", "tsan", "weight", "releases")


def _load() -> str:
    try:
        return " / ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


def load_note(start: str, cores: int) -> str:
    """What the load average before the first measurement says about the absolute times.

    The load during the run is mostly the benchmark's own (parallel builds, 8 ranks), so
    only the load at the start tells whether other jobs shared the machine.

    >>> load_note("7.4 / 7.7 / 7.1", 2).startswith("this machine was busy")
    True
    >>> load_note("1.1 / 1.9 / 1.6", 2).startswith("the machine was not saturated")
    True
    """
    try:
        one_minute = float(start.split("/")[0])
    except ValueError:
        return "the load average could not be read: judge absolute times by the CPU-time column"
    if one_minute >= cores:
        return (f"this machine was busy at the start (load {one_minute:.1f} on {cores} cores: other "
                "jobs, or the tail of an earlier benchmark session): absolute times are inflated and noisy; "
                "ratios, CPU times and the executed-page sets are the stable figures")
    return (f"the machine was not saturated at the start (load {one_minute:.1f} on {cores} cores); "
            "the load at the end is the benchmark's own work (parallel builds, 8-rank launches)")


def merge_runs(runs: list[dict]) -> dict:
    """One run's data from several ``results.json`` of the same commit, later runs winning per figure.

    >>> a = {"meta": {"commit": "abc", "date": "d1", "load average at start (1/5/15 min)": "1.0 / 1 / 1",
    ...               "bench wall time": "10.0 min"},
    ...      "figures": [{"key": "cold", "samples": [1]}, {"key": "import_torch", "samples": [3]}],
    ...      "pages": {"cold execution (MyST-NB)": {"render": [5]}}, "notes": ["n1"], "docnames": ["render"]}
    >>> b = {"meta": {"commit": "abc", "date": "d2", "load average at start (1/5/15 min)": "0.5 / 1 / 1",
    ...               "bench wall time": "2.5 min"},
    ...      "figures": [{"key": "import_torch", "samples": [2]}], "notes": ["n1", "n2"]}
    >>> m = merge_runs([a, b])
    >>> [(f["key"], f["samples"]) for f in m["figures"]], m["notes"], m["meta"]["date"]
    ([('cold', [1]), ('import_torch', [2])], ['n1', 'n2'], 'd1; d2')
    >>> m["meta"]["bench wall time"], m["meta"]["load average at start (1/5/15 min)"]
    ('12.5 min (2 sessions)', '1.0 / 1 / 1; 0.5 / 1 / 1')
    >>> c = {**b, "meta": {**b["meta"], "runs": "1", "groups measured": "site, weight"}}
    >>> m = merge_runs([{**a, "meta": {**a["meta"], "runs": "3", "groups measured": "import"}}, c])
    >>> m["meta"]["runs"], m["meta"]["groups measured"]
    ('3 runs for import; 1 run for site, weight', 'import, site, weight')
    >>> merge_runs([a, {**b, "meta": {**b["meta"], "commit": "def"}}])
    Traceback (most recent call last):
    ...
    ValueError: the runs measured different commits (abc, def): run every group on one commit
    """
    commits = list(dict.fromkeys(r["meta"].get("commit", "") for r in runs))
    if len(commits) > 1:
        raise ValueError(f"the runs measured different commits ({', '.join(commits)}): run every group on one commit")
    figures: dict[str, dict] = {}
    pages: dict[str, dict] = {}
    notes: list[str] = []
    docnames: list[str] = []
    experiments: list[dict] = []
    for r in runs:
        figures.update({f["key"]: f for f in r.get("figures", [])})
        for kind, per_page in r.get("pages", {}).items():
            pages.setdefault(kind, {}).update(per_page)
        notes += [n for n in r.get("notes", []) if n not in notes]
        docnames += [d for d in r.get("docnames", []) if d not in docnames]
        experiments = r.get("experiments") or experiments
    meta = dict(runs[0]["meta"])
    if len(runs) > 1:
        for key in ("date", "load average at start (1/5/15 min)", "load average at end"):
            values = [r["meta"][key] for r in runs if key in r["meta"]]
            if values:
                meta[key] = "; ".join(values)
        # each session's load note, worded by this code (a stored note keeps an older wording)
        starts = [r["meta"]["load average at start (1/5/15 min)"] for r in runs
                  if "load average at start (1/5/15 min)" in r["meta"]]
        if starts:
            meta["note"] = "; ".join(f"session {i}: {load_note(x, os.cpu_count() or 1)}"
                                     for i, x in enumerate(starts, 1))
        minutes = sum(float(r["meta"].get("bench wall time", "0 min").split()[0]) for r in runs)
        meta["bench wall time"] = f"{minutes:.1f} min ({len(runs)} sessions)"
        meta["sessions merged"] = str(len(runs))
        # each session has its own runs per figure and its own groups: say which is which
        groups = [r["meta"].get("groups measured", "") for r in runs]
        counts = [r["meta"].get("runs", "?") for r in runs]
        meta["runs"] = "; ".join(f"{n} run{'' if n == '1' else 's'} for {g or 'the groups run'}"
                                 for n, g in zip(counts, groups, strict=True))
        meta["groups measured"] = ", ".join(dict.fromkeys(x.strip() for g in groups for x in g.split(",")
                                                          if x.strip()))
    return {"meta": meta, "figures": list(figures.values()), "experiments": experiments, "pages": pages,
            "notes": notes, "docnames": docnames}


def _by_key(figs: list[Figure]) -> dict[str, Figure]:
    return {f.key: f for f in figs}


def _med(f: Figure | None) -> float | None:
    return f.summary.median if f and f.samples else None


def per_page_section(ctx: F.Context, figs: list[Figure]) -> str:
    execd = ctx.pages.get("cold execution (MyST-NB)", {})
    floor = ctx.pages.get("plain-script floor", {})
    floor_cpu = ctx.pages.get("plain-script floor CPU", {})
    imp = _by_key(figs).get("import_torch")
    imp_cpu = statistics.median(imp.cpu) if imp and imp.cpu else None
    if not execd:
        return ""
    rows = ["| page | executed in the cold build (MyST-NB) | as a plain script | kernel overhead "
            "| plain script, CPU time | its own work: CPU beyond `import torch` |",
            "|---|---|---|---|---|---|"]
    for p in sorted(execd, key=lambda p: -statistics.median(execd[p])):
        e = statistics.median(execd[p])
        fl = statistics.median(floor[p]) if p in floor else None
        fc = statistics.median(floor_cpu[p]) if p in floor_cpu else None
        rows.append(" | ".join([
            f"| {p}", fmt(e, "s"), fmt(fl, "s") if fl is not None else "—",
            fmt(e - fl, "s") if fl is not None else "—", fmt(fc, "s") if fc is not None else "—",
            (fmt(max(fc - imp_cpu, 0.0), "s") if fc is not None and imp_cpu is not None else "—") + " |",
        ]))
    return ("Medians over the runs. *Kernel overhead* is the MyST-NB execution time minus the "
            "plain-script time (wall): kernel start-up and messaging, rich display of results, "
            "glue; it can come out negative when the machine's load changed between the two. "
            "The CPU columns do not depend on other jobs' load: *its own work* is the page's "
            "plain-script CPU time minus that of a bare `import torch` "
            + (f"({fmt(imp_cpu, 's')})" if imp_cpu else "") + ", the part a lighter workload "
            "could shrink.\n\n" + "\n".join(rows))


def idle_estimate(figs: list[Figure], ctx: F.Context) -> str:
    """Serial and -j 2 cold-build wall times predicted for an idle 2-core machine, from CPU times."""
    cpu = {p: statistics.median(v) for p, v in ctx.pages.get("plain-script floor CPU", {}).items()}
    sphinx = _by_key(figs).get("sphinx_floor")
    if not cpu or not ctx.docnames or not (sphinx and sphinx.cpu):
        return ""
    fixed = statistics.median(sphinx.cpu)
    execd = ctx.pages.get("cold execution (MyST-NB)", {})
    floor = ctx.pages.get("plain-script floor", {})
    extra = [statistics.median(execd[p]) - statistics.median(floor[p]) for p in execd if p in floor]
    overhead = (f" (the per-page table puts a kernel's extra cost at {fmt(statistics.median(extra), 's')}"
                " of wall time, median)") if extra else ""
    serial = F.parallel_estimate(ctx.docnames, cpu, fixed, 1)
    par = F.parallel_estimate(ctx.docnames, cpu, fixed, 2)
    return (f"**On an idle 2-core machine**, from CPU times (each page's plain-script CPU time, "
            f"Sphinx's {fmt(fixed, 's')} with execution off, and Sphinx's own split of the "
            f"{len(ctx.docnames)} documents into chunks): a serial cold build needs about "
            f"{fmt(serial, 's')} plus one kernel start per page, and `-j 2` about {fmt(par, 's')} "
            f"plus the kernel starts of its longer chunk{overhead}. "
            "`-j 2` is the one change here that brings a cold build under 60 s; "
            "`docs/_ext/parallel_exec.py` makes it safe (see Notes).")


def experiments_section(experiments: list[Figure], figs: list[Figure], ctx: F.Context) -> str:
    estimate = idle_estimate(figs, ctx)
    if not experiments:
        return estimate
    k = _by_key(experiments)
    base = k.get("exp:serial (-j 1)") or k.get("exp:serial (today)")
    lines = [
        "Cold builds of the same copy under each setting, interleaved round by round (`nox -s "
        "docs` builds with `-j auto` by default since commit 3f202c2). On a "
        "machine shared with other jobs, a build with two processes also gets a larger share of "
        "the cores than a serial one, so the wall-time gain of `-j 2` here overstates what an "
        "idle machine would see; the CPU column shows what the work itself costs.",
        "",
        table(experiments),
    ]
    par = k.get("exp:-j 2")
    if base and base.samples and par and par.samples:
        lines += ["", f"`-j 2`: {_med(par) / _med(base):.2f}× the serial wall time, "
                  + (f"{statistics.median(par.cpu) / statistics.median(base.cpu):.2f}× its CPU time."
                     if par.cpu and base.cpu else "")]
    failed = [f for f in experiments if "failed" in f.detail]
    if failed:
        lines += ["", "Failed builds: " + "; ".join(f"{f.label}: {f.detail}" for f in failed)]
    omp = k.get("exp:-j 1, OMP_NUM_THREADS=1") or k.get("exp:OMP_NUM_THREADS=1")
    if omp and omp.cpu and base and base.cpu:
        lines += ["", f"`OMP_NUM_THREADS=1` used {statistics.median(omp.cpu) / statistics.median(base.cpu):.2f}× "
                  "the CPU time of the default (torch's two threads per kernel spin while they wait "
                  "for a core that another process holds). It also changes what the pages show: "
                  "the stamp's thread count, and any timing a page makes; so it is not a default."]
    if estimate:
        lines += ["", estimate]
    return "\n".join(lines)


def _executed_and_expected(detail: str) -> tuple[list[str], list[str]]:
    """The pages an edit figure's ``detail`` says executed, and those it expected.

    >>> _executed_and_expected("executed: render, versions (EXPECTED render) (in at least one run)")
    (['render', 'versions'], ['render'])
    >>> _executed_and_expected("executed: mesh (as expected)")
    (['mesh'], ['mesh'])
    """
    got = re.match(r"executed: ([\w, ]+?) \(", detail)
    executed = [p.strip() for p in got.group(1).split(",") if p.strip() != "none"] if got else []
    wanted = re.search(r"\(EXPECTED ([\w, ]+?)\)", detail)
    return executed, ([p.strip() for p in wanted.group(1).split(",") if p.strip() != "none"]
                      if wanted else executed)


def _rebuild_why(f: Figure, execd: dict[str, list[float]], cpu: str) -> tuple[str, str]:
    """Why a page or module edit missed, from what executed; and what would change it.

    >>> f = Figure("edit_page", "x", "s")
    >>> f.detail = "executed: render, versions (EXPECTED render) (in at least one run)"
    >>> why, fix = _rebuild_why(f, {"versions": [90.0]}, "")
    >>> why.split(";")[0]
    'Besides the pages the edit reaches, `versions` (90.0 s of execution in the cold build) executed'
    """
    executed, wanted = _executed_and_expected(f.detail)
    extra = [p for p in executed if p not in wanted]
    if not extra:
        return (f"Only the pages the edit reaches executed (checked above); how the time{cpu} divides "
                "between them and the build around them (starting `nox` and Sphinx, reading and writing "
                "pages, staging the site) is not isolated here.",
                "Compare the CPU-time column on a quiet machine before changing anything.")
    times = ", ".join(f"`{p}`" + (f" ({fmt(statistics.median(execd[p]), 's')} of execution in the cold build)"
                                  if execd.get(p) else "") for p in extra)
    why = (f"Besides the pages the edit reaches, {times} executed; "
           "`docs/_ext/release_records.py` names `versions` and `verification` outdated on every build that "
           "runs Sphinx, and their front matter forces execution (`execution_mode: force`), so every edit "
           f"pays for them. How the time{cpu} divides between the executed pages and Sphinx is not isolated here.")
    fix = ("Key those pages' execution on what they report (the other releases' build records, the build's "
           "environment) instead of forcing it, so an edit that changes neither leaves them cached; "
           "then measure again.")
    return why, fix


def diagnose(figs: list[Figure], ctx: F.Context) -> str:
    """For every missed goal: why, from the measurements, and what would fix it."""
    k = _by_key(figs)
    out = []
    execd = ctx.pages.get("cold execution (MyST-NB)", {})
    n_pages = len(execd)
    sum_exec = sum(statistics.median(v) for v in execd.values()) if execd else None
    imp = _med(k.get("import_torch"))
    sfloor = _med(k.get("sphinx_floor"))
    heavy = [f for f in figs if f.key.startswith("weight:") and f.status == "missed"]
    for f in figs:
        if f.status != "missed" or f in heavy[1:]:
            continue
        why, fix = "", ""
        if f.key == "cold":
            why = (f"The cold build ({fmt(_med(f), 's')}) is mostly page execution: the pages' MyST-NB "
                   f"execution times add up to {fmt(sum_exec, 's')}" if sum_exec else "")
            if imp and n_pages:
                why += (f"; every one of the {n_pages} pages starts a kernel that imports torch "
                        f"({fmt(imp, 's')} each on this machine, {fmt(imp * n_pages, 's')} in all)")
            if sfloor:
                why += f"; Sphinx alone takes {fmt(sfloor, 's')}"
            why += "."
            fix = ("Execute pages in parallel: `nox -s docs` now builds with `-j auto` (see *How to get "
                   "there* for the measurements and the idle-machine estimate). Beyond that, the "
                   "heaviest pages' own work (per-page table: CPU beyond `import torch`) is where a "
                   "lighter but still faithful workload would save most; `import torch` itself is "
                   "paid once per kernel and never by Sphinx.")
        elif f.key == "overhead":
            why = ("The build costs more than its two floors: each page's kernel start-up, ZMQ "
                   "messaging and rich display (per-page table: *kernel overhead*), the jupyter-cache "
                   "bookkeeping, and `nox`'s staging copy of the site.")
            fix = "Parallel execution overlaps kernel start-up with other pages' work."
        elif f.key in ("warm", "edit_page") or f.key.startswith("edit_module"):
            cpu = f" ({fmt(statistics.median(f.cpu), 's')} of CPU time here)" if f.cpu else ""
            if f.key == "warm":
                why = ("Nothing executes (checked above), and `nox -s docs` does not start Sphinx when "
                       "no input changed (`tools/sitebuild.py`'s `inputs_digest`): what remains is starting "
                       f"`nox` and hashing `docs/` and `explainers/`{cpu}.")
                fix = "Load on the machine is the only remaining cost; compare the CPU-time column."
            else:
                why, fix = _rebuild_why(f, execd, cpu)
        elif f.key.startswith("weight:"):
            heaviest = f.detail.split("heaviest: ")[-1]
            if "fontawesome.js" in heaviest:
                why = (f"{heaviest}: the theme (pydata-sphinx-theme 0.20) loads `scripts/fontawesome.js` "
                       "on every page, Font Awesome's whole icon set as JavaScript, only so that sites "
                       "can add custom icons; its own icons come from the CSS webfont.")
                fix = ("The override `docs/_templates/static/webpack-macros.html` leaves that script "
                       "out; if this row names it, the override no longer matches the theme's macros "
                       "(re-copy it from the pinned theme). Serving gzip-compressed also helps "
                       "(the gzip figure is in the row).")
            else:
                why = f"The heaviest files: {heaviest}."
                fix = "Serve the site gzip-compressed (the gzip figure is in the row), or slim those files."
        elif f.key == "mesh_ratio":
            why = "The simulated walkthrough is not at least 10× cheaper than launching 8 real ranks."
            fix = "Profile `walkthrough` under `LocalTensorMode`; the real launch is dominated by 8 × `import torch`."
        elif f.key.startswith("tsan"):
            why = "The TSAN figure includes running both variants until both races show (`reproduce`)."
            fix = "Fewer iterations or a shorter `max_seconds` on the page; the build itself is cached by content hash."
        elif f.key.startswith("render"):
            why = "`render` formats every kept cell in Python."
            fix = "Vectorize the formatting of cells with numpy."
        if f in heavy:
            f = heavy[0]
            label = f"page weight, cold: {', '.join('`' + h.key.split(':', 1)[1] + '`' for h in heavy)}"
            out.append(f"**{label}** — goal {f.goal_text}, measured {fmt(min(_med(h) for h in heavy), 'MB')} "
                       f"to {fmt(max(_med(h) for h in heavy), 'MB')}. *Why:* {why} *Fix:* {fix}")
            continue
        out.append(f"**{f.label}** — goal {f.goal_text}, measured {fmt(_med(f), f.unit) if f.samples else '—'}."
                   + (f" *Why:* {why}" if why else "") + (f" *Fix:* {fix}" if fix else ""))
    return "\n\n".join(out) if out else "Every goal measured is met."


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="runs per figure (default 3)")
    ap.add_argument("--only", default=",".join(GROUPS), help=f"comma-separated groups from {GROUPS}")
    ap.add_argument("--experiments", action="store_true", help="also time -j 2 / OMP_NUM_THREADS=1 cold builds")
    ap.add_argument("--experiment-runs", type=int, default=None, help="rounds of experiments (default: --runs)")
    ap.add_argument("--module-runs", type=int, default=1, help="rounds that edit each module (default 1)")
    ap.add_argument("--touch-page", default=None, help="page whose code is edited (default: render)")
    ap.add_argument("--out", type=Path, default=BENCH, help="where results.md / results.svg go")
    ap.add_argument("--rerender", type=Path, nargs="+", default=None, metavar="RESULTS_JSON",
                    help="measure nothing: rewrite results.md / results.svg from one run's results.json, "
                         "or from several runs of the same commit, merged")
    args = ap.parse_args(argv)
    if args.rerender:
        print(render_results(merge_runs([json.loads(p.read_text()) for p in args.rerender]), args.out))
        return 0
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    groups = [g.strip() for g in args.only.split(",") if g.strip()]
    unknown = set(groups) - set(GROUPS)
    if unknown:
        ap.error(f"unknown group(s) {sorted(unknown)}; choose from {GROUPS}")

    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    ctx = F.Context(work=BENCH / "_runs" / stamp, runs=args.runs,
                    log=lambda s: print(s, file=sys.stderr, flush=True))
    ctx.work.mkdir(parents=True, exist_ok=True)
    meta = {"runs": str(args.runs), "commit": commit_line(), "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "load average at start (1/5/15 min)": _load()}
    started = time.perf_counter()
    figs: list[Figure] = []
    experiments: list[Figure] = []
    steps = {
        "site": lambda: F.site_figures(ctx, args.touch_page, args.module_runs),
        "import": lambda: F.import_torch_figure(ctx),
        "render": lambda: F.render_figures(ctx),
        "mesh": lambda: F.mesh_figures(ctx),
        "tsan": lambda: F.tsan_figures(ctx),
        "weight": lambda: F.weight_figures(ctx),
        "releases": lambda: F.releases_figures(ctx),
    }
    def save(done: list[str]) -> dict:
        data = {"meta": {**meta, "groups measured": ", ".join(done)},
                "figures": [asdict_figure(f) for f in figs], "experiments": [asdict_figure(f) for f in experiments],
                "pages": ctx.pages, "notes": ctx.notes, "docnames": ctx.docnames}
        (ctx.work / "results.json").write_text(json.dumps(data, indent=1))
        return data

    done: list[str] = []
    for g in GROUPS:
        if g not in groups:
            continue
        ctx.log(f"== {g}")
        try:
            measured = steps[g]()
        except Exception as exc:  # noqa: BLE001 - one broken group never hides the others
            measured = [F._failed(Figure(g, f"{g} figures", "s"), exc)]
        figs += [f.judge() for f in measured]
        done.append(g)
        save(done)  # a run stopped later keeps this group (python -m bench --rerender merges runs)
    if args.experiments:
        ctx.log("== experiments")
        ctx.runs = args.experiment_runs or args.runs
        try:
            experiments = F.parallel_experiments(ctx)
        except Exception as exc:  # noqa: BLE001
            experiments = [F._failed(Figure("exp", "experiments", "s"), exc)]
    for f in figs + experiments:
        f.judge()
    meta["load average at end"] = _load()
    meta["bench wall time"] = f"{(time.perf_counter() - started) / 60:.1f} min"
    meta["note"] = load_note(meta["load average at start (1/5/15 min)"], os.cpu_count() or 1)
    text = render_results(save(done), args.out)
    print(text)
    pending = [f.label for f in figs if f.status == NOT_YET]
    if pending:
        print(f"\n{len(pending)} figure(s) not available yet: their components have not landed.", file=sys.stderr)
    return 1 if any(f.status.startswith("failed") for f in figs) else 0


def asdict_figure(f: Figure) -> dict:
    return {k: getattr(f, k) for k in ("key", "label", "unit", "goal", "goal_text", "samples", "cpu",
                                       "status", "note", "detail")}


def render_results(data: dict, out: Path) -> str:
    """results.md and results.svg from a run's data (also: ``--rerender results.json``)."""
    figs = [Figure(**{**d, "goal": tuple(d["goal"]) if d.get("goal") else None}) for d in data["figures"]]
    experiments = [Figure(**{**d, "goal": tuple(d["goal"]) if d.get("goal") else None})
                   for d in data.get("experiments", [])]
    ctx = F.Context(work=out, pages=data.get("pages", {}), notes=data.get("notes", []),
                    docnames=data.get("docnames", []))
    sections = {
        "Why goals are missed, and what would fix it": diagnose(figs, ctx),
        "Per page": per_page_section(ctx, figs),
        "How to get there: parallel execution and threads": experiments_section(experiments, figs, ctx),
        "Notes": "\n".join(f"- {n}" for n in ctx.notes),
    }
    out.mkdir(parents=True, exist_ok=True)
    text = write_markdown(out / "results.md", figs, sections, data["meta"])
    write_plot(out / "results.svg", figs)
    return text


if __name__ == "__main__":
    sys.exit(main())
