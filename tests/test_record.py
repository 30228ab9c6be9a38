"""The typed record (record.py) and the plan (plan.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_edge.core.marker import parse_marker
from pytest_edge.core.models import Model
from pytest_edge.core.plan import backend_choices, plan_for
from pytest_edge.core.record import COMPILE_ONLY, NOT_MEASURED, GateVerdict, Record, TimingNotJudged, Verdict
from pytest_edge.core.settings import Settings

MODEL = {"name": "m", "artifact": "m.onnx", "sha256": "ab"}


def test_record_round_trips_and_keeps_unknown_fields() -> None:
    record = Record("t::a[m-cpu]", MODEL, "onnxruntime-cpu", latency_ms={"p50": 1.0}, accuracy={"cosine": 1.0},
                    checked=True).conclude(["too slow"])
    data = json.loads(json.dumps(record.to_json()))
    assert data["verdict"] == "failed" and data["violations"] == ["too slow"] and data["peak_memory_mb"] is None
    data["from_the_future"] = {"x": 1}
    again = Record.from_json(data)
    assert again.to_json() == data and again.conclude([]).verdict == "passed"


def test_verdicts_are_enums_whose_json_is_the_reports_string() -> None:
    """The report's strings (SPEC §6) stay as they were; read back, they are members again."""
    assert [v.value for v in Verdict] == ["passed", "failed", "error", "skipped", "does not convert"]
    assert [v.value for v in GateVerdict] == ["passed", "failed", "inconclusive", "accepted"]
    record = Record("t", MODEL, "litert", checked=True, accuracy={}, timing_not_judged=COMPILE_ONLY).conclude(["x"])
    text = json.dumps(record.to_json())
    data = json.loads(text)
    assert data["verdict"] == "failed" and type(record.to_json()["verdict"]) is str  # xdist sends plain JSON
    assert data["timing_not_judged"] == COMPILE_ONLY.reason and "compile only" not in text
    again = Record.from_json(data)
    assert again.verdict is Verdict.FAILED and again.timing_not_judged is COMPILE_ONLY and again.extra == {}
    assert again.to_json() == data
    skipped = Record.from_json(Record.skipped("t", MODEL, "litert", "no .tflite").to_json())
    assert skipped.verdict is Verdict.SKIPPED and skipped.verdict == "skipped"  # equal to a stored report's string
    # A policy is no string: written to JSON without its reason it fails, never writes a name no report has.
    with pytest.raises(TypeError):
        json.dumps({"timing_not_judged": NOT_MEASURED})
    assert str(NOT_MEASURED) == NOT_MEASURED.reason and TimingNotJudged.from_json(NOT_MEASURED.reason, "r") is NOT_MEASURED


@pytest.mark.parametrize("field, value, detail", [
    ("verdict", "great", "unknown verdict 'great'"),
    ("verdict", 1, "unknown verdict '1'"),
    ("timing_not_judged", "an emulator's timing", "unknown timing_not_judged"),
])
def test_a_stored_record_of_no_known_verdict_or_policy_is_refused_naming_where(field: str, value: object,
                                                                              detail: str) -> None:
    data = {**Record("t", MODEL, "litert").to_json(), field: value}
    with pytest.raises(ValueError, match="baseline.json record 3") as error:
        Record.from_json(data, "baseline.json record 3")
    assert detail in str(error.value), str(error.value)


def test_short_records_say_who_what_and_why() -> None:
    assert Record.skipped("t", MODEL, "litert", "no .tflite artifact").to_json() == {
        "test": "t", "model": MODEL, "backend": "litert", "verdict": "skipped", "violations": [],
        "skip_reason": "no .tflite artifact"}
    failed = Record.body_failed("t", MODEL, "litert", AssertionError("x")).to_json()
    assert failed["verdict"] == "failed" and failed["violations"] == ["the test body failed: AssertionError"]
    assert Record.errored("t", MODEL, "litert", "corrupt").to_json()["verdict"] == "error"


def test_junit_properties_leave_out_what_was_not_measured() -> None:
    props = dict(Record("t", MODEL, "litert", coverage={"fallback": 0.25, "partitions": 1}, checked=True)
                 .junit_properties())
    assert props == {"edge_backend": "litert", "edge_verdict": "passed", "edge_fallback": 0.25, "edge_partitions": 1}
    assert type(props["edge_verdict"]) is str  # pytest-xdist's serializer refuses a str subclass (an enum)


def test_plan_resolves_marker_and_settings(tmp_path: Path) -> None:
    (tmp_path / "m.onnx").write_bytes(b"x")
    model = Model("m", {".onnx": tmp_path / "m.onnx"})
    settings = Settings(golden_dir=tmp_path, rootdir=tmp_path, runs=50, atol=1e-4)
    marker = parse_marker((), {"model": "m", "runs": 7, "atol": 0.5, "tolerances": {"litert": {"atol": 2}},
                               "p50_ms": 5})
    plan = plan_for(settings, marker, model, "onnxruntime-cpu", tmp_path)
    assert (plan.runs, plan.warmup, plan.threads, plan.measure) == (7, 5, 1, True)
    assert plan.tolerance("y").atol == 0.5 and plan.tolerance("y", "litert").atol == 2
    assert plan.on("litert").backend == "litert" and plan.on("litert").runs == 7
    choices = dict(backend_choices(settings, marker, model))
    assert choices["onnxruntime-cpu"] is None and choices["litert"] == "no .tflite artifact for m"
