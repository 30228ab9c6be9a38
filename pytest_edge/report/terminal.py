"""The terminal's sections at the end of a run (pytest's terminal summary): the conformance table
and where the reports were written, the goldens no test used, and the decoders' generation figures
the table lacks. The plugin's hook hands over what the session kept."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, Sequence

from ..core.settings import Settings
from ..errors import visible
from ..golden.use import GoldenUse, unused_report

if TYPE_CHECKING:
    from ..core.record import Record


class Terminal(Protocol):
    """What is used of pytest's TerminalReporter."""

    def section(self, title: str, sep: str = ..., **markup: bool) -> None: ...

    def write_line(self, line: str, **markup: bool) -> None: ...


def write_nothing_ran(terminal: Terminal, settings: Settings, use: GoldenUse) -> None:
    """No edge test ran: the goldens no test used, and the reports asked for that were not written."""
    asked = [f"{name} {settings.rootdir / path}" for name, path in
             (("report", settings.report), ("html", settings.html), ("summary", settings.summary))
             if path]
    if use.unused or use.error or asked:
        terminal.section("pytest-edge")
    if asked:  # said, so a CI step that expects the file knows why it is not there
        terminal.write_line(visible(f"pytest-edge: no edge test ran, so nothing was written ({', '.join(asked)})"),
                            yellow=True)
    write_golden_use(terminal, use)


def write_summary(terminal: Terminal, settings: Settings, records: Sequence["Record"], use: GoldenUse, *,
                  under_load: bool, inconclusive: int, xdist_workers: int | None, report_error: str) -> None:
    """The conformance section (the table, a report that could not be written, where the reports
    are), the goldens no test used, and the LLM generation section where a decoder was measured."""
    terminal.section("pytest-edge conformance")
    for line in summary_lines(records, under_load=under_load, inconclusive=inconclusive, xdist_workers=xdist_workers):
        terminal.write_line(visible(line))
    if report_error:
        for line in report_error.splitlines():
            terminal.write_line(visible(line), red=True, bold=True)
    for name, path in (("report", settings.report), ("html", settings.html), ("summary", settings.summary)):
        target = settings.rootdir / path if path else None
        if target is not None and str(target) not in report_error:
            terminal.write_line(visible(f"{name}: {target}"))
    write_golden_use(terminal, use)
    generation: list[str] = []
    if any(record.generation is not None for record in records):  # a decoder's report module, where one ran
        from .generation import generation_lines

        generation = generation_lines(records)  # the decoders' figures the table lacks
    if generation:
        terminal.section("pytest-edge LLM generation")
        for line in generation:
            terminal.write_line(line)


def write_golden_use(terminal: Terminal, use: GoldenUse) -> None:
    if use.error:
        terminal.write_line(visible(use.error, lines=True), yellow=True)
    if use.unused:
        terminal.write_line(visible(unused_report(use.unused, use.models_used), lines=True), yellow=True)


def summary_lines(records: Sequence["Record"], *, under_load: bool = False, inconclusive: int = 0,
                  xdist_workers: int | None = None) -> list[str]:
    """What the terminal prints after a run: the table, its footer, the gate's line, and the notes
    that qualify the figures (predicted coverage, timings under load, inconclusive gates, restarted
    workers, measurement beside other xdist workers)."""
    from ..core.record import NOT_JUDGED, NOT_MEASURED
    from .npu_targets import compiled_lines
    from .table import format_table, gate_summary, table_footer, table_rows, timing_policy

    lines = format_table(table_rows(records))
    lines += table_footer(records)  # skipped-for-no-artifact backends, one line per model; legend
    gate = gate_summary(records)
    if gate:
        lines.append(gate)
    if any(r.coverage is not None and r.coverage.method == "predicted" for r in records):
        lines.append("* coverage predicted from the execution provider's support rules")
    if under_load:
        lines.append("note: some timings ran under load (other processes kept more than half a core busy; see "
                     "timing_under_load in the report): their latency figures are noisier than on an idle machine")
    recorded = sorted({r.backend for r in records if timing_policy(r) is NOT_JUDGED})
    if recorded:
        lines.append(f"note: latency, load time and memory of {', '.join(recorded)} were recorded, not judged "
                     "against budgets or baselines (emulated device: timing and memory are not the target's; "
                     "edge_emulated_timing = judge judges them)")
    unmeasured = sorted({r.backend for r in records if timing_policy(r) is NOT_MEASURED})
    if unmeasured:
        lines.append(f"note: latency, load time and memory of {', '.join(unmeasured)} were not measured "
                     "(emulated device: timing and memory are not the target's; edge_emulated_timing = record "
                     "measures them, = judge judges them too)")
    lines += compiled_lines(records)
    # Figures the candidate holds and its baseline does not: said, never passed in silence.
    for r in records:
        notes = r.baseline_check.notes if r.baseline_check is not None else None
        lines += [f"note: {r.test}: {note}" for note in notes or [] if ": not compared: " in note]
    counted = [(r, r.counted) for r in records if r.counted is not None]
    if counted:
        figures = ", ".join(f"{r.model.name} on {r.backend} {found.instructions:,.0f}"
                            for r, found in counted[:6]) + (", ..." if len(counted) > 6 else "")
        lines.append(f"note: counted mode: instructions per inference under {counted[0][1].tool} "
                     f"({figures}); nothing was timed (Valgrind is far slower), so latency and memory are null and "
                     "their budgets not judged")
    if inconclusive:
        lines.append(f"note: {inconclusive} latency regression(s) against the stored baseline were inconclusive "
                     "because the machine was busy (see the warnings); A/B mode (--edge-baseline-models) is not "
                     "fooled by load")
    restarts = sum(len(r.restarts) for r in records)
    if restarts:
        lines.append(f"note: {restarts} backend worker(s) died between requests and were restarted (see the "
                     "EdgeWorkerRestarted warnings and the records' restarts; --edge-strict-restarts fails such tests)")
    if xdist_workers:
        lines.append(f"note: timing and memory ran one at a time across the {xdist_workers} xdist workers, but "
                     "correctness tests of other workers ran beside them; for the steadiest figures run without -n")
    return lines
