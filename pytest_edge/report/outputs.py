"""What a session writes at its end: the JSON report, the HTML page and the Markdown summary, each
on its own (one unwritable path does not lose the others), from the same report and the same
baseline the gate used; the figures over time (OpenMetrics, the history and its creep alert); and
whether the run fails for any of it, or for a gate that compared nothing (:func:`finish_session`).
Plain logic: the plugin's ``pytest_sessionfinish`` calls it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence, cast

from .json_report import Report, build_report, write_page, write_report
from .table import gate_compared_nothing

if TYPE_CHECKING:  # settings imports report modules for its defaults
    from ..core.record import Record
    from ..core.settings import Settings
    from ..measurement.machine import Machine
    from .history import OverTime


@dataclass
class SessionEnd:
    """What a session's end wrote, and what fails the run: ``errors`` (an output that could not be
    written, a failing creep, a gate that compared nothing), one message each; ``over_time``, what
    --edge-openmetrics and --edge-history wrote and the creeps found (None: neither was asked for)."""

    errors: list[str] = field(default_factory=list)
    over_time: "OverTime | None" = None


def finish_session(records: Sequence["Record"], machine: "Machine", settings: "Settings") -> SessionEnd:
    """Every output ``settings`` asks for, from one report of ``records`` (built only where one is
    asked for), and the run's failures at its end."""
    end = SessionEnd()
    if settings.report or settings.html or settings.summary or settings.openmetrics or settings.history:
        report = build_report(records, machine)
        sections: list[str] = []
        if settings.openmetrics or settings.history:
            from .history import write_over_time

            end.over_time = over_time = write_over_time(report, settings)
            end.errors += [*over_time.errors, *(over_time.lines() if over_time.fail else [])]
            if settings.html and over_time.runs:  # the page's history section
                from .html_history import history_section

                sections = history_section(over_time.runs, settings.creep_window, over_time.creeps)
        end.errors = write_outputs(report, settings, sections) + end.errors
    nothing = gate_compared_nothing(records)  # a gate that compared nothing is no pass
    if nothing:
        end.errors.append(nothing)
    return end


def write_outputs(report: Report, settings: "Settings", page_sections: Sequence[str] = ()) -> list[str]:
    """Write every output ``settings`` asks for; the errors, one line each (the table and pytest's
    summary still print, and the exit status says something failed). ``page_sections``: HTML lines
    the page adds after the models (the run history's)."""
    errors = []
    # The baseline the gate used: the Report the plugin read at configure (settings names it by the
    # records judging/ reads, as core/ does not import report/).
    baseline = cast("Report | None", settings.baseline)
    if settings.report:
        target = settings.rootdir / settings.report
        try:
            write_report(target, report)
        except OSError as exc:
            errors.append(f"pytest-edge: cannot write the report {target}: {exc.strerror or exc}")
    for what, path in (("HTML report", settings.html), ("summary", settings.summary)):
        if not path:
            continue
        render = _renderer(what)
        target = settings.rootdir / path
        try:
            # The baseline the gate used: the pages show the gate's verdicts, judged once.
            extra = {"sections": page_sections} if what == "HTML report" and page_sections else {}
            text = render(report, baseline, settings.max_regression, gate_baseline=True, **extra)
        except Exception as exc:  # noqa: BLE001 - a rendering bug must not hide the run's results
            errors.append(f"pytest-edge: cannot render the {what}: {type(exc).__name__}: {exc}")
            continue
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            write_page(target, text)
        except OSError as exc:
            errors.append(f"pytest-edge: cannot write the {what} {target}: {exc.strerror or exc}")
    return errors


def _renderer(what: str) -> Callable[..., str]:
    """The page's renderer, imported for a page that was asked for only."""
    if what == "summary":
        from .markdown import markdown_summary

        return markdown_summary
    from .html import render_html

    return render_html
