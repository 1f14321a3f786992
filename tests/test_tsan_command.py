"""Slow: tsan_command.py's two shell lines, run as a reader would run them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from explainers.allocator.tsan_command import main, set_torch, torch_folder

pytestmark = pytest.mark.slow

RACE = """\
#include <thread>
int counter = 0;
int main() {
  std::thread t([] { counter++; });
  counter++;
  t.join();
  return counter == 2 ? 0 : 1;
}
"""


def test_run_compiles_a_racy_program_that_tsan_reports(tmp_path, monkeypatch):
    (tmp_path / "race.cpp").write_text(RACE)
    monkeypatch.chdir(tmp_path)
    assert main(["race.cpp", "--run"]) == 0
    proc = subprocess.run(["./race"], cwd=tmp_path, capture_output=True, text=True, check=False,
                          env=dict(os.environ, TSAN_OPTIONS="halt_on_error=0"))
    assert proc.returncode == 66, proc.stderr  # TSAN's exit code when it reported something
    assert "WARNING: ThreadSanitizer: data race" in proc.stderr
    assert "race.cpp:" in proc.stderr  # -g1's line tables name the racing lines


def test_the_export_line_finds_the_torch_of_the_interpreter_named(tmp_path):
    # The line names the interpreter, found on PATH as the reader's shell would find it.
    python = Path(sys.executable)
    env = dict(os.environ, PATH=f"{python.parent}{os.pathsep}{os.environ['PATH']}")
    script = f'{set_torch(python.name)}\nprintf "%s" "$TORCH"'
    proc = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, check=True)
    assert Path(proc.stdout) == torch_folder()
    assert set_torch() == set_torch(python.name)


def test_bad_arguments_print_the_usage(capsys):
    assert main(["race.cpp", "other.cpp"]) == 2
    assert capsys.readouterr().err.startswith("usage: python tsan_command.py FILE.cpp")
