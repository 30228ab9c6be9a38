"""The marker's keywords and units (marker.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_edge.errors import EdgeUsageError
from pytest_edge.marker import (
    parse_fraction,
    parse_marker,
    parse_mb,
    parse_ms,
    parse_percent,
)

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


