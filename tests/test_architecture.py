"""The layout's rules (docs/architecture.md), read from the source with ``ast``:

- no runtime name or artifact suffix in code outside ``pytest_edge/backends/`` (what a runtime knows
  is its backend's: the files an artifact consists of, its targets, its triage and quantization-pair
  methods, what a device installs), except the entries of ALLOWED, each with its reason;
- ``backends/`` imports nothing above it: only itself and the leaves ``errors`` and ``metrics``.

Code is identifiers (names, attributes, definitions, arguments, keywords, imported modules) and string
constants (f-strings' text included); comments and docstrings are documentation and are not read.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_edge"
BACKENDS = PACKAGE / "backends"

# Runtime names, as words of an identifier (``TfliteGraph``, ``onnx_divergence``) or of a text.
RUNTIME_WORDS = ("onnxruntime", "onnx", "ort", "executorch", "litert", "tflite", "tensorflow", "openvino", "ncnn",
                 "mnn", "llama", "gguf", "genai", "xnnpack", "coreml", "nnapi", "qnn")
# Artifact suffixes, anywhere in a text ("tiny_cnn.onnx" too); the registry's are checked to be here.
SUFFIXES = (".onnx", ".tflite", ".pte", ".gguf", ".mnn", ".ncnn.param", ".xml")

# What may stay outside backends/: {file: {word or suffix, or "*" for the whole file: why}}.
ALLOWED: dict[str, dict[str, str]] = {
    # The one named exception: the default reference backend, in the option's help.
    "pytest_edge/settings.py": {"onnxruntime": "the default reference backend named in edge_reference_backend's help"},
    # Text that quotes an example for the user, not knowledge the code acts on.
    "pytest_edge/alignment.py": {".tflite": "an example command in a hint (pytest-edge triage quant FLOAT.tflite INT8.tflite)",
                                 "tflite": "the same example"},
    # Runtime-specific triage methods not moved yet: each is written against triage's and the golden's
    # machinery (Runner, Plan, Golden, compare; quant_layers, quant_inputs, quant_report), so under
    # backends/ it would import upwards. The dispatch to them asks the backend (Backend.triage_method,
    # Backend.quant_pair); moving them means splitting each into the runtime's graph reader (its
    # backend's) and the comparison (triage's).
    "pytest_edge/triage/onnx.py": {"*": "the \"nodes\" triage method: ONNX Runtime's configurations compared node by node"},
    "pytest_edge/triage/etdump.py": {"*": "the \"etdump\" triage method: an ExecuTorch program's operator record"},
    "pytest_edge/triage/quant_onnx.py": {"*": "the \"qdq\" quantization pair: float .onnx against its QDQ model on ONNX Runtime"},
    "pytest_edge/triage/quant_pte.py": {"*": "the \"etdump\" quantization pair: float and int8 .pte through ETDump"},
    "pytest_edge/triage/tflite_graph.py": {"*": "the \"tensors\" pair's graph: a .tflite on LiteRT's reference kernels"},
    "pytest_edge/triage/quant.py": {"tflite": "the \"tensors\" pair is compared here, over tflite_graph.TfliteGraph",
                                    "onnx": "PAIRS names the module of the \"qdq\" pair (quant_onnx)"},
    "pytest_edge/triage/ladder.py": {"onnx": "imports the \"nodes\" method from triage/onnx.py"},
    "pytest_edge/triage/__init__.py": {"onnx": "onnx_divergence from triage/onnx.py: the import path docs/triage.md shows"},
}
# What backends/ may import from the rest of the package: leaves that import nothing of it.
BACKENDS_MAY_IMPORT = {"errors", "metrics"}

_IDENTIFIER_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_TEXT_WORD = re.compile(r"(?<![a-z0-9])(" + "|".join(RUNTIME_WORDS) + r")(?![a-z0-9])")
_TEXT_SUFFIX = re.compile("(" + "|".join(re.escape(s) for s in SUFFIXES) + r")(?![a-z0-9])")


def _identifier_words(name: str) -> set[str]:
    """``TfliteGraph`` -> {"tflite", "graph"}; ``backends.litert.backend`` -> {"backends", "litert", "backend"}."""
    return {w.lower() for part in re.split(r"[_.]", name) for w in _IDENTIFIER_WORD.findall(part)}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                found.add(id(first.value))
    return found


def _names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.keyword):
        return [node.arg or ""]
    if isinstance(node, ast.alias):
        return [node.name, node.asname or ""]
    if isinstance(node, ast.ImportFrom):
        return [node.module or ""]
    return []


def runtime_mentions(source: str) -> list[tuple[int, str]]:
    """(line, word or suffix) of each runtime name or artifact suffix in the code of ``source``."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings:
                text = node.value.lower()
                found += [(node.lineno, m.group(1)) for m in _TEXT_WORD.finditer(text)]
                found += [(node.lineno, m.group(1)) for m in _TEXT_SUFFIX.finditer(text)]
            continue
        for name in _names(node):
            found += [(node.lineno, word) for word in sorted(_identifier_words(name) & set(RUNTIME_WORDS))]
    return sorted(set(found))


