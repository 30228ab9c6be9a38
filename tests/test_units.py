"""Unit tests of the pure modules: no pytest plugin, no runtime."""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pytest_edge.backends import Coverage, TensorSpec
from pytest_edge.backends.litert_backend import delegate_coverage
from pytest_edge.checks import check_baseline, check_coverage, check_latency, check_memory
from pytest_edge.compare import compare_output, needed_tolerances, resolve_tolerance
from pytest_edge.errors import EdgeUsageError, GoldenError
from pytest_edge.golden import GoldenCase, GoldenStore, atomic_write
from pytest_edge.inputs import concrete_shape, feed_order, generate_case, user_cases
from pytest_edge.measure import drift, latency_stats
from pytest_edge.options import parse_fraction, parse_marker, parse_mb, parse_ms, parse_percent
from pytest_edge.report import compare_reports, format_table, merge_reports, table_rows

# ---------------------------------------------------------------- options


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False), st.sampled_from(["ms", "s", "us", ""]))
def test_parse_ms_units(number: float, unit: str) -> None:
    factor = {"ms": 1, "s": 1000, "us": 1e-3, "": 1}[unit]
    assert parse_ms(f"{number!r}{unit}") == pytest.approx(number * factor)


@given(st.floats(min_value=0, max_value=1e5, allow_nan=False), st.sampled_from(["MB", "GB", "KB", "MiB", "mb"]))
def test_parse_mb_units(number: float, unit: str) -> None:
    factor = {"mb": 1, "gb": 1024, "kb": 1 / 1024, "mib": 1}[unit.lower()]
    assert parse_mb(f"{number!r} {unit}") == pytest.approx(number * factor)


@pytest.mark.parametrize("bad", ["12 parsecs", "fast", "-3ms", "1e400ms", True])
def test_parse_ms_rejects(bad: object) -> None:
    with pytest.raises(EdgeUsageError):
        parse_ms(bad)


def test_fractions_and_percent() -> None:
    assert parse_fraction("5%") == pytest.approx(0.05)
    assert parse_fraction(0.05) == 0.05
    assert parse_percent("10%") == pytest.approx(0.1)
    assert parse_percent("250%") == pytest.approx(2.5)
    with pytest.raises(EdgeUsageError):
        parse_fraction("150%")


def test_parse_marker_canonical_units_and_errors() -> None:
    spec = parse_marker(("tiny",), {"p50_ms": "2s", "peak_memory_mb": "1GB", "max_fallback": "5%",
                                    "backends": "litert, executorch", "shapes": {"x": [1, 3, 8, 8]}})
    assert (spec.model, spec.p50_ms, spec.peak_memory_mb, spec.max_fallback) == ("tiny", 2000, 1024, 0.05)
    assert spec.backends == ["litert", "executorch"] and spec.shapes == {"x": (1, 3, 8, 8)}
    assert spec.needs_measurement
    with pytest.raises(EdgeUsageError, match="unknown edge marker keyword"):
        parse_marker((), {"modle": "x"})
    with pytest.raises(EdgeUsageError, match="runs"):
        parse_marker((), {"runs": 0})
    with pytest.raises(EdgeUsageError, match="target"):
        parse_marker((), {"target": "tpu"})
    with pytest.raises(EdgeUsageError, match=r"tolerances\['litert'\]: unknown key\(s\) 'atoll'"):
        parse_marker((), {"tolerances": {"litert": {"y": {"atoll": 1}}}})
    assert parse_marker((), {"tolerances": {"litert": {"atol": 1, "y": {"rtol": 2}}}}).tolerances


# ---------------------------------------------------------------- comparison

finite = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False, width=32)


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.float32, st.integers(1, 20), elements=finite),
       hnp.arrays(np.float32, st.integers(1, 20), elements=finite),
       st.sampled_from([0.0, 1e-5, 1e-2]), st.sampled_from([0.0, 1e-4, 1e-1]))
def test_needed_tolerances_are_sufficient(expected, noise, atol, rtol) -> None:
    """The smallest tolerances the failure message suggests must really make isclose pass."""
    n = min(len(expected), len(noise))
    expected, actual = expected[:n], expected[:n] + noise[:n]
    need_atol, need_rtol = needed_tolerances(expected, actual, atol, rtol)
    e, a = expected.astype(np.float64), actual.astype(np.float64)
    assert np.allclose(a, e, atol=need_atol * (1 + 1e-9) + 1e-300, rtol=rtol)
    if math.isfinite(need_rtol):
        assert np.allclose(a, e, atol=atol, rtol=need_rtol * (1 + 1e-9) + 1e-300)


def test_comparison_message_names_worst_element() -> None:
    expected = np.array([[1.0, 2.0, 3.0]], np.float32)
    actual = np.array([[1.0, 2.5, 3.0]], np.float32)
    result = compare_output("y", expected, actual, {"atol": 0.1, "rtol": 0.0})
    (message,) = result.problems
    assert "1 of 3 elements differ" in message and "worst at index (0, 1): got 2.5, golden 2" in message
    assert "would pass with atol=0.5 (rtol=0)" in message and result.max_abs_err == pytest.approx(0.5)


