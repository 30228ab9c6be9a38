"""Issue #48: the lenient stored blocks that had hand-written to_json/from_json pairs go through the
codec (``codec.layout(lenient=True)``). Each block below is what the hand-written code wrote (built
with it before the change, kept as a literal): it reads back and writes again byte for byte, and a
block of an older or edited report (keys missing, of another type, unknown) still reads."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_edge import codec
from pytest_edge.backends.compiled import Compilation, CompiledOperator
from pytest_edge.backends.tensors import Coverage
from pytest_edge.measurement.counts import CountedMeasurement, ProcessCount

# CountedMeasurement.to_json() at 41a1c88: the cache simulation on (process 0's cache as the worker
# counted it, integers), and off (no cache key, a process of no per-run counts).
COUNTED = (
    '{"tool": "callgrind", "version": "valgrind-3.22.0", "instructions": 1234567.5, "cache": {"D1mr": 120.0, '
    '"Dr": 3456.0}, "runs": 20, "warmup_runs": 2, "spread": 0.0012, "processes": [{"instructions": 1234000, '
    '"cache": {"D1mr": 118, "Dr": 3450}, "run_spread": 0.0004, "run_instructions": [1234000, 1234400.0]}, '
    '{"instructions": 1235135.0, "run_spread": 0.0, "run_instructions": [1235135.0]}]}',
    '{"tool": "callgrind", "version": "valgrind-3.22.0", "instructions": 99.0, "runs": 5, "warmup_runs": 1, '
    '"spread": 0.0, "processes": [{"instructions": 99, "run_spread": null, "run_instructions": null}]}',
)

# Compilation.to_json() at 41a1c88 (the record's npu block; its coverage is the record's): vela's,
# and a .pte's without vela's report.
NPU = (
    '{"target": "ethos-u55-128", "compiler": "vela 5.2.0", "settings": {"accelerator_config": "ethos-u55-128", '
    '"system_config": "Ethos_U55_High_End_Embedded", "memory_mode": "Shared_Sram"}, "executed": false, '
    '"sram_bytes": 40960, "flash_bytes": 123904, "memories": {"sram": 40960, "off_chip_flash": 123904}, '
    '"clock_hz": 500000000.0, "estimated_cycles": 123456, "estimated_ms": 0.246912, "estimate_note": '
    '"the NPU\'s operators only", "macs": 987654, "operators": [{"op": "Conv2D", "name": "Relu;add;Conv2D", '
    '"placed_on": "NPU", "estimated_cycles": 1200}, {"op": "SOFTMAX", "name": "out", "placed_on": "CPU", '
    '"estimated_cycles": null}]}',
    '{"target": "ethos-u85-256", "compiler": "vela (at export, by ExecuTorch\'s Arm backend)", "settings": {}, '
    '"executed": false, "sram_bytes": null, "flash_bytes": null, "memories": {}, "clock_hz": null, '
    '"estimated_cycles": null, "estimated_ms": null, "estimate_note": "", "macs": null, "operators": []}',
)


@pytest.mark.parametrize("text", COUNTED)
def test_a_counted_block_of_the_hand_written_code_reads_back_byte_for_byte(text: str) -> None:
    found = codec.from_json(CountedMeasurement, json.loads(text), "a report's counted block")
    assert json.dumps(codec.to_json(found)) == text
    assert CountedMeasurement.of({"counted": json.loads(text)}) == found


def test_the_counted_block_read_is_the_measurement_written() -> None:
    found = codec.from_json(CountedMeasurement, json.loads(COUNTED[0]), "x")
    assert found == CountedMeasurement("callgrind", "valgrind-3.22.0", 1234567.5, {"D1mr": 120.0, "Dr": 3456.0}, 20, 2,
                                       0.0012, (ProcessCount(1234000, {"D1mr": 118, "Dr": 3450}, 0.0004,
                                                             [1234000, 1234400.0]),
                                                ProcessCount(1235135.0, None, 0.0, [1235135.0])))
    assert type(found.processes[0].instructions) is int  # kept as written


@pytest.mark.parametrize("block, expected", [
    ({}, CountedMeasurement()),  # an older report's: every figure unknown
    ({"instructions": 5.0, "newer": {"x": 1}}, CountedMeasurement(instructions=5.0)),
    ({"instructions": "5", "runs": 2.5, "spread": None, "tool": 3}, CountedMeasurement()),
    ({"instructions": 5.0, "processes": 7}, CountedMeasurement(instructions=5.0)),
    ({"processes": ["x", {"run_instructions": ["x", 1.0]}, {"instructions": 1, "cache": []}]},
     CountedMeasurement(processes=(ProcessCount(), ProcessCount(), ProcessCount(1)))),
])
def test_an_older_or_edited_counted_block_still_reads(block: dict[str, Any], expected: CountedMeasurement) -> None:
    assert codec.from_json(CountedMeasurement, block, "x") == expected


COVERAGE = Coverage(3, 2, 1, 1, method="compiler")


@pytest.mark.parametrize("text", NPU)
def test_an_npu_block_of_the_hand_written_code_reads_back_byte_for_byte(text: str) -> None:
    found = Compilation.of_record(json.loads(text), codec.to_json(COVERAGE))
    assert json.dumps(codec.to_json(found)) == text and found.coverage == COVERAGE


def test_the_npu_block_read_is_the_compilation_written() -> None:
    found = Compilation.of_record(json.loads(NPU[0]), codec.to_json(COVERAGE))
    assert found == Compilation(
        "ethos-u55-128", "vela 5.2.0", {"accelerator_config": "ethos-u55-128",
                                        "system_config": "Ethos_U55_High_End_Embedded", "memory_mode": "Shared_Sram"},
        COVERAGE, sram_bytes=40960, flash_bytes=123904, memories={"sram": 40960, "off_chip_flash": 123904},
        clock_hz=500000000.0, estimated_cycles=123456, estimated_ms=0.246912, macs=987654,
        operators=[CompiledOperator("Conv2D", "Relu;add;Conv2D", "NPU", 1200), CompiledOperator("SOFTMAX", "out", "CPU")],
        estimate_note="the NPU's operators only")


@pytest.mark.parametrize("block, coverage, expected", [
    ({}, None, Compilation()),  # no coverage or none readable: the compiler's empty one
    ({"target": "t", "executed": True, "newer": 1}, {"total_ops": "x"}, Compilation("t")),
    ({"settings": {"a": 1}, "memories": {"sram": "1"}, "clock_hz": "fast", "operators": {"op": "x"}}, [], Compilation()),
    ({"operators": ["x", {"op": "Conv2D", "estimated_cycles": 1.5}, {"op": "A", "name": "n", "placed_on": "CPU"}]},
     None, Compilation(operators=[CompiledOperator(), CompiledOperator("Conv2D"), CompiledOperator("A", "n", "CPU")])),
])
def test_an_older_or_edited_npu_block_still_reads(block: dict[str, Any], coverage: Any, expected: Compilation) -> None:
    found = Compilation.of_record(block, coverage)
    assert found == expected and found.coverage == Coverage(0, 0, 0, 0, method="compiler")


# What the other hand-written writers wrote at 41a1c88: GateFinding.to_json() (baseline_check.findings)
# and AnalysisRow.to_json() (an rknn backend's Intermediates.details["layers"]).
FINDING = ('{"figure": "P50 latency", "verdict": "passed", "old": 1.0, "new": 1.5, "threshold": 0.1, '
           '"statistic": "Mann-Whitney U p=0.001", "rule": "stored", "message": "slower"}')
ROW = '{"name": "a", "op": "Conv", "cosine": 0.99, "euclidean": 0.1, "entire_cosine": 0.98, "entire_euclidean": null}'


def test_the_gates_finding_and_an_analysis_row_write_as_before() -> None:
    from pytest_edge.backends.rknn.analysis import AnalysisRow
    from pytest_edge.core.record import GateVerdict
    from pytest_edge.judging.regressions import GateFinding
    from pytest_edge.triage.layers import LayerFigure

    finding = GateFinding("P50 latency", GateVerdict.PASSED, 1.0, 1.5, 0.1, "Mann-Whitney U p=0.001", "stored", "slower")
    assert json.dumps(codec.to_json(finding)) == FINDING
    assert codec.from_json(GateFinding, json.loads(FINDING), "x") == finding
    row = AnalysisRow("a", "Conv", 0.99, 0.1, 0.98, None)
    assert json.dumps(codec.to_json(row)) == ROW and codec.from_json(AnalysisRow, json.loads(ROW), "x") == row
    assert codec.from_json(LayerFigure, json.loads(ROW), "x") == LayerFigure("a", "Conv", 0.99, 0.1, 0.98)


def test_a_stored_coverage_without_operator_names_is_placement_not_known_not_none_on_the_cpu() -> None:
    """A hand-written or another tool's baseline whose coverage names no operators: written again
    without them, and the gate compares its fraction only; it must not read the live
    record's CPU operators as newly there (an empty list would say the baseline had none)."""
    from pytest_edge.core.record_blocks import RecordCoverage
    from pytest_edge.judging.figures import GateFigures
    from pytest_edge.judging.regressions import placement_regressions

    text = '{"total_ops": 8, "delegated_ops": 6, "fallback_ops": 2, "partitions": 1, "fallback": 0.25}'
    stored = codec.from_json(RecordCoverage, json.loads(text), "a stored record's coverage")
    assert stored.fallback_op_names is None and stored.delegated_op_ids is None and stored.fallback_reasons is None
    assert not {"fallback_op_names", "delegated_op_ids", "fallback_reasons"} & set(codec.to_json(stored))
    live = RecordCoverage.of(Coverage(8, 6, 2, 1, {"CUMSUM": 2}, ["XNNPACK"], delegated_op_ids=["ADD#0"],
                                      fallback_reasons={"CUMSUM#1": "", "CUMSUM#2": ""}))
    assert live.fallback_op_names == {"CUMSUM": 2}  # a live record names them
    mine = GateFigures.from_json({"backend": "litert", "coverage": codec.to_json(live)})
    theirs = GateFigures.from_json({"backend": "litert", "coverage": codec.to_json(stored)})
    assert theirs.fallback_op_names is None
    assert placement_regressions(mine, theirs) == []  # the same fraction; no names to compare
