"""One self-contained HTML page from a JSON report: verdicts, latency distributions, delegate
coverage, accuracy, the change against a baseline and the device x backend matrix.

Charts are inline SVG drawn by the few functions below (no plotting library, no script, no font
or stylesheet from the network), so the page opens offline from a CI artifact years later and stays
a few kilobytes per record. Every string that comes from a report goes through :func:`_e`.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..ab_baseline import report_baseline
from ..checks import latency_regressions, resource_regressions
from .json_report import DASH, VERDICT_RANK, find_baseline, fold_line, folded_skips, missing_artifact, worst_per

DEFAULT_MAX_REGRESSION = 0.10
# Colour-blind-safe (Okabe-Ito), one per series of a chart.
PALETTE = ["#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000000"]
DELEGATED, FALLBACK = "#009e73", "#d55e00"


def _e(value: Any) -> str:
    """HTML-escaped text: model, test and operator names come from user files."""
    return html.escape(str(value), quote=True)


def _table_open(title_html: str, headers: Sequence[str]) -> str:
    """A section title (trusted HTML) and the opening of its table with escaped column headers."""
    return f"<h3>{title_html}</h3><table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in headers) + "</tr>"


def _num(value: Any, digits: int = 3) -> str:
    """A figure with ``digits`` significant digits (latencies span µs to s), or a dash."""
    if value is None:
        return DASH
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return _e(value)
    if isinstance(value, int) or value == 0 or abs(value) >= 10 ** digits:
        return f"{value:.0f}"
    return f"{value:.{max(digits - 1 - math.floor(math.log10(abs(value))), 0)}f}"


def _get(record: Mapping[str, Any], *path: str) -> Any:
    value: Any = record
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


# ------------------------------------------------------------------ labels


def device_label(record: Mapping[str, Any]) -> str:
    """Where a record ran: the merged report's machine label, then the device name (from
    ``device`` or the ``@device`` suffix of the backend); "local" for neither."""
    parts = [str(record["machine"])] if record.get("machine") else []
    device = _get(record, "device", "name") or record["backend"].partition("@")[2]
    if device and device != "local":
        parts.append(str(device))
    return " / ".join(parts) or "local"


def base_backend(record: Mapping[str, Any]) -> str:
    return record["backend"].partition("@")[0]


def _series_labels(records: Sequence[Mapping[str, Any]], merged: bool) -> list[str]:
    """Backend (and machine in a merged report); the test's name only where two records would
    otherwise share a label."""
    labels = [r["backend"] + (f" · {r['machine']}" if merged and r.get("machine") else "") for r in records]
    return [f"{label} [{r['test'].rpartition('::')[2]}]" if labels.count(label) > 1 else label
            for label, r in zip(labels, records)]


# ------------------------------------------------------------------ baseline


@dataclass(frozen=True)
class Change:
    """One figure of a record against its baseline record."""

    figure: str
    old: float
    new: float
    relative: bool  # latency, memory: a ratio; fallback: a difference of fractions
    regressed: bool

    @property
    def delta(self) -> float:
        if not self.relative:
            return self.new - self.old
        return self.new / self.old - 1 if self.old else (math.inf if self.new else 0.0)

    def text(self) -> str:
        if not self.relative:
            return f"{self.delta * 100:+.1f} pp"
        return "new" if math.isinf(self.delta) else f"{self.delta:+.1%}"


FIGURES: list[tuple[str, Callable[[Mapping[str, Any]], Any], bool]] = [
    ("P50", lambda r: _get(r, "latency_ms", "p50"), True),
    ("P99", lambda r: _get(r, "latency_ms", "p99"), True),
    ("peak memory", lambda r: r.get("peak_memory_mb"), True),
    ("fallback", lambda r: _get(r, "coverage", "fallback"), False),
]


# The merge gate's name of each figure (checks.Regression.figure).
_GATE_FIGURES = {"P50": "P50 latency", "P99": "P99 latency", "peak memory": "peak memory",
                 "fallback": "delegate coverage"}


def figure_changes(record: Mapping[str, Any], old: Mapping[str, Any] | None,
                   max_regression: float = DEFAULT_MAX_REGRESSION) -> list[Change]:
    """P50, P99, peak memory and fallback against the baseline record, where both have them. A
    figure is marked regressed by the merge gate's own rules against stored numbers (checks.py):
    latency above ``max_regression`` and significant over the processes (P99 is never gated
    against stored numbers), memory above it and by more than 1 MB, fallback when it rose at all.
    So a page never calls "regressed" what the gate would pass."""
    if not old:
        return []
    flagged: set[str] = set()
    if record.get("backend"):
        latency, _ = latency_regressions(record, old, max_regression)
        flagged = {r.figure for r in latency + resource_regressions(record, old, max_regression)}
    changes = []
    for figure, get, relative in FIGURES:
        new_value, old_value = get(record), get(old)
        if not isinstance(new_value, (int, float)) or not isinstance(old_value, (int, float)):
            continue
        changes.append(Change(figure, float(old_value), float(new_value), relative, _GATE_FIGURES[figure] in flagged))
    return changes


def regressions(report: Mapping[str, Any], baseline: Mapping[str, Any] | None,
                max_regression: float = DEFAULT_MAX_REGRESSION) -> list[tuple[Mapping[str, Any], Change]]:
    """Every regressed figure of the report's records against the baseline report."""
    if not baseline:
        return []
    found = []
    for record in report.get("records", []):
        if record.get("verdict") == "skipped":
            continue
        found += [(record, c) for c in figure_changes(record, find_baseline(baseline, record), max_regression)
                  if c.regressed]
    return found