def test_nan_and_shape_problems() -> None:
    e = np.zeros((2, 2), np.float32)
    assert "NaN" in compare_output("y", e, np.full((2, 2), np.nan, np.float32), {"atol": 1}).problems[0]
    assert "shape" in compare_output("y", e, np.zeros((4,), np.float32), {"atol": 1}).problems[0]


def test_statistical_checks() -> None:
    rng = np.random.default_rng(0)
    e = rng.standard_normal((4, 10)).astype(np.float32)
    small = compare_output("y", e, e + 1e-3, {"min_cosine": 0.999, "min_snr_db": 30, "topk_agreement": 0.75})
    assert small.problems == [] and small.snr_db > 30
    big = compare_output("y", e, -e, {"min_cosine": 0.9, "min_snr_db": 0, "topk_agreement": 0.5})
    assert len(big.problems) == 3


def test_tolerance_resolution_order() -> None:
    tolerances = {"y": {"atol": 1}, "litert": {"atol": 2, "y": {"atol": 3}}}
    assert resolve_tolerance({"atol": 0, "rtol": 0}, tolerances, "onnxruntime-cpu", "y")["atol"] == 1
    assert resolve_tolerance({"atol": 0}, tolerances, "litert", "z")["atol"] == 2
    assert resolve_tolerance({"atol": 0}, tolerances, "litert", "y")["atol"] == 3


# ---------------------------------------------------------------- inputs


def test_concrete_shape_rules() -> None:
    assert concrete_shape(TensorSpec("x", ("batch", 16), "float32"), {}) == (1, 16)
    assert concrete_shape(TensorSpec("x", (1, 3, "h", "w"), "float32"), {"x": (1, 3, 5, 6)}) == (1, 3, 5, 6)
    with pytest.raises(EdgeUsageError, match="dynamic dimension 'h' at axis 2"):
        concrete_shape(TensorSpec("x", (1, 3, "h", 4), "float32"), {})
    with pytest.raises(EdgeUsageError, match="rank"):
        concrete_shape(TensorSpec("x", (1, 3), "float32"), {"x": (1, 3, 3)})


def test_generated_inputs_are_seeded_and_typed() -> None:
    specs = [TensorSpec("a", (2, 3), "float32"), TensorSpec("b", (4,), "int8"), TensorSpec("c", (2,), "bool")]
    one, two = generate_case(specs, {}, 7), generate_case(specs, {}, 7)
    assert all(np.array_equal(one[k], two[k]) for k in one)
    assert [one[k].dtype.name for k in "abc"] == ["float32", "int8", "bool"]
    assert not np.array_equal(one["a"], generate_case(specs, {}, 8)["a"])


def test_user_cases_forms(tmp_path: Path) -> None:
    np.savez(tmp_path / "in.npz", x=np.ones(3))
    assert user_cases("in.npz", tmp_path)[0]["x"].tolist() == [1, 1, 1]
    assert len(user_cases(lambda: [{"x": 1}, {"x": 2}], tmp_path)) == 2
    with pytest.raises(EdgeUsageError, match="cannot read inputs file"):
        user_cases("missing.npz", tmp_path)


def test_feed_order_by_name_or_position() -> None:
    ref = [TensorSpec("a", (1,), "float32"), TensorSpec("b", (1,), "int32")]
    assert feed_order(ref, [ref[1], ref[0]]) == [1, 0]
    assert feed_order(ref, [TensorSpec("input_0", (1,), "float32"), TensorSpec("input_1", (1,), "int32")]) == [0, 1]
    with pytest.raises(ValueError):
        feed_order(ref, ref[:1])


# ---------------------------------------------------------------- golden store


def _case() -> GoldenCase:
    return GoldenCase({"x": np.arange(4, dtype=np.float32)}, {"y": np.arange(4, dtype=np.float32) * 2})


def _meta(artifact: Path) -> dict:
    from pytest_edge.golden import sha256_file

    return {"model": "m", "artifacts": {artifact.name: sha256_file(artifact)},
            "reference": {"backend": "onnxruntime-cpu", "artifact": artifact.name},
            "signature": {"inputs": [{"name": "x", "shape": [4], "dtype": "float32"}],
                          "outputs": [{"name": "y", "shape": [4], "dtype": "float32"}]}}


