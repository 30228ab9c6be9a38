"""The speech section of the HTML page (edge_asr records, docs/speech.md): the table of
report/speech.py and its charts: each check's real-time factor per audio file (bars: below 1 is
faster than real time), encoder time and time to first token per audio file, and, for audio longer
than one window, each window's latency against where the window starts."""

from __future__ import annotations

import math
from typing import Any, Sequence

from ..core.record import Record, SpeechFile
from .charts import PALETTE, Curve, bar_chart, escape, line_chart
from .html_parts import table_open
from .speech import HEADERS, speech_of, speech_rows


def _number(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _files(record: Record) -> list[SpeechFile]:
    block = speech_of(record)
    return list(block.files) if block is not None else []


def speech_charts(records: Sequence[Record]) -> list[str]:
    """Bars per check (test · backend), one per audio file, for the real-time factor and for the
    encoder and first-token times; lines of each window's latency for files of more than one window.
    A figure a runtime does not give (CTranslate2's first token) is drawn as "not measured"."""
    checks = sorted((r for r in records if _files(r)), key=lambda r: (r.model.name, r.backend, r.test))
    if not checks:
        return []
    audio = sorted({f.audio for r in checks for f in _files(r)})
    color = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(audio)}

    def label(r: Record) -> str:
        return f"{r.test.rpartition('::')[2].partition('[')[0]} · {r.backend}"

    charts = []
    for figure, unit, title in (("real_time_factor", "x", "Real-time factor (processing time / audio duration)"),
                                ("encoder_ms", "ms", "Encoder time"), ("first_token_ms", "ms", "Time to first token")):
        groups = [(label(r), [(_number(getattr(f, figure)), color[f.audio], f.audio) for f in _files(r)])
                  for r in checks]
        chart = bar_chart(groups, unit, width=460)
        if chart:
            charts.append(f'<div class="card"><h3>{escape(title)}</h3>{chart}</div>')
    curves = []
    for index, r in enumerate(checks):
        for f in _files(r):
            points = [(s, t) for w in f.windows if (s := _number(w.start_s)) is not None
                      and (t := _number(w.total_ms)) is not None]
            if len(points) > 1:
                curves.append(Curve(f"{label(r)} · {f.audio}", PALETTE[index % len(PALETTE)], points))
    latency = line_chart(curves, "window start, s", "ms", linear_x=True)
    if latency:
        charts.append(f'<div class="card"><h3>Latency of each window</h3>{latency}<br><small>audio longer than '
                      "one window: each window decoded on its own, audio in to last token out</small></div>")
    legend = "".join(f'<span class="sw" style="background:{color[name]}"></span>{escape(name)} ' for name in audio)
    return ['<div class="row">', *charts, "</div>", f'<p class="muted"><small>{legend}</small></p>'] if charts else []


def speech_section(records: Sequence[Record]) -> list[str]:
    """The page's section for speech checks; nothing where no record is one."""
    rows = speech_rows(records)
    if not rows:
        return []
    return ['<section id="speech"><h2>Speech recognition</h2>',
            table_open("tokens against the golden, WER/CER against the reference's transcript, real-time factor "
                       "and stage times per audio file", HEADERS),
            *("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in rows),
            "</table>", *speech_charts(records), "</section>"]
