"""The supported torch releases: one list, newest first, and library calls under each one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from explainers.releases import (
    PRIMARY,
    SUPPORTED,
    ReleaseNotProvisioned,
    env_python,
    release_of,
    run_under,
)
from explainers.versions import DIFFERENCES, executed_pages, matrix, read_records

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _key(release: str) -> tuple[int, ...]:
    return tuple(int(x) for x in release.split("."))


def test_releases_are_listed_newest_first_and_the_newest_is_primary():
    assert len(SUPPORTED) == len(set(SUPPORTED)) >= 2
    assert all(re.fullmatch(r"\d+\.\d+\.\d+", r) for r in SUPPORTED)
    assert list(SUPPORTED) == sorted(SUPPORTED, key=_key, reverse=True)
    assert SUPPORTED[0] == PRIMARY


def test_this_torch_is_a_supported_release():
    assert release_of(torch.__version__) in SUPPORTED


@pytest.mark.slow
@pytest.mark.parametrize("release", SUPPORTED)
def test_run_under_calls_the_library_in_that_release(release):
    if not env_python(release).exists():
        pytest.skip(f"torch {release} has no environment here (nox -s tests creates every one)")
    env = run_under(release, "explainers.page.stamp:environment")
    assert env["torch"].split("+")[0] == release


def test_run_under_says_what_is_wrong(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="not a supported torch release"):
        run_under("1.0.0", "explainers.page.stamp:environment")
    with pytest.raises(ValueError, match="explainers.<module>:<function>"):
        run_under(PRIMARY, "subprocess:run")
    monkeypatch.setenv("TORCH_EXPLAINERS_CACHE", str(tmp_path))
    with pytest.raises(ReleaseNotProvisioned, match=f"torch {PRIMARY} has no environment"):
        run_under(PRIMARY, "explainers.page.stamp:environment")


def test_every_listed_difference_names_a_section_that_exists():
    labels = {m for p in DOCS.glob("*.md") for m in re.findall(r"^\(([\w-]+)\)=$", p.read_text(), re.M)}
    for d in DIFFERENCES:
        assert (DOCS / f"{d.page}.md").is_file(), d
        assert d.label in labels, f"{d.label}: no such section label in docs/"
        assert f"({d.label})=" in (DOCS / f"{d.page}.md").read_text(), f"{d.label} is not on {d.page}"


def test_the_matrix_reports_each_release_from_its_record(tmp_path):
    (tmp_path / "2.14.1").mkdir()
    (tmp_path / "2.14.1" / "record.json").write_text('{"torch": "2.14.1", "pages": {"a": true, "b": false}}')
    records = read_records(tmp_path)
    rows = matrix(["a", "b", "c"], records, ("2.15.0", "2.14.1"), "2.15.0", executed=["a", "b"])
    assert [r["2.14.1"] for r in rows] == ["claims held", "FAILED", "not executed"]
    assert [r["2.15.0"] for r in rows] == ["claims held", "claims held", "not executed"]
    assert matrix(["a"], records, ("2.15.0", "2.14.1"), "2.15.0", built=("2.15.0",),
                  executed=["a"])[0]["2.14.1"] == "not built"
    with pytest.raises(TypeError, match="executed="):
        matrix(["a"], records, ("2.15.0", "2.14.1"), "2.15.0")

    (tmp_path / "2.14.1" / "record.json").write_text('{"torch": "2.14.1"}')
    with pytest.raises(ValueError, match="not a release record"):
        read_records(tmp_path)


def test_executed_pages_are_the_pages_with_code_that_conf_does_not_exclude():
    pages = executed_pages(DOCS)
    assert "versions" in pages and "render" in pages and "index" not in pages


def _releases_in_child(env: dict[str, str], code: str) -> str:
    import os
    import subprocess
    import sys

    full = {k: v for k, v in os.environ.items() if k != "TORCH_EXPLAINERS_CANDIDATE"}
    full.update({"PYTHONPATH": str(Path(__file__).resolve().parents[1]), **env})
    proc = subprocess.run([sys.executable, "-c", "from explainers import releases as r\n" + code],
                          env=full, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_a_candidate_joins_the_supported_releases_of_its_process_only():
    code = "print(*r.SUPPORTED, r.PRIMARY, r.env_python('2.99.0').parent.parent.name)"
    assert _releases_in_child({"TORCH_EXPLAINERS_CANDIDATE": "2.99.0"}, code).split() == [
        "2.99.0", *SUPPORTED, PRIMARY, "env-2.99.0"]
    # An older candidate takes its place by version; the published release stays the primary.
    assert _releases_in_child({"TORCH_EXPLAINERS_CANDIDATE": "2.0.0"}, "print(*r.SUPPORTED, r.PRIMARY)").split() == [
        *SUPPORTED, "2.0.0", PRIMARY]
    # Without the variable, the candidate is no release at all.
    assert _releases_in_child({}, "import sys\ntry:\n    r.env_python('2.99.0')\nexcept ValueError as e:\n"
                                  "    print(e)") == (
        f"'2.99.0' is not a supported torch release; supported: {', '.join(SUPPORTED)}")


def test_check_each_release_names_every_release_it_fails_on_and_what_each_did():
    from explainers.releases import check_each_release

    check_each_release("positive", {"2.15.0": 1, "2.14.1": None}, lambda rel, v: v > 0)  # None: not built here
    with pytest.raises(AssertionError) as failed:
        check_each_release("positive", {"2.16.0": -1, "2.15.0": 1, "2.14.1": -2}, lambda rel, v: v > 0)
    assert str(failed.value) == ("positive [fails on torch 2.16.0, 2.14.1; seen: torch 2.16.0: -1; "
                                 "torch 2.15.0: 1; torch 2.14.1: -2]")
