"""One function per group of figures; each discovers what the checkout has.

Every function takes a :class:`Context` and returns a list of
:class:`~bench.stats.Figure`.  A figure whose component has not landed (no
``explainers.mesh``, no TSAN harness) comes back with status ``NOT_YET``; one
that raised comes back ``failed: ...`` with the error, so one broken figure
never hides the others.  Runs of different figures are interleaved where they
are compared (cold build, sphinx floor, execution floor in the same round), so
the ratios see the same machine load.
"""

from __future__ import annotations

import os
import re
import resource
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from explainers.releases import cache_root

from .floor import run_page
from .stats import NOT_YET, Figure
from .tree import Build, BuildFailed, Tree
from .weight import find_chromium, measure_site

__all__ = ["Context", "parallel_estimate", "site_figures", "render_figures", "mesh_figures", "tsan_figures",
           "weight_figures", "import_torch_figure", "parallel_experiments"]


@dataclass
class Context:
    work: Path  # this run's scratch folder, under bench/_runs/
    runs: int = 3
    log: Callable[[str], None] = print
    tree: Tree | None = None  # the copy the site figures built (weight reuses its site)
    pages: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # per-page samples
    notes: list[str] = field(default_factory=list)
    docnames: list[str] = field(default_factory=list)  # every document Sphinx reads

    @property
    def python(self) -> str:
        return str(self.tree.noxfile.PY) if self.tree else sys.executable


def _failed(fig: Figure, exc: BaseException) -> Figure:
    lines = str(exc).strip().splitlines()
    # A failed build's message is the command, then the lines naming what failed, then the log's end.
    said = (lines[1] if isinstance(exc, BuildFailed) and len(lines) > 1 else lines[-1]) if lines else ""
    fig.status = f"failed: {type(exc).__name__}: {said}"
    fig.note = (fig.note + "\n" if fig.note else "") + "".join(traceback.format_exception(exc))[-1500:]
    return fig


def _names(pages) -> str:
    return ", ".join(sorted(pages)) if pages else "none"


# -- the site: cold, floors, warm, edits ------------------------------------------------------


