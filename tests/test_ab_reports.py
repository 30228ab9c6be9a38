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
from pytest_edge.core.record import Record
from pytest_edge.report import Report, build_report
from pytest_edge.report.markdown import markdown_summary
from pytest_edge.measurement.machine import Machine

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def _record(p50: float, twin_p50: float | None, failed: tuple[str, ...] = (), peak: float = 5.0,
            judged_p50: float | None = None) -> dict[str, Any]:
    """A recorded A/B record: its P50 and the twin's, and the figures the gate failed (its findings);
    ``judged_p50``: the P50 the gate judged (geometric mean of process P50s), where it is not the pooled one."""
    record: dict[str, Any] = {
        "test": "tests/test_m.py::test_m[m-onnxruntime-cpu]", "model": {"name": "m", "artifact": "models/m.onnx"},
        "backend": "onnxruntime-cpu", "verdict": "failed" if failed else "passed", "violations": [],
        "coverage": {"total_ops": 3, "delegated_ops": 3, "fallback_ops": 0, "fallback": 0.0, "partitions": 1},
        "latency_ms": {"p50": p50, "p90": p50, "p99": p50 * 1.5, "mean": p50, "min": p50},
        "latency_quantiles_ms": [p50 * (0.9 + 0.2 * i / 100) for i in range(101)],
        "load_ms": 2.0, "peak_memory_mb": peak, "accuracy": {"reference": "onnxruntime-cpu", "max_abs_err": 0.0}}
    if twin_p50 is not None:
        judged = {"P50 latency": (twin_p50, judged_p50 or p50), "peak memory": (5.0, peak)}
        findings = [{"figure": f, "verdict": "failed", "old": judged[f][0], "new": judged[f][1], "threshold": 0.1,
                     "statistic": "paired t=28.30 over 7 A/B pairs, needs > 1.94", "rule": "A/B",
                     "message": f"onnxruntime-cpu: {f} ..."} for f in failed]
        record["baseline_check"] = {
            "mode": "ab", "baseline": "main/m.onnx", "verdict": "failed" if failed else "passed", "remeasured": False,
            "findings": findings,
            "twin": {"latency_ms": {"p50": twin_p50, "p90": twin_p50, "p99": twin_p50 * 1.5, "mean": twin_p50,
                                    "min": twin_p50},
                     "latency_quantiles_ms": [twin_p50] * 101, "peak_memory_mb": 5.0, "load_ms": 2.0,
                     "coverage": record["coverage"]}}
    return record


def _report(*records: dict[str, Any]) -> Report:
    return build_report([Record.from_json(r) for r in records], Machine(cpu="Test CPU", cores=2))


def test_twins_become_the_pages_baseline() -> None:
    report = _report(_record(1.5, 1.0, failed=("P50 latency",)))
    baseline = twin_baseline(report)
    assert baseline is not None and baseline.records[0].latency_ms == {**_record(1.0, None)["latency_ms"]}
    assert baseline.created == "this job (A/B against main)"
    page = render_html(report)
    assert "Against the baseline" in page and "+50.0%" in page
    assert "Regressions against the baseline (1)" in page and 'class="n bad"' in page
    summary = markdown_summary(report)
    assert "1 regressed against the baseline" in summary.splitlines()[0]
    assert "merge gate (A/B against main): 1 compared, 1 regressed, 0 inconclusive" in summary
    assert "### Regressions against the baseline" in summary and "P50 +50.0%" in summary
    assert "**1.500 (+50.0%)**" in summary
    # A stored baseline given explicitly still wins; a report without A/B records has none.
    against_stored = markdown_summary(report, _report(_record(1.5, None)))
    assert "P50 +0.0%" not in against_stored and "regressed against the baseline" not in against_stored
    assert "regressed against the baseline" not in markdown_summary(_report(_record(1.5, None)))
    assert twin_baseline(_report(_record(1.5, None))) is None


def test_a_figure_the_gate_passed_is_never_called_regressed() -> None:
    """+20 % P50 that the gate passed (not significant over its pairs): every page shows the change and
    none marks it; the headline counts 0 regressed, as the gate's own line does."""
    report = _report(_record(1.2, 1.0))
    page = render_html(report)
    assert "+20.0%" in page and "0 record(s) regressed" in page and 'class="n bad"' not in page
    assert "Regressions against the baseline" not in page and "a comparison" not in page.split("Overview")[1][:600]
    summary = markdown_summary(report)
    assert "0 regressed against the baseline" in summary.splitlines()[0]
    assert "1.200 (+20.0%)" in summary and "**1.200" not in summary and "### Regressions" not in summary


def test_every_figure_the_gate_failed_is_marked_whatever_the_stored_rule_says() -> None:
    """The gate failed P50 on 7 A/B pairs; on the pooled figures alone (one number per side) the stored
    rule could not call it significant. The pages repeat the gate: P50 marked in the table and listed."""
    report = _report(_record(2.44, 1.0, failed=("P50 latency", "peak memory"), peak=9.0))
    summary = markdown_summary(report)
    section = summary.split("### Regressions against the baseline")[1]
    assert "P50 +144.0%" in section and "peak memory +80.0%" in section
    assert "**2.440 (+144.0%)**" in summary and "**9.0 (+80.0%)**" in summary
    page = render_html(report)
    assert page.count('class="n bad"') == 2


