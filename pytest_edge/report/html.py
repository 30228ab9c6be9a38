"""One self-contained HTML page from a JSON report: verdicts, latency distributions, delegate
coverage, accuracy, the change against a baseline and the device x backend matrix.

Charts are inline SVG (:mod:`.charts`) (no plotting library, no script, no font
or stylesheet from the network), so the page opens offline from a CI artifact years later and stays
a few kilobytes per record. Every string that comes from a report goes through :func:`~.charts.escape`.
"""

from __future__ import annotations

from typing import Sequence

from .ab_baseline import report_baseline
from .changes import (DEFAULT_MAX_REGRESSION, FigureChange, base_backend, device_label, gate_judged, regressions)
from .charts import escape, significant
from ..core.record import GateVerdict, Record, Verdict
from .html_generation import generation_section
from .html_speech import speech_section
from .html_model import model_section
from .html_parts import CSS, anchor, table_open
from .json_report import Report
from .npu_targets import COMPILED_HEADERS, compiled_rows, target_matrix
from .table import DASH, VERDICT_RANK, gate_checks, gate_summary, machine_label, missing_artifact, worst_per


def _chip(verdict: str, count: int) -> str:
    return f'<span class="{escape(verdict)}">{count} {escape(verdict)}</span>'


def _overview(records: Sequence[Record], found: Sequence[tuple[Record, FigureChange]], max_regression: float,
              has_baseline: bool, gates: bool) -> list[str]:
    counts: dict[str, int] = {}
    for record in records:
        counts[record.verdict] = counts.get(record.verdict, 0) + 1
    out = ['<section id="overview"><h2>Overview</h2><div class="chips">']
    out += [_chip(v, counts[v]) for v in sorted(counts, key=lambda v: (VERDICT_RANK.get(v, 1), v))]
    inconclusive = sum(1 for r in records if r.warnings)
    if inconclusive:
        out.append(f'<span class="inconclusive">{inconclusive} gate inconclusive</span>')
    failed = [(r, c) for r, c in found if c.regressed]
    beyond = [(r, c) for r, c in found if not c.regressed]
    gate_line = gate_summary(records)
    if gate_line and gates:  # the terminal's gate line: decoders and models without a twin counted too
        regressed = any(check.verdict == GateVerdict.FAILED for check in gate_checks(records))
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
    failures = [r for r in records if r.verdict in (Verdict.FAILED, Verdict.ERROR)]
    if failures:
        out.append(f"<h3>Failures ({len(failures)})</h3><ul class=\"fail\">")
        for r in failures:
            messages = "".join(f"<li>{escape(v)}</li>" for v in r.violations or ["(no message)"])
            machine = machine_label(r)
            out.append(f'<li><a href="#{anchor(r.model.name)}"><code>{escape(r.test)}</code></a> '
                       f'on <b>{escape(r.backend)}</b>'
                       + (f" ({escape(machine)})" if machine else "")
                       + f' <span class="{escape(r.verdict)}">{escape(r.verdict)}</span><ul>{messages}</ul></li>')
        out.append("</ul>")
    for title, listed in (("Regressions against the baseline", failed),
                          (f"Changes beyond {max_regression:.0%} against the baseline, a comparison "
                           "(no merge gate judged these records)", beyond)):
        if not listed:
            continue
        per_record: dict[int, tuple[Record, list[FigureChange]]] = {}
        for r, change in listed:
            per_record.setdefault(id(r), (r, []))[1].append(change)
        out.append(f"<h3>{escape(title)} ({len(per_record)})</h3><ul class=\"fail\">")
        for r, changes in per_record.values():
            out.append(f'<li><code>{escape(r.test)}</code> on <b>{escape(r.backend)}</b>: ' + "; ".join(
                f"{escape(c.figure)} {escape(c.text())} ({significant(c.old)} → {significant(c.new)})" for c in changes) + "</li>")
        out.append("</ul>")
    warnings = [(r, w) for r in records for w in r.warnings]
    if warnings:
        out.append("<h3>Warnings</h3><ul>" + "".join(
            f"<li><code>{escape(r.test)}</code>: {escape(w)}</li>" for r, w in warnings) + "</ul>")
    out.append("</section>")
    return out


def _targets(records: Sequence[Record]) -> list[str]:
    """Model x accelerator target at the top of the page (npu_targets.target_matrix)."""
    models, targets, cells = target_matrix(records)
    if not cells:
        return []
    out = ['<section id="targets"><h2>Model × accelerator target</h2>',
           table_open("Share of operators on the accelerator, the memory its compiler planned, the verdict",
                      ["model", *targets])]
    for model in models:
        out.append(f"<tr><td>{escape(model)}</td>" + "".join(
            f"<td>{escape(cells.get((model, t), DASH))}</td>" for t in targets) + "</tr>")
    out.append("</table></section>")
    return out