def site_figures(ctx: Context, touch_page: str | None = None, module_rounds: int = 1) -> list[Figure]:
    """Cold build, both floors, the overhead ratio, and the cache figures, interleaved per run.

    Editing each ``explainers`` module re-executes its importers, which is slow and
    whose point is *which* pages execute: that is done in the first ``module_rounds``
    rounds only.
    """
    tree = ctx.tree = Tree(ctx.work / "tree")
    if not tree.env_is_current():
        raise RuntimeError("the shared environment is out of date: run `nox -s docs` once first")
    pages = tree.pages()
    target = touch_page or ("render" if "render" in pages else next(p for p in pages if p != "verification"))
    everyone = set(pages)
    modules = {m: tree.importers(m) for m in tree.modules()}
    # A module every page imports (the stamp) re-executes the whole site: that is a cold build.
    modules = {m: imp for m, imp in modules.items() if imp != everyone}

    cold = Figure("cold", "cold build: whole site from a clean `_build` (`nox -s docs`)", "s",
                  ("<=", 60.0), "≤ 60 s", check=lambda f: "as expected" in f.detail)
    sfloor = Figure("sphinx_floor", "sphinx floor: same site, execution off", "s")
    xfloor = Figure("exec_floor", "execution floor: Σ pages' code as plain Python scripts", "s")
    ratio = Figure("overhead", "overhead ratio: cold ÷ (execution floor + sphinx floor)", "×",
                   ("<=", 1.3), "≤ 1.3")
    ratio_cpu = Figure("overhead_cpu", "overhead ratio in CPU time (insensitive to other jobs' load)", "×")
    warm = Figure("warm", "warm rebuild, no change", "s", ("<=", 5.0), "≤ 5 s",
                  check=lambda f: "as expected" in f.detail)
    mtime = Figure("touch_mtime", f"rebuild after `touch docs/{target}.md` (mtime only)", "s",
                   goal_text="executes nothing", check=lambda f: "as expected" in f.detail)
    edit = Figure("edit_page", f"rebuild after editing `{target}`'s code, minus that page's execution",
                  "s", ("<=", 5.0), "only that page re-executes; ≤ its execution + 5 s",
                  check=lambda f: "as expected" in f.detail)
    mod_figs = {
        m: Figure(f"edit_module:{m}", f"rebuild after editing `{m}`", "s",
                  goal_text=f"only its importers re-execute ({_names(imp)})",
                  check=lambda f: "as expected" in f.detail)
        for m, imp in modules.items()
    }
    figs = [cold, sfloor, xfloor, ratio, ratio_cpu, warm, mtime, edit, *mod_figs.values()]
    per_page_exec: dict[str, list[float]] = {}
    per_page_floor: dict[str, list[float]] = {}
    per_page_floor_cpu: dict[str, list[float]] = {}
    bad: dict[str, str] = {}
    floor_failures: dict[str, str] = {}

    def expect(fig: Figure, b: Build, wanted: set[str]) -> None:
        got = set(b.executed)
        ok = got == wanted
        fig.detail = f"executed: {_names(got)} " + ("(as expected)" if ok else f"(EXPECTED {_names(wanted)})")
        if not ok:
            bad[fig.key] = fig.detail

    for i in range(ctx.runs):
        ctx.log(f"[site] round {i + 1}/{ctx.runs}: cold build")
        tree.clean()
        b = tree.nox_docs()
        cold.samples.append(b.seconds)
        cold.cpu.append(b.cpu)
        for p, s in b.executed.items():
            per_page_exec.setdefault(p, []).append(s)
        expect(cold, b, everyone)
        ctx.log(f"[site]   cold {b.seconds:.1f} s; sphinx floor")
        f = tree.sphinx(env={"NB_EXECUTION_MODE": "off"}, strict=False, out="floor")
        sfloor.samples.append(f.seconds)
        sfloor.cpu.append(f.cpu)
        ctx.log(f"[site]   sphinx floor {f.seconds:.1f} s; execution floor")
        total = total_cpu = 0.0
        for p in pages:
            try:
                s, c = run_page(tree.docs / f"{p}.md", ctx.python, tree.env())
            except Exception as exc:  # noqa: BLE001 - one page's floor must not hide the rest
                floor_failures[p] = str(exc).strip().splitlines()[-1][:200]
                continue
            per_page_floor.setdefault(p, []).append(s)
            per_page_floor_cpu.setdefault(p, []).append(c)
            total += s
            total_cpu += c
        if not floor_failures:
            xfloor.samples.append(total)
            xfloor.cpu.append(total_cpu)
            ratio.samples.append(b.seconds / (f.seconds + total))
            ratio_cpu.samples.append(b.cpu / (f.cpu + total_cpu))
        ctx.log(f"[site]   execution floor {total:.1f} s; warm rebuild")
        b = tree.nox_docs()
        warm.samples.append(b.seconds)
        warm.cpu.append(b.cpu)
        expect(warm, b, set())
        tree.touch_page(target)
        b = tree.nox_docs()
        mtime.samples.append(b.seconds)
        mtime.cpu.append(b.cpu)
        expect(mtime, b, set())
        ctx.log(f"[site]   warm {warm.samples[-1]:.1f} s, touch {b.seconds:.1f} s; edit {target}")
        tree.edit_page(target)
        b = tree.nox_docs()
        edit.samples.append(b.seconds - b.executed.get(target, 0.0))
        edit.cpu.append(b.cpu)
        expect(edit, b, {target})
        edit.detail += (
            f" · rebuild {b.seconds:.1f} s, of which {target} executed {b.executed.get(target, 0):.1f} s")
        for m, fig in mod_figs.items() if i < module_rounds else ():
            tree.edit_module(m)
            b = tree.nox_docs()
            fig.samples.append(b.seconds)
            fig.cpu.append(b.cpu)
            expect(fig, b, modules[m])
            ctx.log(f"[site]   edit {m}: {b.seconds:.1f} s, executed {_names(b.executed)}")

    if floor_failures:
        why = "; ".join(f"{p}: {e}" for p, e in floor_failures.items())
        for fig in (xfloor, ratio, ratio_cpu):
            fig.status = f"failed: a page does not run as a plain script ({why})"
    for key, line in bad.items():
        fig = next(f for f in figs if f.key == key)
        fig.detail = line + " (in at least one run)"
    ctx.docnames = sorted(p.relative_to(tree.docs).with_suffix("").as_posix()
                          for p in tree.docs.rglob("*.md") if "_build" not in p.parts)
    ctx.pages["cold execution (MyST-NB)"] = per_page_exec
    ctx.pages["plain-script floor"] = per_page_floor
    ctx.pages["plain-script floor CPU"] = per_page_floor_cpu
    base = cache_root()  # the one root of every cache: environments, TSAN builds, stored real runs
    kept = sorted(p.name for p in base.glob("*") if p.is_dir() and not p.name.startswith("env-"))
    if kept:
        ctx.notes.append(
            f"A cold build starts from a clean `_build` but keeps the caches outside it, in `{base}` "
            f"({', '.join(kept)}): pages reuse what those hold, as they do on any machine that has "
            "run `nox -s tests` once (its tests fill them before the docs build)."
        )
    ctx.notes.append(
        f"Modules every page imports ({_names(set(tree.modules()) - set(modules))}) re-execute the "
        "whole site when edited, which the cold build already measures; they are not edited separately."
    )
    return figs


