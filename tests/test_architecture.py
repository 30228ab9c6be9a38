"""The layout's rules (docs/architecture.md), read from the source with ``ast``:

- no runtime name or artifact suffix in code outside ``pytest_edge/backends/`` (what a runtime knows
  is its backend's: the files an artifact consists of, its targets, its triage and quantization-pair
  methods, what a device installs), except the entries of ALLOWED, each with its reason;
- no module imports one of a higher layer (LAYERS, lowest first: ``backends/`` imports only the
  leaves below it), except the entries of UPWARD, each with its reason;
- no import cycle between files (strongly connected components of the import graph, function-level
  imports and ``TYPE_CHECKING`` ones included), and none between folders.

Code is identifiers (names, attributes, definitions, arguments, keywords, imported modules) and string
constants (f-strings' text included); comments and docstrings are documentation and are not read.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from edge_helpers import docstring_ids

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_edge"
BACKENDS = PACKAGE / "backends"

# Runtime names, as words of an identifier (``TfliteGraph``, ``onnx_divergence``) or of a text.
RUNTIME_WORDS = ("onnxruntime", "onnx", "ort", "executorch", "litert", "tflite", "tensorflow", "openvino", "ncnn",
                 "mnn", "llama", "gguf", "genai", "xnnpack", "coreml", "nnapi", "qnn", "ethos", "vela", "tosa", "rknn",
                 "whisper", "ctranslate2", "sherpa")
# Artifact suffixes, anywhere in a text ("tiny_cnn.onnx" too); the registry's are checked to be here.
# The speech runtimes' exports are folders: their backends' "suffix" is the file that makes one.
SUFFIXES = (".onnx", ".tflite", ".pte", ".gguf", ".litertlm", ".mnn", ".ncnn.param", ".xml", ".tosa", "ggml-model.bin",
            "ctranslate2/model.bin", "sherpa-onnx/whisper-encoder.onnx")

# What may stay outside backends/: {file: {word or suffix, or "*" for the whole file: why}}.
ALLOWED: dict[str, dict[str, str]] = {
    # The one named exception: the default reference backend, in the option's help.
    "pytest_edge/core/options.py": {"onnxruntime": "the default reference backend named in edge_reference_backend's help"},
    # Text that quotes an example for the user, not knowledge the code acts on.
    "pytest_edge/golden/alignment.py": {".tflite": "an example command in a hint (pytest-edge triage quant FLOAT.tflite INT8.tflite)",
                                 "tflite": "the same example"},
}

_IDENTIFIER_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_TEXT_WORD = re.compile(r"(?<![a-z0-9])(" + "|".join(RUNTIME_WORDS) + r")(?![a-z0-9])")
_TEXT_SUFFIX = re.compile("(" + "|".join(re.escape(s) for s in SUFFIXES) + r")(?![a-z0-9])")


def _identifier_words(name: str) -> set[str]:
    """``TfliteGraph`` -> {"tflite", "graph"}; ``backends.litert.backend`` -> {"backends", "litert", "backend"}."""
    return {w.lower() for part in re.split(r"[_.]", name) for w in _IDENTIFIER_WORD.findall(part)}


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
    docstrings = docstring_ids(tree)
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


# The layers, lowest first (docs/architecture.md): a module imports its own layer or lower ones only.
# A layer is folders and modules by dotted prefix under pytest_edge ("" is the package's __init__);
# a module belongs to its longest matching prefix. Each folder is one layer, so the folder graph has
# no cycle either.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("leaves", ("", "errors", "files", "units", "codec", "installed", "accuracy.metrics")),
    ("backends", ("backends",)),
    ("measurement", ("measurement",)),
    ("checks", ("checks",)),
    ("accuracy", ("accuracy",)),
    ("devices", ("devices",)),
    ("core", ("core",)),
    ("worker", ("worker",)),
    ("judging", ("judging",)),
    ("golden", ("golden",)),
    ("report", ("report",)),
    ("triage", ("triage",)),
    ("llm", ("llm",)),
    ("run", ("run",)),
    ("plugin", ("plugin", "parametrize", "stash", "xdist_merge", "edge_model", "bench")),
    ("cli", ("cli", "__main__")),
    ("public helpers", ("quant", "strategies")),
)
# Imports against the order, each with why: {(importer, imported): reason}.
UPWARD: dict[tuple[str, str], str] = {}


def _module_names(package: Path) -> dict[str, Path]:
    found = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imported(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules ``module`` imports (dotted under the package), at any depth of its code."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def known(name: str) -> str | None:
        while name not in modules and name:
            name = name.rpartition(".")[0]
        return name if name in modules else None

    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[:len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            elif (node.module or "").split(".")[0] == package_name(modules):
                target = node.module.partition(".")[2]  # type: ignore[union-attr]
            else:
                continue
            for alias in node.names:
                whole = f"{target}.{alias.name}" if target else alias.name
                hit = whole if whole in modules else known(target)
                if hit is not None:
                    found.add(hit)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == package_name(modules):
                    hit = known(alias.name.partition(".")[2])
                    if hit is not None:
                        found.add(hit)
    found.discard(module)
    return found


def package_name(modules: dict[str, Path]) -> str:
    return modules[""].parent.name


def layer_of(module: str, layers=LAYERS) -> int | None:
    best = None
    for index, (_, prefixes) in enumerate(layers):
        for prefix in prefixes:
            if module == prefix or (module.startswith(prefix + ".") if prefix else False) or (prefix == "" and module == ""):
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), index)
    return None if best is None else best[1]


def upward_imports(package: Path, layers=LAYERS, upward=UPWARD) -> list[str]:
    """``importer -> imported (layer -> higher layer)`` for every import against the order, and
    ``module: in no layer`` for a module the order does not place."""
    modules = _module_names(package)
    problems = []
    for module, path in sorted(modules.items()):
        mine = layer_of(module, layers)
        if mine is None:
            problems.append(f"{module or '__init__'}: in no layer")
            continue
        for target in sorted(_imported(module, path, modules)):
            theirs = layer_of(target, layers)
            if theirs is not None and theirs > mine and (module, target) not in upward:
                problems.append(f"{module} -> {target} ({layers[mine][0]} -> {layers[theirs][0]})")
    return problems


def test_no_import_from_a_lower_layer_to_a_higher_one() -> None:
    problems = upward_imports(PACKAGE)
    assert not problems, "imports against the layers (docs/architecture.md):\n" + "\n".join(problems)


def test_every_upward_import_allowed_is_still_made() -> None:
    modules = _module_names(PACKAGE)
    stale = [f"{a} -> {b}" for a, b in UPWARD if a not in modules or b not in _imported(a, modules[a], modules)]
    assert not stale, "UPWARD entries no longer needed:\n" + "\n".join(stale)


def test_a_planted_upward_import_is_caught(tmp_path: Path) -> None:
    package = tmp_path / "pytest_edge"
    (package / "backends" / "foo").mkdir(parents=True)
    (package / "report").mkdir()
    for init in (package, package / "backends", package / "backends" / "foo", package / "report"):
        (init / "__init__.py").write_text("")
    (package / "errors.py").write_text("")
    (package / "report" / "table.py").write_text("from ..errors import X\nfrom ..backends.foo import backend\n")
    (package / "backends" / "foo" / "backend.py").write_text("from ...errors import X\n")
    assert upward_imports(package) == []
    (package / "backends" / "foo" / "backend.py").write_text("def f():\n    from ...report.table import T\n")
    assert upward_imports(package) == ["backends.foo.backend -> report.table (backends -> report)"]
    (package / "backends" / "foo" / "backend.py").write_text("import pytest_edge.report.table\n")
    assert upward_imports(package) == ["backends.foo.backend -> report.table (backends -> report)"]
    (package / "loose.py").write_text("")
    assert "loose: in no layer" in upward_imports(package)


def _is_marker(node: ast.AST) -> bool:
    """``marker``, ``spec`` or ``<something>.marker`` / ``.spec``: a MarkerSpec or an LlmSpec, whose
    budgets are read through the table (a TimedMeasurement's ``peak_memory_mb`` is a figure of the
    same name, not a budget)."""
    names = ("marker", "spec")
    return (isinstance(node, ast.Name) and node.id in names) or (isinstance(node, ast.Attribute)
                                                                  and node.attr in names)


# Where each marker's budgets would be spelled if not read from the table: {marker: (its spec's
# module, where its checks run)}. Its spec module may spell no budget keyword as a text; none of
# them reads one by name from a marker's spec.
BUDGET_READERS = {"edge": ("core/marker.py", ("run/pipeline.py", "run/session.py")),
                  "edge_llm": ("llm/marker.py", ("run/decoder_check.py",)),
                  "edge_asr": ("run/speech_plan.py", ("run/speech_check.py",))}


def test_budget_keywords_are_declared_once_in_the_budget_table() -> None:
    """Both markers parse their budgets, and the pipelines ask the checks for them, from
    checks.BUDGETS: a marker's module spells no budget keyword as a text, the pipelines and the
    session read none by name from a marker (``marker.budgets(check)``, ``spec.budgets(check)``),
    and every row is a keyword of each marker it belongs to."""
    from dataclasses import fields

    from pytest_edge.checks import BUDGETS, EDGE, EDGE_ASR, EDGE_LLM
    from pytest_edge.core.marker import KEYWORDS as EDGE_KEYWORDS, MarkerSpec
    from pytest_edge.llm.marker import BUDGET_KEYWORDS as LLM_BUDGETS, LlmSpec
    from pytest_edge.run.speech_plan import BUDGET_KEYWORDS as SPEECH_BUDGETS, SpeechSpec

    keywords = {budget.keyword for budget in BUDGETS}
    assert len(keywords) == len(BUDGETS)
    specs = {EDGE: MarkerSpec, EDGE_LLM: LlmSpec, EDGE_ASR: SpeechSpec}
    assert set(BUDGET_READERS) == set(specs)
    for budget in BUDGETS:
        assert budget.markers and set(budget.markers) <= set(specs), budget.keyword
        # Each marker keeps its budgets by keyword (MarkerSpec.budget, LlmSpec.budget, SpeechSpec.budget).
        keywords_of = {EDGE: set(EDGE_KEYWORDS), EDGE_LLM: set(LLM_BUDGETS), EDGE_ASR: set(SPEECH_BUDGETS)}
        assert all(budget.keyword in keywords_of[m] for m in budget.markers), budget.keyword
        assert all(budget.keyword not in {f.name for f in fields(specs[m])} for m in budget.markers), budget.keyword
        assert budget.sense in ("max", "min"), budget.keyword
    spelled = []
    for marker_module, runners in BUDGET_READERS.values():
        for name in (marker_module, *runners):
            tree = ast.parse((PACKAGE / name).read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if name == marker_module and isinstance(node, ast.Constant) and node.value in keywords:
                    spelled.append(f"{name}:{node.lineno}: {node.value!r}")
                elif isinstance(node, ast.Attribute) and node.attr in keywords and _is_marker(node.value):
                    spelled.append(f"{name}:{node.lineno}: .{node.attr}")
    assert not spelled, "budget keywords spelled outside checks.BUDGETS:\n" + "\n".join(spelled)


def test_the_documented_layers_are_the_tested_ones() -> None:
    """docs/architecture.md's table of layers lists LAYERS' names in LAYERS' order: the page and the
    rule cannot drift apart."""
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = page.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1].strip() for line in section.splitlines() if line.startswith("| ")]
    assert rows[1:] == [name for name, _ in LAYERS]  # rows[0]: the header


# ------------------------------------------------------------ import cycles

def import_graph(package: Path) -> dict[str, set[str]]:
    """Every module of ``package`` -> the package's modules it imports (at any depth of its code)."""
    modules = _module_names(package)
    return {module: _imported(module, path, modules) for module, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def folder_graph(package: Path) -> dict[str, set[str]]:
    """The import graph between folders: a module's folder (``core``, ``backends/litert``), or the
    module itself at the package's top (``plugin``, ``checks``), each a node."""
    modules = _module_names(package)

    def folder(module: str) -> str:
        return module if modules[module].name == "__init__.py" else (module.rpartition(".")[0] or module or "__init__")

    graph: dict[str, set[str]] = {}
    for module, imported in import_graph(package).items():
        graph.setdefault(folder(module), set()).update(folder(t) for t in imported if folder(t) != folder(module))
    return graph


def test_no_import_cycle_between_files() -> None:
    found = cycles(import_graph(PACKAGE))
    assert not found, "import cycles between files (docs/architecture.md):\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_import_cycle_between_folders() -> None:
    found = cycles(folder_graph(PACKAGE))
    assert not found, "import cycles between folders (docs/architecture.md):\n" + "\n".join(" <-> ".join(c) for c in found)


def test_a_planted_cycle_is_caught(tmp_path: Path) -> None:
    package = tmp_path / "pytest_edge"
    (package / "a").mkdir(parents=True)
    (package / "b").mkdir()
    for init in (package, package / "a", package / "b"):
        (init / "__init__.py").write_text("")
    (package / "a" / "one.py").write_text("from ..b import two\n")
    (package / "b" / "two.py").write_text("X = 1\n")
    assert cycles(import_graph(package)) == [] and cycles(folder_graph(package)) == []
    (package / "b" / "two.py").write_text("def f():\n    from ..a import one\n")  # function-level
    assert cycles(import_graph(package)) == [["a.one", "b.two"]]
    (package / "b" / "two.py").write_text("X = 1\n")
    (package / "b" / "three.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                            "    from ..a.one import Y\n")
    assert cycles(import_graph(package)) == [] and cycles(folder_graph(package)) == [["a", "b"]]

