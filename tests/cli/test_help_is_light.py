"""Every command line of the project answers ``--help`` and usage errors without importing torch, fairseq,
spaCy, LightGBM, Optuna or matplotlib (``fairseq_plugins/command_line.py``): setup.py's console scripts, run
as pip's script runs them, and every ``python -m`` command of fairseq_plugins/ and data_prep/. A module with a
``__main__`` that no list here names fails, so a new command line is checked from its first commit. What the
commands import is read from ``python -X importtime``, the interpreter's own record of every import."""
import os
import re
import runpy
import subprocess
import sys
from unittest import mock

import pytest

from fairseq_plugins import command_line

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEAVY = {"torch", "fairseq", "fairseq_cli", "spacy", "lightgbm", "optuna", "matplotlib"}
# modules with a __main__ that are no user's command line
NOT_COMMANDS = {"fairseq_plugins.cli._rank_main": "a distributed rank, started by the launcher"}


def console_scripts():
    """setup.py's console_scripts entry points: (name, module, function)."""
    with mock.patch("setuptools.setup") as setup:
        runpy.run_path(os.path.join(ROOT, "setup.py"), run_name="__main__")
    entries = setup.call_args.kwargs["entry_points"]["console_scripts"]
    return [re.fullmatch(r"\s*(\S+)\s*=\s*([\w.]+):(\w+)\s*", entry).groups() for entry in entries]


def main_modules():
    """Every module of fairseq_plugins/ and data_prep/ that runs as a program (``-m``)."""
    found = set()
    for package in ("fairseq_plugins", "data_prep"):
        for directory, _, files in os.walk(os.path.join(ROOT, package)):
            for name in files:
                path = os.path.join(directory, name)
                if name.endswith(".py") and re.search(r"^if __name__ == .__main__.:", open(path, encoding="utf-8").read(), re.M):
                    module = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    found.add(module[:-len(".__main__")] if module.endswith(".__main__") else module)
    return found


DATA_PREP = sorted(m for m in main_modules() if m.startswith("data_prep."))
MODULES = sorted({m for m in command_line.LIGHT_MODULES if not m.endswith(".__main__")} | set(DATA_PREP))
# (command line, expected exit status): --help of every command, a subcommand's --help, usage errors
RUNS = ([(["-m", module, "--help"], 0) for module in MODULES]
        + [(["-m", "fairseq_plugins.search", command, "--help"], 0) for command in ("sample", "evaluate", "collect", "rank", "evolve", "pareto")]
        + [(["-m", "fairseq_plugins.search", "sample"], 2),  # --space missing
           (["-m", "fairseq_plugins.search", "sample", "--space", "s.yaml", "-n", "0"], 2),
           (["-m", "fairseq_plugins.cli.model_costs", "--vocab", "0"], 2),
           (["-m", "fairseq_plugins.cli.demo", "--max-update", "0"], 2),
           (["-m", "data_prep.multi30k", "--stop-after", "nothing"], 2),
           ([os.path.join("data_prep", "syntax_hints.py"), "--help"], 0)])  # run as a script, as the recipes do


def imported(stderr: str) -> set:
    """The top-level packages ``-X importtime`` reports imported."""
    return {line.split("|")[-1].strip().split(".")[0] for line in stderr.splitlines() if line.startswith("import time:")}


def run(arguments, cwd=ROOT):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-X", "importtime", *arguments], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_every_command_line_is_checked():
    assert set(DATA_PREP) and "fairseq_plugins.search" in MODULES
    unchecked = main_modules() - set(MODULES) - set(NOT_COMMANDS)
    assert not unchecked, f"add to fairseq_plugins.command_line.LIGHT_MODULES (and make --help light): {sorted(unchecked)}"
    for name, module, _ in console_scripts():
        assert name.startswith(command_line.CONSOLE_SCRIPT_PREFIX), name
        assert module in command_line.LIGHT_MODULES or f"{module}.__main__" in command_line.LIGHT_MODULES \
            or module.rsplit(".", 1)[0] in command_line.LIGHT_MODULES, module


@pytest.mark.parametrize("arguments, status", RUNS, ids=[" ".join(a) for a, _ in RUNS])
def test_help_and_usage_errors_import_nothing_heavy(arguments, status):
    result = run(arguments)
    assert result.returncode == status, result.stderr[-3000:]
    if status == 0:
        assert "usage:" in result.stdout
    else:
        assert "error:" in result.stderr.splitlines()[-1]
    assert not imported(result.stderr) & HEAVY, sorted(imported(result.stderr) & HEAVY)


@pytest.mark.parametrize("name, module, function", console_scripts(), ids=[s[0] for s in console_scripts()])
def test_console_scripts_help_imports_nothing_heavy(tmp_path, name, module, function):
    """The script pip writes for an entry point (the same lines), run by its path."""
    script = tmp_path / name
    script.write_text(f"import re\nimport sys\nfrom {module} import {function}\nif __name__ == '__main__':\n"
                      f"    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n    sys.exit({function}())\n")
    result = run([str(script), "--help"], cwd=tmp_path)
    assert result.returncode == 0 and "usage:" in result.stdout, result.stderr[-3000:]
    assert not imported(result.stderr) & HEAVY, sorted(imported(result.stderr) & HEAVY)


def test_a_light_command_registers_before_it_uses_fairseq():
    """Past its options, a light command registers the presets (here: counts one) and logs nothing on stdout."""
    result = run(["-m", "fairseq_plugins.cli.model_costs", "--arch", "cosformer_iwslt_de_en"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"^\| `cosformer_iwslt_de_en` \| encoder-decoder \| [0-9,]+ \|", result.stdout, re.M), result.stdout
    assert "torch" in imported(result.stderr)


def test_other_processes_register_on_import():
    """fairseq's --user-dir, a script, the hub: importing the package registers everything, as before."""
    code = ("import fairseq_plugins; from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY; "
            "from fairseq.tasks import TASK_REGISTRY; "
            "print('cosformer_iwslt_de_en' in ARCH_MODEL_REGISTRY, 'mixed_supertransformer' in MODEL_REGISTRY, "
            "'translation_with_syntax' in TASK_REGISTRY)")
    result = run(["-c", code])
    assert result.returncode == 0 and result.stdout.split() == ["True", "True", "True"], result.stderr[-3000:]


@pytest.mark.parametrize("orig_argv, module", [
    (["python", "-m", "fairseq_plugins.search", "--help"], "fairseq_plugins.search"),
    (["python", "-X", "importtime", "-W", "ignore", "-m", "data_prep.multi30k"], "data_prep.multi30k"),
    (["python", "-Bm", "fairseq_plugins.cli.demo"], "fairseq_plugins.cli.demo"),
    (["python", "-mfairseq_plugins.complexity"], "fairseq_plugins.complexity"),
    (["python", "-Wignore", "-u", "-m", "x"], "x"),
    (["python", "-c", "import fairseq_plugins", "-m", "x"], None),
    (["python", "script.py", "-m", "x"], None),
    (["python"], None),
])
def test_the_module_a_python_command_runs(orig_argv, module):
    assert command_line.module_run(orig_argv) == module


def test_data_prep_logs_in_the_same_format():
    from data_prep import common

    assert (common.LOG_FORMAT, common.LOG_DATE_FORMAT) == (command_line.LOG_FORMAT, command_line.LOG_DATE_FORMAT)
