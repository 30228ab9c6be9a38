"""The history section of the HTML page (docs/monitoring.md): per (model, backend, device) its figures
over the last runs of a run history, as a table (a column per run) and trend charts (inline SVG, no
script, no network), with the creep alert's findings first. Plain logic: ``pytest-edge history html``
and ``--edge-html`` with ``--edge-history`` call it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from ..checks import BUDGETS
from ..core.record import Record, is_finite_number
from .charts import PALETTE, Curve, escape, line_chart
from .history_creep import Creep
from .history_runs import Run
from .history_series import SHOWN, Held, series
from .html_parts import CSS
from .record_figures import instructions, snr_db, token_agreement


@dataclass(frozen=True)
class Trend:
    """A trend chart: its title, the y axis, how its figure is read from a record, and its place
    among the charts."""

    title: str
    unit: str
    read: Callable[[Record], float | None]
    place: float = 0.0


# The charts of figures no budget judges; a budgeted figure's is its row's (checks.BUDGETS, its kept
# figure's ``trend``), so a new row's figure gets a chart without another edit.
OWN_TRENDS = (Trend("instructions per inference", "instructions", instructions, 55),
              Trend("SNR against the reference", "dB", snr_db, 90),
              Trend("token agreement", "fraction of tokens", token_agreement, 92))
TRENDS = tuple(sorted((*OWN_TRENDS, *(Trend(row.kept.trend, row.kept.trend_unit, row.kept.readers[0], row.kept.place)
                                      for row in BUDGETS if row.kept and row.kept.trend)),
                      key=lambda trend: trend.place))


def _points(held: Held, read: Callable[[Record], float | None]) -> list[tuple[float, float]]:
    return [(float(index + 1), float(v)) for index, (_, record) in enumerate(held)
            if is_finite_number(v := read(record))]


def _p50(record: Record) -> float | None:
    return record.latency_ms.get("p50") if record.latency_ms is not None else None


def _process_p50s(record: Record) -> list[float]:
    processes = record.processes  # the one reader of the record's processes here
    return [p.p50 for p in processes or [] if is_finite_number(p.p50) and p.p50 > 0]


def _latency_chart(held: Held) -> str:
    """P50 latency per run, with the fastest and slowest fresh process's P50 (the spread) dashed."""
    p50 = _points(held, _p50)
    if not p50:
        return ""
    low = _points(held, lambda r: min(_process_p50s(r)) if len(_process_p50s(r)) > 1 else None)
    high = _points(held, lambda r: max(_process_p50s(r)) if len(_process_p50s(r)) > 1 else None)
    curves = [Curve("P50 latency", PALETTE[0], p50)]
    if low:
        curves += [Curve("fastest process P50", PALETTE[0], low, dashed=True),
                   Curve("slowest process P50", PALETTE[0], high, dashed=True)]
    return line_chart(curves, "run", "P50 ms (dashed: processes' range)", 420, 220, from_zero=False, linear_x=True)


def _table(held: Held) -> list[str]:
    out = ['<table><tr><th>run</th>' + "".join(f"<th>{index + 1}<br><small>{escape(run.commit[:10] or '-')}"
                                               f"<br>{escape(run.created[:10])}</small></th>"
                                               for index, (run, _) in enumerate(held)) + "</tr>"]
    for shown in SHOWN:
        values = [shown.read(record) for _, record in held]
        if not any(is_finite_number(v) for v in values):
            continue
        out.append(f"<tr><td>{escape(shown.name)}</td>" + "".join(
            f"<td>{escape(format(v, shown.fmt)) if is_finite_number(v) else '—'}</td>" for v in values) + "</tr>")
    out.append("</table>")
    return out


def history_section(runs: Sequence[Run], last: int = 10, creeps: Sequence[Creep] = ()) -> list[str]:
    """The section's HTML lines: the creeps, then per (model, backend, device) its table and trends."""
    out = ['<section id="history"><h2>History</h2>',
           f'<p class="muted">{len(runs)} run(s) in the history; each series shows its last {last}, numbered from '
           "1, the oldest shown, as in its table.</p>"]
    if creeps:
        out.append("<h3>Creep over the history</h3><ul>" + "".join(
            f"<li><strong>creep</strong>: {escape(c.message)}</li>" for c in creeps) + "</ul>")
    for key, held in sorted(series(runs).items()):
        held = held[-last:]
        out.append(f"<h3>{escape(' / '.join(key))}</h3>")
        out += _table(held)
        charts = [_latency_chart(held)] + [
            line_chart([Curve(trend.title, PALETTE[(index + 1) % len(PALETTE)], points)],
                       "run", f"{trend.title}, {trend.unit}", 420, 220, from_zero=False, linear_x=True)
            for index, trend in enumerate(TRENDS) if (points := _points(held, trend.read))]
        out.append('<div class="row">' + "".join(f'<div class="card">{chart}</div>' for chart in charts if chart) + "</div>")
    out.append("</section>")
    # A lone surrogate in a run's names (a file name's undecodable byte) has no UTF-8: its escape's text.
    return [line.encode("utf-8", "backslashreplace").decode("utf-8") for line in out]


def render_history_html(runs: Sequence[Run], last: int = 10, creeps: Sequence[Creep] = ()) -> str:
    """A page of the history section alone (``pytest-edge history html``)."""
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width,initial-scale=1">',
           "<title>pytest-edge history</title>", f"<style>{CSS}</style></head><body>",
           "<h1>pytest-edge: figures over time</h1>", *history_section(runs, last, creeps),
           '<p class="muted"><small>pytest-edge · self-contained page: no script, no network</small></p>',
           "</body></html>"]
    return "\n".join(out) + "\n"
