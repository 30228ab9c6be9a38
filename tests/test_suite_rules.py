"""Rules of this suite that its own files must keep (issue 53: green on every run, not most).

No verdict may rest on the running machine's speed: the suite runs on machines 3x faster and 3x
slower than the one a test was written on, and on busy ones. A bound on a figure read from a clock
(latency, TTFT, TPOT, tokens/s, load time, drift, a share of two clocks, a run's duration) is either
a check of logic on recorded or synthetic samples (exact values: no bound here), or an end-to-end
bound wide enough for any such machine, with its reason written beside it. This test finds every
assertion of the second kind, so a new tight bound cannot come in unexplained; the fidelity of a
figure (how close two clocks read) is measured in benchmarks/, not asserted here. It also checks
how tests/measuring.py tells what a test measured (the failed-tests summary of tests/conftest.py)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import measuring

TESTS = Path(__file__).resolve().parent
# Figures a clock gives, as the suite's tests name them (report fields, the worker's replies,
# pytester's RunResult.duration, the test's own clock reads).
CLOCK_FIGURE = re.compile(r"latency|\bp50|\bp90|\bp99|_ms\b|_ms[\"']|tokens_per_s|ttft|tpot|first_inference|drift|"
                          r"duration|elapsed|monotonic|perf_counter|speedup|per_token|timed_s|\[\"counted\"\]|"
                          r"\bprefill\b|\bdecode\b|process_spread|other_cores_busy|probe_us")
# What makes a test end to end: it runs pytest or a worker, or reads a clock itself. Its helpers (a
# module's functions not named test_*) count as end to end where the module has such a test; a test
# of another kind works on recorded or synthetic figures, whose bounds are logic (tests/test_history.py).
END_TO_END = re.compile(r"pytester|runpytest|subprocess|Popen|calibrated_chain|op_measure|measure_rounds|WorkerPool|"
                        r"EdgeSession|BackendWorker|_server\(|perf_counter|monotonic|\.measure\(|\.duration")
REASON = "clock bound:"  # a comment on the assert's line or in the comment block just above it


class Bound(NamedTuple):
    where: str
    text: str
    reasoned: bool


def _is_number(node: ast.AST) -> bool:
    """A number written in the test: literals and UPPER_CASE constants, with arithmetic."""
    allowed = (ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop, ast.Load)
    nodes = list(ast.walk(node))
    return all(isinstance(n, allowed) or (isinstance(n, ast.Name) and n.id.isupper()) for n in nodes) and \
        any(isinstance(n, ast.Constant) and type(n.value) in (int, float) for n in nodes)


def _is_zero(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value == 0


def _reasoned(lines: list[str], first: int, last: int) -> bool:
    """REASON on one of the assert's lines, or in the comment lines right above it."""
    if any(REASON in line for line in lines[first - 1:last]):
        return True
    number = first - 2
    while number >= 0 and lines[number].strip().startswith("#"):
        if REASON in lines[number]:
            return True
        number -= 1
    return False


def _end_to_end(source: str, tree: ast.Module) -> list[ast.AST]:
    """The module's functions whose figures may come from a clock (END_TO_END)."""
    functions = [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    tests = [f for f in functions if f.name.startswith("test")]
    ends = {f.name for f in functions if END_TO_END.search(ast.get_source_segment(source, f) or "")}
    helpers = any(f.name in ends for f in tests)
    return [f for f in functions if f.name in ends or (helpers and not f.name.startswith("test"))]


def clock_bounds(path: Path) -> list[Bound]:
    """Each assertion of an end-to-end test (or its module's helpers) in ``path`` that bounds a
    clock's figure by a number other than zero (``> 0`` says a figure was measured, whatever the
    machine: not a bound on its value)."""
    source = path.read_text()
    lines = source.splitlines()
    found = []
    tree = ast.parse(source)
    for node in (n for function in _end_to_end(source, tree) for n in ast.walk(function)):
        if not isinstance(node, ast.Assert):
            continue
        for compare in ast.walk(node.test):
            if not isinstance(compare, ast.Compare) or \
                    not any(isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) for op in compare.ops):
                continue
            operands = [compare.left, *compare.comparators]
            numbers = [o for o in operands if _is_number(o) and not _is_zero(o)]
            figures = [o for o in operands if not _is_number(o)
                       and CLOCK_FIGURE.search(ast.get_source_segment(source, o) or "")]
            if numbers and figures:
                found.append(Bound(f"{path.name}:{node.lineno}", ast.get_source_segment(source, compare) or "",
                                   _reasoned(lines, node.lineno, node.end_lineno or node.lineno)))
    return found


