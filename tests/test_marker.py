"""The marker's keywords and units (marker.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_edge.errors import EdgeUsageError
from pytest_edge.core.marker import parse_marker
from pytest_edge.units import parse_fraction, parse_mb, parse_ms, parse_percent

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
    assert (spec.model, spec.budget("p50_ms"), spec.budget("peak_memory_mb"), spec.budget("max_fallback")) == ("tiny", 2000, 1024, 0.05)
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
    # None switches a keyword off in its scope: the marker's min_cosine is not applied on litert
    from pytest_edge.accuracy.compare import Tolerance, resolve_tolerance
    off = parse_marker((), {"tolerances": {"litert": {"min_cosine": None, "atol": None, "rtol": None}}}).tolerances
    marker_level = Tolerance(atol=1e-5, rtol=1e-4, min_cosine=0.99)
    assert resolve_tolerance(marker_level, off, "litert", "y") == Tolerance()
    assert resolve_tolerance(marker_level, off, "onnxruntime-cpu", "y") == marker_level


# ---------------------------------------------------------------- reference= and max_drift=


@given(st.floats(min_value=1.0, max_value=1e6, exclude_min=True, allow_nan=False))
def test_max_drift_takes_ratios_above_one(ratio: float) -> None:
    spec = parse_marker(("m",), {"max_drift": ratio})
    assert spec.budget("max_drift") == ratio and spec.needs_measurement
    assert parse_marker(("m",), {"max_drift": repr(ratio)}).budget("max_drift") == pytest.approx(ratio)


@given(st.floats(min_value=0, max_value=1e4, exclude_min=True, allow_nan=False))
def test_max_drift_percent_is_how_much_slower(percent: float) -> None:
    expected = 1 + percent / 100
    if expected <= 1:  # a percentage too small to move 1.0 in floating point
        with pytest.raises(EdgeUsageError, match="max_drift"):
            parse_marker(("m",), {"max_drift": f"{percent!r}%"})
        return
    assert parse_marker(("m",), {"max_drift": f"{percent!r}%"}).budget("max_drift") == pytest.approx(expected)


@given(st.one_of(st.floats(max_value=1.0), st.integers(max_value=1)))
def test_max_drift_at_or_below_one_is_refused(value: float) -> None:
    with pytest.raises(EdgeUsageError, match="max_drift"):
        parse_marker(("m",), {"max_drift": value})


@pytest.mark.parametrize("bad", [True, False, float("nan"), float("inf"), "nan", "0%", "-10%", "fast",
                                 "1.1x", "1", [1.1], "10 %%"])
def test_max_drift_rejects(bad: object) -> None:
    with pytest.raises(EdgeUsageError, match="max_drift: .* must be a ratio above 1"):  # one message for all
        parse_marker(("m",), {"max_drift": bad})


def test_max_drift_examples() -> None:
    assert parse_marker(("m",), {"max_drift": "10%"}).budget("max_drift") == pytest.approx(1.10)
    assert parse_marker(("m",), {"max_drift": 2}).budget("max_drift") == 2.0
    assert parse_marker(("m",), {"max_drift": " 1.5 "}).budget("max_drift") == 1.5
    spec = parse_marker(("m",), {})
    assert spec.budget("max_drift") is None and not spec.needs_measurement
    with pytest.raises(EdgeUsageError, match=r"max_drift: 1\.0 must be a ratio above 1"):
        parse_marker(("m",), {"max_drift": 1.0})


@given(st.text(min_size=1).filter(lambda t: t.strip()))
def test_reference_keeps_any_name_or_path(name: str) -> None:
    assert parse_marker(("m",), {"reference": name}).reference == name.strip()


def test_reference_kinds() -> None:
    from pathlib import Path

    assert parse_marker(("m",), {"reference": Path("models/tiny_cnn.onnx")}).reference == "models/tiny_cnn.onnx"
    assert parse_marker(("m",), {}).reference is None
    for bad in ("", "  ", 3, ["tiny_cnn"]):
        with pytest.raises(EdgeUsageError, match="reference: expected a model name or an artifact path"):
            parse_marker(("m",), {"reference": bad})


def test_names_tolerance_sees_keywords_and_overrides() -> None:
    assert not parse_marker(("m",), {"reference": "r"}).names_tolerance
    assert parse_marker(("m",), {"min_cosine": 0.99}).names_tolerance
    assert parse_marker(("m",), {"tolerances": {"y": {"atol": 1}}}).names_tolerance
