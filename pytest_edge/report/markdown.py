"""GitHub-flavoured Markdown for a CI job summary (``$GITHUB_STEP_SUMMARY``, a GitLab report):
the conformance table, then the failures and the regressions against a baseline."""

from __future__ import annotations

from typing import Any

from ..core.record import GateVerdict, Record, Verdict
from .ab_baseline import report_baseline
from .json_report import Report
from .generation import HEADERS as GENERATION_HEADERS, generation_rows
from .npu_targets import COMPILED_HEADERS, compiled_rows, target_matrix
from .speech import HEADERS as SPEECH_HEADERS, speech_rows
from .changes import DEFAULT_MAX_REGRESSION, FigureChange, device_label, figure_changes, gate_judged, regressions
from .table import (DASH, VERDICT_RANK, figure, fold_line, folded_skips, gate_summary, machine_label,
                    missing_artifact, table_footer, worst_per)

_ICON = {Verdict.PASSED: "✅", Verdict.FAILED: "❌", Verdict.ERROR: "❌", Verdict.SKIPPED: "⏭️", Verdict.DOES_NOT_CONVERT: "↪️"}


def _md(value: Any) -> str:
    """Text safe in a table cell: no pipe or newline breaks the row, and no name from a user's
    file turns into HTML, a link or emphasis (GitHub renders HTML inside Markdown)."""
    text = " ".join(str(value).split()).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for char in "\\`*_[]|#":
        text = text.replace(char, "\\" + char)
    return text


