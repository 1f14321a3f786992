"""Every page of the built site weighs at most 2 MB on a cold load.

The budget was 1.5 MB until the pages carried their checks folded in the HTML (every
assert still runs and is one click away): the allocator and precision pages now weigh
about 1.62 and 1.52 MB cold (webfont allowance included).

Over the site that `nox -s tests` just built: a page's HTML plus every local
stylesheet, script and image it names, plus an allowance for what the browser
fetches beyond those (the theme's icon webfont).
"""

from __future__ import annotations

import re

import pytest

#: What a browser fetches on top of the files a page names: the theme's icon webfont.
WEBFONT_ALLOWANCE = 250_000


@pytest.mark.site
def test_every_page_weighs_at_most_2_MB_cold(site):
    """HTML plus every local stylesheet, script and image it names (the browser figure is in bench/)."""
    heavy = {}
    for page in sorted(p for p in site.glob("*.html")):
        html = page.read_text(encoding="utf-8")
        total = len(html.encode())
        for ref in set(re.findall(r'(?:src|href)="([^"#?]+\.(?:css|js|png|svg|jpg|woff2?))[^"]*"', html)):
            path = (page.parent / ref).resolve()
            if path.is_file():
                total += path.stat().st_size
        if total + WEBFONT_ALLOWANCE > 2_000_000:
            heavy[page.name] = total
    assert heavy == {}, f"pages over 2 MB cold (bytes, before webfonts): {heavy}"
