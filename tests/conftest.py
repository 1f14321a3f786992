"""Shared fixtures.  Site checks read the built HTML that `nox -s tests` just made."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "docs" / "_build" / "html"


@pytest.fixture(scope="session")
def site() -> Path:
    if not (SITE / "index.html").is_file():
        pytest.fail(f"no built site at {SITE}: run `nox -s docs` first (nox -s tests does)")
    return SITE
