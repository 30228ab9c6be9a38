"""One self-contained HTML page from a JSON report: verdicts, latency distributions, delegate
coverage, accuracy, the change against a baseline and the device x backend matrix.

Charts are inline SVG (:mod:`.charts`) (no plotting library, no script, no font
or stylesheet from the network), so the page opens offline from a CI artifact years later and stays
a few kilobytes per record. Every string that comes from a report goes through :func:`~.charts.escape`.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..core.record import GateVerdict, Verdict, dig
from . import deployment
from .ab_baseline import report_baseline
from . import generation as decoders
from .generation import HEADERS as GENERATION_HEADERS, generation_rows
from .changes import (DEFAULT_MAX_REGRESSION, FIGURES, FigureChange, base_backend, device_label, figure_changes,
                      gate_judged, regressions)
from .charts import PALETTE, Curve, Series, bar_chart, coverage_bar, ecdf_chart, escape, line_chart, significant
from ..judging.baseline import find_baseline
from .table import (COMPILED_HEADERS, DASH, NOT_RUN, VERDICT_RANK, compiled_rows, fold_line, folded_skips,
                    gate_summary, missing_artifact, worst_per)


def _table_open(title_html: str, headers: Sequence[str]) -> str:
    """A section title (trusted HTML) and the opening of its table with escaped column headers."""
    return f"<h3>{title_html}</h3><table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in headers) + "</tr>"


def _series_labels(records: Sequence[Mapping[str, Any]], merged: bool) -> list[str]:
    """Backend (and machine in a merged report); the test's name only where two records would
    otherwise share a label."""
    labels = [r["backend"] + (f" · {r['machine']}" if merged and r.get("machine") else "") for r in records]
    return [f"{label} [{r['test'].rpartition('::')[2]}]" if labels.count(label) > 1 else label
            for label, r in zip(labels, records)]


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
.changed{background:#fff8c5;color:#7d4e00}td.changed{font-style:italic}
.convert{background:#eaeef2;color:#57606a}
.row{display:flex;flex-wrap:wrap;gap:18px;align-items:flex-start}
.card{border:1px solid #d0d7de;border-radius:6px;padding:8px 10px}
.sw{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:5px}
svg{max-width:100%;height:auto}svg text{font:11px system-ui,sans-serif;fill:#1b1f24}
svg .tick{fill:#57606a}svg .axis{fill:#57606a;font-size:11px}svg .val{fill:#1b1f24;font-size:10px}
svg .plot{fill:#fbfcfd;stroke:#d0d7de}svg .grid{stroke:#eaeef2}svg .guide{stroke:#afb8c1;stroke-dasharray:2 3}
ul.fail li{margin-bottom:4px}code{font-size:12px;background:#f6f8fa;padding:0 3px;border-radius:3px}
"""


def _chip(verdict: str, count: int) -> str:
    return f'<span class="{escape(verdict)}">{count} {escape(verdict)}</span>'


def _verdict_cell(record: Mapping[str, Any]) -> str:
    verdict = record["verdict"]
    extra = " (gate inconclusive)" if record.get("warnings") else ""
    title = "; ".join(record.get("violations") or []) or record.get("skip_reason") or ""
    return f'<td class="{escape(verdict)}" title="{escape(title)}">{escape(verdict + extra)}</td>'


