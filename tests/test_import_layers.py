"""What fairseq loads at training time (data, models, modules, tasks, criterions)
never imports the tooling (cli, analysis), and the tooling takes nothing from
the training-time datasets of fairseq_plugins.data: read from every import
statement of the package's modules, function-level imports included."""
import ast
from pathlib import Path
from typing import List, Set

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fairseq_plugins"
TRAINING_TIME = ("data", "models", "modules", "tasks", "criterions")
TOOLING = ("cli", "analysis")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> Set[str]:
    """Every module an import statement of ``path`` names (``from a import b``: a, and a.b in case b is a module)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def imports_from(subpackages, into) -> List[str]:
    """``module -> imported`` for every import of a module under ``subpackages`` from one under ``into``."""
    targets = tuple(f"fairseq_plugins.{p}" for p in into)
    hits = []
    for sub in subpackages:
        for path in sorted((PACKAGE / sub).rglob("*.py")):
            hits += [f"{module_name(path)} -> {m}" for m in sorted(imported_modules(path))
                     if m in targets or m.startswith(tuple(t + "." for t in targets))]
    return hits


def test_relative_imports_are_resolved():
    assert "fairseq_plugins.cli.pipeline" in imported_modules(PACKAGE / "cli" / "synthetic.py")
    assert "fairseq_plugins.files" in imported_modules(PACKAGE / "cli" / "synthetic.py")


@pytest.mark.parametrize("subpackage", TRAINING_TIME)
def test_training_time_code_does_not_import_the_tooling(subpackage):
    assert imports_from([subpackage], TOOLING) == []


def test_the_tooling_does_not_import_the_training_time_datasets():
    assert imports_from(["cli"], ["data"]) == []


def test_the_models_do_not_import_the_search():
    """The search (its spaces, the supernet and its tasks) builds on the models, never the other way round:
    no import loop between ``models`` and ``search``."""
    assert imports_from(TRAINING_TIME, ["search"]) == []


@pytest.mark.parametrize("module", ["space", "supernet", "supernet_tasks"])
def test_the_search_training_time_modules_do_not_import_the_tooling(module):
    """What fairseq-train loads of the search (the supernet and its tasks, fairseq_plugins/search/__init__.py)."""
    targets = tuple(f"fairseq_plugins.{p}" for p in TOOLING)
    imported = imported_modules(PACKAGE / "search" / f"{module}.py") | imported_modules(PACKAGE / "search" / "__init__.py")
    assert [m for m in imported if m.startswith(targets)] == []
