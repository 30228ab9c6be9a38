"""A/B mode reports like stored mode: the HTML page's "Against the baseline" table and the Markdown
summary's gate line and regressions come from the twins measured in the job itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from edge_helpers import write_mlp

from pytest_edge.report.ab_baseline import twin_baseline
from pytest_edge.report.html import render_html
from pytest_edge.report import build_report
from pytest_edge.report.markdown import markdown_summary

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def _record(p50: float, twin_p50: float | None) -> dict[str, Any]:
    record: dict[str, Any] = {
        "test": "tests/test_m.py::test_m[m-onnxruntime-cpu]", "model": {"name": "m", "artifact": "models/m.onnx"},
        "backend": "onnxruntime-cpu", "verdict": "passed", "violations": [],
        "coverage": {"total_ops": 3, "delegated_ops": 3, "fallback_ops": 0, "fallback": 0.0, "partitions": 1},
        "latency_ms": {"p50": p50, "p90": p50, "p99": p50 * 1.5, "mean": p50, "min": p50},
        "latency_quantiles_ms": [p50 * (0.9 + 0.2 * i / 100) for i in range(101)],
        "load_ms": 2.0, "peak_memory_mb": 5.0, "accuracy": {"reference": "onnxruntime-cpu", "max_abs_err": 0.0}}
    if twin_p50 is not None:
        record["baseline_check"] = {
            "mode": "ab", "baseline": "main/m.onnx", "verdict": "passed", "remeasured": False,
            "twin": {"latency_ms": {"p50": twin_p50, "p90": twin_p50, "p99": twin_p50 * 1.5, "mean": twin_p50,
                                    "min": twin_p50},
                     "latency_quantiles_ms": [twin_p50] * 101, "peak_memory_mb": 5.0, "load_ms": 2.0,
                     "coverage": record["coverage"]}}
    return record


def _report(*records: dict[str, Any]) -> dict[str, Any]:
    return build_report(list(records), {"cpu": "Test CPU", "cores": 2})


def test_twins_become_the_pages_baseline() -> None:
    report = _report(_record(1.5, 1.0))
    baseline = twin_baseline(report)
    assert baseline is not None and baseline["records"][0]["latency_ms"]["p50"] == 1.0
    assert baseline["created"] == "this job (A/B against main)"
    page = render_html(report)
    assert "Against the baseline" in page and "+50.0%" in page
    assert "Regressions against the baseline (1)" in page
    summary = markdown_summary(report)
    assert "1 regressed against the baseline" in summary.splitlines()[0]
    assert "merge gate (A/B against main): 1 compared, 0 regressed, 0 inconclusive" in summary
    assert "### Regressions against the baseline" in summary and "P50 +50.0%" in summary
    # A stored baseline given explicitly still wins; a report without A/B records has none.
    assert "P50 +0.0%" not in markdown_summary(report, _report(_record(1.5, None)))
    assert "regressed against the baseline" not in markdown_summary(_report(_record(1.5, None)))
    assert twin_baseline(_report(_record(1.5, None))) is None


def test_ab_run_writes_the_baseline_table_and_the_gate_line(pytester: pytest.Pytester) -> None:
    """A real A/B run whose model is 4x the work of its twin: the page and the summary written by
    the run itself (--edge-html, --edge-summary) show the change against the twin."""
    for folder, hidden in (("main", 256), ("pr", 1024)):
        (pytester.path / folder).mkdir()
        write_mlp(pytester.path / folder / "mlp.onnx", hidden)
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="mlp", backends="onnxruntime-cpu")
        def test_mlp(edge_model):
            pass
    """)
    pytester.makeini("[pytest]\nedge_model_dirs = pr\n")
    pytester.runpytest_subprocess("--edge-update-golden").assert_outcomes(passed=1)
    result = pytester.runpytest_subprocess("--edge-baseline-models=main", "--edge-processes=2",
                                           "--edge-min-time=0.05s", "--edge-report=r.json", "--edge-html=r.html",
                                           "--edge-summary=r.md")
    result.assert_outcomes(failed=1)
    record = json.loads((pytester.path / "r.json").read_text())["records"][0]
    twin = record["baseline_check"]["twin"]
    assert twin["latency_ms"]["p50"] < record["latency_ms"]["p50"] and len(twin["latency_quantiles_ms"]) == 101
    page = (pytester.path / "r.html").read_text()
    assert "Against the baseline" in page and "Regressions against the baseline (1)" in page
    assert "baseline of this job (A/B against main)" in page
    summary = (pytester.path / "r.md").read_text()
    assert "merge gate (A/B against main): 1 compared, 1 regressed" in summary
    assert "### Regressions against the baseline" in summary and "P50 +" in summary