def test_golden_roundtrip_stale_and_missing(tmp_path: Path) -> None:
    artifact = tmp_path / "m.onnx"
    artifact.write_bytes(b"model v1")
    store = GoldenStore(tmp_path / "golden")
    with pytest.raises(GoldenError, match="--edge-update-golden"):
        store.load("m")
    store.write("m", _meta(artifact), [_case(), _case()])
    golden = store.load("m")
    assert len(golden.cases) == 2 and golden.stale_reason(artifact) is None
    assert golden.cases[1].outputs["y"].tolist() == [0, 2, 4, 6]
    artifact.write_bytes(b"model v2")
    reason = golden.stale_reason(artifact)
    assert reason is not None and "stale" in reason and golden.meta["artifacts"]["m.onnx"] in reason
    before = {p.name: p.read_bytes() for p in (tmp_path / "golden/m").iterdir()}
    store.write("m", _meta(artifact), [_case()])
    after = {p.name: p.read_bytes() for p in (tmp_path / "golden/m").iterdir()}
    assert sorted(after) == sorted(n for n in before if n.startswith("case_000-")) + ["meta.json"]
    store.write("m", _meta(artifact), [_case()])
    assert {p.name: p.read_bytes() for p in (tmp_path / "golden/m").iterdir()} == after, \
        "refreshing an unchanged golden must not change a byte"


def test_atomic_write_leaves_old_file_when_interrupted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "meta.json"
    target.write_text("old")

    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, b"new")
    assert target.read_text() == "old" and list(tmp_path.iterdir()) == [target]


def test_concurrent_golden_writes_never_expose_a_partial_file(tmp_path: Path) -> None:
    artifact = tmp_path / "m.onnx"
    artifact.write_bytes(b"model")
    store = GoldenStore(tmp_path / "golden")
    store.write("m", _meta(artifact), [_case()])
    errors: list[Exception] = []

    def writer() -> None:
        for _ in range(20):
            store.write("m", _meta(artifact), [_case()])

    def reader() -> None:
        for _ in range(50):
            try:
                assert store.load("m").cases[0].outputs["y"].tolist() == [0, 2, 4, 6]
            except Exception as exc:  # noqa: BLE001
                errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(2)] + [threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_corrupt_meta_names_file(tmp_path: Path) -> None:
    (tmp_path / "golden/m").mkdir(parents=True)
    (tmp_path / "golden/m/meta.json").write_text("{not json")
    with pytest.raises(GoldenError, match=r"corrupt golden file .*meta\.json"):
        GoldenStore(tmp_path / "golden").load("m")


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


def _record(p50: float, fallback: float, test: str = "t::a[m-litert]") -> dict:
    return {"test": test, "model": {"name": "m"}, "backend": "litert", "verdict": "passed",
            "latency_ms": {"p50": p50, "p99": p50 * 2}, "peak_memory_mb": 10.0,
            "coverage": {"fallback": fallback, "partitions": 1}, "accuracy": {"max_abs_err": 0.0}}


def test_baseline_and_compare() -> None:
    assert check_baseline(_record(1.05, 0.1), _record(1.0, 0.1), 0.10) == []
    problems = check_baseline(_record(1.2, 0.2), _record(1.0, 0.1), 0.10)
    assert len(problems) == 3 and "+20.0%" in problems[0] and "coverage dropped" in problems[2]
    old, new = {"records": [_record(1.0, 0.1)]}, {"records": [_record(2.0, 0.1)]}
    assert len(compare_reports(old, new, 0.5)) == 2 and compare_reports(new, old, 0.5) == []


def test_merge_builds_device_backend_matrix() -> None:
    a = {"machine": {"cpu": "x86"}, "records": [_record(1.0, 0.1)]}
    b = {"machine": {"cpu": "arm"}, "records": [_record(3.0, 0.1)]}
    merged = merge_reports([a, b])
    assert len(merged["records"]) == 2 and set(merged["matrix"]["m"]) == {"x86 [0]", "arm [1]"}
    json.dumps(merged)


def test_table_rows_show_dash_for_unmeasured() -> None:
    record = _record(1.0, 0.125)
    record["latency_ms"] = None
    (row,) = table_rows([record])
    assert row[3] == "88%" and row[5] == "—"
    assert format_table([row])[0].startswith("model")


@pytest.mark.parametrize("make_actual, expected_hint", [
    (lambda e: np.transpose(e, (0, 2, 3, 1)), "layout: the output is the golden in NHWC"),
    (lambda e: np.flip(e, 1), "channel order: the output is the golden reversed on axis 1"),
    (lambda e: e * 255.0, "normalisation: the output is 255 x golden + 0"),
    (lambda e: (e - 0.5) / 0.25, "normalisation: the output is 4 x golden + -2"),
    (lambda e: e + 1e-3 * np.sin(np.arange(e.size)).reshape(e.shape), "numerics: same direction"),
    (lambda e: np.random.default_rng(9).standard_normal(e.shape), "large disagreement"),
])
def test_triage_points_at_the_likely_cause(make_actual, expected_hint) -> None:
    expected = np.random.default_rng(3).random((1, 3, 5, 7)).astype(np.float32)
    actual = make_actual(expected).astype(np.float32)
    (problem,) = compare_output("y", expected, actual, {"atol": 1e-5, "rtol": 1e-5}).problems
    assert "look first at " + expected_hint in problem
