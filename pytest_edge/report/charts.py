"""Inline SVG charts for the HTML page: latency ECDFs, bars, the delegated/fallback bar. No plotting
library, no script, no font or stylesheet from the network, so the page opens offline years later.
Every string that comes from a report goes through :func:`escape`."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from .table import DASH

if TYPE_CHECKING:
    from ..core.record_blocks import RecordCoverage

# Colour-blind-safe (Okabe-Ito), one per series of a chart.
PALETTE = ["#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000000"]
DELEGATED, FALLBACK = "#009e73", "#d55e00"


def escape(value: Any) -> str:
    """HTML-escaped text: model, test and operator names come from user files."""
    return html.escape(str(value), quote=True)


def significant(value: Any, digits: int = 3) -> str:
    """A figure with ``digits`` significant digits (latencies span µs to s), or a dash."""
    if value is None:
        return DASH
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return escape(value)
    if isinstance(value, int) or value == 0 or abs(value) >= 10 ** digits:
        return f"{value:.0f}"
    return f"{value:.{max(digits - 1 - math.floor(math.log10(abs(value))), 0)}f}"


# ------------------------------------------------------------------ SVG


def _svg(width: int, height: int, body: Iterable[str], label: str) -> str:
    # width/height attributes as well as the viewBox: the chart has a size before CSS applies.
    return (f'<svg width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(label)}">'
            + "".join(body) + "</svg>")


def _ticks(lo: float, hi: float, log: bool) -> list[float]:
    """Round axis values in [lo, hi]: 1-2-5 steps (per decade on a log axis)."""
    if log:
        ticks = []
        for exponent in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
            for mantissa in (1, 2, 5):
                value = mantissa * 10.0 ** exponent
                if lo <= value <= hi:
                    ticks.append(value)
        return ticks if len(ticks) <= 7 else [t for t in ticks if f"{t:.0e}".startswith("1")]
    raw = (hi - lo) / 5 or 1.0
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def _text(x: float, y: float, text: str, anchor: str = "start", cls: str = "") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"'
            + (f' class="{cls}"' if cls else "") + f">{escape(text)}</text>")


@dataclass
class Series:
    label: str
    color: str
    quantiles: list[float] | None  # 0..100th percentiles, ms
    marks: dict[str, float]  # p50/p90/p99 -> ms
    baseline: bool = False


def ecdf_chart(series: Sequence[Series], width: int = 560, height: int = 270, figure: str = "latency",
               per: str = "runs") -> str:
    """The latency distributions as ECDFs (x: ms, log scale when they span more than a decade;
    y: fraction of runs at most x), P50/P90/P99 marked on each; baseline series dashed. ``figure``
    and ``per`` name the axis (a decoder's "TTFT" over "generations", "TPOT" over "tokens")."""
    left, right, top, bottom = 46, 14, 10, 38
    values = [v for s in series for v in [*(s.quantiles or []), *s.marks.values()]
              if isinstance(v, (int, float)) and math.isfinite(v)]
    if not values:
        return ""
    lo, hi = min(values), max(values)
    log = lo > 0 and hi / lo > 10
    if log:
        lo, hi = lo / 1.1, hi * 1.1
    else:
        pad = (hi - lo) * 0.05 or abs(hi) * 0.05 or 1.0
        lo, hi = max(lo - pad, 0.0), hi + pad
    plot_w, plot_h = width - left - right, height - top - bottom

    def x(v: float) -> float:
        if log:
            return left + plot_w * (math.log10(max(v, lo)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
        return left + plot_w * (v - lo) / (hi - lo)

    def y(fraction: float) -> float:
        return top + plot_h * (1 - fraction)

    body = [f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" class="plot"/>']
    for tick in _ticks(lo, hi, log):
        body.append(f'<line x1="{x(tick):.1f}" y1="{top}" x2="{x(tick):.1f}" y2="{top + plot_h}" class="grid"/>')
        body.append(_text(x(tick), top + plot_h + 13, significant(tick, 2), "middle", "tick"))
    for fraction, name in ((0.0, "0"), (0.5, "P50"), (0.9, "P90"), (0.99, "P99"), (1.0, "")):
        body.append(f'<line x1="{left}" y1="{y(fraction):.1f}" x2="{left + plot_w}" y2="{y(fraction):.1f}" '
                    f'class="{"guide" if name not in ("0", "") else "grid"}"/>')
        if name:
            body.append(_text(left - 4, y(fraction) + (7 if name == "P99" else 3.5), name, "end", "tick"))
    body.append(_text(left + plot_w / 2, height - 6,
                      f"{figure}, ms" + (" (log scale)" if log else "") + f": fraction of {per} at most x",
                      "middle", "axis"))
    for s in series:
        dash = ' stroke-dasharray="5 3" stroke-opacity="0.75"' if s.baseline else ""
        if s.quantiles:
            points = " ".join(f"{x(v):.1f},{y(i / (len(s.quantiles) - 1)):.1f}" for i, v in enumerate(s.quantiles))
        else:  # no quantiles (an older report): the marks alone, joined
            marks = sorted((s.marks[k], f) for k, f in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)) if k in s.marks)
            points = " ".join(f"{x(v):.1f},{y(f):.1f}" for v, f in marks)
            dash = ' stroke-dasharray="2 3"'
        body.append(f'<polyline points="{points}" fill="none" stroke="{s.color}" '
                    f'stroke-width="{1.3 if s.baseline else 1.8}"{dash}><title>{escape(s.label)}</title></polyline>')
        for key, fraction in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            if key in s.marks:
                fill = "#fff" if s.baseline else s.color
                body.append(f'<circle cx="{x(s.marks[key]):.1f}" cy="{y(fraction):.1f}" r="3.2" fill="{fill}" '
                            f'stroke="{s.color}"><title>{escape(s.label)} {key.upper()} '
                            f'{significant(s.marks[key])} ms</title></circle>')
    return _svg(width, height, body, f"{figure} distribution per backend")


@dataclass
class Curve:
    label: str
    color: str
    points: list[tuple[float, float]]  # (x, y), x ascending
    dashed: bool = False


def line_chart(curves: Sequence[Curve], x_label: str, y_label: str, width: int = 560, height: int = 270,
               from_zero: bool = True, linear_x: bool = False) -> str:
    """Curves of y against x (a decoder's peak memory and KV-cache estimate against the context
    length): x on a log-2 scale where it spans a factor of 4 or more (the sweep doubles), y
    linear from 0 (``from_zero=False``: from a little below the least y, for a trend of a few
    percent; its ticks to three digits); x linear always with ``linear_x`` (a run's number); each
    point marked, with its value in a tooltip; dashed curves for estimates."""
    left, right, top, bottom = 52, 14, 10, 38
    xs = [x for c in curves for x, _ in c.points]
    ys = [y for c in curves for _, y in c.points]
    if not xs:
        return ""
    x_lo, x_hi = min(xs), max(xs)
    log = x_lo > 0 and x_hi / x_lo >= 4 and not linear_x
    if x_hi == x_lo:
        x_lo, x_hi = x_lo * 0.9 - 1e-9, x_hi * 1.1 + 1e-9
    y_lo, y_hi = 0.0, max(ys) * 1.08 or 1.0
    if not from_zero:
        pad = (max(ys) - min(ys)) * 0.1 or abs(max(ys)) * 0.05 or 1.0
        y_lo, y_hi = min(ys) - pad, max(ys) + pad
    plot_w, plot_h = width - left - right, height - top - bottom

    def px(v: float) -> float:
        if log:
            return left + plot_w * (math.log2(v) - math.log2(x_lo)) / (math.log2(x_hi) - math.log2(x_lo))
        return left + plot_w * (v - x_lo) / (x_hi - x_lo)

    def py(v: float) -> float:
        return top + plot_h * (1 - (v - y_lo) / (y_hi - y_lo))

    body = [f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" class="plot"/>']
    x_ticks = sorted(set(xs)) if log and len(set(xs)) <= 8 else _ticks(x_lo, x_hi, False)
    for tick in x_ticks:
        body.append(f'<line x1="{px(tick):.1f}" y1="{top}" x2="{px(tick):.1f}" y2="{top + plot_h}" class="grid"/>')
        body.append(_text(px(tick), top + plot_h + 13, significant(tick, 2), "middle", "tick"))
    for tick in _ticks(y_lo, y_hi, False):
        body.append(f'<line x1="{left}" y1="{py(tick):.1f}" x2="{left + plot_w}" y2="{py(tick):.1f}" class="grid"/>')
        body.append(_text(left - 4, py(tick) + 3.5, significant(tick, 2 if from_zero else 3), "end", "tick"))
    body.append(_text(left + plot_w / 2, height - 6, f"{x_label}" + (" (log scale)" if log else "")
                      + f"; y: {y_label}", "middle", "axis"))
    for c in curves:
        dash = ' stroke-dasharray="5 3"' if c.dashed else ""
        points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in c.points)
        body.append(f'<polyline points="{points}" fill="none" stroke="{c.color}" stroke-width="1.8"{dash}>'
                    f"<title>{escape(c.label)}</title></polyline>")
        for x, y in c.points:
            body.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{"#fff" if c.dashed else c.color}" '
                        f'stroke="{c.color}"><title>{escape(c.label)}: {significant(y)} at {significant(x)}'
                        f"</title></circle>")
    return _svg(width, height, body, f"{y_label} against {x_label}")


def bar_chart(groups: Sequence[tuple[str, Sequence[tuple[float | None, str, str]]]], unit: str,
              width: int = 360) -> str:
    """Horizontal bars: per group (a backend) one bar per (value, colour, name); a missing value
    is a dash, not a zero-length bar that would read as "free"."""
    label_w, row, gap = 150, 11, 7
    values = [v for _, bars in groups for v, _, _ in bars if isinstance(v, (int, float))]
    if not values:
        return ""
    top_value = max(values) or 1.0
    plot_w = width - label_w - 58
    height = sum(len(bars) * row + gap for _, bars in groups) + 4
    body, cursor = [], 2
    for label, bars in groups:
        short = label if len(label) <= 24 else label[:23] + "…"
        body.append(f'<text x="{label_w - 6}" y="{cursor + len(bars) * row / 2 + 4:.1f}" text-anchor="end" '
                    f'class="tick"><title>{escape(label)}</title>{escape(short)}</text>')
        for value, color, name in bars:
            if isinstance(value, (int, float)):
                length = max(plot_w * value / top_value, 1.0)
                body.append(f'<rect x="{label_w}" y="{cursor}" width="{length:.1f}" height="{row - 2}" '
                            f'fill="{color}"><title>{escape(label)} {escape(name)}: {significant(value)} {escape(unit)}</title></rect>')
                body.append(_text(label_w + length + 4, cursor + row - 3, f"{significant(value)} {unit}", "start", "val"))
            else:
                body.append(_text(label_w + 2, cursor + row - 3, f"{name}: not measured", "start", "val"))
            cursor += row
        cursor += gap
    return _svg(width, height, body, f"bars, {unit}")


def coverage_bar(coverage: "RecordCoverage", width: int = 300, height: int = 16) -> str:
    """One bar split delegated (green) / fallback (orange) by operator count."""
    total = coverage.total_ops
    fallback = coverage.fallback
    if total:
        delegated_share = (coverage.delegated_ops or 0) / total
    elif isinstance(fallback, (int, float)):
        delegated_share = 1 - fallback
    else:
        return ""
    split = width * max(min(delegated_share, 1.0), 0.0)
    body = [(f'<rect x="0" y="0" width="{split:.1f}" height="{height}" fill="{DELEGATED}">'
             f'<title>delegated {delegated_share:.0%}</title></rect>'),
            (f'<rect x="{split:.1f}" y="0" width="{width - split:.1f}" height="{height}" fill="{FALLBACK}">'
             f'<title>fallback {1 - delegated_share:.0%}</title></rect>')]
    return _svg(width, height, body, f"delegated {delegated_share:.0%}")
