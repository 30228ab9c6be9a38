"""``pytest-edge history``: a run history's figures over time (show, html), its creep alert (creep),
and its runs moved in and out (import, export); docs/monitoring.md."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

from ..errors import EdgeError
from ..files import atomic_write
from ..report.history import export_runs, import_runs, judge_creep, load_history, runs_of_file, show_lines
from ..units import parse_percent


def add_arguments(commands: argparse._SubParsersAction) -> None:
    history = commands.add_parser("history", help="a run history (--edge-history): figures over time, creep, "
                                                  "import and export")
    sub = history.add_subparsers(dest="history_command", required=True)
    show = sub.add_parser("show", help="per (model, backend, device), each figure over the last runs")
    show.add_argument("folder", help="the history folder")
    show.add_argument("--last", type=int, default=10, help="how many runs (default 10)")
    show.add_argument("--model", help="only this model")
    show.set_defaults(func=show_command)
    creep = sub.add_parser("creep", help="figures that crept over the last runs (exit 1 if any)")
    creep.add_argument("folder", help="the history folder")
    creep.add_argument("--max-creep", default="5%", help="allowed growth over the window (default 5%%)")
    creep.add_argument("--window", type=int, default=10, help="runs judged (default 10)")
    creep.set_defaults(func=creep_command)
    page = sub.add_parser("html", help="the history's figures over time as one self-contained HTML page")
    page.add_argument("folder", help="the history folder")
    page.add_argument("-o", "--output", required=True, help="write the page here")
    page.add_argument("--last", type=int, default=10, help="how many runs per series (default 10)")
    page.add_argument("--max-creep", help="also list the figures that crept beyond this (e.g. 5%%)")
    page.add_argument("--window", type=int, default=10, help="runs the creep alert judges (default 10)")
    page.set_defaults(func=html_command)
    export = sub.add_parser("export", help="the history's runs as one JSON file")
    export.add_argument("folder", help="the history folder")
    export.add_argument("-o", "--output", required=True, help="write the runs here")
    export.add_argument("--last", type=int, help="only the last N runs")
    export.set_defaults(func=export_command)
    into = sub.add_parser("import", help="add runs to a history: an export, or reports (--edge-report's)")
    into.add_argument("folder", help="the history folder (made if missing)")
    into.add_argument("files", nargs="+", help="exports or reports")
    into.add_argument("--commit", help="the commit a report's run is kept under (default: its own, if any)")
    into.add_argument("--machine", help="the machine a report's run is kept under (default: its own, else this one)")
    into.set_defaults(func=import_command)


def _fail(command: str, exc: Exception) -> int:
    print(f"pytest-edge history {command}: {exc}", file=sys.stderr)
    return 2


def _count(value: int | None, option: str, least: int, why: str) -> None:
    """A run count given on the command line: below ``least`` is refused, never bent to fit (a
    --last of -1 would drop the first run; a --window of 1 was judged as 3)."""
    if value is not None and value < least:
        raise ValueError(f"{option} {value}: at least {least} ({why})")


def show_command(args: argparse.Namespace) -> int:
    try:
        _count(args.last, "--last", 1, "the runs shown per model, backend and device")
        runs = load_history(Path(args.folder))
    except ValueError as exc:
        return _fail("show", exc)
    print("\n".join(show_lines(runs, args.last, args.model)))
    return 0


def creep_command(args: argparse.Namespace) -> int:
    try:
        limit = parse_percent(args.max_creep, "--max-creep")
        _count(args.window, "--window", 3, "a first and a last third of runs")
        runs = load_history(Path(args.folder))
    except (ValueError, EdgeError) as exc:
        return _fail("creep", exc)
    creeps = judge_creep(runs, limit, args.window)
    for creep in creeps:
        print(creep.message)
    print(json.dumps({"runs": len(runs), "creeps": len(creeps)}))
    return 1 if creeps else 0


def _write(output: str, write: Callable[[Path], None]) -> None:
    """Write ``output`` (its folder made if missing); an OSError naming the file and why."""
    path = Path(output)
    if path.parent.exists() and not path.parent.is_dir():
        raise OSError(f"cannot write {path}: {path.parent} is not a folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path)
    except OSError as exc:
        raise OSError(f"cannot write {path}: {exc.strerror or exc}") from None


def html_command(args: argparse.Namespace) -> int:
    from ..report.html_history import render_history_html
    from ..report.json_report import write_page

    try:
        _count(args.last, "--last", 1, "the runs drawn per model, backend and device")
        _count(args.window, "--window", 3, "a first and a last third of runs")
        limit = parse_percent(args.max_creep, "--max-creep") if args.max_creep else None
        runs = load_history(Path(args.folder))
        creeps = judge_creep(runs, limit, args.window) if limit is not None else []
    except (ValueError, EdgeError) as exc:
        return _fail("html", exc)
    try:
        _write(args.output, lambda path: write_page(path, render_history_html(runs, args.last, creeps)))
    except OSError as exc:
        return _fail("html", exc)
    print(f"html: {args.output}")
    return 0


def export_command(args: argparse.Namespace) -> int:
    try:
        _count(args.last, "--last", 1, "the newest runs exported; leave it out for every run")
        runs = load_history(Path(args.folder))
    except ValueError as exc:
        return _fail("export", exc)
    runs = runs[-args.last:] if args.last else runs
    try:
        _write(args.output, lambda path: atomic_write(path, (json.dumps(export_runs(runs), indent=1) + "\n").encode()))
    except OSError as exc:
        return _fail("export", exc)
    print(f"exported {len(runs)} run(s) to {args.output}")
    return 0


def import_command(args: argparse.Namespace) -> int:
    try:  # every file read and validated before a run is written: a bad file imports nothing
        runs = [run for name in args.files for run in runs_of_file(Path(name), args.commit, args.machine)]
        written, held = import_runs(Path(args.folder), runs)
    except (ValueError, OSError) as exc:
        return _fail("import", exc)
    print(f"imported {len(written)} run(s) into {args.folder}"
          + (f"; {held} already in the history, left out" if held else ""))
    return 0
