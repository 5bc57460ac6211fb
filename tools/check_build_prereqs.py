"""Check, before ``make setup`` builds fairseq-fixed, that its C++ extensions
can be compiled with this interpreter: the compilers setuptools will call and
the Python headers. Prints what to install and exits 1 otherwise, instead of
a compiler error deep inside pip's build log minutes later.

    python3.11 tools/check_build_prereqs.py
"""
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile

PYTHON = f"python{sys.version_info.major}.{sys.version_info.minor}"
INSTALL_COMPILER = ("install a C/C++ compiler (Debian/Ubuntu: sudo apt-get install build-essential; "
                    "Fedora: sudo dnf install gcc-c++; macOS: xcode-select --install)")
INSTALL_HEADERS = (f"install the Python headers (Debian/Ubuntu: sudo apt-get install {PYTHON}-dev; "
                   f"Fedora: sudo dnf install {PYTHON}-devel)")


def configured_compiler(variable: str) -> list:
    """The command setuptools compiles with: $CC / $CXX, else what the interpreter was built with."""
    return shlex.split(os.environ.get(variable) or sysconfig.get_config_var(variable) or "")


def problems() -> list:
    found = []
    compilers = {name: configured_compiler(name) for name in ("CC", "CXX")}
    for name, command in compilers.items():
        if not command or shutil.which(command[0]) is None:
            program = command[0] if command else "(none configured)"
            found.append(f"the {'C++' if name == 'CXX' else 'C'} compiler '{program}' (${name} or {PYTHON}'s "
                         f"sysconfig {name}) is not on PATH: {INSTALL_COMPILER}")
    include = sysconfig.get_paths()["include"]
    if not os.path.isfile(os.path.join(include, "Python.h")):
        found.append(f"Python.h is not in {include} ({PYTHON}'s include directory): {INSTALL_HEADERS}")
    if found:
        return found
    # Both exist: compile a C++ file that includes Python.h, as the extension build will
    # (catches e.g. gcc without g++'s cc1plus, or headers of another Python version).
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "check.cpp")
        with open(source, "w") as f:
            f.write("#include <Python.h>\n#include <vector>\nint main() { std::vector<int> v{1}; return Py_IsInitialized() + v[0]; }\n")
        command = compilers["CXX"] + ["-fsyntax-only", "-I", include, source]
        result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        first_error = next((line for line in (result.stderr + result.stdout).splitlines() if line.strip()), "no output")
        found.append(f"'{' '.join(compilers['CXX'])}' cannot compile a C++ file that includes Python.h "
                     f"({first_error.strip()}): {INSTALL_COMPILER}; {INSTALL_HEADERS}")
    return found


def main() -> int:
    found = problems()
    for problem in found:
        print(f"error: make setup compiles fairseq's C++ extensions, but {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