# -- import torch ------------------------------------------------------------------------


def import_torch_figure(ctx: Context) -> list[Figure]:
    """``python -c "import torch"``: what every kernel, plain script and rank pays first."""
    fig = Figure("import_torch", "`import torch` in a fresh interpreter", "s")
    import resource

    env = {**os.environ, "PYTHONPATH": str(ctx.tree.root if ctx.tree else Path.cwd())}
    bare = Figure("python_start", "a fresh interpreter that imports nothing (`python -c pass`)", "s")
    for _ in range(ctx.runs):
        for f, code in ((fig, "import torch"), (bare, "pass")):
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            subprocess.run([ctx.python, "-c", code], check=True, env=env)
            f.samples.append(time.perf_counter() - t)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            f.cpu.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
    return [fig, bare]


# -- render -------------------------------------------------------------------------------


def render_figures(ctx: Context) -> list[Figure]:
    """``render`` against ``repr`` on 10^6 elements, and ``render`` unsummarized on 10^4."""
    ratio = Figure("render_vs_repr", "`render` ÷ `repr`, 10^6-element tensor (100×100×100), summarized",
                   "×", ("<=", 1.0), "≤ 1.0")
    small = Figure("render_1e4", "`render`, 10^4-element tensor (10×10×10×10), summarize=False",
                   "ms", ("<=", 50.0), "≤ 50 ms")
    try:
        from explainers.render import arange_nd, render
    except ImportError:
        ratio.status = small.status = NOT_YET
        return [ratio, small]

    def best_of(fn, reps=5) -> float:
        out = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
        return min(out)  # within a run: the least-disturbed repetition

    big = arange_nd(100, 100, 100)
    four = arange_nd(10, 10, 10, 10)
    render(big), repr(big), render(four, summarize=False)  # warm up imports and caches
    for _ in range(ctx.runs):
        ratio.samples.append(best_of(lambda: render(big)) / best_of(lambda: repr(big)))
        small.samples.append(1e3 * best_of(lambda: render(four, summarize=False)))
    return [ratio, small]


# -- mesh ----------------------------------------------------------------------------------

# As the page times it: imports done, then open the simulated world, walk, close it.
_SIMULATED = r"""
import sys, time, torch
from explainers.mesh.simulated import simulated_mesh
from explainers.mesh.walkthrough import walkthrough
t, c = time.perf_counter(), time.process_time()
with simulated_mesh((2, 2, 2), ("m", "n", "k")) as mesh:
    steps = walkthrough(mesh, int(sys.argv[1]))
print(time.perf_counter() - t, time.process_time() - c)
"""


def mesh_figures(ctx: Context, numel: int = 15) -> list[Figure]:
    """The simulated walkthrough (one process) against the same walkthrough on 8 gloo processes."""
    ratio = Figure("mesh_ratio", "simulated mesh walkthrough ÷ the same on 8 real gloo processes (torchrun)",
                   "×", ("<=", 0.1), "≤ 0.1")
    sim = Figure("mesh_sim", "simulated walkthrough as the page times it (torch imported; the "
                 "first call pays the DTensor and dynamo imports)", "s")
    real = Figure("mesh_real", "real walkthrough: torchrun launch of 8 gloo ranks, end to end", "s")
    idle = Figure("mesh_ratio_idle", "the same ratio estimated for an idle 2-core machine: "
                  "simulated CPU ÷ (real CPU ÷ 2)", "×")
    figs = [ratio, idle, sim, real]
    try:
        from explainers.mesh.launch import launch_walkthrough
    except ImportError:
        for f in figs:
            f.status = NOT_YET
        return figs
    env = {**os.environ, "PYTHONPATH": str(Path(sys.modules["explainers"].__file__).parents[1])}
    try:
        for i in range(ctx.runs):
            ctx.log(f"[mesh] round {i + 1}/{ctx.runs}")
            res = subprocess.run([ctx.python, "-c", _SIMULATED, str(numel)], env=env, check=True,
                                 capture_output=True, text=True, timeout=600)
            s, s_cpu = map(float, res.stdout.strip().splitlines()[-1].split())
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            r = launch_walkthrough(numel, timeout=600)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            r_cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
            sim.samples.append(s)
            sim.cpu.append(s_cpu)
            real.samples.append(r.wall_s)
            real.cpu.append(r_cpu)
            ratio.samples.append(s / r.wall_s)
            idle.samples.append(s_cpu / (r_cpu / 2))
            ctx.log(f"[mesh]   simulated {s:.2f} s, real {r.wall_s:.1f} s (walkthrough alone {r.walkthrough_s:.2f} s)")
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return [_failed(f, exc) for f in figs]
    return figs


