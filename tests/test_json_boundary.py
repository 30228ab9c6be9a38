"""Typed from the worker to the report (docs/architecture.md, "Typed figures"): a dict of anything
(``dict[str, Any]``, ``Mapping[str, Any]``; ``object`` for ``Any`` too) is written only where JSON
enters or leaves (a file, the worker's pipe, xdist's, a marker's keywords) and in the lenient
blocks' ``unknown`` fields (another version's keys, written back). The count is held here, so a
figure handed on as a dict shows up as a change to this number, not as one more annotation nobody
counted. Aliases count where they are spelled, so naming the dict does not hide it."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_edge"
# Where JSON enters or leaves, as counted at the commit that set it; lower it when one goes.
CEILING = 49
_MAPPINGS = {"dict", "Dict", "Mapping", "MutableMapping"}
_ANYTHING = {"Any", "object"}


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):  # typing.Mapping, collections.abc.Mapping
        return node.attr
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # dict[str, "Any"]
        return node.value
    return None


def dicts_of_anything(source: str) -> list[int]:
    """The lines of every ``dict[str, Any]``-like subscript in ``source``, in annotations, string
    annotations and aliases alike."""
    found: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "[" in node.value:
            try:  # a string annotation ("dict[str, Any] | None"): parsed as the expression it is
                inner = ast.parse(node.value, mode="eval")
            except SyntaxError:
                continue
            found += [node.lineno] * len(_subscripts(inner))
        found += [sub.lineno for sub in _subscripts(node, walk=False)]
    return sorted(found)


def _subscripts(tree: ast.AST, walk: bool = True) -> list[ast.Subscript]:
    nodes = ast.walk(tree) if walk else [tree]
    return [node for node in nodes if isinstance(node, ast.Subscript) and _name(node.value) in _MAPPINGS
            and isinstance(node.slice, ast.Tuple) and len(node.slice.elts) == 2
            and _name(node.slice.elts[0]) == "str" and _name(node.slice.elts[1]) in _ANYTHING]


def package_count() -> dict[str, int]:
    counts = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = dicts_of_anything(path.read_text(encoding="utf-8"))
        if lines:
            counts[str(path.relative_to(PACKAGE))] = len(lines)
    return counts


def test_dicts_of_anything_stay_at_the_json_boundary() -> None:
    counts = package_count()
    total = sum(counts.values())
    worst = ", ".join(f"{name} {n}" for name, n in sorted(counts.items(), key=lambda kv: -kv[1])[:8])
    assert total <= CEILING, (f"{total} dict[str, Any]-like annotations in the package (at most {CEILING}): "
                              f"type the figure instead of handing on its JSON; most in: {worst}")


def test_the_count_finds_every_spelling() -> None:
    source = ("from typing import Any, Mapping\nimport typing\n"
              "Alias = dict[str, Any]\n"
              "def f(a: Mapping[str, Any], b: 'dict[str, Any] | None', c: typing.Mapping[str, object]) -> None: ...\n"
              "x: dict[str, int] = {}\n"  # typed values: not counted
              "y: list[dict[str, 'Any']] = []\n")
    assert dicts_of_anything(source) == [3, 4, 4, 4, 6]
