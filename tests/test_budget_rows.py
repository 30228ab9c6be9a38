"""A budget is one row (issue #48 item 5): each row of :data:`pytest_edge.checks.BUDGETS` owns its
keyword, how its check reads its figure, the words its finding adds and where a report's record
keeps the figure (:class:`pytest_edge.checks.Kept`), so adding a budget is adding a row.

- A budget keyword is spelled in at most 2 modules of the package (the table's, and the one type
  whose field or the one format whose key has the same spelling), except the entries of SPREAD,
  each with its reason. Read with ``ast``: string constants (f-strings' text included; docstrings
  are documentation and are not read) and the names a module binds or defines (variables,
  arguments, functions, classes, a class's fields, imports, ``dict(keyword=...)``). An attribute
  (``figures.ttft_ms``) or a keyword argument (``GenerationFigures(ttft_ms=...)``) uses the field of
  a type declared elsewhere, where it is counted.
- A row added to a copy of the table appears, without another edit, where the lists derived from it
  are: each marker's keywords, its check's findings, the OpenMetrics families, the run history's
  rows and trend charts, and the budgets a first test suggests.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from edge_helpers import docstring_ids

from pytest_edge.checks import BUDGETS

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_edge"
MOST = 2

# Modules beyond MOST that may spell a keyword: {keyword: {module: why}}. An entry no longer needed
# fails test_every_spread_entry_is_still_needed, so the list only shrinks.
_RECORD_KEY = ("the record's peak memory, a JSON key of the report (a record's, a decoder's block's, a context "
               "length's, a worker reply's) read by name where the report is read as JSON")
SPREAD: dict[str, dict[str, str]] = {
    "ttft_ms": {
        "backends/decoder.py": "a runtime's own counters (RuntimeCounters: llama.cpp's, LiteRT-LM's) in the keys the "
                               "record's RuntimeTimings (core.generation_figures) writes them in: a backend sits below "
                               "core and cannot name the type",
    },
    "max_context": {
        # The model's own maximum context (LlmConfig.max_context), not the budget: a homonym.
        "backends/decoder_config.py": "LlmConfig.max_context, the model's maximum context",
        "backends/executorch/backend.py": "the model's maximum context (LlmConfig.max_context)",
        "backends/executorch/llm_metadata.py": "the model's maximum context (LlmConfig.max_context)",
        "backends/litert/decoder.py": "the model's maximum context (LlmConfig.max_context)",
        "backends/llama_cpp/gguf.py": "the model's maximum context (LlmConfig.max_context)",
    },
    "peak_memory_mb": {module: _RECORD_KEY for module in (
        "backends/speech.py", "bench.py", "core/generation_figures.py", "core/speech_record.py", "core/baseline_check.py",
        "judging/figures.py",
        "judging/generation.py", "measurement/combined.py", "measurement/timing.py",
        "report/generation.py", "report/json_report.py", "worker/protocol.py")},
}


def _words(node: ast.AST, docstrings: set[int]) -> list[str]:
    """The texts and names of ``node`` that spell something in this module (see the module's docstring)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [] if id(node) in docstrings else [node.value]
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.alias):
        return [node.name, node.asname or ""]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
        return [keyword.arg or "" for keyword in node.keywords]  # dict(keyword=...) is a text key
    return []


def spelled(source: str, keywords: set[str]) -> set[str]:
    """The keywords of ``keywords`` that ``source`` spells, each as a whole word of a text or a name."""
    tree = ast.parse(source)
    docstrings = docstring_ids(tree)
    pattern = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(map(re.escape, sorted(keywords))) + r")(?![A-Za-z0-9_])")
    return {m.group(1) for node in ast.walk(tree) for word in _words(node, docstrings) for m in pattern.finditer(word)}


def modules_spelling(package: Path, keywords: set[str]) -> dict[str, set[str]]:
    """{keyword: the modules of ``package`` (relative paths) that spell it}."""
    found: dict[str, set[str]] = {keyword: set() for keyword in keywords}
    for path in sorted(package.rglob("*.py")):
        for keyword in spelled(path.read_text(encoding="utf-8"), keywords):
            found[keyword].add(path.relative_to(package).as_posix())
    return found


def too_spread(package: Path, keywords: set[str], spread: dict[str, dict[str, str]]) -> list[str]:
    problems = []
    for keyword, modules in sorted(modules_spelling(package, keywords).items()):
        counted = sorted(modules - set(spread.get(keyword, {})))
        if len(counted) > MOST:
            problems.append(f"{keyword}: {len(counted)} modules: {', '.join(counted)}")
    return problems


KEYWORDS = {budget.keyword for budget in BUDGETS}