# -- releases ------------------------------------------------------------------------------


def releases_figures(ctx: Context) -> list[Figure]:
    """What verifying every page on the other supported releases costs: a cold
    `nox -s docs -- --all-releases` against a cold primary-only `nox -s docs`, environments ready."""
    from explainers.releases import SUPPORTED

    single = Figure("cold_primary", "cold build, primary release only (`nox -s docs`)", "s")
    every = Figure("cold_all_releases", f"cold build on all {len(SUPPORTED)} releases "
                   "(`nox -s docs -- --all-releases`)", "s")
    ratio = Figure("releases_ratio", "all releases ÷ primary only, cold", "×",
                   ("<=", len(SUPPORTED) + 0.5), f"≤ {len(SUPPORTED) + 0.5}")
    tree = ctx.tree or Tree(ctx.work / "tree")
    try:
        for i in range(ctx.runs):
            tree.clean()
            a = tree.nox_docs()
            tree.clean()
            b = tree.nox_docs(["--all-releases"])
            single.samples.append(a.seconds)
            single.cpu.append(a.cpu)
            every.samples.append(b.seconds)
            every.cpu.append(b.cpu)
            ratio.samples.append(b.seconds / a.seconds)
            ctx.log(f"[releases] round {i + 1}/{ctx.runs}: primary {a.seconds:.1f} s, all {b.seconds:.1f} s")
    except Exception as exc:  # noqa: BLE001
        return [_failed(single, exc), _failed(every, exc), _failed(ratio, exc)]
    return [single, every, ratio]


# -- TSAN ----------------------------------------------------------------------------------


def tsan_figures(ctx: Context) -> list[Figure]:
    """The TSAN harness cold (fresh cache: compile both variants + run) and cached."""
    cold = Figure("tsan_cold", "TSAN harness, cold: compile + run, both variants", "s",
                  ("<=", 30.0), "≤ 30 s")
    cached = Figure("tsan_cached", "TSAN harness, cached build: run both variants", "s",
                    ("<=", 2.0), "≤ 2 s")
    try:
        from explainers.allocator.runner import reproduce
    except ImportError:
        cold.status = cached.status = NOT_YET
        return [cold, cached]
    try:
        for i in range(ctx.runs):
            cache = ctx.work / f"tsan-cache-{i}"
            t = time.perf_counter()
            reproduce(cache=cache)
            cold.samples.append(time.perf_counter() - t)
            t = time.perf_counter()
            reproduce(cache=cache)
            cached.samples.append(time.perf_counter() - t)
            ctx.log(f"[tsan] cold {cold.samples[-1]:.1f} s, cached {cached.samples[-1]:.1f} s")
    except Exception as exc:  # noqa: BLE001
        return [_failed(cold, exc), _failed(cached, exc)]
    return [cold, cached]


# -- page weight ---------------------------------------------------------------------------


