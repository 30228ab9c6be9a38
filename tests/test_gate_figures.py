"""GateFigures.from_json (judging/figures.py): what the merge gate reads of a record, parsed once,
with bad or missing values treated as the gate always treated them. Figures only, no timing."""

from __future__ import annotations

import math
from typing import Any, Mapping

from hypothesis import example, given, settings
from hypothesis import strategies as st

from pytest_edge.judging.figures import GateFigures, ProcessFigures
from pytest_edge.judging.machine_speed import machine_slowdown
from pytest_edge.judging.regressions import _per_process, check_baseline, resource_regressions


def _per_process_as_before(record: Mapping[str, Any], key: str) -> tuple[list[float], int | None]:
    """The gate's reading of per-process figures before GateFigures, on the record's JSON (kept
    verbatim as the reference the parser must agree with)."""
    processes = record.get("processes") or []
    values = [p.get(key) for p in processes if isinstance(p, Mapping)]
    values = [float(v) for v in values if isinstance(v, (int, float)) and v > 0]
    runs = [p.get("runs") for p in processes if isinstance(p, Mapping)]
    if values:
        fewest = min((r for r in runs if isinstance(r, int)), default=None)
        return values, fewest
    pooled = (record.get("latency_ms") or {}).get(key) if isinstance(record.get("latency_ms"), Mapping) else None
    if isinstance(pooled, (int, float)) and pooled > 0:
        runs_total = record.get("measured_runs")
        return [float(pooled)], runs_total if isinstance(runs_total, int) else None
    return [], None


hostile = st.one_of(st.none(), st.booleans(), st.integers(-3, 3000), st.floats(allow_nan=True, allow_infinity=True),
                    st.floats(0.01, 10.0), st.sampled_from(["1.5", "fast", ""]), st.lists(st.integers(0, 2), max_size=2))
process = st.one_of(st.fixed_dictionaries({}, optional={"p50": hostile, "p99": hostile, "ttft_p50_ms": hostile,
                                                        "tpot_p50_ms": hostile, "runs": hostile}), hostile)
records = st.fixed_dictionaries({"backend": st.just("b")}, optional={
    "processes": st.one_of(st.lists(process, min_size=1, max_size=5), st.lists(process, max_size=5),
                           st.sampled_from(["abc", "", None]), st.just({"p50": 1.0})),
    "latency_ms": st.one_of(st.fixed_dictionaries({}, optional={"p50": hostile, "p99": hostile}), hostile),
    "measured_runs": hostile})


@settings(max_examples=400, deadline=None)
@given(records)
@example({"backend": "b", "processes": [{"p50": True, "runs": 0}, {"p50": 1.0, "runs": -1}, "x",
                                        {"p99": float("nan"), "runs": True}], "latency_ms": {"p99": 2.0}})
def test_per_process_figures_are_read_as_before(record: dict) -> None:
    """Strings, NaN, negatives, zero, bools, processes that are not objects, a missing list: each
    process figure and run count the gate reads is the one it read from the JSON before."""
    figures = GateFigures.from_json(record)
    for key in ("p50", "p99", "ttft_p50_ms", "tpot_p50_ms"):
        values, runs = _per_process(figures, key)
        expected_values, expected_runs = _per_process_as_before(record, key)
        assert values == expected_values and repr(runs) == repr(expected_runs), key


def test_hostile_resource_figures_are_absent_never_judged() -> None:
    """A figure that is not a number (a string, null, true, a list) is absent: nothing is judged
    against it, nothing raises."""
    good = {"backend": "b", "peak_memory_mb": 10.0, "artifact_bytes": 1000, "coverage": {"fallback": 0.0},
            "npu": {"memories": {"sram": 1024}}}
    grown = {"backend": "b", "peak_memory_mb": 50.0, "artifact_bytes": 5000, "coverage": {"fallback": 0.5},
             "npu": {"memories": {"sram": 4096}}}
    assert len(resource_regressions(GateFigures.from_json(grown), GateFigures.from_json(good), 0.1)) == 4
    # NaN and Inf are not figures either (a NaN SRAM in a stored report once failed as "none before").
    for bad in ("10", None, True, [10.0], float("nan"), float("inf")):
        hostile_old = {"backend": "b", "peak_memory_mb": bad, "artifact_bytes": bad, "coverage": {"fallback": bad},
                       "npu": {"memories": {"sram": bad}}}
        figures = GateFigures.from_json(hostile_old)
        assert (figures.peak_memory_mb, figures.artifact_bytes, figures.fallback, dict(figures.npu_memories)) == \
            (None, None, None, {})
        assert resource_regressions(GateFigures.from_json(grown), figures, 0.1) == []
        assert check_baseline(GateFigures.from_json(grown), figures, 0.1) == []
    # A negative or zero baseline is a number, but no ratio is taken against it (as before).
    zero = {"backend": "b", "peak_memory_mb": 0.0, "artifact_bytes": -5}
    assert [r.figure for r in resource_regressions(GateFigures.from_json(grown), GateFigures.from_json(zero), 0.1)] == []
    # An artifact's size stays as written: an int is printed as one in the message.
    (size,) = [r for r in resource_regressions(GateFigures.from_json(grown), GateFigures.from_json(good), 0.1)
               if r.figure == "artifact size"]
    assert "is 5000 bytes" in size.message and "baseline 1000 bytes" in size.message


def test_processes_keep_their_place_and_missing_processes_fall_back_to_the_pooled_figure() -> None:
    """A process written as something other than an object keeps its place (A/B pairs stay aligned
    for the slower-machine rule); a record with no per-process figure is one process, its pooled P50."""
    figures = GateFigures.from_json({"backend": "b", "processes": [{"p50": 1.0, "probe_us": 100.0}, "junk",
                                                                   {"p50": -1.0, "probe_us": float("nan")}]})
    assert figures.processes[1] == ProcessFigures() and [p.timed for p in figures.processes] == [{"p50": 1.0}, {}, {}]
    assert [p.probe_us for p in figures.processes] == [100.0, None, None]
    pooled = GateFigures.from_json({"backend": "b", "latency_ms": {"p50": 2.0}, "measured_runs": 40})
    assert _per_process(pooled, "p50") == ([2.0], 40) and _per_process(pooled, "p99") == ([], None)
    assert _per_process(GateFigures.from_json({"backend": "b", "latency_ms": "2.0"}), "p50") == ([], None)
    slower = GateFigures.from_json({"backend": "b", "processes": [{"probe_us": 130.0}, {"probe_us": "x"}]})
    assert math.isclose(machine_slowdown(figures, slower) or 0.0, 1.3)