def markdown_summary(report: Report, baseline: Report | None = None,
                     max_regression: float = DEFAULT_MAX_REGRESSION, gate_baseline: bool | None = None) -> str:
    """The report as Markdown: verdict counts, one table row per model x backend (x device in a
    merged report) that ran, the backends skipped for a missing artifact folded into one line per
    model, then the failures and the regressions (P50, P99, peak memory above ``max_regression``;
    any rise of fallback). Without ``baseline``, the A/B twins measured in the report's own job.
    ``gate_baseline``: ``baseline`` is the one the run's merge gate used, so its verdicts are shown
    (default: only for the twins; another report is compared, not judged)."""
    gates = baseline is None if gate_baseline is None else gate_baseline
    baseline = report_baseline(report, baseline)
    records = list(report.records)
    counts: dict[str, int] = {}
    for record in records:
        counts[record.verdict] = counts.get(record.verdict, 0) + 1
    found = regressions(report, baseline, max_regression, gates)
    failed = [(r, c) for r, c in found if c.regressed]
    beyond = [(r, c) for r, c in found if not c.regressed]
    judged = gates and any(gate_judged(r) for r in records)
    headline = ", ".join(f"{counts[v]} {_md(v)}" for v in sorted(counts, key=lambda v: (VERDICT_RANK.get(v, 1), v)))
    if baseline is not None and judged:
        headline += f", {len({id(r) for r, _ in failed})} regressed against the baseline"
    if baseline is not None and (beyond or not judged):
        headline += (f", {len({id(r) for r, _ in beyond})} changed beyond {max_regression:.0%} against the baseline "
                     "(comparison)")
    lines = [f"## pytest-edge conformance: {headline or 'no records'}", ""]
    models, targets, cells = target_matrix(records)
    if cells:  # what a team chooses a chip by, first (table.target_matrix)
        lines += ["### Model × accelerator target", "", "| model | " + " | ".join(_md(t) for t in targets) + " |",
                  "|---|" + "---|" * len(targets)]
        lines += ["| " + _md(m) + " | " + " | ".join(_md(cells.get((m, t), "—")) for t in targets) + " |"
                  for m in models] + [""]
    gate = gate_summary(records)
    if gate:  # what the merge gate compared, A/B or stored, as the terminal says it
        lines += [_md(gate), ""]

    devices = len({device_label(r) for r in records}) > 1
    grouped = worst_per((r for r in records if missing_artifact(r) is None),
                        lambda r: (r.model.name, device_label(r) if devices else "", r.backend))
    if grouped:
        header = ["model", *(["device"] if devices else []), "backend", "max abs err", "coverage", "P50 ms",
                  "P99 ms", "load ms", "peak MB", "verdict"]
        lines += ["| " + " | ".join(header) + " |",
                  "|" + "|".join("---:" if h.endswith(("ms", "MB", "err", "coverage")) else "---"
                                 for h in header) + "|"]
        for (model, device, backend), r in sorted(grouped.items()):
            lat = r.latency_ms or {}
            changes = {c.figure: c for c in figure_changes(r, baseline.baseline_of(r), max_regression, gates)} \
                if baseline is not None else {}

            def with_change(text: str, figure: str, changes: dict[str, FigureChange] = changes) -> str:
                # The change beside the figure; a regression in bold so it stands out in the table.
                change = changes.get(figure)
                if change is None or change.text() in ("+0.0%", "-0.0%", "+0.0 pp", "-0.0 pp"):
                    return text
                shown = f"{text} ({change.text()})"
                # Bold: the gate failed it; italic: past the threshold by comparison, no gate ran.
                return f"**{shown}**" if change.regressed else f"_{shown}_" if change.beyond else shown

            fallback = r.coverage.fallback if r.coverage is not None else None
            coverage = DASH if fallback is None else f"{1 - fallback:.0%}"
            verdict = f"{_ICON.get(r.verdict, '')} {_md(r.verdict)}".strip()
            if r.verdict in (Verdict.SKIPPED, Verdict.DOES_NOT_CONVERT) and r.skip_reason:
                verdict += f": {_md(r.skip_reason)}"
            if r.warnings:
                verdict += " (gate inconclusive)"
            cells = [_md(model), *([_md(device)] if devices else []), _md(backend),
                     figure(getattr(r.accuracy, "max_abs_err", None), ".2e"),
                     with_change(coverage, "fallback"), with_change(figure(lat.get("p50"), ".3f"), "P50"),
                     with_change(figure(lat.get("p99"), ".3f"), "P99"), figure(r.load_ms, ".1f"),
                     with_change(figure(r.peak_memory_mb, ".1f"), "peak memory"), verdict]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    folded = folded_skips(records)
    legend = [line for line in table_footer(records, width=10_000) if line.startswith("coverage 0% on ")]
    if folded or legend:
        lines += [f"- {_md(fold_line(model, s, b))}" for model, (s, b) in folded.items()]
        lines += [f"- {_md(line)}" for line in legend] + [""]

    generation = generation_rows(records)
    if generation:  # decoder LLMs: the figures the conformance table has no column for
        lines += ["### LLM generation", "", "| " + " | ".join(GENERATION_HEADERS) + " |",
                  "|" + "|".join("---" if h in ("test", "model", "backend", "verdict") else "---:" for h in GENERATION_HEADERS)
                  + "|"]
        lines += ["| " + " | ".join(_md(cell) for cell in row) + " |" for row in generation] + [""]

    speech = speech_rows(records)
    if speech:  # speech recognition (edge_asr): per audio file
        lines += ["### Speech recognition", "", "| " + " | ".join(SPEECH_HEADERS) + " |",
                  "|" + "|".join("---" if h in ("test", "model", "backend", "audio", "tokens", "verdict") else "---:"
                                 for h in SPEECH_HEADERS) + "|"]
        lines += ["| " + " | ".join(_md(cell) for cell in row) + " |" for row in speech] + [""]

    compiled = compiled_rows(records)
    if compiled:  # compile-time targets (docs/npu.md): nothing executed; the time is the compiler's estimate
        lines += ["### NPU compile-time targets (nothing executed; the time is the compiler's estimate)", "",
                  "| " + " | ".join(COMPILED_HEADERS) + " |",
                  "|" + "|".join("---:" if h.endswith(("ops", "KiB", "ms", "cycles")) else "---" for h in COMPILED_HEADERS)
                  + "|"]
        lines += ["| " + " | ".join(_md(cell) for cell in row) + " |" for row in compiled] + [""]

    failures = [r for r in records if r.verdict in (Verdict.FAILED, Verdict.ERROR)]
    if failures:
        lines += [f"### Failures ({len(failures)})", ""]
        for r in failures:
            machine = machine_label(r)
            where = f" on {_md(machine)}" if devices and machine else ""
            lines.append(f"- `{r.test.replace('`', '')}` ({_md(r.backend)}{where}), {_md(r.verdict)}:")
            lines += [f"  - {_md(v)}" for v in r.violations or ["(no message)"]]
        lines.append("")
    for title, listed in (("### Regressions against the baseline (failed by the merge gate)", failed),
                          (f"### Changes beyond {max_regression:.0%} against the baseline (fallback: any rise; "
                           "a comparison of figures, no merge gate judged these records)", beyond)):
        if not listed:
            continue
        lines += [title, ""]
        per_record: dict[int, tuple[Record, list[FigureChange]]] = {}
        for r, change in listed:
            per_record.setdefault(id(r), (r, []))[1].append(change)
        for r, changes in per_record.values():
            lines.append(f"- `{r.test.replace('`', '')}` ({_md(r.backend)}): " + "; ".join(
                f"{_md(c.figure)} {c.text()} ({c.old:.4g} → {c.new:.4g})" for c in changes))
        lines.append("")
    accepted = [(r, f) for r in records if r.baseline_check is not None for f in r.baseline_check.findings or []
                if f.verdict == GateVerdict.ACCEPTED]
    if accepted:  # what the gate would have failed, passed by a committed acceptance: shown for review
        lines += [f"### Accepted changes ({len(accepted)}: passed by an acceptance file)", ""]
        lines += [f"- `{r.test.replace('`', '')}` ({_md(r.backend)}): {_md(f.message)}" for r, f in accepted]
        lines.append("")
    return "\n".join(lines)
