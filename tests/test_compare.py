"""Comparison against goldens and its messages (compare.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pytest_edge.accuracy.compare import (ScopedTolerances, Tolerance, ToleranceOverride, compare_output,
                                          needed_tolerances, resolve_tolerance)

# Also run by tox -e tflite-runtime: comparisons NumPy 1.x computes there.
pytestmark = pytest.mark.tflite_runtime_lane

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
    result = compare_output("y", expected, actual, Tolerance(atol=0.1, rtol=0.0))
    (message,) = result.problems
    assert "1 of 3 elements differ" in message and "worst at index (0, 1): got 2.5, golden 2" in message
    assert "would pass with atol=0.5 (rtol=0)" in message and result.max_abs_err == pytest.approx(0.5)


def test_nan_and_shape_problems() -> None:
    e = np.zeros((2, 2), np.float32)
    assert "NaN" in compare_output("y", e, np.full((2, 2), np.nan, np.float32), Tolerance(atol=1)).problems[0]
    assert "shape" in compare_output("y", e, np.zeros((4,), np.float32), Tolerance(atol=1)).problems[0]


def test_statistical_checks() -> None:
    rng = np.random.default_rng(0)
    e = rng.standard_normal((4, 10)).astype(np.float32)
    small = compare_output("y", e, e + 1e-3, Tolerance(min_cosine=0.999, min_snr_db=30, topk_agreement=0.75))
    assert small.problems == [] and small.snr_db > 30
    big = compare_output("y", e, -e, Tolerance(min_cosine=0.9, min_snr_db=0, topk_agreement=0.5))
    assert len(big.problems) == 3


def test_tolerance_resolution_order() -> None:
    tolerances = {"y": ScopedTolerances(ToleranceOverride(Tolerance(atol=1))),
                  "litert": ScopedTolerances(ToleranceOverride(Tolerance(atol=2)), {"y": ToleranceOverride(Tolerance(atol=3))})}
    assert resolve_tolerance(Tolerance(atol=0, rtol=0), tolerances, "onnxruntime-cpu", "y").atol == 1
    assert resolve_tolerance(Tolerance(atol=0), tolerances, "litert", "z").atol == 2
    assert resolve_tolerance(Tolerance(atol=0), tolerances, "litert", "y").atol == 3


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
    (problem,) = compare_output("y", expected, actual, Tolerance(atol=1e-5, rtol=1e-5)).problems
    assert "look first at " + expected_hint in problem

