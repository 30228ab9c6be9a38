"""Delegate coverage and the budget checks (checks.py, backends)."""


from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_edge.backends import Coverage
from pytest_edge.backends.litert_backend import delegate_coverage
from pytest_edge.checks import (
    check_coverage,
    check_drift,
    check_latency,
    check_memory,
)
from pytest_edge.measure import drift, latency_stats

# ---------------------------------------------------------------- coverage and budgets


def _op(index: int, name: str, inputs: list[int], outputs: list[int]) -> dict:
    return {"index": index, "op_name": name, "inputs": inputs, "outputs": outputs}


def test_litert_coverage_from_delegate_boundaries() -> None:
    # x(0) -> CONV(1) -> RELU(2) -> CUMSUM(3) -> FC(4) -> out(5); two partitions around CUMSUM
    ops = [_op(0, "CONV_2D", [0, 10], [1]), _op(1, "RELU", [1], [2]), _op(2, "CUMSUM", [2, 11], [3]),
           _op(3, "FULLY_CONNECTED", [3, 12], [4]), _op(4, "DELEGATE", [0, 10], [2]), _op(5, "DELEGATE", [3, 12], [4])]
    cov = delegate_coverage(ops, {4}, "XNNPACK")
    assert (cov.total_ops, cov.delegated_ops, cov.partitions, cov.fallback_op_names) == (4, 3, 2, {"CUMSUM": 1})


def test_litert_coverage_with_resource_variables() -> None:
    ops = [_op(0, "VAR_HANDLE", [], [1]), _op(1, "READ_VARIABLE", [1], [2]), _op(2, "ADD", [2, 0], [3]),
           _op(3, "ASSIGN_VARIABLE", [1, 3], []), _op(4, "READ_VARIABLE", [1], [4]), _op(5, "CALL_ONCE", [], []),
           _op(6, "DELEGATE", [0], [4])]
    cov = delegate_coverage(ops, {4}, "XNNPACK")
    assert (cov.total_ops, cov.delegated_ops, cov.fallback_op_names) == (6, 5, {"CALL_ONCE": 1})


def test_coverage_budget_messages() -> None:
    cov = Coverage(8, 6, 2, 3, {"CUMSUM": 1, "TOPK": 1}, ["XNNPACK"])
    problems = check_coverage(cov, 0.05, 2, "litert")
    assert "fallback 25.0% (2 of 8 operators on default CPU kernels) > max_fallback 5.0%" in problems[0]
    assert "CUMSUM x1, TOPK x1" in problems[0] and "3 delegate partitions" in problems[1]
    assert check_coverage(cov, 0.25, 3, "litert") == []


def test_latency_and_memory_budget_messages() -> None:
    latency = latency_stats([1_000_000] * 19 + [5_000_000])
    assert latency["p50"] == pytest.approx(1.0) and latency["min"] == pytest.approx(1.0)
    problems = check_latency(latency, 20, {"p50_ms": 0.5, "p99_ms": 10.0}, "executorch")
    assert len(problems) == 1 and "P50 latency 1.000 ms > p50_ms 0.5 ms (over 20 runs)" in problems[0]
    weak = check_latency(latency, 20, {"p99_ms": 1.0}, "executorch")[0]
    assert "weak evidence: P99 from only 20 runs" in weak
    assert "could not be measured" in check_memory(None, 64, "litert")[0]
    assert drift([10] * 10 + [20] * 10) == pytest.approx(2.0) and drift([1, 2]) is None


def test_drift_budget_messages() -> None:
    problem = check_drift(1.25, 1.1, 150, "litert")
    assert len(problem) == 1 and problem[0].startswith(
        "litert: drift 1.250 > max_drift 1.1 (median of the last tenth of the runs over the first tenth, "
        "over 150 timed runs)")
    assert check_drift(1.1, 1.1, 150, "litert") == []  # at the budget passes, as the other budgets do
    assert check_drift(0.7, 1.1, 150, "litert") == []  # faster at the end is no drift problem
    assert check_drift(None, None, 5, "litert") == [] and check_drift(9.0, None, 50, "litert") == []
    unmeasured = check_drift(None, 1.1, 5, "onnxruntime-cpu")
    assert unmeasured == ["onnxruntime-cpu: drift was not measured (max_drift=1.1); 5 timed runs in all; "
                          "it needs at least 10 timed runs per process (runs>=10)"]
    assert check_drift(None, 2.0, None, "litert")[0].startswith("litert: drift was not measured (max_drift=2)")


@given(st.lists(st.integers(1, 10**9), min_size=10, max_size=400),
       st.floats(min_value=1.0, max_value=100, exclude_min=True))
def test_drift_budget_fails_exactly_above_it(samples: list[int], budget: float) -> None:
    figure = drift(samples)
    assert figure is not None  # ten runs give a tenth of one run
    problems = check_drift(figure, budget, len(samples), "litert")
    assert bool(problems) == (figure > budget)
    if problems:
        assert f"max_drift {budget:g}" in problems[0] and f"over {len(samples)} timed runs" in problems[0]


@given(st.lists(st.integers(1, 10**9), max_size=9))
def test_drift_needs_ten_runs(samples: list[int]) -> None:
    assert drift(samples) is None
    assert "drift was not measured (max_drift=1.1)" in check_drift(drift(samples), 1.1, len(samples), "litert")[0]