def test_a_budget_keyword_is_spelled_in_at_most_two_modules() -> None:
    problems = too_spread(PACKAGE, KEYWORDS, SPREAD)
    assert not problems, ("budget keywords spelled in more than 2 modules of the package (read what a row "
                          "declares: checks.BUDGET, its read/kept; or list the module in SPREAD with why):\n"
                          + "\n".join(problems))


def test_every_spread_entry_is_still_needed() -> None:
    found = modules_spelling(PACKAGE, KEYWORDS)
    stale = [f"{keyword}: {module}" for keyword, modules in SPREAD.items() for module in modules
             if keyword not in KEYWORDS or module not in found[keyword]]
    assert not stale, "SPREAD entries that spell the keyword no more:\n" + "\n".join(stale)


def test_the_reader_counts_texts_and_names_not_docstrings_comments_or_fields_used(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text('"""Docstrings may say p50_ms."""\n# and comments: p50_ms\n'
                                  "x = figures.p50_ms + Row(p50_ms=1).value\n")
    assert modules_spelling(package, {"p50_ms", "ttft_ms"}) == {"p50_ms": set(), "ttft_ms": set()}
    planted = {"b.py": 'BUDGET = "p50_ms"\n', "c.py": 'message = f"over {x} p50_ms budget"\n',
               "d.py": "def f(p50_ms):\n    return p50_ms\n", "e.py": "class Spec:\n    p50_ms: float = 1.0\n",
               "f.py": "row = dict(p50_ms=3)\n", "g.py": 'k = "edge_ttft_p50_ms"\n'}  # g: another word
    for name, text in planted.items():
        (package / name).write_text(text)
    assert modules_spelling(package, {"p50_ms", "ttft_ms"}) == {"p50_ms": {"b.py", "c.py", "d.py", "e.py", "f.py"},
                                                                 "ttft_ms": set()}
    assert too_spread(package, {"p50_ms"}, {}) == ["p50_ms: 5 modules: b.py, c.py, d.py, e.py, f.py"]
    assert too_spread(package, {"p50_ms"}, {"p50_ms": {"c.py": "planted", "d.py": "planted", "f.py": "."}}) == []


# A row added to a copy of the table, before anything reads it, in a fresh interpreter (the derived
# lists are read from the table when their modules are imported): a decoder's figure, kept in the
# record and exported, shown and charted.
_ADDED_ROW = textwrap.dedent('''
    import dataclasses, json
    from pytest_edge import checks
    from pytest_edge.checks import EDGE, EDGE_LLM, Budget, Kept, check_generation, check_memory
    row = Budget("max_widget_ms", checks.parse_ms, "widget time", "ms", {EDGE_LLM: check_generation}, measured=True,
                 read=lambda block: block.unknown.get("widget_ms"), hint="5",
                 kept=Kept((("llm", "widget_ms"),), 99, "llm_widget_seconds", "decoder: widget time", "seconds", 1e-3,
                           shown="widget ms", trend="widget time", trend_unit="ms",
                           readers=(lambda record: record.generation.unknown.get("widget_ms"),)))
    checks.BUDGETS = (*checks.BUDGETS, row)
    checks.BUDGET = {budget.keyword: budget for budget in checks.BUDGETS}

    from pytest_edge.core.marker import KEYWORDS as EDGE_KEYWORDS
    from pytest_edge.llm.marker import BUDGET_KEYWORDS, parse_llm_marker
    from pytest_edge.report.openmetrics import FIGURES, render_openmetrics
    from pytest_edge.report.history import SHOWN
    from pytest_edge.report.html_history import TRENDS
    from pytest_edge.cli.first_tests import first_llm_test_source
    from pytest_edge.core.record import Record
    from pytest_edge.core.generation_record import GenerationRecord
    from pytest_edge.backends.decoder_search import FoundDecoder

    spec = parse_llm_marker((), {"model": "m", "prompts": [[1]], "max_widget_ms": "20ms"})
    found = check_generation(GenerationRecord(unknown={"widget_ms": 30.0}), spec.budgets(check_generation), "rt")
    record = {"test": "t", "backend": "rt", "model": {"name": "m"}, "llm": {"widget_ms": 30.0}}
    print(json.dumps({
        "llm_keywords": list(BUDGET_KEYWORDS), "edge_keywords": list(EDGE_KEYWORDS),
        "budget": spec.budget("max_widget_ms"), "findings": [dataclasses.asdict(f) for f in found],
        "families": [f.name for f in FIGURES], "text": render_openmetrics([Record.from_json(record)]),
        "shown": [s.name for s in SHOWN], "trends": [t.title for t in TRENDS],
        "first_test": first_llm_test_source([FoundDecoder("m", "a decoder", 8)], set())}))
''')


def test_a_row_added_to_the_table_appears_where_the_lists_derive_from_it() -> None:
    done = subprocess.run([sys.executable, "-c", _ADDED_ROW], capture_output=True, text=True, timeout=120,
                          cwd=PACKAGE.parent)
    assert done.returncode == 0, done.stderr
    import json

    seen = json.loads(done.stdout)
    assert "max_widget_ms" in seen["llm_keywords"] and "max_widget_ms" not in seen["edge_keywords"]
    assert seen["budget"] == 20.0
    assert [(f["check"], f["figure"], f["value"], f["budget"], f["unit"]) for f in seen["findings"]] == [
        ("max_widget_ms", "widget time", 30.0, 20.0, "ms")]
    assert seen["findings"][0]["message"] == "rt: widget time 30 ms exceeds the budget max_widget_ms=20 ms"
    assert seen["families"][-1] == "llm_widget_seconds"
    assert 'edge_llm_widget_seconds{model="m",backend="rt",device="local",commit="",test="t"} 0.03' in seen["text"]
    assert seen["shown"][-1] == "widget ms" and seen["trends"][-1] == "widget time"
    assert "max_widget_ms=5" in seen["first_test"]


def _kept_samples() -> list[dict]:
    """A report's records holding every kept figure: a tensor model's, a compile-time target's and a
    decoder's (its measured llm block), each as Record.to_json writes it."""
    from edge_helpers import record

    from pytest_edge.core.record import Record

    llm = {"config": {}, "new_tokens": 8, "kv_cache": None, "prompts": [],
           "ttft_ms": {"p50": 12.5, "p90": 14.0}, "tpot_ms": {"p50": 3.25, "p90": 3.5}, "prefill_tokens_per_s": 800.0,
           "decode_tokens_per_s": 307.7, "load_ms": 40.0, "peak_memory_mb": 64.0}
    records = (record("tiny_cnn", "litert", p50=0.41, artifact_bytes=5816),
               record("tiny_cnn", "ethos-u55-128", p50=None,
                      npu={"target": "ethos-u55-128", "memories": {"sram": 2048, "off_chip_flash": 9000, "dram": 7}}),
               record("tiny_llm", "onnxruntime-cpu", p50=None, peak_memory_mb=None, llm=llm))
    return [Record.from_json(data).to_json() for data in records]


def test_each_kept_figure_is_read_from_the_typed_record_where_its_path_says() -> None:
    """A row's kept figure has one reader per path (the reports over time read typed records); each
    reads of a record what its path names in the record's JSON."""
    from pytest_edge.core.record import Record, dig

    samples = _kept_samples()
    for row in BUDGETS:
        if row.kept is None:
            continue
        assert len(row.kept.readers) == len(row.kept.paths), row.keyword
        for path, read in zip(row.kept.paths, row.kept.readers):
            assert any(dig(data, *path) is not None for data in samples), (row.keyword, path)  # each one tried
            for data in samples:
                assert read(Record.from_json(data)) == dig(data, *path), (row.keyword, path, data["backend"])


def test_each_check_is_given_the_rows_that_name_it() -> None:
    """The table gives each check, when it is called, the rows that name it: its findings take their
    figure and unit from them, and a check of one budget its keyword (it spells none); given two
    rows, such a check says so rather than judge one of them."""
    from pytest_edge.checks import BUDGET, check_coverage, check_memory
    from pytest_edge.checks.rows import one_row

    (finding,) = check_memory(12.0, {"peak_memory_mb": 10.0}, "rt")
    row = BUDGET["peak_memory_mb"]
    assert (finding.check, finding.figure, finding.unit, finding.value) == (row.keyword, row.figure, row.unit, 12.0)
    assert "peak_memory_mb 10 MB" in finding.message
    (finding,) = check_coverage(None, {"max_partitions": 1}, "rt")
    assert (finding.figure, finding.unit) == (BUDGET["max_partitions"].figure, BUDGET["max_partitions"].unit)
    with pytest.raises(ValueError, match="p50_ms, p90_ms"):
        one_row({keyword: BUDGET[keyword] for keyword in ("p50_ms", "p90_ms")})


@pytest.mark.parametrize("keyword", sorted(KEYWORDS))
def test_each_row_that_a_block_check_judges_reads_its_own_figure(keyword: str) -> None:
    """The checks that judge a block's figures alike (generation, speech, teacher-forced) ask each row
    for its figure: a row of theirs without ``read`` would never be judged."""
    from pytest_edge.checks import BUDGET, check_generation, check_speech, check_teacher_forced

    row = BUDGET[keyword]
    if set(row.checks.values()) & {check_generation, check_speech, check_teacher_forced}:
        assert row.read is not None, keyword
