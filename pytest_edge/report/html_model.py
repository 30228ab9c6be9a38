"""A model's section of the HTML page: its latency distributions, load and peak-memory charts, the
figures table, sizes and long-run figures, the change against the baseline, delegate coverage,
accuracy against the golden, and the backends skipped for want of an artifact."""

from __future__ import annotations

from typing import Mapping, Sequence

from ..core.record import COMPILE_ONLY, Record, Verdict, is_finite_number
from . import deployment
from . import generation as decoders
from .changes import FIGURES, figure_changes
from .charts import PALETTE, Curve, Series, bar_chart, coverage_bar, ecdf_chart, escape, line_chart, significant
from .html_parts import anchor, table_open
from .json_report import Report
from .table import DASH, NOT_RUN, VERDICT_RANK, fold_line, folded_skips, machine_label, timing_policy


def _series_labels(records: Sequence[Record], merged: bool) -> list[str]:
    """Backend (and machine in a merged report); the test's name only where two records would
    otherwise share a label."""
    labels = [r.backend + (f" · {machine_label(r)}" if merged and machine_label(r) else "") for r in records]
    return [f"{label} [{r.test.rpartition('::')[2]}]" if labels.count(label) > 1 else label
            for label, r in zip(labels, records)]


def _verdict_cell(record: Record) -> str:
    verdict = str(record.verdict)
    extra = " (gate inconclusive)" if record.warnings else ""
    title = "; ".join(record.violations) or record.skip_reason or ""
    return f'<td class="{escape(verdict)}" title="{escape(title)}">{escape(verdict + extra)}</td>'


def _marks(latency_ms: Mapping[str, float] | None) -> dict[str, float]:
    """P50, P90 and P99 of a record's latency, where they are numbers."""
    return {k: v for k, v in (latency_ms or {}).items() if k in ("p50", "p90", "p99") and isinstance(v, (int, float))}