def test_every_bound_on_a_clocks_figure_says_why_it_holds_on_any_machine() -> None:
    """Each end-to-end bound on a clock's figure carries a ``clock bound:`` comment: why no machine 3x
    faster or slower, nor a busy one, crosses it (a budget no machine meets or misses, a wait that no
    clock shortens, a ratio of two clocks over the same work with a factor of room, a staged effect
    on a model calibrated here). The list it finds is the suite's inventory of such bounds."""
    bounds = [bound for path in sorted(TESTS.glob("test_*.py")) for bound in clock_bounds(path)]
    assert len(bounds) >= 5, bounds  # the scan still finds the known ones (test_llm_quality's shares among them)
    assert any(b.where.startswith("test_llm_quality.py") and "counted" in b.text for b in bounds), bounds
    unexplained = [f"{b.where}: {b.text}" for b in bounds if not b.reasoned]
    assert not unexplained, ("bounds on a clock's figure without a '# clock bound: <why it holds on a machine 3x "
                             "faster or slower, or busy>' comment (or move the claim to benchmarks/):\n  "
                             + "\n  ".join(unexplained))


def test_the_scan_finds_a_tight_bound_and_passes_logic(tmp_path: Path) -> None:
    """What the rule catches and what it leaves: a share of two clocks bounded a point under one
    machine's reading is caught; exact figures of synthetic samples, '> 0', and a reasoned bound are not."""
    path = tmp_path / "test_x.py"
    path.write_text(
        "def test_a(pytester):\n"
        "    assert 0.95 <= block['counted']['decode'] <= 1.0\n"
        "    assert figures['tpot_ms']['p50'] == 15.0 and block['ttft_ms']['p50'] > 0\n"
        "    # clock bound: a budget no machine meets\n"
        "    assert found['p50_ms']['value'] > 1e-6\n"
        "    assert result.duration < TIMEOUT_S / 2\n"
        "def test_synthetic():\n"
        "    assert judge(history).p50.ratio - 1 > 0.05\n")
    assert [(b.where, b.reasoned) for b in clock_bounds(path)] == [
        ("test_x.py:2", False), ("test_x.py:5", True), ("test_x.py:6", False)]


class _Item:
    def __init__(self) -> None:
        self.user_properties: list[tuple[str, object]] = []


def test_a_pytest_run_that_asks_for_measurement_is_found_and_one_that_does_not_is_not(tmp_path: Path) -> None:
    """tests/measuring.py reads what a test's pytest runs asked for (their command line, the project's
    ini and test files) and what their reports hold, not the test's name."""
    assert measuring._asks_in_text("python -mpytest --edge-measure -q") == "--edge-measure"
    assert measuring._asks_in_text("pytest --edge-baseline-models=main") == "--edge-baseline"
    assert measuring._asks_in_text("pytest -o edge_count=instructions") == "--edge-count"
    assert measuring._asks_in_text("pytest --edge-count=off --edge-report=r.json -o edge_measure=false") is None
    assert measuring._asks_in_text("[pytest]\nedge_model_dirs = models\nedge_processes = 1\n") is None
    (tmp_path / "pytest.ini").write_text("[pytest]\nedge_model_dirs = models\n")
    (tmp_path / "test_golden.py").write_text("@pytest.mark.edge(model='m', max_fallback=0.1)\ndef test(edge_model): pass\n")
    assert measuring._project_asks(tmp_path) is None  # a coverage budget is not measured
    (tmp_path / "test_budget.py").write_text("@pytest.mark.edge(model='m', p50_ms='60s')\ndef test(edge_model): pass\n")
    assert measuring._project_asks(tmp_path) == "a measured budget (p50_ms) in test_budget.py"
    (tmp_path / "r.json").write_text(json.dumps({"records": [{"latency_ms": None, "load_ms": 8.7}]}))
    assert not measuring._report_measured(tmp_path / "r.json")  # every session times its loads
    (tmp_path / "r.json").write_text(json.dumps({"records": [{"latency_ms": {"p50": 0.1}}]}))
    assert measuring._report_measured(tmp_path / "r.json")

    item, empty = _Item(), tmp_path / "empty"
    empty.mkdir()
    with measuring.finding(item):  # type: ignore[arg-type]
        subprocess.run([sys.executable, "-c", "pass", "pytest", "-q"], cwd=empty, check=True)
    assert item.user_properties == []
    with measuring.finding(item):  # type: ignore[arg-type]
        subprocess.run([sys.executable, "-c", "pass", "pytest", "--edge-measure"], check=True)
        subprocess.run([sys.executable, "-c", "pass", "-mpytest", "--edge-report=r.json"], cwd=tmp_path, check=True)
    assert measuring.PROPERTY in dict(item.user_properties)
    assert [value for _, value in item.user_properties] == [
        "a pytest run with --edge-measure", "a pytest run with a measured budget (p50_ms) in test_budget.py",
        "its run's report r.json holds measured figures"]


def test_no_pytester_file_is_named_like_a_module_of_the_suite() -> None:
    """Pytester runs in-process import their test files by basename: one named like a module of
    tests/ (test_llm.py) is found as the suite's own module once an xdist worker has collected it,
    and the run fails collecting, in CI's order and not alone."""
    suite = {path.stem for path in Path(__file__).resolve().parent.glob("*.py")}
    named = re.compile(r"makepyfile\((?:\*\*\{)?[\"']?(\w+)[\"']?\s*[=:]")
    clashes = [f"{path.name}: {name}" for path in sorted(Path(__file__).resolve().parent.glob("test_*.py"))
               for name in named.findall(path.read_text(encoding="utf-8")) if name in suite]
    assert not clashes, clashes
