"""What a session writes at its end: the JSON report, the HTML page and the Markdown summary, each
on its own (one unwritable path does not lose the others), from the same report and the same
baseline the gate used. Plain logic: the plugin's ``pytest_sessionfinish`` calls it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence, cast

from .json_report import Report, write_page, write_report

if TYPE_CHECKING:  # settings imports report modules for its defaults
    from ..core.settings import Settings


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
