"""Two clean builds of the real site are identical, byte for byte, and the second runs offline.

`nox -s tests` builds the site; this builds it again from a clean copy of the
checkout, inside a network namespace with only loopback (where the kernel
allows it) and with every Python process logging any outbound connection
(`tests/offline/sitecustomize.py`).  The two HTML trees must be identical
apart from the entries of `NONDETERMINISTIC`, each with its reason.
"""

from __future__ import annotations

import shutil

import pytest
from gate_figures import record
from minisite import ROOT, build

# What may differ between two clean builds of the same sources, and why.  Each
# entry is (file glob, regex, reason); matches are removed
# before comparing.  Keep this list minimal: anything else that differs fails.
NONDETERMINISTIC = [
    ("*.html", r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", "the execution date in stamps and the environment list"),
    ("*.html", r"executed in [\d.]+ s", "the page's execution time in its stamp"),
    ("verification.html", r"<table class=\"table\">.*?</table>",
     "MyST-NB's execution table: method (cache or executed), time and run time per page"),
    ("*.html", r"(?<![\w.])[\d.]+(?:</span>)?\s*(?:s|ms|µs|us)\b",
     "measured wall-clock durations: any number directly followed by a time unit"),
    ("allocator.html", r"<table class=\"table\">.*?</table>|<div class=\"cell_output[^\"]*\">.*?</pre>",
     "ThreadSanitizer's findings depend on thread scheduling: which access of a racing pair is "
     "reported first, pids, addresses, iteration and snapshot counts; the page's tables and "
     "outputs show them, its assertions check what must hold on every run"),
    ("*.html", r"\?v=[0-9a-f]{8}\b",
     "Sphinx adds a ?v=checksum to an asset URL only if the asset is already in the output "
     "folder: an incremental build has it for MyST-NB's CSS, a clean build does not"),
    ("searchindex.js", r".*", "built from the page text, which varies exactly where the entries above do"),
    ("_sources/*.ipynb", r'"outputs": \[\n.*?\n   \]',
     "a downloadable notebook's outputs are its page's outputs, compared in the page's HTML above "
     "(there the stamp's date and time, durations and the ThreadSanitizer runs vary; in the "
     "notebook a glued duration has no unit to match); its cells' sources are compared"),
]
# Also replaced: the checkout's absolute path (tracebacks of raises-exception
# cells show library file paths), which differs between the two build folders.


def _normalized(path, rel: str, checkout: str) -> bytes:
    import re
    from fnmatch import fnmatch

    data = path.read_bytes().replace(checkout.encode(), b"<checkout>")
    rules = [(rx, why) for glob, rx, why in NONDETERMINISTIC if fnmatch(rel, glob) or fnmatch(path.name, glob)]
    if not rules:
        return data
    text = data.decode("utf-8", errors="surrogateescape")
    for rx, _ in rules:
        text = re.sub(rx, "", text, flags=re.S)
    return text.encode("utf-8", errors="surrogateescape")


def _offline_prefix() -> list[str]:
    """`unshare -rn` (new user and network namespace, only loopback, brought up) if it works here."""
    import subprocess

    prefix = ["unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"]
    try:
        ok = subprocess.run([*prefix, "true"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return prefix if ok else []


def _checkout_files(root) -> list:
    """The files of this checkout (tracked and untracked, not ignored; without git, all but outputs)."""
    import subprocess

    try:
        out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root,
                             capture_output=True, check=True).stdout.decode()
        return [p for p in out.split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        skip = {"_build", "jupyter_execute", ".cache", ".nox", ".git", "__pycache__", ".pytest_cache"}
        return [p.relative_to(root).as_posix() for p in root.rglob("*")
                if p.is_file() and not skip & set(p.relative_to(root).parts)]


@pytest.mark.slow
@pytest.mark.site
def test_a_clean_offline_build_is_identical_to_the_site(site, tmp_path):

    clean = tmp_path / "clean"
    for rel in _checkout_files(ROOT):
        src = ROOT / rel
        if src.is_file():
            (clean / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, clean / rel)
    prefix = _offline_prefix()
    log = tmp_path / "network.log"
    guard = ROOT / "tests" / "offline"
    result = build(clean / "docs", timeout_cell=300, prefix=prefix, timeout=1200,
                   extra_env={"PYTHONPATH": f"{guard}:{clean}", "GATE_NET_LOG": str(log)})
    attempts = log.read_text().splitlines() if log.exists() else []
    how = "network namespace with only loopback (unshare -rn)" if prefix else "socket guard only (no unshare here)"
    record("offline", "build", result=f"{'passed' if result.ok else 'FAILED'} in a {how}; "
           f"{len(attempts)} outbound connection attempts")
    assert result.ok, result.output[-5000:]
    assert attempts == [], attempts

    other = clean / "docs" / "_build" / "html"
    ours = {p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file()}
    theirs = {p.relative_to(other).as_posix() for p in other.rglob("*") if p.is_file()}
    pairs = {rel: (_normalized(site / rel, rel, str(ROOT)), _normalized(other / rel, rel, str(clean)))
             for rel in ours & theirs}
    differing = sorted(rel for rel, (a, b) in pairs.items() if a != b)
    record("determinism", "html", result=f"{len(ours & theirs) - len(differing)} of "
           f"{len(ours | theirs)} files identical after {len(NONDETERMINISTIC)} documented exceptions")
    assert sorted(ours ^ theirs) == []
    assert differing == [], "\n\n".join(_first_difference(*pairs[rel], rel) for rel in differing[:3])


def _first_difference(ours: bytes, theirs: bytes, rel: str, width: int = 300) -> str:
    """Where two normalized files part, with some text either side, so a CI log names the cause."""
    at = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), min(len(ours), len(theirs)))
    lo = max(0, at - width)
    show = lambda data: repr(data[lo:at + width].decode("utf-8", errors="replace"))  # noqa: E731
    return f"{rel} differs at byte {at}:\n  site:  {show(ours)}\n  clean: {show(theirs)}"


def test_a_determinism_failure_shows_where_the_builds_part():
    assert _first_difference(b"abcXdef", b"abcYdef", "p.html", width=2) == (
        "p.html differs at byte 3:\n  site:  'bcXd'\n  clean: 'bcYd'")
    assert "at byte 3" in _first_difference(b"abc", b"abcd", "q.html")  # one is a prefix of the other
