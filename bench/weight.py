"""Page weight: the bytes a browser transfers to load each page with an empty cache.

A local ``http.server`` serves the built site under the path it is published
at (the canonical link's path, ``/torch-explainers/``: the 404 page's links are
absolute under it, as GitHub Pages needs) and counts every byte it writes
(headers included), per request; headless Chromium (Playwright, Debian's
``/usr/bin/chromium``) loads each page in a fresh browser context, so nothing
is cached, and waits until the network is idle.  Any request to another host
is counted as external and aborted, so the measurement itself stays offline.
``http.server`` does not compress; the gzip column is what a static host that
compresses text would send for the same files.
"""

from __future__ import annotations

import gzip
import http.server
import os
import re
import shutil
import threading
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from urllib.parse import unquote, urlparse

__all__ = ["PageWeight", "find_chromium", "measure_site", "site_prefix"]

_TEXT = (".html", ".css", ".js", ".svg", ".json", ".txt", ".map")


@dataclass
class PageWeight:
    page: str
    bytes: int  # over the wire from http.server, headers included
    gzip_bytes: int  # the same bodies gzip-compressed where they are text
    requests: int
    external: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # local requests that did not return 200
    largest: list[tuple[str, int]] = field(default_factory=list)  # the heaviest requests, bytes


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def site_prefix(site: Path) -> str:
    """The path the built ``site`` is published under, from its index page's canonical link (``/`` if none).

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "index.html").write_text('<link rel="canonical" href="https://x.github.io/proj/index.html" />')
    >>> site_prefix(d)
    '/proj/'
    >>> _ = (d / "index.html").write_text("<html></html>")
    >>> site_prefix(d)
    '/'
    """
    index = site / "index.html"
    m = re.search(r'<link rel="canonical" href="([^"]+)"', index.read_text(errors="replace")) if index.is_file() else None
    return urlparse(m[1]).path.rsplit("/", 1)[0] + "/" if m else "/"


class _Counter:
    def __init__(self, raw):
        self.raw = raw
        self.n = 0

    def write(self, b):
        self.n += len(b)
        return self.raw.write(b)

    def __getattr__(self, name):
        return getattr(self.raw, name)


class _Handler(http.server.SimpleHTTPRequestHandler):
    log: list  # (path, status, bytes), shared per server
    prefix: str  # the published path: requests under it map to the site's root

    def translate_path(self, path):
        if path.startswith(self.prefix):
            path = "/" + path[len(self.prefix):]
        return super().translate_path(path)

    def setup(self):
        super().setup()
        self.wfile = _Counter(self.wfile)

    def handle_one_request(self):
        before = self.wfile.n
        super().handle_one_request()
        if getattr(self, "path", None):
            self.log.append((self.path, getattr(self, "_status", 0), self.wfile.n - before))

    def send_response(self, code, message=None):
        self._status = code
        super().send_response(code, message)

    def log_message(self, *args):  # quiet
        pass


def _gzip_size(site: Path, prefix: str, url_path: str, raw: int) -> int:
    path = site / unquote(urlparse(url_path).path).removeprefix(prefix).lstrip("/")
    if path.is_dir():
        path = path / "index.html"
    if path.suffix in _TEXT and path.is_file():
        return len(gzip.compress(path.read_bytes(), 6))
    return raw


def measure_site(site: Path, pages: list[str], chromium: str | None = None) -> list[PageWeight]:
    """Weigh each page (``"render"`` -> ``render.html``) of the built ``site``."""
    from playwright.sync_api import sync_playwright

    chromium = chromium or find_chromium()
    if chromium is None:
        raise RuntimeError("page weight needs Chromium: apt-get install -y chromium")
    log: list = []
    prefix = site_prefix(site)
    handler = type("H", (_Handler,), {"log": log, "prefix": prefix})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    results = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=chromium,
                args=["--no-sandbox", "--disable-background-networking", "--headless"],
            )
            for page_name in pages:
                context = browser.new_context()
                external: list[str] = []

                def route(r, external=external):
                    if r.request.url.startswith(base):
                        r.continue_()
                    else:
                        external.append(r.request.url)
                        r.abort()

                context.route("**/*", route)
                page = context.new_page()
                log.clear()
                page.goto(f"{base}{prefix}{page_name}.html", wait_until="networkidle")
                context.close()
                entries = list(log)
                results.append(PageWeight(
                    page=page_name,
                    bytes=sum(n for _, _, n in entries),
                    gzip_bytes=sum(_gzip_size(site, prefix, u, n) for u, s, n in entries),
                    requests=len(entries),
                    external=external,
                    failed=[u for u, s, _ in entries if s != 200],
                    largest=sorted(((urlparse(u).path.removeprefix(prefix), n) for u, _, n in entries), key=lambda e: -e[1])[:3],
                ))
            browser.close()
    finally:
        server.shutdown()
        server.server_close()
    return results


if __name__ == "__main__":  # python -m bench.weight docs/_build/html render index
    import sys

    for w in measure_site(Path(sys.argv[1]), sys.argv[2:]):
        print(f"{w.page}: {w.bytes / 1e6:.2f} MB ({w.gzip_bytes / 1e6:.2f} MB gzip), "
              f"{w.requests} requests, {len(w.external)} external, failed={w.failed}")
    os._exit(0)
