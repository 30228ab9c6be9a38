"""report/charts.py: the inline SVG charts of the HTML page (latency ECDFs, bars, line charts, the
delegated/fallback bar) and its figure formatting, on hand-built series: where a value lands on a
linear or a log axis, that a missing value is drawn as "not measured" and never as a zero-length
bar, and that a name from a user's file is escaped."""

from __future__ import annotations

import math
import re

import pytest

from pytest_edge import codec
from pytest_edge.core.record_blocks import RecordCoverage
from pytest_edge.report.charts import (DELEGATED, FALLBACK, Curve, Series, bar_chart, coverage_bar, ecdf_chart,
                                       escape, line_chart, significant)
from pytest_edge.report.table import DASH

HOSTILE = '<script>alert("x")</script>'
# ecdf_chart's and line_chart's plot areas at their default size (560 x 270)
ECDF_LEFT, ECDF_W, ECDF_TOP, ECDF_H = 46, 560 - 46 - 14, 10, 270 - 10 - 38
LINE_LEFT, LINE_W, LINE_TOP, LINE_H = 52, 560 - 52 - 14, 10, 270 - 10 - 38


def texts(svg: str) -> list[str]:
    """The text elements' contents, in order."""
    return re.findall(r"<text [^>]*>([^<]*)</text>", svg)


def x_ticks(svg: str) -> list[str]:
    """The x axis's tick labels (centred under the plot), left to right."""
    return re.findall(r'<text [^>]*text-anchor="middle" class="tick">([^<]*)</text>', svg)


def y_ticks(svg: str) -> list[str]:
    """The y axis's tick labels (right-aligned beside the plot)."""
    return re.findall(r'<text [^>]*text-anchor="end" class="tick">([^<]*)</text>', svg)


def circles(svg: str) -> list[tuple[float, float, str]]:
    """(cx, cy, tooltip) of each marked point."""
    return [(float(x), float(y), title) for x, y, title in
            re.findall(r'<circle cx="([\d.]+)" cy="([\d.]+)"[^>]*><title>([^<]*)</title>', svg)]


@pytest.mark.parametrize(("value", "shown"), [
    (None, DASH), (0.012345, "0.0123"), (12.345, "12.3"), (1.0, "1.00"), (1234.4, "1234"), (7, "7"), (0.0, "0"),
    (-2.5, "-2.50"), (float("nan"), "nan"), (float("inf"), "inf"), (True, "True"), ("<b>", "&lt;b&gt;")])
def test_significant_keeps_three_digits_a_dash_for_none_and_escapes_what_is_no_number(value, shown) -> None:
    assert significant(value) == shown


def test_escape_quotes_attributes_too() -> None:
    assert escape(HOSTILE) == "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"
    assert escape("a'b") == "a&#x27;b"


def test_ecdf_chart_of_nothing_is_no_chart() -> None:
    assert ecdf_chart([]) == ""
    assert ecdf_chart([Series("cpu", "#000", None, {})]) == ""


def test_ecdf_chart_within_a_decade_is_linear_and_places_the_marks_on_it() -> None:
    """P50 1 ms and P90 2 ms: a linear axis padded 5% of the span each side (0.95..2.05 ms); the
    marks at their x, P50 at half the plot's height and P90 at 90%."""
    svg = ecdf_chart([Series("cpu", "#0072b2", None, {"p50": 1.0, "p90": 2.0})])
    assert "(log scale)" not in svg
    assert "latency, ms: fraction of runs at most x" in texts(svg)
    (x50, y50, t50), (x90, y90, t90) = circles(svg)
    lo, hi = 0.95, 2.05
    assert x50 == pytest.approx(ECDF_LEFT + ECDF_W * (1.0 - lo) / (hi - lo), abs=0.06)
    assert x90 == pytest.approx(ECDF_LEFT + ECDF_W * (2.0 - lo) / (hi - lo), abs=0.06)
    assert y50 == pytest.approx(ECDF_TOP + ECDF_H * 0.5, abs=0.06)
    assert y90 == pytest.approx(ECDF_TOP + ECDF_H * 0.1, abs=0.06)
    assert (t50, t90) == ("cpu P50 1.00 ms", "cpu P90 2.00 ms")
    # round ticks, 1-2-5 steps: a fifth of the span (0.22 ms) rounded up to 0.5 ms
    assert x_ticks(svg) == ["1.0", "1.5", "2.0"]
    assert y_ticks(svg) == ["0", "P50", "P90", "P99"]