def _matrix(records: Sequence[Record]) -> list[str]:
    """Per model, devices (rows) x backends (columns): the worst verdict and its P50."""
    devices = sorted({device_label(r) for r in records})
    if len(devices) < 2:
        return []
    out = ['<section id="matrix"><h2>Device × backend</h2>']
    models = sorted({r.model.name for r in records})
    for model in models:
        cells = worst_per((r for r in records if r.model.name == model and missing_artifact(r) is None),
                          lambda r: (device_label(r), base_backend(r)))
        if not cells:
            continue
        backends = sorted({b for _, b in cells})
        out.append(table_open(escape(model), ["device", *backends]))
        for device in sorted({d for d, _ in cells}):
            out.append(f"<tr><th>{escape(device)}</th>")
            for backend in backends:
                r = cells.get((device, backend))
                if r is None:
                    out.append(f'<td class="muted">{DASH}</td>')
                    continue
                p50 = (r.latency_ms or {}).get("p50")
                out.append(f'<td class="{escape(r.verdict)}">{escape(r.verdict)}'
                           + (f"<br>P50 {significant(p50)} ms" if p50 is not None else "") + "</td>")
            out.append("</tr>")
        out.append("</table>")
    out.append("</section>")
    return out


def render_html(report: Report, baseline: Report | None = None,
                max_regression: float = DEFAULT_MAX_REGRESSION, gate_baseline: bool | None = None,
                sections: Sequence[str] = ()) -> str:
    """The whole report as one HTML page: overview, device x backend matrix (merged reports),
    then per model latency, load, memory, coverage, accuracy and the change against ``baseline``
    (a report of the same shape; records matched by test, else by model and backend; without one,
    the A/B twins measured in the report's own job). ``gate_baseline``: as for the Markdown summary,
    whether the gate's verdicts apply to ``baseline`` (default: only to the twins). ``sections``:
    HTML lines added after the models (the run history's, report/html_history.py)."""
    gates = baseline is None if gate_baseline is None else gate_baseline
    baseline = report_baseline(report, baseline)
    records = list(report.records)
    merged = bool(report.machines) or any(machine_label(r) for r in records)
    found = regressions(report, baseline, max_regression, gates)
    machines = report.machines or ([report.machine] if report.machine else [])
    described = "; ".join(
        (f"{m.label}: " if m.label else "")
        + ", ".join(str(value) for value in (m.cpu, m.os, m.python) if value)
        + (f", {m.cores} cores" if m.cores else "") for m in machines)
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width,initial-scale=1">',
           "<title>pytest-edge report</title>", f"<style>{CSS}</style></head><body>",
           "<h1>pytest-edge conformance report</h1>",
           f'<p class="muted">{escape(report.created)} · {len(records)} record(s)'
           + (f" · {escape(described)}" if described else "")
           + (f" · baseline of {escape(baseline.created)}" if baseline is not None else "") + "</p>"]
    out += _targets(records)
    out += _overview(records, found, max_regression, baseline is not None, gates)
    out += _matrix(records)
    out += generation_section(records)
    out += speech_section(records)  # speech recognition (edge_asr, docs/speech.md): per audio file
    compiled = compiled_rows(records)
    if compiled:  # compile-time targets (docs/npu.md): nothing executed; the time is the compiler's estimate
        out.append('<section id="npu"><h2>NPU compile-time targets</h2>')
        out.append(table_open("The compiler's placement, memory and estimated NPU time (nothing executed: an "
                              "estimate, not a measurement)", COMPILED_HEADERS))
        out += ["<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in compiled]
        out.append("</table></section>")
    by_model: dict[str, list[Record]] = {}
    for record in records:
        by_model.setdefault(record.model.name, []).append(record)
    # Models with a failure first, then by name.
    order = sorted(by_model, key=lambda m: (min(VERDICT_RANK.get(r.verdict, 1) for r in by_model[m]) != 0, m))
    for model in order:
        shown = sorted((r for r in by_model[model] if missing_artifact(r) is None),
                       key=lambda r: (r.backend, str(r.extra.get("machine", "")), r.test))
        skipped = [r for r in by_model[model] if missing_artifact(r) is not None]
        out += model_section(model, shown, skipped, baseline, max_regression, merged, gates)
    out += sections
    out.append('<p class="muted"><small>pytest-edge · self-contained page: no script, no network</small></p>')
    out.append("</body></html>")
    return "\n".join(out) + "\n"