# ------------------------------------------------------------------ SVG


def _svg(width: int, height: int, body: Iterable[str], label: str) -> str:
    # width/height attributes as well as the viewBox: the chart has a size before CSS applies.
    return (f'<svg width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(label)}">'
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
            + (f' class="{cls}"' if cls else "") + f">{_e(text)}</text>")


@dataclass
class Series:
    label: str
    color: str
    quantiles: list[float] | None  # 0..100th percentiles, ms
    marks: dict[str, float]  # p50/p90/p99 -> ms
    baseline: bool = False


def ecdf_chart(series: Sequence[Series], width: int = 560, height: int = 270) -> str:
    """The latency distributions as ECDFs (x: ms, log scale when they span more than a decade;
    y: fraction of runs at most x), P50/P90/P99 marked on each; baseline series dashed."""
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
        body.append(_text(x(tick), top + plot_h + 13, _num(tick, 2), "middle", "tick"))
    for fraction, name in ((0.0, "0"), (0.5, "P50"), (0.9, "P90"), (0.99, "P99"), (1.0, "")):
        body.append(f'<line x1="{left}" y1="{y(fraction):.1f}" x2="{left + plot_w}" y2="{y(fraction):.1f}" '
                    f'class="{"guide" if name not in ("0", "") else "grid"}"/>')
        if name:
            body.append(_text(left - 4, y(fraction) + (7 if name == "P99" else 3.5), name, "end", "tick"))
    body.append(_text(left + plot_w / 2, height - 6,
                      "latency, ms" + (" (log scale)" if log else "") + ": fraction of runs at most x",
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
                    f'stroke-width="{1.3 if s.baseline else 1.8}"{dash}><title>{_e(s.label)}</title></polyline>')
        for key, fraction in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            if key in s.marks:
                fill = "#fff" if s.baseline else s.color
                body.append(f'<circle cx="{x(s.marks[key]):.1f}" cy="{y(fraction):.1f}" r="3.2" fill="{fill}" '
                            f'stroke="{s.color}"><title>{_e(s.label)} {key.upper()} '
                            f'{_num(s.marks[key])} ms</title></circle>')
    return _svg(width, height, body, "latency distribution per backend")


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
                    f'class="tick"><title>{_e(label)}</title>{_e(short)}</text>')
        for value, color, name in bars:
            if isinstance(value, (int, float)):
                length = max(plot_w * value / top_value, 1.0)
                body.append(f'<rect x="{label_w}" y="{cursor}" width="{length:.1f}" height="{row - 2}" '
                            f'fill="{color}"><title>{_e(label)} {_e(name)}: {_num(value)} {_e(unit)}</title></rect>')
                body.append(_text(label_w + length + 4, cursor + row - 3, f"{_num(value)} {unit}", "start", "val"))
            else:
                body.append(_text(label_w + 2, cursor + row - 3, f"{name}: not measured", "start", "val"))
            cursor += row
        cursor += gap
    return _svg(width, height, body, f"bars, {unit}")