def model_section(model: str, records: Sequence[Record], skipped: Sequence[Record], baseline: Report | None,
                  max_regression: float, merged: bool, gates: bool) -> list[str]:
    """The section of ``model``: its ``records`` (sorted as shown), those ``skipped`` for want of an
    artifact (folded into a line), each record's change against its match in ``baseline``."""
    ran = [r for r in records if r.verdict not in NOT_RUN]
    labels = _series_labels(records, merged)
    color = {id(r): PALETTE[i % len(PALETTE)] for i, r in enumerate(records)}
    label = {id(r): lab for r, lab in zip(records, labels)}
    olds = {id(r): baseline.baseline_of(r) if baseline is not None else None for r in records}
    worst = min((VERDICT_RANK.get(r.verdict, 1) for r in records), default=1)
    out = [(f'<section id="{anchor(model)}"><h2>{escape(model)} '
            f'<small>{"failures" if worst == 0 else ""}</small></h2>')]
    artifacts = sorted({str(r.model.artifact) for r in records if r.model.artifact})
    if artifacts:
        out.append("<p class=\"muted\">" + ", ".join(f"<code>{escape(a)}</code>" for a in artifacts) + "</p>")

    # Latency: distributions, then load / first inference and peak memory beside them.
    series = []
    for r in ran:
        marks = _marks(r.latency_ms)
        quantiles = r.latency_quantiles_ms
        if quantiles or marks:
            series.append(Series(label[id(r)], color[id(r)], quantiles, marks))
        old = olds[id(r)]
        if old is not None and (old.latency_quantiles_ms or (old.latency_ms or {}).get("p50") is not None):
            series.append(Series(f"{label[id(r)]} (baseline)", color[id(r)], old.latency_quantiles_ms,
                                 _marks(old.latency_ms), True))
    chart = ecdf_chart(series)
    timing = bar_chart([(label[id(r)], [(r.load_ms, color[id(r)], "load"),
                                        (r.first_inference_ms, color[id(r)] + "99", "first inference")])
                        for r in ran], "ms")
    memory = bar_chart([(label[id(r)], [(r.peak_memory_mb, color[id(r)], "peak")]
                         + ([(old.peak_memory_mb, "#afb8c1", "baseline peak")]
                            if (old := olds[id(r)]) is not None and old.peak_memory_mb is not None else []))
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
                        + ("<br><small>grey: baseline</small>" if baseline is not None else ""))
        if side:
            out.append('<div class="card">' + "".join(side) + "</div>")
        out.append("</div>")
    # Resident memory during the timed runs, per backend (its first process's readings): a leak is a
    # line that keeps rising; the record's memory_growth_kb_per_run is its slope.
    growth = [Curve(f"{label[id(r)]}: {significant(r.memory_growth_kb_per_run)} KB per run", color[id(r)],
                    points) for r in ran if len(points := _rss_points(r)) > 1]
    if any(c.points for c in growth):
        out.append('<div class="card"><h3>Resident memory during the timed runs</h3>'
                   + line_chart([c for c in growth if c.points], "timed run", "RSS MB", from_zero=False, linear_x=True)
                   + "<br><small>one process per backend; the slope is the record's memory growth per run</small>"
                   + "</div>")

    # The figures as numbers, the backends' colours as the charts' legend. A compile-time target
    # (docs/npu.md) times nothing: its figures are the page's NPU section, not a row of dashes here.
    timed = [r for r in records if timing_policy(r) is not COMPILE_ONLY]
    compiled = [r for r in records if timing_policy(r) is COMPILE_ONLY]
    if compiled:
        out.append('<p class="muted">' + ", ".join(f"{escape(label[id(r)])} ({escape(r.verdict)})" for r in compiled)
                   + ': compile-time target(s): nothing executed, their placement, memory and estimate are in '
                   '<a href="#npu">NPU compile-time targets</a></p>')
    if timed:
        out.append(table_open("Figures", ["backend", "P50 ms", "P90 ms", "P99 ms", "mean ms", "min ms", "runs",
                                          "load ms", "first inference ms", "peak MB", "verdict"]))
    for r in timed:
        lat = r.latency_ms or {}
        out.append(f'<tr><td><span class="sw" style="background:{color[id(r)]}"></span>{escape(label[id(r)])}</td>'
                   + "".join(f'<td class="n">{significant(v)}</td>' for v in (
                       lat.get("p50"), lat.get("p90"), lat.get("p99"), lat.get("mean"), lat.get("min"),
                       r.measured_runs, r.load_ms, r.first_inference_ms, r.peak_memory_mb))
                   + _verdict_cell(r) + "</tr>")
    if timed:
        out.append("</table>")
    shipped = [r for r in ran if deployment.has_figures(r) and timing_policy(r) is not COMPILE_ONLY]
    if shipped:  # what ships and how it runs for long: sizes, throughput, power and temperature
        out.append(table_open("Size, throughput, power and temperature <small>(initial → steady)</small>",
                              deployment.HEADERS))
        out += [f"<tr><td>{escape(label[id(r)])}</td>{''.join(deployment.row_cells(r))}</tr>" for r in shipped]
        out.append("</table>")
    for r in records:
        if r.verdict in (Verdict.FAILED, Verdict.ERROR, *NOT_RUN) and (r.violations or r.skip_reason):
            text = "; ".join(r.violations) or r.skip_reason or ""
            out.append(f'<p><span class="{escape(r.verdict)}">&nbsp;{escape(r.verdict)}&nbsp;</span> '
                       f"<b>{escape(label[id(r)])}</b>: {escape(text)}</p>")

    # Against the baseline: each figure's change, regressions highlighted.
    compared = [(r, figure_changes(r, old, max_regression, gates)) for r in ran if (old := olds[id(r)]) is not None]
    if any(changes for _, changes in compared):
        out.append(table_open("Against the baseline <small>(marked: failed by the merge gate; where no gate ran, "
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
    covered = [(r, r.coverage) for r in ran if r.coverage is not None]
    if covered:
        out.append(table_open("Delegate coverage",
                              ["backend", "delegated / fallback", "ops", "partitions", "fallback operators"]))
        for r, cov in covered:
            ops = cov.fallback_op_names or {}
            names = ", ".join(f"<code>{escape(op)}</code> ×{escape(n)}" for op, n in sorted(ops.items())) or "none"
            share = cov.fallback
            note = ""
            if not (cov.delegated_ops or 0) and not cov.partitions:
                from .table import backend_has_delegate  # the registry, or the "-ref" naming

                if not backend_has_delegate(r.backend):
                    note = " <small>reference lane: no delegate by design</small>"
            method = " <small>(predicted)</small>" if cov.method == "predicted" else ""
            out.append(f"<tr><td>{escape(label[id(r)])}</td><td>{coverage_bar(cov)} "
                       f"{'' if share is None else f'{1 - share:.0%} delegated'}{method}{note}</td>"
                       f'<td class="n">{significant(cov.delegated_ops)}/{significant(cov.total_ops)}</td>'
                       f'<td class="n">{significant(cov.partitions)}</td><td>{names}</td></tr>')
        out.append("</table>")

    # Accuracy against the golden, per record (the report keeps the worst over outputs and cases).
    checked = [r for r in ran if r.accuracy is not None]
    if checked:
        # A decoder's max |Δ| and cosine are its first step's logits; its tokens' figures beside them.
        decoder = any(decoders.is_decoder(r) for r in checked)
        quality = [header for header, _, _ in decoders.QUALITY] if decoder else []
        out.append(table_open("Accuracy <small>(worst over outputs and cases"
                              + ("; a decoder's max |Δ| and cosine: its first step's logits" if decoder else "")
                              + ")</small>",
                              ["backend", "reference", "max |Δ|", "max rel", "cosine", "SNR dB", *quality]))
        for r in checked:
            # A decoder's and a speech export's accuracy lack some of a tensor model's figures: dashes.
            acc = r.accuracy
            cosine, max_abs_err = getattr(acc, "cosine", None), getattr(acc, "max_abs_err", None)
            max_rel_err = getattr(acc, "max_rel_err", None)
            out.append(f"<tr><td>{escape(label[id(r)])}</td><td>{escape(getattr(acc, 'reference', None) or DASH)}</td>"
                       + "".join(f'<td class="n">{v}</td>' for v in (
                           DASH if max_abs_err is None else f"{max_abs_err:.2e}",
                           DASH if max_rel_err is None else f"{max_rel_err:.2e}",
                           DASH if cosine is None else f"{cosine:.6f}", significant(getattr(acc, "snr_db", None))))
                       + "".join(f'<td class="n">{escape(cell)}</td>'
                                 for cell in (decoders.quality_cells(r) if decoder else []))
                       + "</tr>")
        out.append("</table>")
    for model_name, (suffixes, backends) in folded_skips(skipped).items():
        out.append(f'<p class="muted">{escape(fold_line(model_name, suffixes, backends))}</p>')
    out.append("</section>")
    return out


def _rss_points(record: Record) -> list[tuple[float, float]]:
    """The first process's readings of resident memory (run count, MB) in a report's record, the
    well-formed ones only (a report is untrusted input: a NaN reads as a float)."""
    first = record.processes[0] if record.processes else None  # the one place this module reads a process
    points = first.rss_points if first is not None else None
    return [(float(p[0]), float(p[1])) for p in points or [] if len(p) == 2 and all(is_finite_number(v) for v in p)]
