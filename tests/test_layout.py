"""Tests a newcomer can find (issue 48): every module of the layers ``pytest_edge/run/``,
``pytest_edge/judging/`` and ``pytest_edge/report/`` (``__init__`` aside) is imported directly by at
least one test file
(``tests/test_*.py``), so whoever changes a module finds its tests by grepping its name. Imports are
read with ``ast`` at any depth (a test's function-level import counts), in the three forms
``from pytest_edge.run.X import ...``, ``import pytest_edge.run.X`` and ``from pytest_edge.run import X``;
a module reached only through another (the session importing the tensor check) does not count."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pytest_edge.run", "pytest_edge.judging", "pytest_edge.report")


def modules_of(package: str) -> set[str]:
    """The dotted names of ``package``'s modules, in subfolders too, ``__init__`` aside."""
    folder = ROOT / package.replace(".", "/")
    return {".".join(path.relative_to(ROOT).with_suffix("").parts) for path in folder.rglob("*.py")
            if path.name != "__init__.py"}


def imported_modules(source: str) -> set[str]:
    """Every module of the package that ``source`` imports directly, in any of the three forms (a
    ``from package import name`` counts ``package.name``, which is the module where one is named)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_the_reader_finds_each_form_of_import_and_only_those() -> None:
    """The contract below can fail: each form is found, a mention in a string or a comment is not."""
    source = ("from pytest_edge.run.kinds import Check\n"
              "import pytest_edge.judging.gate\n"
              "def f():\n    from pytest_edge.run import pipeline as p\n"
              "NOTE = 'pytest_edge.run.session'  # import pytest_edge.run.calibration\n")
    found = imported_modules(source) & (modules_of("pytest_edge.run") | modules_of("pytest_edge.judging"))
    assert found == {"pytest_edge.run.kinds", "pytest_edge.judging.gate", "pytest_edge.run.pipeline"}


def test_every_module_of_the_covered_layers_is_imported_by_a_test_file() -> None:
    """Each module of run/, judging/ and report/ has a test file that imports it directly."""
    wanted = set().union(*(modules_of(package) for package in PACKAGES))
    assert len(wanted) > 10, wanted  # the folders were found
    imported: set[str] = set()
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        imported |= imported_modules(path.read_text(encoding="utf-8"))
    untested = sorted(wanted - imported)
    assert not untested, (f"no test file imports {', '.join(untested)} directly: add a tests/test_*.py that "
                          "does (`from pytest_edge.run.X import ...`), so its tests can be found by its name")
