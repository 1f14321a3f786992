"""The build's UTC clock (docs/_ext/utc_clock.py): the execution table shows UTC for a page
served from the cache and a page executed alike, whatever the machine's time zone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _utc_offset(zone: str) -> float:
    """The zone's offset from UTC now, in hours (New York's changes with daylight saving,
    Kolkata's is not a whole hour)."""
    return datetime.now(ZoneInfo(zone)).utcoffset().total_seconds() / 3600


def _offsets(zone: str) -> list[dict[str, float]]:
    """The table's offsets from UTC in ``zone``, with the UTC clock off, then on."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import utc_clock; "
            "print(json.dumps([utc_clock.table_offsets(False), utc_clock.table_offsets(True)]))")
    out = subprocess.run([sys.executable, "-c", code, str(DOCS / "_ext")], check=True, text=True,
                         capture_output=True, env={**os.environ, "TZ": zone}).stdout
    return json.loads(out)


@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Kolkata", "UTC"])
def test_every_row_is_utc_with_the_clock_on_and_not_without(zone):
    off, on = _offsets(zone)
    # Without it, the failure the extension exists for: a cached row shows UTC, an executed
    # one local time.
    assert off == {"cached": 0, "executed": _utc_offset(zone)}
    assert on == {"cached": 0, "executed": 0}


def test_the_build_loads_it():
    assert "utc_clock" in (DOCS / "conf.py").read_text()