def weight_figures(ctx: Context) -> list[Figure]:
    """Bytes per page, cold, from the site the cold builds made; and external requests."""
    ext = Figure("external", "external requests, all pages", "requests", ("==", 0.0), "0")
    if ctx.tree is None or not (ctx.tree.docs / "_build" / "html" / "index.html").is_file():
        ext.status = "failed: no built site (the site figures did not run)"
        return [ext]
    if find_chromium() is None:
        ext.status = "failed: no Chromium (apt-get install -y chromium)"
        return [ext]
    site = ctx.tree.docs / "_build" / "html"
    names = sorted(p.relative_to(site).with_suffix("").as_posix() for p in site.glob("*.html")
                   if p.stem not in ("genindex", "search"))
    try:
        weights = measure_site(site, names)
    except Exception as exc:  # noqa: BLE001
        return [_failed(ext, exc)]
    figs = []
    for w in weights:
        fig = Figure(f"weight:{w.page}", f"page weight, cold: `{w.page}`", "MB", ("<=", 1.5), "≤ 1.5 MB",
                     samples=[w.bytes / 1e6])
        fig.detail = (f"{w.requests} requests; {w.gzip_bytes / 1e6:.2f} MB if served gzip-compressed; "
                      "heaviest: " + ", ".join(f"{Path(u).name} {n / 1e6:.2f} MB" for u, n in w.largest[:2]))
        if w.failed:
            fig.detail += f"; not 200: {', '.join(w.failed)}"
        figs.append(fig)
    ext.samples = [float(sum(len(w.external) for w in weights))]
    ext.detail = "; ".join(f"{w.page}: {u}" for w in weights for u in w.external) or "none"
    return [*figs, ext]


# -- how to get there: parallel execution and threads ----------------------------------------


def parallel_experiments(ctx: Context, configs: dict[str, tuple[list[str], dict[str, str]]] | None = None
                         ) -> list[Figure]:
    """Cold builds under several ``-j`` / ``OMP_NUM_THREADS`` settings, interleaved per round."""
    configs = configs or {
        "serial (-j 1)": (["-j", "1"], {}),
        "-j 2": (["-j", "2"], {}),
        "-j 1, OMP_NUM_THREADS=1": (["-j", "1"], {"OMP_NUM_THREADS": "1"}),
        "-j 2, OMP_NUM_THREADS=1": (["-j", "2"], {"OMP_NUM_THREADS": "1"}),
    }
    tree = ctx.tree or Tree(ctx.work / "tree")
    figs = {name: Figure(f"exp:{name}", f"cold build, {name}", "s") for name in configs}
    failures: dict[str, list[str]] = {name: [] for name in configs}
    pages = set(tree.pages())
    for i in range(ctx.runs):
        for name, (extra, env) in configs.items():
            tree.clean()
            try:
                b = tree.nox_docs(extra, env)
            except Exception as exc:  # noqa: BLE001 - a port race or a crash is a result here
                lines = str(exc).strip().splitlines()
                cause = [ln for ln in lines if re.search(r"\w(Error|Exception)\b|WARNING|died", ln)]
                failures[name].append((cause[0] if cause else lines[-1]).strip()[:200])
                continue
            figs[name].samples.append(b.seconds)
            figs[name].cpu.append(b.cpu)
            if set(b.executed) != pages:
                failures[name].append(f"executed {_names(b.executed)}")
            ctx.log(f"[exp] round {i + 1}: {name}: {b.seconds:.1f} s")
    first = next(iter(figs.values()))  # the baseline
    base = first.summary if first.samples else None
    for name, fig in figs.items():
        if fig.samples and base:
            fig.detail = f"{statistics.median(fig.samples) / base.median:.2f}× {first.label.split(', ', 1)[-1]}"
        if failures[name]:
            fig.detail += f"; {len(failures[name])} failed: {failures[name][0]}"
    return list(figs.values())


def parallel_estimate(docnames: list[str], page_cost: dict[str, float], fixed: float, nproc: int) -> float:
    """Wall time a ``-j nproc`` build would take on ``nproc`` idle cores, from per-page costs.

    Sphinx 9 splits the documents to read, sorted, into chunks of
    ``len // nproc`` (``sphinx.util.parallel.make_chunks``) and hands each chunk to
    the next free worker; ``fixed`` is the serial rest of the build.

    >>> parallel_estimate(["a", "b", "c", "d"], {"a": 4.0, "b": 1.0, "c": 2.0, "d": 2.0}, 1.0, 1)
    10.0
    >>> parallel_estimate(["a", "b", "c", "d"], {"a": 4.0, "b": 1.0, "c": 2.0, "d": 2.0}, 1.0, 2)
    6.0
    """
    names = sorted(docnames)
    size = max(len(names) // nproc, 1)
    chunks = [names[i : i + size] for i in range(0, len(names), size)]
    workers = [0.0] * nproc
    for chunk in chunks:
        i = workers.index(min(workers))
        workers[i] += sum(page_cost.get(d, 0.0) for d in chunk)
    return fixed + max(workers)
