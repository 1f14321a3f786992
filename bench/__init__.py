"""Benchmarks for torch-explainers: build speed, cache effectiveness, explainer cost.

``nox -s bench`` (or ``python -m bench``) measures every figure of the build-cost budget side
by side in one run and writes ``bench/results.md`` and ``bench/results.svg``.
Each figure is a function that discovers what is present in the checkout: a
figure whose component (an explainer page, the mesh launcher, the TSAN
harness) has not landed yet is reported as "not available yet".

Builds never touch the checkout's own site: every build runs on a throw-away
copy of the project under ``bench/_runs/`` (gitignored).

- :mod:`bench.stats`   median / min / max of repeated samples
- :mod:`bench.tree`    a copy of the project, its builds, and which pages they executed
- :mod:`bench.floor`   each page's code run as a plain Python script
- :mod:`bench.weight`  bytes a browser transfers to load each page cold
- :mod:`bench.figures` one function per figure, each returning :class:`bench.stats.Figure`
- :mod:`bench.report`  results.md and the plot
- :mod:`bench.run`     the command line
"""