def coverage_bar(coverage: Mapping[str, Any], width: int = 300, height: int = 16) -> str:
    """One bar split delegated (green) / fallback (orange) by operator count."""
    total = coverage.get("total_ops")
    fallback = coverage.get("fallback")
    if total:
        delegated_share = (coverage.get("delegated_ops") or 0) / total
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


# ------------------------------------------------------------------ page

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1200px;
padding:16px 24px;color:#1b1f24;background:#fff}
h1{font-size:22px;margin:4px 0}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d0d7de}
h3{font-size:15px;margin:16px 0 6px}small,.muted{color:#57606a}
table{border-collapse:collapse;margin:6px 0 10px;font-size:13px}
th,td{border:1px solid #d0d7de;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.n{text-align:right;font-variant-numeric:tabular-nums}
.chips span{display:inline-block;padding:3px 10px;margin:0 6px 6px 0;border-radius:12px;font-weight:600}
.passed{background:#dafbe1;color:#116329}.failed,.error{background:#ffebe9;color:#a40e26}
.skipped{background:#eaeef2;color:#57606a}.inconclusive{background:#fff8c5;color:#7d4e00}
td.bad{background:#ffebe9;color:#a40e26;font-weight:600}td.good{color:#116329}
.row{display:flex;flex-wrap:wrap;gap:18px;align-items:flex-start}
.card{border:1px solid #d0d7de;border-radius:6px;padding:8px 10px}
.sw{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:5px}
svg{max-width:100%;height:auto}svg text{font:11px system-ui,sans-serif;fill:#1b1f24}
svg .tick{fill:#57606a}svg .axis{fill:#57606a;font-size:11px}svg .val{fill:#1b1f24;font-size:10px}
svg .plot{fill:#fbfcfd;stroke:#d0d7de}svg .grid{stroke:#eaeef2}svg .guide{stroke:#afb8c1;stroke-dasharray:2 3}
ul.fail li{margin-bottom:4px}code{font-size:12px;background:#f6f8fa;padding:0 3px;border-radius:3px}
"""


def _chip(verdict: str, count: int) -> str:
    return f'<span class="{_e(verdict)}">{count} {_e(verdict)}</span>'


def _verdict_cell(record: Mapping[str, Any]) -> str:
    verdict = record["verdict"]
    extra = " (gate inconclusive)" if record.get("warnings") else ""
    title = "; ".join(record.get("violations") or []) or record.get("skip_reason") or ""
    return f'<td class="{_e(verdict)}" title="{_e(title)}">{_e(verdict + extra)}</td>'


def _overview(report: Mapping[str, Any], records: Sequence[Mapping[str, Any]],
              found: Sequence[tuple[Mapping[str, Any], Change]], max_regression: float,
              has_baseline: bool) -> list[str]:
    counts: dict[str, int] = {}
    for record in records:
        counts[record["verdict"]] = counts.get(record["verdict"], 0) + 1
    out = ['<section id="overview"><h2>Overview</h2><div class="chips">']
    out += [_chip(v, counts[v]) for v in sorted(counts, key=lambda v: (VERDICT_RANK.get(v, 1), v))]
    inconclusive = sum(1 for r in records if r.get("warnings"))
    if inconclusive:
        out.append(f'<span class="inconclusive">{inconclusive} gate inconclusive</span>')
    if has_baseline:
        regressed = len({id(r) for r, _ in found})
        out.append(f'<span class="{"failed" if found else "passed"}">{regressed} record(s) regressed '
                   f'against the baseline (&gt; {max_regression:.0%})</span>')
    out.append("</div>")
    failures = [r for r in records if r["verdict"] in ("failed", "error")]
    if failures:
        out.append(f"<h3>Failures ({len(failures)})</h3><ul class=\"fail\">")
        for r in failures:
            messages = "".join(f"<li>{_e(v)}</li>" for v in r.get("violations") or ["(no message)"])
            out.append(f'<li><a href="#{_anchor(r["model"]["name"])}"><code>{_e(r["test"])}</code></a> '
                       f'on <b>{_e(r["backend"])}</b>'
                       + (f" ({_e(r['machine'])})" if r.get("machine") else "")
                       + f' <span class="{_e(r["verdict"])}">{_e(r["verdict"])}</span><ul>{messages}</ul></li>')
        out.append("</ul>")
    if found:
        per_record: dict[int, tuple[Mapping[str, Any], list[Change]]] = {}
        for r, change in found:
            per_record.setdefault(id(r), (r, []))[1].append(change)
        out.append(f"<h3>Regressions against the baseline ({len(per_record)})</h3><ul class=\"fail\">")
        for r, changes in per_record.values():
            out.append(f'<li><code>{_e(r["test"])}</code> on <b>{_e(r["backend"])}</b>: ' + "; ".join(
                f"{_e(c.figure)} {_e(c.text())} ({_num(c.old)} → {_num(c.new)})" for c in changes) + "</li>")
        out.append("</ul>")
    warnings = [(r, w) for r in records for w in r.get("warnings") or []]
    if warnings:
        out.append("<h3>Warnings</h3><ul>" + "".join(
            f"<li><code>{_e(r['test'])}</code>: {_e(w)}</li>" for r, w in warnings) + "</ul>")
    out.append("</section>")
    return out


def _anchor(model: str) -> str:
    return "model-" + "".join(c if c.isalnum() or c in "-_" else "_" for c in model)


def _matrix(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per model, devices (rows) x backends (columns): the worst verdict and its P50."""
    devices = sorted({device_label(r) for r in records})
    if len(devices) < 2:
        return []
    out = ['<section id="matrix"><h2>Device × backend</h2>']
    models = sorted({r["model"]["name"] for r in records})
    for model in models:
        cells = worst_per((r for r in records if r["model"]["name"] == model and missing_artifact(r) is None),
                          lambda r: (device_label(r), base_backend(r)))
        if not cells:
            continue
        backends = sorted({b for _, b in cells})
        out.append(_table_open(_e(model), ["device", *backends]))
        for device in sorted({d for d, _ in cells}):
            out.append(f"<tr><th>{_e(device)}</th>")
            for backend in backends:
                r = cells.get((device, backend))
                if r is None:
                    out.append(f'<td class="muted">{DASH}</td>')
                    continue
                p50 = _get(r, "latency_ms", "p50")
                out.append(f'<td class="{_e(r["verdict"])}">{_e(r["verdict"])}'
                           + (f"<br>P50 {_num(p50)} ms" if p50 is not None else "") + "</td>")
            out.append("</tr>")
        out.append("</table>")
    out.append("</section>")
    return out


def _model_section(model: str, records: Sequence[Mapping[str, Any]], skipped: Sequence[Mapping[str, Any]],
                   baseline: Mapping[str, Any] | None, max_regression: float, merged: bool) -> list[str]:
    ran = [r for r in records if r["verdict"] != "skipped"]
    labels = _series_labels(records, merged)
    color = {id(r): PALETTE[i % len(PALETTE)] for i, r in enumerate(records)}
    label = {id(r): lab for r, lab in zip(records, labels)}
    olds = {id(r): find_baseline(baseline, r) if baseline else None for r in records}
    worst = min((VERDICT_RANK.get(r["verdict"], 1) for r in records), default=1)
    out = [(f'<section id="{_anchor(model)}"><h2>{_e(model)} '
            f'<small>{"failures" if worst == 0 else ""}</small></h2>')]
    artifacts = sorted({str(_get(r, "model", "artifact")) for r in records if _get(r, "model", "artifact")})
    if artifacts:
        out.append("<p class=\"muted\">" + ", ".join(f"<code>{_e(a)}</code>" for a in artifacts) + "</p>")

    # Latency: distributions, then load / first inference and peak memory beside them.
    series = []
    for r in ran:
        marks = {k: v for k, v in (_get(r, "latency_ms") or {}).items()
                 if k in ("p50", "p90", "p99") and isinstance(v, (int, float))}
        quantiles = r.get("latency_quantiles_ms") if isinstance(r.get("latency_quantiles_ms"), list) else None
        if quantiles or marks:
            series.append(Series(label[id(r)], color[id(r)], quantiles, marks))
        old = olds[id(r)]
        if old and (old.get("latency_quantiles_ms") or _get(old, "latency_ms", "p50") is not None):
            old_marks = {k: v for k, v in (_get(old, "latency_ms") or {}).items()
                         if k in ("p50", "p90", "p99") and isinstance(v, (int, float))}
            old_quantiles = old.get("latency_quantiles_ms") if isinstance(old.get("latency_quantiles_ms"), list) \
                else None
            series.append(Series(f"{label[id(r)]} (baseline)", color[id(r)], old_quantiles, old_marks, True))
    chart = ecdf_chart(series)
    timing = bar_chart([(label[id(r)], [(r.get("load_ms"), color[id(r)], "load"),
                                        (r.get("first_inference_ms"), color[id(r)] + "99", "first inference")])
                        for r in ran], "ms")
    memory = bar_chart([(label[id(r)], [(r.get("peak_memory_mb"), color[id(r)], "peak")]
                         + ([(olds[id(r)].get("peak_memory_mb"), "#afb8c1", "baseline peak")]
                            if olds[id(r)] and olds[id(r)].get("peak_memory_mb") is not None else []))
                        for r in ran], "MB")
    if chart or timing or memory:
        out.append('<div class="row">')
        if chart:
            out.append(f'<div class="card"><h3>Latency distribution</h3>{chart}'
                       + ('<br><small>dashed: baseline</small>' if any(s.baseline for s in series) else "")
                       + "</div>")
        side = []
        if timing:
            side.append(f"<h3>Load and first inference</h3>{timing}<br><small>solid: load; light: first "
                        "inference</small>")
        if memory:
            side.append(f"<h3>Peak memory</h3>{memory}"
                        + ("<br><small>grey: baseline</small>" if baseline else ""))
        if side:
            out.append('<div class="card">' + "".join(side) + "</div>")
        out.append("</div>")

    # The figures as numbers, the backends' colours as the charts' legend.
    out.append(_table_open("Figures", ["backend", "P50 ms", "P90 ms", "P99 ms", "mean ms", "min ms", "runs",
                                       "load ms", "first inference ms", "peak MB", "verdict"]))
    for r in records:
        lat = r.get("latency_ms") or {}
        out.append(f'<tr><td><span class="sw" style="background:{color[id(r)]}"></span>{_e(label[id(r)])}</td>'
                   + "".join(f'<td class="n">{_num(v)}</td>' for v in (
                       lat.get("p50"), lat.get("p90"), lat.get("p99"), lat.get("mean"), lat.get("min"),
                       r.get("measured_runs"), r.get("load_ms"), r.get("first_inference_ms"),
                       r.get("peak_memory_mb")))
                   + _verdict_cell(r) + "</tr>")
    out.append("</table>")
    for r in records:
        if r["verdict"] in ("failed", "error", "skipped") and (r.get("violations") or r.get("skip_reason")):
            text = "; ".join(r.get("violations") or []) or r.get("skip_reason")
            out.append(f'<p><span class="{_e(r["verdict"])}">&nbsp;{_e(r["verdict"])}&nbsp;</span> '
                       f"<b>{_e(label[id(r)])}</b>: {_e(text)}</p>")

    # Against the baseline: each figure's change, regressions highlighted.
    compared = [(r, figure_changes(r, olds[id(r)], max_regression)) for r in ran if olds[id(r)]]
    if any(changes for _, changes in compared):
        out.append(_table_open(f"Against the baseline <small>(regression: more than {max_regression:.0%}; "
                               "fallback: any rise)</small>", ["backend", *(f for f, _, _ in FIGURES)]))
        for r, changes in compared:
            by_figure = {c.figure: c for c in changes}
            cells = []
            for figure, _, relative in FIGURES:
                c = by_figure.get(figure)
                if c is None:
                    cells.append(f'<td class="muted">{DASH}</td>')
                    continue
                shown = (lambda v: f"{v:.1%}") if not relative else _num
                cls = "bad" if c.regressed else ("good" if c.delta < 0 else "")
                cells.append(f'<td class="n {cls}">{shown(c.old)} → {shown(c.new)} ({_e(c.text())})</td>')
            out.append(f"<tr><td>{_e(label[id(r)])}</td>{''.join(cells)}</tr>")
        out.append("</table>")

    # Delegate coverage: the split, the operators left to the CPU, the partitions.
    covered = [r for r in ran if r.get("coverage")]
    if covered:
        out.append(_table_open("Delegate coverage",
                               ["backend", "delegated / fallback", "ops", "partitions", "fallback operators"]))
        for r in covered:
            cov = r["coverage"]
            ops = cov.get("fallback_op_names") or {}
            names = ", ".join(f"<code>{_e(op)}</code> ×{_e(n)}" for op, n in sorted(ops.items())) or "none"
            share = cov.get("fallback")
            note = ""
            if not (cov.get("delegated_ops") or 0) and not cov.get("partitions"):
                from .json_report import backend_has_delegate  # the registry, or the "-ref" naming

                if not backend_has_delegate(r["backend"]):
                    note = " <small>reference lane: no delegate by design</small>"
            method = " <small>(predicted)</small>" if cov.get("method") == "predicted" else ""
            out.append(f"<tr><td>{_e(label[id(r)])}</td><td>{coverage_bar(cov)} "
                       f"{'' if share is None else f'{1 - share:.0%} delegated'}{method}{note}</td>"
                       f'<td class="n">{_num(cov.get("delegated_ops"))}/{_num(cov.get("total_ops"))}</td>'
                       f'<td class="n">{_num(cov.get("partitions"))}</td><td>{names}</td></tr>')
        out.append("</table>")

    # Accuracy against the golden, per record (the report keeps the worst over outputs and cases).
    checked = [r for r in ran if r.get("accuracy")]
    if checked:
        out.append(_table_open("Accuracy <small>(worst over outputs and cases)</small>",
                               ["backend", "reference", "max |Δ|", "max rel", "cosine", "SNR dB"]))
        for r in checked:
            acc = r["accuracy"]
            cosine = acc.get("cosine")
            out.append(f"<tr><td>{_e(label[id(r)])}</td><td>{_e(acc.get('reference') or DASH)}</td>"
                       + "".join(f'<td class="n">{v}</td>' for v in (
                           DASH if acc.get("max_abs_err") is None else f"{acc['max_abs_err']:.2e}",
                           DASH if acc.get("max_rel_err") is None else f"{acc['max_rel_err']:.2e}",
                           DASH if cosine is None else f"{cosine:.6f}", _num(acc.get("snr_db"))))
                       + "</tr>")
        out.append("</table>")
    for model_name, (suffixes, backends) in folded_skips(skipped).items():
        out.append(f'<p class="muted">{_e(fold_line(model_name, suffixes, backends))}</p>')
    out.append("</section>")
    return out


def render_html(report: Mapping[str, Any], baseline: Mapping[str, Any] | None = None,
                max_regression: float = DEFAULT_MAX_REGRESSION) -> str:
    """The whole report as one HTML page: overview, device x backend matrix (merged reports),
    then per model latency, load, memory, coverage, accuracy and the change against ``baseline``
    (a report of the same shape; records matched by test, else by model and backend; without one,
    the A/B twins measured in the report's own job)."""
    baseline = report_baseline(report, baseline)
    records = list(report.get("records", []))
    merged = bool(report.get("machines")) or any(r.get("machine") for r in records)
    found = regressions(report, baseline, max_regression)
    machines = report.get("machines") or ([report["machine"]] if report.get("machine") else [])
    described = "; ".join(
        (f"{m['label']}: " if m.get("label") else "")
        + ", ".join(str(m[k]) for k in ("cpu", "os", "python") if m.get(k))
        + (f", {m['cores']} cores" if m.get("cores") else "") for m in machines if isinstance(m, Mapping))
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width,initial-scale=1">',
           "<title>pytest-edge report</title>", f"<style>{CSS}</style></head><body>",
           "<h1>pytest-edge conformance report</h1>",
           f'<p class="muted">{_e(report.get("created", ""))} · {len(records)} record(s)'
           + (f" · {_e(described)}" if described else "")
           + (f" · baseline of {_e(baseline.get('created', '?'))}" if baseline else "") + "</p>"]
    out += _overview(report, records, found, max_regression, baseline is not None)
    out += _matrix(records)
    by_model: dict[str, list[Mapping[str, Any]]] = {}
    for record in records:
        by_model.setdefault(record["model"]["name"], []).append(record)
    # Models with a failure first, then by name.
    order = sorted(by_model, key=lambda m: (min(VERDICT_RANK.get(r["verdict"], 1) for r in by_model[m]) != 0, m))
    for model in order:
        shown = sorted((r for r in by_model[model] if missing_artifact(r) is None),
                       key=lambda r: (r["backend"], str(r.get("machine", "")), r["test"]))
        skipped = [r for r in by_model[model] if missing_artifact(r) is not None]
        out += _model_section(model, shown, skipped, baseline, max_regression, merged)
    out.append('<p class="muted"><small>pytest-edge · self-contained page: no script, no network</small></p>')
    out.append("</body></html>")
    return "\n".join(out) + "\n"
