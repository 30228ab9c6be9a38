"""The terminal's sections at the end of a run (pytest's terminal summary): the conformance table
and where the reports were written, the goldens no test used, and the decoders' generation figures
the table lacks. The plugin's hook hands over what the session kept."""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence

from ..core.settings import Settings
from ..errors import visible
from ..golden.use import GoldenUse, unused_report


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


def write_summary(terminal: Terminal, settings: Settings, records: Sequence[Mapping[str, Any]], use: GoldenUse, *,
                  under_load: bool, inconclusive: int, xdist_workers: int | None, report_error: str) -> None:
    """The conformance section (the table, a report that could not be written, where the reports
    are), the goldens no test used, and the LLM generation section where a decoder was measured."""
    from .generation import generation_lines
    from .table import summary_lines

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
