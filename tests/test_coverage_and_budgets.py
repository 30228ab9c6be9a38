"""Delegate coverage and the budget checks (checks/, backends)."""


from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_edge.backends import Coverage
from pytest_edge.backends.litert.backend import delegate_coverage
from pytest_edge.checks import (
    check_coverage,
    check_drift,
    check_latency,
    check_memory,
)
from pytest_edge.measurement.combined import combine_processes
from pytest_edge.measurement.timing import (DRIFT_MIN_TIME_S, ProcessTiming, drift, latency_stats,
                                            probe_drift)

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
    problems = _messages(check_coverage(cov, {"max_fallback": 0.05, "max_partitions": 2}, "litert"))
    assert "fallback 25.0% (2 of 8 operators on default CPU kernels) > max_fallback 5.0%" in problems[0]
    assert "CUMSUM x1, TOPK x1" in problems[0] and "3 delegate partitions" in problems[1]
    assert check_coverage(cov, {"max_fallback": 0.25, "max_partitions": 3}, "litert") == []


def test_latency_and_memory_budget_messages() -> None:
    latency = latency_stats([1_000_000] * 19 + [5_000_000])
    assert latency["p50"] == pytest.approx(1.0) and latency["min"] == pytest.approx(1.0)
    problems = check_latency(latency, 20, {"p50_ms": 0.5, "p99_ms": 10.0}, "executorch")
    assert len(problems) == 1 and "P50 latency 1.000 ms > p50_ms 0.5 ms (over 20 runs)" in problems[0].message
    assert (problems[0].check, problems[0].figure, problems[0].value, problems[0].budget, problems[0].unit) == \
        ("p50_ms", "P50 latency", pytest.approx(1.0), 0.5, "ms")
    weak = check_latency(latency, 20, {"p99_ms": 1.0}, "executorch")[0].message
    assert "weak evidence: P99 from only 20 runs" in weak
    unmeasured = check_memory(None, {"peak_memory_mb": 64}, "litert")[0]
    assert "could not be measured" in unmeasured.message and unmeasured.value is None


MS = 1_000_000  # ns


def test_drift_is_judged_on_windows_of_time_not_of_run_count() -> None:
    # 0.5 s of 1 ms runs, then 0.5 s of 2 ms runs: the last fifth of the time is twice as slow.
    assert drift([MS] * 500 + [2 * MS] * 250) == pytest.approx(2.0)
    # A burst of 20 slow runs (20 ms of 1 s) inside the first window moves its median by nothing.
    assert drift([MS] * 50 + [10 * MS] * 20 + [MS] * 930) == pytest.approx(1.0)
    # Two thousand 20 us runs (40 ms) cannot fill two 0.05 s windows: no figure, not a made-up one.
    assert drift([20_000] * 2000) is None
    # Windows long enough but with too few runs (a 100 ms model, 1 s): no figure either.
    assert drift([100 * MS] * 10) is None and drift([]) is None


def test_the_machine_probe_drifts_over_the_same_windows() -> None:
    samples = [MS] * 1000  # 1 s of runs; a probe after every 100 runs, twice as slow in the last 0.2 s
    after = list(range(0, 1001, 100))
    probes = [100_000] * 8 + [200_000] * 3
    assert probe_drift(samples, after, probes) == pytest.approx(2.0)
    assert probe_drift([20_000] * 10, [0, 10], [1, 1]) is None