def unallowed(package: Path, allowed: dict[str, dict[str, str]]) -> list[str]:
    """``file:line: word`` of every mention outside ``package/backends`` that ``allowed`` does not list."""
    problems = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package.parent).as_posix()
        if path.is_relative_to(package / "backends"):
            continue
        entry = allowed.get(relative, {})
        for line, word in runtime_mentions(path.read_text(encoding="utf-8")):
            if "*" not in entry and word not in entry:
                problems.append(f"{relative}:{line}: {word}")
    return problems


def test_no_runtime_name_or_suffix_outside_backends() -> None:
    problems = unallowed(PACKAGE, ALLOWED)
    assert not problems, ("runtime knowledge outside pytest_edge/backends/ (ask the backend: a Backend attribute "
                          "or method; or list it in ALLOWED with why):\n" + "\n".join(problems))


def test_every_allowed_entry_is_still_needed() -> None:
    """An entry whose file no longer mentions its word is dropped, so the list shrinks with the code."""
    stale = []
    for relative, entry in ALLOWED.items():
        path = PACKAGE.parent / relative
        words = {word for _, word in runtime_mentions(path.read_text(encoding="utf-8"))} if path.is_file() else set()
        stale += [f"{relative}: {word}" for word in entry if (word == "*" and not words) or (word != "*" and word not in words)]
    assert not stale, "ALLOWED entries with nothing left to allow:\n" + "\n".join(stale)


def test_the_words_cover_every_runtime_folder_and_suffix() -> None:
    """A new runtime folder or suffix is checked too: its name and its suffixes are in the lists."""
    from pytest_edge.backends import all_backends

    folders = [p.name for p in BACKENDS.iterdir() if p.is_dir() and (p / "__init__.py").is_file()]
    assert folders
    assert [f for f in folders if f.split("_")[0] not in RUNTIME_WORDS] == []
    suffixes = {s for b in all_backends().values() for s in b.artifact_suffixes()}
    assert suffixes - set(SUFFIXES) == set()


@pytest.mark.parametrize("planted, word", [
    ('if artifact.suffix == ".pte":\n    pass\n', ".pte"),
    ('BACKEND = "litert-ref"\n', "litert"),
    ('message = f"no {name}.gguf here"\n', ".gguf"),
    ("from .backends.openvino.backend import OpenVINOBackend\n", "openvino"),
    ("def read_tflite(path):\n    return path\n", "tflite"),
    ('WHEELS = ["onnxruntime", "numpy"]\n', "onnxruntime"),
])
def test_a_planted_mention_is_caught(tmp_path: Path, planted: str, word: str) -> None:
    package = tmp_path / "pytest_edge"
    (package / "backends" / "foo").mkdir(parents=True)
    (package / "backends" / "foo" / "backend.py").write_text(planted)  # inside backends/: allowed
    (package / "plain.py").write_text('"""Docstrings may say .onnx and ExecuTorch."""\n# and comments: litert\n'
                                      "X = 1  # tflite\n")
    assert unallowed(package, {}) == []
    (package / "planted.py").write_text(planted)
    problems = unallowed(package, {})
    assert f"pytest_edge/planted.py:1: {word}" in problems
    assert all(p.startswith("pytest_edge/planted.py:") for p in problems), problems
    found = {p.rsplit(": ", 1)[1] for p in problems}  # ".gguf" in a text is also the word "gguf"
    assert unallowed(package, {"pytest_edge/planted.py": {w: "planted on purpose" for w in found}}) == []
    assert unallowed(package, {"pytest_edge/planted.py": {"*": "the whole file"}}) == []


def test_harmless_words_are_not_runtime_names() -> None:
    """Words that merely contain a runtime name ("report", "sort", "export") are not mentions."""
    assert runtime_mentions('def sort_report(exported):\n    return "short report"\n') == []


def test_backends_import_nothing_above_them() -> None:
    problems = []
    for path in sorted(BACKENDS.rglob("*.py")):
        depth = len(path.relative_to(PACKAGE).parts) - 1  # backends/x.py: 1; backends/rt/x.py: 2
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level > depth:
                top = (node.module or "").split(".")[0]
                if top not in BACKENDS_MAY_IMPORT:
                    problems.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: from {'.' * node.level}{node.module}")
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for module in modules:
                    parts = module.split(".")
                    if parts[0] == "pytest_edge" and len(parts) > 1 and parts[1] not in {"backends", *BACKENDS_MAY_IMPORT}:
                        problems.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: import {module}")
    assert not problems, "backends/ imports from a higher folder:\n" + "\n".join(problems)