def test_the_pages_show_the_percentage_the_gate_judged() -> None:
    """The gate judges the geometric mean of the process P50s (+54.1 %); the pooled runs' P50 reads
    +50.6 %. The failure message, the table and the list all say +54.1 % (the P99 column, judged by
    no one here, keeps its pooled figure)."""
    report = _report(_record(1.506, 1.0, failed=("P50 latency",), judged_p50=1.541))
    summary = markdown_summary(report)
    assert "P50 +54.1%" in summary.split("### Regressions against the baseline")[1]
    assert "**1.506 (+54.1%)**" in summary and "1.506 (+50.6%)" not in summary  # the P50 as tabulated, the change as judged
    page = render_html(report)
    assert "+54.1%" in page and "P50 +50.6%" not in page


def test_a_stored_baseline_without_a_gate_is_a_comparison_not_a_verdict() -> None:
    """``pytest-edge report summary --baseline old.json`` of a run where no gate ran: figures past the
    threshold are shown as a comparison, not as regressions."""
    new = _record(1.5, None)
    new["processes"] = [{"p50": v, "runs": 5000} for v in (1.5, 1.51, 1.49)]
    old = _record(1.0, None)
    old["processes"] = [{"p50": v, "runs": 5000} for v in (1.0, 1.01, 0.99)]
    summary = markdown_summary(_report(new), _report(old))
    assert "regressed" not in summary and "1 changed beyond 10% against the baseline (comparison)" in summary
    assert "_1.500 (+50.0%)_" in summary and "no merge gate judged these records" in summary
    page = render_html(_report(new), _report(old))
    assert "regressed" not in page and "1 record(s) changed beyond 10%" in page and 'class="n changed"' in page


def _ab_project(pytester: pytest.Pytester, model: str, backends: str, write: Any, ini: str = "") -> None:
    """main/ and pr/ each with ``write(folder, side)``'s artifact, a test of ``model`` on ``backends``,
    the goldens recorded from pr/."""
    for side in ("main", "pr"):
        (pytester.path / side).mkdir()
        write(pytester.path / side, side)
    pytester.makepyfile(f"""
        import pytest
        @pytest.mark.edge(model="{model}", backends="{backends}")
        def test_model(edge_model):
            pass
    """)
    pytester.makeini("[pytest]\nedge_model_dirs = pr\n" + ini)
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=len(backends.split(",")))


def test_ab_run_writes_the_baseline_table_and_the_gate_line(pytester: pytest.Pytester) -> None:
    """A real A/B run whose model is 4x the work of its twin: the page and the summary written by
    the run itself (--edge-html, --edge-summary) show the change against the twin."""
    _ab_project(pytester, "mlp", "onnxruntime-cpu",
                lambda folder, side: write_mlp(folder / "mlp.onnx", 256 if side == "main" else 1024))
    result = pytester.runpytest_inprocess("--edge-baseline-models=main", "--edge-processes=2",
                                           "--edge-min-time=0.05s", "--edge-report=r.json", "--edge-html=r.html",
                                           "--edge-summary=r.md")
    result.assert_outcomes(failed=1)
    record = json.loads((pytester.path / "r.json").read_text())["records"][0]
    twin = record["baseline_check"]["twin"]
    assert twin["latency_ms"]["p50"] > 0 and len(twin["latency_quantiles_ms"]) == 101
    assert twin["artifact_bytes"] < record["artifact_bytes"]
    page = (pytester.path / "r.html").read_text()
    assert "Against the baseline" in page and "Regressions against the baseline (1)" in page
    assert "baseline of this job (A/B against main)" in page
    summary = (pytester.path / "r.md").read_text()
    assert "merge gate (A/B against main): 1 compared, 1 regressed" in summary
    # The artifact is 4x the twin's (exact, whatever the machine's load): the gate fails it; what else it
    # failed depends on the timings, and the pages repeat exactly that, nothing judged again.
    failed = {f["figure"] for f in record["baseline_check"]["findings"]}
    assert "artifact size" in failed and record["baseline_check"]["verdict"] == "failed"
    section = summary.split("### Regressions against the baseline")[1]
    shown = {"P50 latency": "P50 ", "P99 latency": "P99 ", "peak memory": "peak memory ", "artifact size": "artifact size "}
    for figure, text in shown.items():
        assert (text in section) == (figure in failed), (figure, failed, section)


def test_each_records_twin_is_its_own_backends(pytester: pytest.Pytester) -> None:
    """litert and litert-ref load the same .tflite twin: each record's twin coverage is its own backend's
    (XNNPACK takes tiny_cnn's convolutions on litert; litert-ref has no delegate), so an unchanged twin
    reads the same fallback as the record on both."""
    fixture = Path(__file__).parent.parent / "fixtures" / "tiny_cnn.tflite"
    _ab_project(pytester, "tiny_cnn", "litert,litert-ref",
                lambda folder, side: (folder / "tiny_cnn.tflite").write_bytes(fixture.read_bytes()),
                ini="edge_reference_backend = litert-ref\n")
    result = pytester.runpytest_inprocess("--edge-baseline-models=main", "--edge-processes=1",
                                           "--edge-min-time=0.02s", "--edge-report=r.json")
    records = {r["backend"]: r for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    assert set(records) == {"litert", "litert-ref"}, result.stdout.str()
    for backend, record in records.items():
        twin = record["baseline_check"]["twin"]["coverage"]
        assert twin["fallback"] == record["coverage"]["fallback"], backend
    assert records["litert"]["coverage"]["fallback"] < records["litert-ref"]["coverage"]["fallback"]