def _overview(report: Mapping[str, Any], records: Sequence[Mapping[str, Any]],
              found: Sequence[tuple[Mapping[str, Any], FigureChange]], max_regression: float,
              has_baseline: bool, gates: bool) -> list[str]:
    counts: dict[str, int] = {}
    for record in records:
        counts[record["verdict"]] = counts.get(record["verdict"], 0) + 1
    out = ['<section id="overview"><h2>Overview</h2><div class="chips">']
    out += [_chip(v, counts[v]) for v in sorted(counts, key=lambda v: (VERDICT_RANK.get(v, 1), v))]
    inconclusive = sum(1 for r in records if r.get("warnings"))
    if inconclusive:
        out.append(f'<span class="inconclusive">{inconclusive} gate inconclusive</span>')
    failed = [(r, c) for r, c in found if c.regressed]
    beyond = [(r, c) for r, c in found if not c.regressed]
    gate_line = gate_summary(records)
    if gate_line and gates:  # the terminal's gate line: decoders and models without a twin counted too
        regressed = any((r.get("baseline_check") or {}).get("verdict") == GateVerdict.FAILED for r in records)
        out.append(f'<span class="{"failed" if regressed else "passed"}">'
                   f"{escape(gate_line)}</span>")
    if has_baseline:
        judged = gates and any(gate_judged(r) for r in records)
        if judged:
            regressed = len({id(r) for r, _ in failed})
            out.append(f'<span class="{"failed" if failed else "passed"}">{regressed} record(s) regressed '
                       f'against the baseline (the merge gate\'s verdict)</span>')
        if beyond or not judged:
            changed = len({id(r) for r, _ in beyond})
            out.append(f'<span class="{"changed" if beyond else "passed"}">{changed} record(s) changed beyond '
                       f'{max_regression:.0%} against the baseline (a comparison, no gate ran)</span>')
    out.append("</div>")
    failures = [r for r in records if r["verdict"] in (Verdict.FAILED, Verdict.ERROR)]
    if failures:
        out.append(f"<h3>Failures ({len(failures)})</h3><ul class=\"fail\">")
        for r in failures:
            messages = "".join(f"<li>{escape(v)}</li>" for v in r.get("violations") or ["(no message)"])
            out.append(f'<li><a href="#{_anchor(r["model"]["name"])}"><code>{escape(r["test"])}</code></a> '
                       f'on <b>{escape(r["backend"])}</b>'
                       + (f" ({escape(r['machine'])})" if r.get("machine") else "")
                       + f' <span class="{escape(r["verdict"])}">{escape(r["verdict"])}</span><ul>{messages}</ul></li>')
        out.append("</ul>")
    for title, listed in (("Regressions against the baseline", failed),
                          (f"Changes beyond {max_regression:.0%} against the baseline, a comparison "
                           "(no merge gate judged these records)", beyond)):
        if not listed:
            continue
        per_record: dict[int, tuple[Mapping[str, Any], list[FigureChange]]] = {}
        for r, change in listed:
            per_record.setdefault(id(r), (r, []))[1].append(change)
        out.append(f"<h3>{escape(title)} ({len(per_record)})</h3><ul class=\"fail\">")
        for r, changes in per_record.values():
            out.append(f'<li><code>{escape(r["test"])}</code> on <b>{escape(r["backend"])}</b>: ' + "; ".join(
                f"{escape(c.figure)} {escape(c.text())} ({significant(c.old)} → {significant(c.new)})" for c in changes) + "</li>")
        out.append("</ul>")
    warnings = [(r, w) for r in records for w in r.get("warnings") or []]
    if warnings:
        out.append("<h3>Warnings</h3><ul>" + "".join(
            f"<li><code>{escape(r['test'])}</code>: {escape(w)}</li>" for r, w in warnings) + "</ul>")
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
        out.append(_table_open(escape(model), ["device", *backends]))
        for device in sorted({d for d, _ in cells}):
            out.append(f"<tr><th>{escape(device)}</th>")
            for backend in backends:
                r = cells.get((device, backend))
                if r is None:
                    out.append(f'<td class="muted">{DASH}</td>')
                    continue
                p50 = dig(r, "latency_ms", "p50")
                out.append(f'<td class="{escape(r["verdict"])}">{escape(r["verdict"])}'
                           + (f"<br>P50 {significant(p50)} ms" if p50 is not None else "") + "</td>")
            out.append("</tr>")
        out.append("</table>")
    out.append("</section>")
    return out


