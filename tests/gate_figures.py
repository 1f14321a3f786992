"""The quality gate's figures: tests record them, `nox -s tests` prints them at the end.

Each test writes one small JSON file under ``docs/_build/gate-figures/``;
``python tests/gate_figures.py`` prints the summary (and ``--reset`` clears
the folder at the start of a run, so old figures never mix in).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

FIGURES = Path(__file__).resolve().parents[1] / "docs" / "_build" / "gate-figures"


def record(group: str, name: str, **values) -> None:
    """Store the figures of one check, e.g. ``record("faults", "syntax-error", caught=True)``."""
    FIGURES.mkdir(parents=True, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    (FIGURES / f"{group}.{safe}.json").write_text(json.dumps({"group": group, "name": name, **values}))


def load() -> list[dict]:
    if not FIGURES.is_dir():
        return []
    return [json.loads(p.read_text()) for p in sorted(FIGURES.glob("*.json"))]


def summary(rows: list[dict]) -> list[str]:
    """One line per figure, from the recorded rows.

    >>> rows = [{"group": "faults", "name": "a", "caught": True},
    ...         {"group": "faults", "name": "b", "caught": False}]
    >>> summary(rows)[0]
    'faults caught:            1 of 2 injected (not caught: b)'
    """
    by = {}
    for row in rows:
        by.setdefault(row["group"], []).append(row)
    lines = []
    if "faults" in by:
        faults = by["faults"]
        missed = [r["name"] for r in faults if not r["caught"]]
        lines.append(f"faults caught:            {len(faults) - len(missed)} of {len(faults)} injected"
                     + (f" (not caught: {', '.join(missed)})" if missed else ""))
    if "browser" in by:
        pages = [r for r in by["browser"] if r["name"].startswith("page:")]
        lines.append(f"pages x themes checked:   {len(pages)} "
                     f"({len({r['page'] for r in pages})} pages x {len({r['theme'] for r in pages})} themes)")
        lines.append(f"a11y violations:          {sum(r['violations'] for r in pages)} serious/critical "
                     f"({sum(r['excluded'] for r in pages)} excluded with a listed reason)")
        lines.append(f"external requests:        {sum(r['external'] for r in pages)}")
        lines.append(f"console errors:           {sum(r['console_errors'] for r in pages)}")
        for r in by["browser"]:
            if not r["name"].startswith("page:"):
                lines.append(f"{r['name'] + ':':26}{r['result']}")
    if "mobile" in by:
        wide = [r["name"] for r in by["mobile"] if r["overflow"] > 0]
        lines.append(f"375 px viewport:          {len(by['mobile']) - len(wide)} of {len(by['mobile'])} pages "
                     f"without sideways scrolling; {sum(r['boxes'] for r in by['mobile'])} wide blocks scroll in their box")
    if "desktop" in by:
        wide = [r["name"] for r in by["desktop"] if r["boxes"]]
        lines.append(f"1400 px viewport:         {len(by['desktop']) - len(wide)} of {len(by['desktop'])} pages "
                     "without an output block that scrolls sideways"
                     + (f" (scrolling: {', '.join(wide)})" if wide else ""))
    if "copy" in by:
        lines.append(f"copy buttons:             {len(by['copy'])} pages: "
                     + "; ".join(f"{r['name']} {r['result']}" for r in by["copy"]))
    if "shape" in by:
        rows = by["shape"]
        on_top = [r for r in rows if r["in_short"] and r["in_short"]["top"] < 1000]
        over = [r for r in rows if r["checks"] > 0.10]
        lines.append(f"page shape (1400 x 1000): {len(rows) - len(over)} of {len(rows)} pages with visible "
                     f"assert+glue lines <= 10 %; {len(on_top)} of {len(rows)} with In short on the first "
                     "screen; folds closed:")
        lines.extend(f"  {_shape_line(r)}" for r in rows)
    if "tables" in by:
        for width in sorted({r["width"] for r in by["tables"]}, reverse=True):
            rows = [r for r in by["tables"] if r["width"] == width]
            bad = [r for r in rows if r["broken"]]
            lines.append(f"tables at {width} px:{' ' * (10 - len(str(width)))}"
                         f"{sum(r['tables'] for r in rows)} tables on {len(rows)} pages, "
                         f"{sum(r['broken'] for r in rows)} words broken over lines"
                         + (" (" + "; ".join(f"{r['page']} {r['broken']}: {', '.join(r['examples'])}"
                                             for r in bad) + ")" if bad else ""))
    if "copyrule" in by:
        checks = [r for r in by["copyrule"] if r["name"].startswith("checks:")]
        runs = [r for r in by["copyrule"] if r["name"].startswith("run:")]
        if checks:
            bad = [r for r in checks if r["with_checks"]]
            lines.append(f"copy rule:                {len(checks) - len(bad)} of {len(checks)} pages whose visible "
                         "cells hold no assert or glue"
                         + (" (" + ", ".join(f"{r['page']} {r['with_checks']} of {r['visible']} cells, "
                                            f"{r['lines']} lines" for r in bad) + ")" if bad else ""))
        if runs:
            bad = [r for r in runs if r["error"]]
            lines.append(f"copy rule, fresh kernel:  {len(runs) - len(bad)} of {len(runs)} pages whose visible "
                         "cells run in order alone"
                         + (" (" + "; ".join(f"{r['page']}: {r['ran']} of {r['visible']} ran, then "
                                            f"{r['error'][:120]}" for r in bad) + ")" if bad else ""))
    if "search" in by:
        lines.append(f"search (offline):         {len(by['search'])} pages found: "
                     + ", ".join(f"{r['name']} by {r['term']!r}" for r in by["search"]))
    for group in ("links", "paths", "snippets", "notebook", "determinism", "offline", "deps"):
        for r in by.get(group, []):
            lines.append(f"{group + ':':26}{r['result']}")
    return lines


def _shape_line(r: dict) -> str:
    """One page's shape figures.

    >>> _shape_line({"name": "render.html", "checks": 0.25, "asserts": 20, "glues": 5, "quotes": 3,
    ...              "code": 100, "machinery": 0.28, "height": 12345, "in_short": None})
    'render.html       checks 25 % (20 assert + 5 glue of 100 visible lines; with 3 quoting: 28 %), height 12,345 px, In short: none'
    """
    where = r["in_short"]
    at = "none" if where is None else f"top at {where['top']:,} px"
    return (f"{r['name']:17} checks {r['checks'] * 100:.0f} % ({r['asserts']} assert + {r['glues']} glue "
            f"of {r['code']} visible lines; with {r['quotes']} quoting: {r['machinery'] * 100:.0f} %), "
            f"height {r['height']:,} px, In short: {at}")


if __name__ == "__main__":
    if "--reset" in sys.argv:
        shutil.rmtree(FIGURES, ignore_errors=True)
        sys.exit(0)
    lines = summary(load())
    print("\n".join(["", "== quality gate figures ==", *(lines or ["(no figures recorded)"])]))
