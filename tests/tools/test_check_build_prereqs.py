"""`make setup` checks the compilers and the Python headers before it builds
fairseq-fixed's C++ extensions, and says what to install; the torch wheel
index is a Makefile variable."""
import os
import runpy
import subprocess
import sys
import sysconfig

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tools", "check_build_prereqs.py")
PYTHON_NAME = f"python{sys.version_info.major}.{sys.version_info.minor}"


@pytest.fixture
def check():
    return runpy.run_path(SCRIPT)


def run_check(env):
    return subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, env=env)


def test_passes_here():
    # this suite runs on fairseq's compiled extensions, so this machine can build them
    result = run_check(dict(os.environ))
    assert result.returncode == 0 and result.stderr == ""


def test_no_compiler_on_path_says_what_to_install(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "CXX")}
    env["PATH"] = str(tmp_path)  # nothing there: no gcc, g++, c++
    result = run_check(env)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    compilers = [sysconfig.get_config_var(name).split()[0] for name in ("CC", "CXX")]
    assert len(lines) == len(set(compilers))  # one line per missing compiler
    for line, compiler in zip(lines, compilers):
        assert line.startswith("error: make setup compiles fairseq's C++ extensions, but the C")
        assert f"'{compiler}'" in line and "is not on PATH" in line
        assert "sudo apt-get install build-essential" in line


def test_a_compiler_that_cannot_compile_is_named(tmp_path):
    broken = tmp_path / "broken-c++"
    broken.write_text("#!/bin/sh\necho 'cc1plus: fatal error: not installed' >&2\nexit 1\n")
    broken.chmod(0o755)
    result = run_check(dict(os.environ, CXX=str(broken)))
    assert result.returncode == 1
    assert f"'{broken}' cannot compile a C++ file that includes Python.h (cc1plus: fatal error: not installed)" in result.stderr
    assert "build-essential" in result.stderr and f"{PYTHON_NAME}-dev" in result.stderr


def test_missing_python_headers_say_which_package(check, tmp_path, monkeypatch):
    paths = dict(sysconfig.get_paths(), include=str(tmp_path))
    monkeypatch.setattr(check["sysconfig"], "get_paths", lambda: paths)
    problems = check["problems"]()
    assert problems == [f"Python.h is not in {tmp_path} ({PYTHON_NAME}'s include directory): install the Python headers "
                        f"(Debian/Ubuntu: sudo apt-get install {PYTHON_NAME}-dev; Fedora: sudo dnf install {PYTHON_NAME}-devel)"]


def make_setup_commands(*variables):
    """The commands `make setup` would run from scratch (-B: as if nothing were built; -n: print only)."""
    result = subprocess.run(["make", "-n", "-B", "setup", *variables], capture_output=True, text=True, cwd=ROOT,
                            check=True)
    return result.stdout.splitlines()


def test_make_setup_checks_before_it_downloads_or_builds():
    commands = make_setup_commands()
    check = next(i for i, c in enumerate(commands) if "tools/check_build_prereqs.py" in c)
    venv = next(i for i, c in enumerate(commands) if " -m venv " in c)
    fairseq = next(i for i, c in enumerate(commands) if "fairseq-fixed==" in c)
    assert check < venv < fairseq
    assert '-c "import fairseq" 2>/dev/null ||' in commands[check]  # not needed once fairseq is installed


def test_torch_index_is_a_makefile_variable():
    torch_install = [c for c in make_setup_commands() if " torch==" in c]
    assert len(torch_install) == 1 and "--index-url" not in torch_install[0]  # default: pip's own configuration
    torch_install = [c for c in make_setup_commands("TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu")
                     if " torch==" in c]
    assert len(torch_install) == 1 and "--index-url https://download.pytorch.org/whl/cpu torch==" in torch_install[0]