def test_ecdf_chart_over_more_than_a_decade_is_log_scaled_with_1_2_5_ticks() -> None:
    svg = ecdf_chart([Series("npu", "#0072b2", None, {"p50": 1.0, "p99": 100.0})], figure="TTFT", per="generations")
    assert "TTFT, ms (log scale): fraction of generations at most x" in texts(svg)
    lo, hi = 1 / 1.1, 110.0
    (x50, _, _), (x99, y99, _) = circles(svg)
    span = math.log10(hi) - math.log10(lo)
    assert x50 == pytest.approx(ECDF_LEFT + ECDF_W * (0 - math.log10(lo)) / span, abs=0.06)
    assert x99 == pytest.approx(ECDF_LEFT + ECDF_W * (2 - math.log10(lo)) / span, abs=0.06)
    assert y99 == pytest.approx(ECDF_TOP + ECDF_H * 0.01, abs=0.06)
    assert x_ticks(svg) == ["1.0", "2.0", "5.0", "10", "20", "50", "100"]


def test_ecdf_quantiles_are_one_line_rising_left_to_right_and_a_baseline_is_dashed_and_hollow() -> None:
    quantiles = [1.0 + i / 100 for i in range(101)]
    svg = ecdf_chart([Series("cpu", "#0072b2", quantiles, {"p50": 1.5}),
                      Series("cpu (baseline)", "#0072b2", quantiles, {"p50": 1.5}, baseline=True)])
    lines = re.findall(r'<polyline points="([^"]+)"([^>]*)>', svg)
    assert len(lines) == 2
    points = [tuple(map(float, p.split(","))) for p in lines[0][0].split()]
    assert len(points) == 101
    assert [x for x, _ in points] == sorted(x for x, _ in points)
    assert points[0][1] == pytest.approx(ECDF_TOP + ECDF_H, abs=0.06)  # the 0th percentile at fraction 0
    assert points[-1][1] == pytest.approx(ECDF_TOP, abs=0.06)  # the 100th at fraction 1
    assert "stroke-dasharray" not in lines[0][1] and 'stroke-dasharray="5 3"' in lines[1][1]
    assert re.search(r'<circle [^>]*fill="#fff" stroke="#0072b2"><title>cpu \(baseline\) P50', svg)


def test_ecdf_chart_escapes_a_hostile_series_label() -> None:
    svg = ecdf_chart([Series(HOSTILE, "#000", None, {"p50": 1.0})])
    assert "<script>" not in svg and escape(HOSTILE) in svg


def test_bar_chart_draws_a_missing_figure_as_not_measured_never_a_zero_bar() -> None:
    svg = bar_chart([("cpu", [(3.0, "#111", "load"), (None, "#222", "first inference")])], "ms")
    assert len(re.findall("<rect ", svg)) == 1  # the load's bar alone
    assert "first inference: not measured" in texts(svg)
    assert "3.00 ms" in texts(svg) and not any(t.startswith("0 ") for t in texts(svg))
    assert bar_chart([("cpu", [(None, "#111", "load")])], "ms") == ""  # nothing measured: no chart


def test_bar_chart_scales_bars_to_the_largest_value_and_shortens_long_labels() -> None:
    long = "a-backend-with-a-very-long-name@board"
    svg = bar_chart([(long, [(10.0, "#111", "peak")]), ("cpu", [(5.0, "#222", "peak")])], "MB", width=360)
    widths = [float(w) for w in re.findall(r'<rect x="150" y="[\d.]+" width="([\d.]+)"', svg)]
    assert widths == [pytest.approx(360 - 150 - 58), pytest.approx((360 - 150 - 58) / 2)]
    assert f"<title>{long}</title>{long[:23]}…" in svg
    assert "<title>cpu peak: 5.00 MB</title>" in svg


