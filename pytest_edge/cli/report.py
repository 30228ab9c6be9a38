"""``pytest-edge report``: merge, compare, and render reports as an HTML page or a Markdown summary."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..errors import EdgeError
from ..marker import parse_percent
from ..report.json_report import compare_reports, load_report, merge_reports, write_page, write_report
from ..report.table import matrix_lines


def merge_command(args: argparse.Namespace) -> int:
    try:
        merged = merge_reports([load_report(Path(p)) for p in args.reports])
    except ValueError as exc:
        print(f"pytest-edge report merge: {exc}", file=sys.stderr)
        return 2
    if args.output:
        write_report(Path(args.output), merged)
    print("\n".join(matrix_lines(merged)))
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


def _load_pair(command: str, args: argparse.Namespace) -> tuple[dict, dict | None, float] | None:
    """The report, the optional baseline and the threshold, or None after saying what is wrong."""
    try:
        report = load_report(Path(args.report))
        baseline = load_report(Path(args.baseline)) if args.baseline else None
        limit = parse_percent(args.max_regression)
    except (ValueError, EdgeError) as exc:
        print(f"pytest-edge report {command}: {exc}", file=sys.stderr)
        return None
    return report, baseline, limit


def html_command(args: argparse.Namespace) -> int:
    from ..report.html import render_html

    loaded = _load_pair("html", args)
    if loaded is None:
        return 2
    try:
        page = render_html(*loaded)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:  # a field load_report does not check
        print(f"pytest-edge report html: cannot render {args.report}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    try:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        write_page(Path(args.output), page)
    except OSError as exc:
        print(f"pytest-edge report html: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"html: {args.output}")
    return 0


def summary_command(args: argparse.Namespace) -> int:
    from ..report.markdown import markdown_summary

    loaded = _load_pair("summary", args)
    if loaded is None:
        return 2
    try:
        text = markdown_summary(*loaded)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:  # a field load_report does not check
        print(f"pytest-edge report summary: cannot render {args.report}: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return 2
    if not args.output:
        print(text)
        return 0
    try:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        write_page(Path(args.output), text)
    except OSError as exc:
        print(f"pytest-edge report summary: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0
