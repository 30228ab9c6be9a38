"""The JSON report, table, merge and compare; the baseline check (report/, checks.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge_helpers import record

from pytest_edge.judging.figures import GateFigures
from pytest_edge.judging.regressions import check_baseline
from pytest_edge.core.record import Record
from pytest_edge.report import Report, compare_reports, format_table, merge_reports, table_rows
from pytest_edge.measurement.machine import Machine

# Also run by tox -e tflite-runtime: the report on NumPy 1.x there.
pytestmark = pytest.mark.tflite_runtime_lane


def _record(p50: float, fallback: float) -> dict:
    return record("m", "litert", p50=p50, coverage={"fallback": fallback, "partitions": 1})


def test_baseline_and_compare() -> None:
    assert check_baseline(GateFigures.from_json(_record(1.05, 0.1)), GateFigures.from_json(_record(1.0, 0.1)), 0.10) == []
    problems = check_baseline(GateFigures.from_json(_record(1.2, 0.2)), GateFigures.from_json(_record(1.0, 0.1)), 0.10)
    # P50 and coverage; a tail (P99) is not gated against stored numbers
    assert len(problems) == 2 and "P50 latency" in problems[0] and "+20.0%" in problems[0]
    assert "coverage dropped" in problems[1]
    old, new = Report([Record.from_json(_record(1.0, 0.1))]), Report([Record.from_json(_record(2.0, 0.1))])
    assert len(compare_reports(old, new, 0.5)) == 1 and compare_reports(new, old, 0.5) == []


def test_merge_builds_device_backend_matrix() -> None:
    a = Report([Record.from_json(_record(1.0, 0.1))], Machine(cpu="x86"))
    b = Report([Record.from_json(_record(3.0, 0.1))], Machine(cpu="arm"))
    merged = merge_reports([a, b]).to_json()
    assert len(merged["records"]) == 2 and set(merged["matrix"]["m"]) == {"x86 [0]", "arm [1]"}
    json.dumps(merged)


def test_table_rows_show_dash_for_unmeasured() -> None:
    record = _record(1.0, 0.125)
    record["latency_ms"] = None
    (row,) = table_rows([Record.from_json(record)])
    assert row[3] == "88%" and row[5] == "—"
    assert format_table([row])[0].startswith("model")


def test_a_narrow_table_never_cuts_two_backends_to_the_same_text() -> None:
    records = []
    for backend in ("litert@here", "litert-ref@here", "onnxruntime-cpu@here"):
        record = _record(1.0, 0.1)
        record.update(backend=backend, model={"name": "a_rather_long_model_name", "artifact": "m", "sha256": None})
        records.append(Record.from_json(record))
    backends = [row[1] for row in table_rows(records, width=60)]
    assert "onnx…@here" in backends  # cut, and still its own
    assert "litert@here" in backends and "litert-ref@here" in backends  # "lite…@here" twice would hide which
    assert len(set(backends)) == 3




def test_merge_puts_device_records_in_device_rows() -> None:
    device_record = {**_record(5.0, 0.1), "backend": "litert@pi5", "device": {"name": "pi5", "machine": {}}}
    merged = merge_reports([Report([Record.from_json(_record(1.0, 0.1)), Record.from_json(device_record)],
                                   Machine(name="ci"))]).to_json()
    assert set(merged["matrix"]["m"]) == {"ci", "ci / pi5"}
    assert merged["matrix"]["m"]["ci / pi5"]["litert"]["p50_ms"] == 5.0


def test_a_report_reads_back_as_typed_records_and_writes_the_same_bytes(tmp_path: Path) -> None:
    """load_report gives Records; write_report of what it read writes the file it read (a record the
    plugin wrote, a counted one, a device's), and a merged record's machine is its last key."""
    from pytest_edge.report import load_report, write_report
    counted = {"tool": "callgrind", "version": "3", "instructions": 5.0, "runs": 3, "warmup_runs": 1, "spread": 0.0,
               "processes": []}
    records = [_record(1.0, 0.1), {**_record(2.0, 0.1), "test": "t[b]", "counted": counted},
               {**_record(3.0, 0.1), "test": "t[c]", "backend": "litert@pi5", "device": {"name": "pi5", "machine": {}}}]
    report = Report([Record.from_json(r) for r in records], Machine(cpu="x86"), "2026-12-04T00:00:00Z")
    write_report(tmp_path / "r.json", report)
    written = (tmp_path / "r.json").read_bytes()
    loaded = load_report(tmp_path / "r.json")
    assert all(isinstance(r, Record) for r in loaded.records) and loaded.records[1].counted.instructions == 5.0
    write_report(tmp_path / "again.json", loaded)
    assert (tmp_path / "again.json").read_bytes() == written
    merged = merge_reports([loaded]).to_json()
    assert [list(r)[-1] for r in merged["records"]] == ["machine"] * 3
    assert [r["machine"] for r in merged["records"]] == ["x86 [0]"] * 3


def test_a_hand_written_record_keeps_its_figures_without_an_accuracy_key() -> None:
    """Record.from_json tells a check that ran by its accuracy key; a report's reader keeps the figures
    of a record written by hand (or another tool) without one, so a merge writes them back."""
    data = {"test": "t", "model": {"name": "m"}, "backend": "litert", "verdict": "passed", "violations": [],
            "latency_ms": {"p50": 1.0}, "peak_memory_mb": 2.0}
    merged = merge_reports([Report.from_json({"records": [data], "machine": {"name": "a"}})]).to_json()
    assert merged["records"][0]["latency_ms"] == {"p50": 1.0} and merged["records"][0]["peak_memory_mb"] == 2.0


def test_a_record_no_record_holds_is_refused_naming_the_file_and_the_record(tmp_path: Path) -> None:
    from pytest_edge.report import load_report
    bad = {**_record(1.0, 0.1), "llm": {"ttft_ms": "fast"}}
    (tmp_path / "r.json").write_text(json.dumps({"schema": "pytest-edge/report/1", "records": [_record(1.0, 0.1), bad]}))
    with pytest.raises(ValueError, match=r"r\.json is not a valid pytest-edge report: record 1 \(tests/test_m\.py::"
                                         r"test_m\[m-litert\]\): llm: ttft_ms"):
        load_report(tmp_path / "r.json")