def test_bar_chart_escapes_group_and_bar_names() -> None:
    svg = bar_chart([(HOSTILE, [(1.0, "#111", HOSTILE), (None, "#111", HOSTILE)])], "ms")
    assert "<script>" not in svg


@pytest.mark.parametrize(("coverage", "split", "title"), [
    ({"total_ops": 8, "delegated_ops": 6, "fallback": 0.25}, 225.0, "delegated 75%"),
    ({"total_ops": 0, "fallback": 0.5}, 150.0, "delegated 50%"),  # no operator count: the fraction
    ({"fallback": 0.0}, 300.0, "delegated 100%"),
    ({"total_ops": 4, "delegated_ops": None}, 0.0, "delegated 0%")])
def test_coverage_bar_splits_delegated_and_fallback(coverage, split, title) -> None:
    svg = coverage_bar(codec.from_json(RecordCoverage, coverage, "a record's coverage"))
    assert f'aria-label="{title}"' in svg
    assert f'<rect x="0" y="0" width="{split:.1f}" height="16" fill="{DELEGATED}">' in svg
    assert f'<rect x="{split:.1f}" y="0" width="{300 - split:.1f}" height="16" fill="{FALLBACK}">' in svg


def test_coverage_bar_of_no_coverage_figure_is_nothing() -> None:
    assert coverage_bar(RecordCoverage()) == "" and coverage_bar(RecordCoverage(fallback=None, total_ops=None)) == ""


def test_line_chart_doubling_x_is_log2_evenly_spaced_with_its_own_values_as_ticks() -> None:
    """A context sweep (64, 128, 256 tokens): each doubling the same step to the right; y from 0."""
    svg = line_chart([Curve("peak", "#111", [(64, 6.0), (128, 7.0), (256, 9.0)])], "context length, tokens", "MB")
    assert "context length, tokens (log scale); y: MB" in texts(svg)
    xs = [x for x, _, _ in circles(svg)]
    assert xs[0] == pytest.approx(LINE_LEFT, abs=0.06) and xs[2] == pytest.approx(LINE_LEFT + LINE_W, abs=0.06)
    assert xs[1] - xs[0] == pytest.approx(xs[2] - xs[1], abs=0.11)
    assert x_ticks(svg) == ["64", "128", "256"]
    assert y_ticks(svg)[0] == "0"  # y from zero
    assert [t for _, _, t in circles(svg)] == ["peak: 6.00 at 64", "peak: 7.00 at 128", "peak: 9.00 at 256"]


def test_line_chart_linear_x_and_a_y_axis_not_from_zero() -> None:
    svg = line_chart([Curve("rss", "#111", [(1, 100.0), (2, 101.0), (3, 102.0)])], "timed run", "RSS MB",
                     from_zero=False, linear_x=True)
    assert "(log scale)" not in svg
    xs = [x for x, _, _ in circles(svg)]
    assert xs[1] - xs[0] == pytest.approx(xs[2] - xs[1], abs=0.11)
    assert x_ticks(svg) == ["1.0", "1.5", "2.0", "2.5", "3.0"]
    assert min(float(t) for t in y_ticks(svg)) > 99  # the y ticks near the values, not from 0
    ys = [y for _, y, _ in circles(svg)]
    assert ys[0] > ys[1] > ys[2]  # a rising line rises on the page (y grows downwards)


def test_line_chart_of_one_point_or_none() -> None:
    assert line_chart([], "x", "y") == ""
    svg = line_chart([Curve("one", "#111", [(128, 5.0)])], "context length, tokens", "MB")
    assert len(circles(svg)) == 1 and "nan" not in svg


def test_line_chart_dashes_an_estimate_and_escapes_its_label() -> None:
    svg = line_chart([Curve(HOSTILE, "#111", [(1, 1.0), (2, 2.0)], dashed=True)], "x", "y")
    assert 'stroke-dasharray="5 3"' in svg and "<script>" not in svg