def _model_section(model: str, records: Sequence[Mapping[str, Any]], skipped: Sequence[Mapping[str, Any]],
                   baseline: Mapping[str, Any] | None, max_regression: float, merged: bool,
                   gates: bool) -> list[str]:
    ran = [r for r in records if r["verdict"] not in NOT_RUN]
    labels = _series_labels(records, merged)
    color = {id(r): PALETTE[i % len(PALETTE)] for i, r in enumerate(records)}
    label = {id(r): lab for r, lab in zip(records, labels)}
    olds = {id(r): find_baseline(baseline, r) if baseline else None for r in records}
    worst = min((VERDICT_RANK.get(r["verdict"], 1) for r in records), default=1)
    out = [(f'<section id="{_anchor(model)}"><h2>{escape(model)} '
            f'<small>{"failures" if worst == 0 else ""}</small></h2>')]
    artifacts = sorted({str(dig(r, "model", "artifact")) for r in records if dig(r, "model", "artifact")})
    if artifacts:
        out.append("<p class=\"muted\">" + ", ".join(f"<code>{escape(a)}</code>" for a in artifacts) + "</p>")

    # Latency: distributions, then load / first inference and peak memory beside them.
    series = []
    for r in ran:
        marks = {k: v for k, v in (dig(r, "latency_ms") or {}).items()
                 if k in ("p50", "p90", "p99") and isinstance(v, (int, float))}
        quantiles = r.get("latency_quantiles_ms") if isinstance(r.get("latency_quantiles_ms"), list) else None
        if quantiles or marks:
            series.append(Series(label[id(r)], color[id(r)], quantiles, marks))
        old = olds[id(r)]
        if old and (old.get("latency_quantiles_ms") or dig(old, "latency_ms", "p50") is not None):
            old_marks = {k: v for k, v in (dig(old, "latency_ms") or {}).items()
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
        out.append(f'<tr><td><span class="sw" style="background:{color[id(r)]}"></span>{escape(label[id(r)])}</td>'
                   + "".join(f'<td class="n">{significant(v)}</td>' for v in (
                       lat.get("p50"), lat.get("p90"), lat.get("p99"), lat.get("mean"), lat.get("min"),
                       r.get("measured_runs"), r.get("load_ms"), r.get("first_inference_ms"),
                       r.get("peak_memory_mb")))
                   + _verdict_cell(r) + "</tr>")
    out.append("</table>")
    shipped = [r for r in ran if deployment.has_figures(r)]
    if shipped:  # what ships and how it runs for long: sizes, throughput, power and temperature
        out.append(_table_open("Size, throughput, power and temperature <small>(initial → steady)</small>",
                               deployment.HEADERS))
        out += [f"<tr><td>{escape(label[id(r)])}</td>{''.join(deployment.row_cells(r))}</tr>" for r in shipped]
        out.append("</table>")
    for r in records:
        if r["verdict"] in (Verdict.FAILED, Verdict.ERROR, *NOT_RUN) and (r.get("violations") or r.get("skip_reason")):
            text = "; ".join(r.get("violations") or []) or r.get("skip_reason")
            out.append(f'<p><span class="{escape(r["verdict"])}">&nbsp;{escape(r["verdict"])}&nbsp;</span> '
                       f"<b>{escape(label[id(r)])}</b>: {escape(text)}</p>")

    # Against the baseline: each figure's change, regressions highlighted.
    compared = [(r, figure_changes(r, olds[id(r)], max_regression, gates)) for r in ran if olds[id(r)]]
    if any(changes for _, changes in compared):
        out.append(_table_open("Against the baseline <small>(marked: failed by the merge gate; where no gate ran, "
                               f"beyond {max_regression:.0%} by comparison, fallback: any rise)</small>",
                               ["backend", *(f for f, _, _ in FIGURES)]))
        for r, changes in compared:
            by_figure = {c.figure: c for c in changes}
            cells = []
            for figure, _, relative in FIGURES:
                c = by_figure.get(figure)
                if c is None:
                    cells.append(f'<td class="muted">{DASH}</td>')
                    continue
                shown = (lambda v: f"{v:.1%}") if not relative else significant
                cls = "bad" if c.regressed else "changed" if c.beyond else ("good" if c.delta < 0 else "")
                cells.append(f'<td class="n {cls}">{shown(c.old)} → {shown(c.new)} ({escape(c.text())})</td>')
            out.append(f"<tr><td>{escape(label[id(r)])}</td>{''.join(cells)}</tr>")
        out.append("</table>")

    # Delegate coverage: the split, the operators left to the CPU, the partitions.
    covered = [r for r in ran if r.get("coverage")]
    if covered:
        out.append(_table_open("Delegate coverage",
                               ["backend", "delegated / fallback", "ops", "partitions", "fallback operators"]))
        for r in covered:
            cov = r["coverage"]
            ops = cov.get("fallback_op_names") or {}
            names = ", ".join(f"<code>{escape(op)}</code> ×{escape(n)}" for op, n in sorted(ops.items())) or "none"
            share = cov.get("fallback")
            note = ""
            if not (cov.get("delegated_ops") or 0) and not cov.get("partitions"):
                from .table import backend_has_delegate  # the registry, or the "-ref" naming

                if not backend_has_delegate(r["backend"]):
                    note = " <small>reference lane: no delegate by design</small>"
            method = " <small>(predicted)</small>" if cov.get("method") == "predicted" else ""
            out.append(f"<tr><td>{escape(label[id(r)])}</td><td>{coverage_bar(cov)} "
                       f"{'' if share is None else f'{1 - share:.0%} delegated'}{method}{note}</td>"
                       f'<td class="n">{significant(cov.get("delegated_ops"))}/{significant(cov.get("total_ops"))}</td>'
                       f'<td class="n">{significant(cov.get("partitions"))}</td><td>{names}</td></tr>')
        out.append("</table>")

    # Accuracy against the golden, per record (the report keeps the worst over outputs and cases).
    checked = [r for r in ran if r.get("accuracy")]
    if checked:
        # A decoder's max |Δ| and cosine are its first step's logits; its tokens' figures beside them.
        decoder = any(decoders.is_decoder(r) for r in checked)
        quality = [header for header, _, _ in decoders.QUALITY] if decoder else []
        out.append(_table_open("Accuracy <small>(worst over outputs and cases"
                               + ("; a decoder's max |Δ| and cosine: its first step's logits" if decoder else "")
                               + ")</small>",
                               ["backend", "reference", "max |Δ|", "max rel", "cosine", "SNR dB", *quality]))
        for r in checked:
            acc = r["accuracy"]
            cosine = acc.get("cosine")
            out.append(f"<tr><td>{escape(label[id(r)])}</td><td>{escape(acc.get('reference') or DASH)}</td>"
                       + "".join(f'<td class="n">{v}</td>' for v in (
                           DASH if acc.get("max_abs_err") is None else f"{acc['max_abs_err']:.2e}",
                           DASH if acc.get("max_rel_err") is None else f"{acc['max_rel_err']:.2e}",
                           DASH if cosine is None else f"{cosine:.6f}", significant(acc.get("snr_db"))))
                       + "".join(f'<td class="n">{escape(cell)}</td>'
                                 for cell in (decoders.quality_cells(r) if decoder else []))
                       + "</tr>")
        out.append("</table>")
    for model_name, (suffixes, backends) in folded_skips(skipped).items():
        out.append(f'<p class="muted">{escape(fold_line(model_name, suffixes, backends))}</p>')
    out.append("</section>")
    return out


def _generation_charts(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per measured decoder (test and backend) its TTFT and TPOT distributions (ECDFs, as a tensor
    model's latency) and, where it swept the context, peak memory and the KV-cache estimate against
    the context length."""
    measured = sorted((r for r in records if decoders.measured(r) is not None),
                      key=lambda r: (str(r["model"]["name"]), str(r["backend"]), str(r.get("test", ""))))
    if not measured:
        return []
    color = {id(r): PALETTE[i % len(PALETTE)] for i, r in enumerate(measured)}
    label = {id(r): f"{r.get('test', '')} · {r['backend']}" for r in measured}
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


def render_html(report: Mapping[str, Any], baseline: Mapping[str, Any] | None = None,
                max_regression: float = DEFAULT_MAX_REGRESSION, gate_baseline: bool | None = None) -> str:
    """The whole report as one HTML page: overview, device x backend matrix (merged reports),
    then per model latency, load, memory, coverage, accuracy and the change against ``baseline``
    (a report of the same shape; records matched by test, else by model and backend; without one,
    the A/B twins measured in the report's own job). ``gate_baseline``: as for the Markdown summary,
    whether the gate's verdicts apply to ``baseline`` (default: only to the twins)."""
    gates = baseline is None if gate_baseline is None else gate_baseline
    baseline = report_baseline(report, baseline)
    records = list(report.get("records", []))
    merged = bool(report.get("machines")) or any(r.get("machine") for r in records)
    found = regressions(report, baseline, max_regression, gates)
    machines = report.get("machines") or ([report["machine"]] if report.get("machine") else [])
    described = "; ".join(
        (f"{m['label']}: " if m.get("label") else "")
        + ", ".join(str(m[k]) for k in ("cpu", "os", "python") if m.get(k))
        + (f", {m['cores']} cores" if m.get("cores") else "") for m in machines if isinstance(m, Mapping))
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width,initial-scale=1">',
           "<title>pytest-edge report</title>", f"<style>{CSS}</style></head><body>",
           "<h1>pytest-edge conformance report</h1>",
           f'<p class="muted">{escape(report.get("created", ""))} · {len(records)} record(s)'
           + (f" · {escape(described)}" if described else "")
           + (f" · baseline of {escape(baseline.get('created', '?'))}" if baseline else "") + "</p>"]
    out += _overview(report, records, found, max_regression, baseline is not None, gates)
    out += _matrix(records)
    generation = generation_rows(records)
    if generation:  # decoder LLMs: the figures the per-model sections have no chart for
        out.append('<section id="llm"><h2>LLM generation</h2>')
        out.append(_table_open("TTFT, TPOT, tokens/s and memory per measured test", GENERATION_HEADERS))
        out += ["<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in generation]
        out.append("</table>")
        out += _generation_charts(records)
        out.append("</section>")
    compiled = compiled_rows(records)
    if compiled:  # compile-time targets (docs/npu.md): nothing executed; the time is the compiler's estimate
        out.append('<section id="npu"><h2>NPU compile-time targets</h2>')
        out.append(_table_open("The compiler's placement, memory and estimated NPU time (nothing executed: an "
                               "estimate, not a measurement)", COMPILED_HEADERS))
        out += ["<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in compiled]
        out.append("</table></section>")
    by_model: dict[str, list[Mapping[str, Any]]] = {}
    for record in records:
        by_model.setdefault(record["model"]["name"], []).append(record)
    # Models with a failure first, then by name.
    order = sorted(by_model, key=lambda m: (min(VERDICT_RANK.get(r["verdict"], 1) for r in by_model[m]) != 0, m))
    for model in order:
        shown = sorted((r for r in by_model[model] if missing_artifact(r) is None),
                       key=lambda r: (r["backend"], str(r.get("machine", "")), r["test"]))
        skipped = [r for r in by_model[model] if missing_artifact(r) is not None]
        out += _model_section(model, shown, skipped, baseline, max_regression, merged, gates)
    out.append('<p class="muted"><small>pytest-edge · self-contained page: no script, no network</small></p>')
    out.append("</body></html>")
    return "\n".join(out) + "\n"
