"""The decoders' section of the HTML page: the generation table (TTFT, TPOT, tokens/s, memory) and,
per measured decoder, its TTFT and TPOT distributions and its memory against the context length."""

from __future__ import annotations

from typing import Sequence

from ..core.record import Record
from . import generation as decoders
from .charts import PALETTE, Curve, Series, ecdf_chart, escape, line_chart
from .generation import HEADERS, generation_rows
from .html_parts import table_open


def generation_charts(records: Sequence[Record]) -> list[str]:
    """Per measured decoder (test and backend) its TTFT and TPOT distributions (ECDFs, as a tensor
    model's latency) and, where it swept the context, peak memory and the KV-cache estimate against
    the context length."""
    measured = sorted((r for r in records if decoders.measured(r) is not None),
                      key=lambda r: (r.model.name, r.backend, r.test))
    if not measured:
        return []
    color = {id(r): PALETTE[i % len(PALETTE)] for i, r in enumerate(measured)}
    label = {id(r): f"{r.test} · {r.backend}" for r in measured}
    charts = []
    for name, per in (("ttft", "generations"), ("tpot", "tokens")):
        series = []
        for r in measured:
            found = decoders.distribution(r, name)
            if found is not None:
                series.append(Series(label[id(r)], color[id(r)], found.quantiles, found.marks))
        chart = ecdf_chart(series, figure=name.upper(), per=per)
        if chart:
            charts.append(f'<div class="card"><h3>{name.upper()} distribution</h3>{chart}</div>')
    curves = []
    for r in measured:
        points = decoders.context_points(r)
        peak = [(p.tokens, p.peak_memory_mb) for p in points if p.peak_memory_mb is not None]
        kv = [(p.tokens, p.kv_cache_estimate_mb) for p in points if p.kv_cache_estimate_mb is not None]
        if peak:
            curves.append(Curve(f"{label[id(r)]} peak memory", color[id(r)], peak))
        if kv:
            curves.append(Curve(f"{label[id(r)]} KV-cache estimate", color[id(r)], kv, dashed=True))
    memory = line_chart(curves, "context length, tokens", "MB")
    if memory:
        charts.append(f'<div class="card"><h3>Memory against context</h3>{memory}<br><small>solid: peak memory '
                      "over the runtime's baseline; dashed: the KV-cache estimate</small></div>")
    legend = "".join(f'<span class="sw" style="background:{color[id(r)]}"></span>{escape(label[id(r)])} '
                     for r in measured)
    return ['<div class="row">', *charts, "</div>", f'<p class="muted"><small>{legend}</small></p>'] if charts else []


def generation_section(records: Sequence[Record]) -> list[str]:
    """The page's section for decoder LLMs, the figures the per-model sections have no chart for;
    nothing where no record measured a decoder."""
    rows = generation_rows(records)
    if not rows:
        return []
    return ['<section id="llm"><h2>LLM generation</h2>',
            table_open("TTFT, TPOT, tokens/s and memory per measured test", HEADERS),
            *("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in rows),
            "</table>", *generation_charts(records), "</section>"]
