"""Slow: tsan_command.py's two shell lines, run as a reader would run them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from explainers.allocator.runner import RACE_CPP as RACE
from explainers.allocator.tsan_command import FLAGS, main, set_torch, torch_folder

pytestmark = pytest.mark.slow


def test_run_compiles_a_racy_program_that_tsan_reports(tmp_path, monkeypatch):
    (tmp_path / "race.cpp").write_text(RACE)
    monkeypatch.chdir(tmp_path)
    assert main(["race.cpp", "--run"]) == 0
    proc = subprocess.run(["./race"], cwd=tmp_path, capture_output=True, text=True, check=False,
                          env=dict(os.environ, TSAN_OPTIONS="halt_on_error=0"))
    assert proc.returncode == 66, proc.stderr  # TSAN's exit code when it reported something
    assert "WARNING: ThreadSanitizer: data race" in proc.stderr
    assert "race.cpp:" in proc.stderr  # -g1's line tables name the racing lines


# A program that uses ATen: torch's headers need C++20 (ATen/ATen.h has an #error under
# C++17), and the operators live in libtorch_cpu, not in libc10.
ATEN = """\
#include <ATen/ATen.h>
#include <iostream>
int main() {
  at::Tensor a = at::ones({2, 3});
  at::Tensor b = at::add(a, at::arange(6).view({2, 3}));
  std::cout << b.sum().item<float>() << std::endl;
  return 0;
}
"""


def _printed_lines(tmp_path, source: str) -> tuple[str, str]:
    """The two lines ``python tsan_command.py SOURCE`` prints, run by this interpreter."""
    script = Path(__file__).resolve().parents[1] / "explainers" / "allocator" / "tsan_command.py"
    proc = subprocess.run([sys.executable, "-I", str(script), source], cwd=tmp_path,
                          capture_output=True, text=True, check=True)
    set_line, gxx_line = proc.stdout.splitlines()
    return set_line, gxx_line


def _shell_env() -> dict[str, str]:
    # A PATH on which `python` is not this interpreter: the printed line must not depend on it.
    assert Path(sys.executable).parent not in (Path("/usr/bin"), Path("/bin"))
    return {k: v for k, v in os.environ.items() if k not in ("TORCH", "PYTHONPATH")} | {
        "PATH": "/usr/bin:/bin"}


def test_the_printed_lines_compile_a_racy_program_that_tsan_reports(tmp_path):
    # The two printed lines, run in a shell whose `python` is not this interpreter, then ./race.
    (tmp_path / "race.cpp").write_text(RACE)
    set_line, gxx_line = _printed_lines(tmp_path, "race.cpp")
    proc = subprocess.run(["bash", "-e", "-c", f"{set_line}\n{gxx_line}\n./race"], cwd=tmp_path,
                          env=_shell_env() | {"TSAN_OPTIONS": "halt_on_error=0"},
                          capture_output=True, text=True, check=False, timeout=900)
    assert proc.returncode == 66, proc.stderr[-3000:]  # TSAN's exit code when it reported something
    assert "WARNING: ThreadSanitizer: data race" in proc.stderr
    assert "race.cpp:" in proc.stderr  # -g1's line tables name the racing lines


def test_the_printed_lines_compile_and_run_an_aten_program(tmp_path):
    (tmp_path / "aten.cpp").write_text(ATEN)
    set_line, gxx_line = _printed_lines(tmp_path, "aten.cpp")
    assert "-std=c++20" in gxx_line.split()
    linked = gxx_line.replace(" -lc10 ", " -ltorch_cpu -lc10 ")
    assert linked != gxx_line
    proc = subprocess.run(["bash", "-e", "-c", f"{set_line}\n{linked}\n./aten"], cwd=tmp_path,
                          env=_shell_env() | {"TSAN_OPTIONS": "halt_on_error=1"},
                          capture_output=True, text=True, check=False, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == "21\n"  # 6 ones plus 0 + 1 + ... + 5


def test_aten_does_not_compile_as_cxx17(tmp_path):
    # Why FLAGS says C++20: the same program, the standard switched back, fails in the headers.
    (tmp_path / "aten.cpp").write_text(ATEN)
    flags = [f for f in FLAGS if not f.startswith("-std=")]
    proc = subprocess.run(["g++", "-std=c++17", *flags, "-fsyntax-only", f"-I{torch_folder() / 'include'}",
                           "aten.cpp"], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert proc.returncode != 0
    assert "C++20 or later compatible compiler is required to use ATen" in proc.stderr


def test_the_set_line_asks_the_interpreter_that_ran_the_script(tmp_path):
    set_line, _ = _printed_lines(tmp_path, "race.cpp")
    assert set_line == set_torch(sys.executable)
    proc = subprocess.run(["bash", "-e", "-c", f'{set_line}\nprintf "%s" "$TORCH"'], cwd=tmp_path,
                          env=_shell_env(), capture_output=True, text=True, check=True)
    assert Path(proc.stdout) == torch_folder()


def test_the_set_line_fails_loudly_without_torch(tmp_path):
    # A Python without torch: the system's python3 run in isolated mode (no user site).
    bare = tmp_path / "bare-python"
    bare.write_text('#!/bin/sh\nexec /usr/bin/python3 -I -S "$@"\n')
    bare.chmod(0o755)
    script = f'{set_torch(str(bare))}\necho "status $?"; printf "[%s]" "${{TORCH-unset}}"'
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=_shell_env(),
                          capture_output=True, text=True, check=False)
    assert "ModuleNotFoundError: No module named 'torch'" in proc.stderr
    assert proc.stdout.startswith("status 1\n")
    # Not exported: a child shell sees no TORCH.
    child = subprocess.run(["bash", "-c", f'{set_torch(str(bare))}; bash -c \'printf "%s" "${{TORCH-unset}}"\''],
                           cwd=tmp_path, env=_shell_env(), capture_output=True, text=True, check=False)
    assert child.stdout == "unset"


def test_a_failed_set_line_leaves_torch_as_it_was(tmp_path):
    # TORCH="$(...)" would set TORCH to "" on failure, and a following g++ would search "/include".
    bare = tmp_path / "bare-python"
    bare.write_text('#!/bin/sh\nexec /usr/bin/python3 -I -S "$@"\n')
    bare.chmod(0o755)
    script = f'{set_torch(str(bare))}\necho "status $?"; printf "[%s]" "$TORCH"'
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=_shell_env() | {"TORCH": "/before"},
                          capture_output=True, text=True, check=False)
    assert proc.stdout == "status 1\n[/before]"
    naive = f'TORCH="$({bare} -c "import torch")"; printf "[%s]" "$TORCH"'
    proc = subprocess.run(["bash", "-c", naive], cwd=tmp_path, env=_shell_env() | {"TORCH": "/before"},
                          capture_output=True, text=True, check=False)
    assert proc.stdout == "[]"  # the plain assignment is what the torch_dir step avoids


def test_a_torch_folder_in_the_current_directory_does_not_change_torch(tmp_path):
    shadow = tmp_path / "torch"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("")
    set_line, _ = _printed_lines(tmp_path, "race.cpp")
    proc = subprocess.run(["bash", "-e", "-c", f'{set_line}\nprintf "%s" "$TORCH"'], cwd=tmp_path,
                          env=_shell_env(), capture_output=True, text=True, check=True)
    assert Path(proc.stdout) == torch_folder()
    # The cause: without -I, `python -c` puts the current directory first and imports the shadow.
    plain = set_line.replace(" -I -c ", " -c ")
    assert plain != set_line
    proc = subprocess.run(["bash", "-e", "-c", f'{plain}\nprintf "%s" "$TORCH"'], cwd=tmp_path,
                          env=_shell_env(), capture_output=True, text=True, check=True)
    assert Path(proc.stdout) == shadow


def test_the_script_refuses_to_print_without_torch(tmp_path):
    script = Path(__file__).resolve().parents[1] / "explainers" / "allocator" / "tsan_command.py"
    proc = subprocess.run(["/usr/bin/python3", "-I", "-S", str(script), "race.cpp"], cwd=tmp_path,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 1 and proc.stdout == ""
    assert "torch is not installed in this Python" in proc.stderr


def test_bad_arguments_print_the_usage(capsys):
    assert main(["race.cpp", "other.cpp"]) == 2
    assert capsys.readouterr().err.startswith("usage: python tsan_command.py FILE.cpp")


def _shadowed_copy(tmp_path) -> Path:
    """tsan_command.py saved alone in a folder that also holds a ``torch/`` package, and a
    ``g++`` on ``PATH`` that only prints the ``TORCH`` it was run with."""
    script = Path(__file__).resolve().parents[1] / "explainers" / "allocator" / "tsan_command.py"
    (tmp_path / "tsan_command.py").write_text(script.read_text(encoding="utf-8"))
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "g++").write_text('#!/bin/sh\nprintf "TORCH=%s" "$TORCH"\n')
    (tmp_path / "bin" / "g++").chmod(0o755)
    return tmp_path / "tsan_command.py"


def test_a_local_torch_folder_changes_nothing_for_run_and_the_missing_torch_check(tmp_path):
    copy = _shadowed_copy(tmp_path)
    # Run as a reader runs it (no -I): the script's folder is sys.path[0], and PYTHONPATH names it too.
    env = _shell_env() | {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "PYTHONPATH": str(tmp_path)}
    run = subprocess.run([sys.executable, copy.name, "race.cpp", "--run"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout == f"TORCH={torch_folder()}"
    printed = subprocess.run([sys.executable, copy.name, "race.cpp"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, check=True).stdout.splitlines()[0]
    shell = subprocess.run(["bash", "-e", "-c", f'{printed}\nprintf "%s" "$TORCH"'], cwd=tmp_path, env=env,
                           capture_output=True, text=True, check=True)
    assert shell.stdout == str(torch_folder())  # --run and the printed line name the same torch
    # A Python without torch still refuses, the local torch/ folder notwithstanding.
    bare = subprocess.run(["/usr/bin/python3", "-S", copy.name, "race.cpp"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, check=False)
    assert (bare.returncode, bare.stdout) == (1, ""), bare.stdout
    assert "torch is not installed in this Python" in bare.stderr
    # The cause: the same find_spec in this (non-isolated) interpreter finds the local folder.
    plain = subprocess.run([sys.executable, "-c", "import importlib.util as u; print(u.find_spec('torch').origin)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert Path(plain.stdout.strip()) == tmp_path / "torch" / "__init__.py"


def test_torch_folder_names_a_python_without_torch():
    with pytest.raises(ModuleNotFoundError, match="torch is not installed in this Python"):
        torch_folder("/usr/bin/python3")
