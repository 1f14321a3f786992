"""Every system program the pages and tests run is installed by `nox` or named in the README.

A fresh Debian machine has Python and g++ and nothing else the site needs; CI's
machine may have more.  So the programs are found in the code itself
(`tools.prerequisites.programs_run`), and each must have its Debian package in
`tools.prerequisites.PACKAGES` (which `nox` installs when missing) and be named
in the README's one install line, or be an essential part of every Debian system.
"""

from __future__ import annotations

import re
from pathlib import Path

from tools import prerequisites as pre

ROOT = Path(__file__).resolve().parents[1]


def _readme_install_line() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    found = re.search(r"^sudo apt-get install -y --no-install-recommends ([^\n`]+)$", readme, re.M)
    assert found, "the README has no `sudo apt-get install -y --no-install-recommends ...` line"
    return found.group(1).split()


def test_every_program_run_is_installed_by_nox_or_essential():
    unknown = {prog: sorted(files) for prog, files in pre.programs_run(ROOT).items()
               if prog not in pre.PACKAGES and prog not in pre.ESSENTIAL}
    assert unknown == {}, (
        f"programs run by the project that neither nox installs (tools/prerequisites.py PACKAGES) "
        f"nor every Debian system has: {unknown}")


def test_the_scan_finds_the_programs_the_pages_are_known_to_need():
    # The control: the scan is not blind.  The allocator page runs g++ and dot, the
    # snippets page jq; if these stop being found, the scan is broken, not the project.
    found = pre.programs_run(ROOT)
    assert {"g++", "dot", "jq", "nm"} <= set(found), sorted(found)


def test_the_readme_names_every_package_before_its_first_command():
    readme = (ROOT / "README.md").read_text()
    named = _readme_install_line()
    assert sorted(named) == sorted(set(pre.PACKAGES.values())), (
        f"the README's install line names {named}; nox installs {sorted(set(pre.PACKAGES.values()))}")
    assert readme.index("--no-install-recommends " + " ".join(named)) < readme.index("nox -s docs"), (
        "the install line comes after the README's first command")


def test_an_unlisted_program_is_caught(tmp_path):
    (tmp_path / "explainers").mkdir()
    (tmp_path / "explainers" / "new.py").write_text(
        "import subprocess\nsubprocess.run(['convert', 'a.png', 'b.jpg'], check=True)\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(
        "```{code-cell} ipython3\n:tags: [hide-input]\nimport shutil\nshutil.which('ffmpeg')\n```\n")
    found = pre.programs_run(tmp_path)
    assert found == {"convert": {"explainers/new.py"}, "ffmpeg": {"docs/page.md"}}
    assert not set(found) & (set(pre.PACKAGES) | pre.ESSENTIAL)


def test_a_missing_program_names_its_package_and_the_install_line():
    packages = pre.missing_packages(pre.DOCS, path="/nonexistent")
    assert packages == ["g++", "binutils", "graphviz", "jq"]
    assert pre.install_line(packages) == "sudo apt-get install -y --no-install-recommends g++ binutils graphviz jq"