def test_drift_budget_messages() -> None:
    problem = check_drift(1.25, {"max_drift": 1.1}, [1.25], "litert", probe_drift=1.01)
    problem = _messages(problem)
    assert len(problem) == 1 and problem[0].startswith(
        "litert: drift 1.250 > max_drift 1.1 (median run of the last fifth of the timed time over the first fifth, "
        "one process: no spread to judge it against)")
    assert problem[0].endswith("the machine probe drifted 1.01 over the same windows")
    assert check_drift(1.1, {"max_drift": 1.1}, [1.1], "litert") == []  # at the budget passes, as the other budgets do
    # The machine slowed down too (its probe drifted 1.18): the model's own drift is 1.54 / 1.18 = 1.30.
    assert check_drift(1.539, {"max_drift": 1.5}, [1.539], "onnxruntime-cpu", probe_drift=1.18) == []
    assert len(check_drift(2.0, {"max_drift": 1.5}, [2.0], "onnxruntime-cpu", probe_drift=1.18)) == 1  # 1.69 of its own
    assert len(check_drift(1.6, {"max_drift": 1.5}, [1.6], "onnxruntime-cpu", probe_drift=0.8)) == 1  # a faster probe is no excuse
    assert check_drift(0.7, {"max_drift": 1.1}, [0.7], "litert") == []  # faster at the end is no drift problem
    assert check_drift(None, {"max_drift": None}, [], "litert") == [] and check_drift(9.0, {"max_drift": None}, [9.0], "litert") == []
    unmeasured = check_drift(None, {"max_drift": 1.1}, [None], "onnxruntime-cpu")
    assert _messages(unmeasured) == [f"onnxruntime-cpu: drift was not measured (max_drift=1.1): the first and last fifth of "
                          f"each process's timed runs must last 0.05 s with 5 runs at least (a max_drift test times "
                          f"{DRIFT_MIN_TIME_S:g} s per process; a slow model needs runs>=25)"]


def test_drift_over_processes_fails_only_outside_their_spread() -> None:
    # Three processes that all got 1.6x slower: significant, fails a 1.5 budget.
    (problem,) = _messages(check_drift(1.6, {"max_drift": 1.5}, [1.58, 1.6, 1.62], "litert"))
    assert "geometric mean of 3 processes: 1.58, 1.60, 1.62; t=" in problem
    # One process hit by a burst in its last window, the others steady: above the budget on
    # average, but not significant over the spread of the processes.
    assert check_drift(1.62, {"max_drift": 1.5}, [1.0, 1.0, 4.25], "litert") == []


@given(st.lists(st.floats(0.5, 3.0), min_size=2, max_size=8), st.floats(1.01, 2.5))
def test_drift_within_the_budget_never_fails(per_process: list[float], budget: float) -> None:
    measured = combine_processes([_measured(d) for d in per_process], 0.5)
    problems = check_drift(measured.drift, {"max_drift": budget}, measured.per_process_drift, "litert")
    if measured.drift <= budget:
        assert problems == []
    elif min(per_process) > budget:
        # Every process above the budget, each by at least 1 % more than the floor of the spread
        # allows for: geometric mean over budget and significant with t well over its critical value.
        if max(per_process) / min(per_process) < 1.05 and min(per_process) > 1.3:
            assert problems and "> max_drift" in problems[0].message


def _messages(findings: list) -> list[str]:
    return [finding.message for finding in findings]


def _measured(figure: float) -> ProcessTiming:
    return ProcessTiming(samples_ns=np.array([MS] * 10), latency_ms=latency_stats([MS] * 10), measured_runs=10,
                         peak_memory_mb=None, steady_memory_mb=None, other_cores_busy=None, first_inference_ms=1.0,
                         warmup_runs=1, drift=figure, probe_drift=1.0)


def test_a_graph_of_no_operators_is_judged_nothing_not_zero_fallback() -> None:
    """0 operators read is no 0 % fallback (it showed as 100 % coverage, 0 of 0): max_fallback and
    max_partitions say they judged nothing, as where coverage cannot be read."""
    from pytest_edge.backends import Coverage
    from pytest_edge.checks import check_coverage

    (finding,) = check_coverage(Coverage(0, 0, 0, 0), {"max_fallback": 0.05}, "litert")
    assert finding.check == "max_fallback" and finding.value is None
    assert "litert: the runtime counted no operators in this model, so max_fallback judged nothing" in finding.message
    assert check_coverage(Coverage(4, 4, 0, 1), {"max_fallback": 0.0}, "litert") == []
