"""``pytest-edge report``: merge, compare, and render reports as an HTML page, a Markdown summary or
OpenMetrics text."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

from ..errors import EdgeError
from ..units import parse_percent
from ..report.json_report import Report, compare_reports, load_report, merge_reports, read_report, write_page, write_report
from ..report.table import matrix_lines


def merge_command(args: argparse.Namespace) -> int:
    try:
        merged = merge_reports([load_report(Path(p)) for p in args.reports])
    except ValueError as exc:
        print(f"pytest-edge report merge: {exc}", file=sys.stderr)
        return 2
    if args.output:
        write_report(Path(args.output), merged)
    print("\n".join(matrix_lines(merged.matrix or {})))
    return 0


def compare_command(args: argparse.Namespace) -> int:
    try:
        old, new = load_report(Path(args.old)), load_report(Path(args.new))
        limit = parse_percent(args.max_regression)
    except (ValueError, EdgeError) as exc:
        print(f"pytest-edge report compare: {exc}", file=sys.stderr)
        return 2
    problems = compare_reports(old, new, limit)
    for problem in problems:
        print(problem)
    print(json.dumps({"regressions": len(problems)}))
    return 1 if problems else 0


def _load_pair(command: str, args: argparse.Namespace) -> tuple[Report, Report | None, float] | None:
    """The report, the optional baseline and the threshold, or None after saying what is wrong."""
    try:
        report = load_report(Path(args.report))
        baseline = load_report(Path(args.baseline)) if args.baseline else None
        limit = parse_percent(args.max_regression)
    except (ValueError, EdgeError) as exc:
        print(f"pytest-edge report {command}: {exc}", file=sys.stderr)
        return None
    return report, baseline, limit


def _render(command: str, args: argparse.Namespace, render: Callable[..., str]) -> str | None:
    """The page or summary of the report ``args`` name, or None after saying what is wrong."""
    loaded = _load_pair(command, args)
    if loaded is None:
        return None
    try:
        return render(*loaded)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:  # a field load_report does not check
        print(f"pytest-edge report {command}: cannot render {args.report}: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return None


def _write(command: str, output: str, text: str) -> bool:
    try:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        write_page(Path(output), text)
    except OSError as exc:
        print(f"pytest-edge report {command}: cannot write {output}: {exc.strerror or exc}", file=sys.stderr)
        return False
    return True


def html_command(args: argparse.Namespace) -> int:
    from ..report.html import render_html

    page = _render("html", args, render_html)
    if page is None or not _write("html", args.output, page):
        return 2
    print(f"html: {args.output}")
    return 0


def summary_command(args: argparse.Namespace) -> int:
    from ..report.markdown import markdown_summary

    text = _render("summary", args, markdown_summary)
    if text is None:
        return 2
    if not args.output:
        print(text)
        return 0
    return 0 if _write("summary", args.output, text) else 2


def openmetrics_command(args: argparse.Namespace) -> int:
    from ..report.openmetrics import render_openmetrics

    try:
        report = load_report(Path(args.report))
    except ValueError as exc:
        print(f"pytest-edge report openmetrics: {exc}", file=sys.stderr)
        return 2
    name = report.machine.name if report.machine is not None else None
    text = render_openmetrics(report.records, args.commit or "", str(name or "local"))
    if not args.output:
        sys.stdout.write(text)
        return 0
    return 0 if _write("openmetrics", args.output, text) else 2
