"""``pytest-edge``: a first configuration (init), goldens (refresh, prune, list, diff), accepted changes, coverage
inspection, quantization triage, report merge/compare/html/summary/openmetrics, a run history (show, creep,
import, export), and devices (prepare, list)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

from ..backends import all_artifact_suffixes, all_backends, predicted_targets
from ..core.settings import MAX_REGRESSION
from ..errors import visible
from ..triage import quant
from . import accept, device, env, history
from .golden import diff_command, golden_prune, golden_refresh, list_command
from .init import init_command
from .inspect import inspect_command
from .report import compare_command, html_command, merge_command, openmetrics_command, summary_command


class _VisibleText:
    """A command's stdout or stderr: what it writes is :func:`~pytest_edge.errors.visible` (a model's
    name, a golden's metadata, an accept reason or a runtime's message may hold terminal escapes),
    and it says it is no terminal, so a pytest run inside a command writes no color escapes of its own."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(visible(text, lines=True))
        return len(text)

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _targets() -> str:
    """The predicted targets by the first backend predicting each: "nnapi, coreml: onnxruntime-cpu; ..."."""
    named: dict[str, list[str]] = {}
    for name, backend in all_backends().items():
        targets = [t for t in backend.predicts_targets if not any(t in seen for seen in named.values())]
        if targets:
            named[name] = targets
    return "; ".join(f"{', '.join(targets)}: {name}" for name, targets in named.items())

def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["golden", "refresh"]:
        # Everything after "refresh" belongs to pytest, options included, so argparse stays out.
        return golden_refresh(argv[2:])
    if argv[:2] == ["golden", "prune"] and not {"-h", "--help"} & set(argv[2:]):
        return golden_prune(argv[2:])
    parser = argparse.ArgumentParser(prog="pytest-edge", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    golden = commands.add_parser("golden", help="golden outputs")
    golden_commands = golden.add_subparsers(dest="golden_command", required=True)
    golden_commands.add_parser("refresh", help="pytest --edge-update-golden [pytest args]")
    golden_commands.add_parser("prune", help="remove golden sets no test uses: prune [--dry-run] [pytest args]")
    listing = golden_commands.add_parser("list", help="models with goldens: cases, reference, artifacts, staleness")
    listing.set_defaults(func=list_command)
    diff = golden_commands.add_parser("diff", help="what mismatching backends produced, against the golden")
    diff.add_argument("model", help="the model's name (its golden folder)")
    diff.add_argument("--set", default="default",
                      help="the input set (its key, as golden list shows it; default: generated inputs)")
    diff.set_defaults(func=diff_command)

    init = commands.add_parser("init", help="configure a project with model artifacts, write a first test per "
                                             "model and record its goldens")
    init.add_argument("folder", nargs="?", default=".", help="the project folder (default: here)")
    init.add_argument("--no-golden", action="store_true", help="write the configuration and the test only")
    init.set_defaults(func=init_command)

    accepting = commands.add_parser("accept", help="accept an intended change of a model in the merge gate "
                                                   "(for its artifacts as they are now; edge-accept.toml)")
    accept.add_arguments(accepting)

    inspect = commands.add_parser("inspect", help="delegate coverage of a model on every available backend")
    inspect.add_argument("model", help="an artifact path, or a stem (finds "
                                       + "/".join(dict.fromkeys(all_artifact_suffixes())) + ")")
    inspect.add_argument("--model-dir", action="append", default=[],
                         help="also search this folder for a stem (the project's edge_model_dirs are searched)")
    inspect.add_argument("--target", action="append", default=[], choices=list(predicted_targets()),
                         help=f"also predict coverage on a target, by the backend that predicts it ({_targets()})")
    inspect.add_argument("--backends", default="",
                         help="only these backends (comma-separated, patterns too); names compile-time targets "
                              "(an NPU compiler's placement: docs/npu.md), which are never in the defaults")
    inspect.set_defaults(func=inspect_command)

    triage = commands.add_parser("triage", help="where a model loses accuracy")
    triage_commands = triage.add_subparsers(dest="triage_command", required=True)
    quant_command = triage_commands.add_parser(
        "quant", help=f"per-layer quantization loss: float vs int8 ({quant.pairs_help()})")
    quant.add_arguments(quant_command)
    quant_command.set_defaults(func=quant.run_parsed)

    report = commands.add_parser("report", help="join, compare or render JSON reports")
    report_commands = report.add_subparsers(dest="report_command", required=True)
    merge = report_commands.add_parser("merge", help="device x backend matrix from several reports")
    merge.add_argument("reports", nargs="+")
    merge.add_argument("-o", "--output", help="write the merged report here")
    merge.set_defaults(func=merge_command)
    compare = report_commands.add_parser("compare", help="regressions of NEW against OLD (exit 1 if any)")
    compare.add_argument("old")
    compare.add_argument("new")
    compare.add_argument("--max-regression", default=MAX_REGRESSION)
    compare.set_defaults(func=compare_command)
    html = report_commands.add_parser("html", help="one self-contained HTML page (optionally against a baseline)")
    summary = report_commands.add_parser("summary", help="Markdown for a CI job summary (stdout without -o)")
    for command, func in ((html, html_command), (summary, summary_command)):
        command.add_argument("report")
        command.add_argument("baseline", nargs="?", help="a report to show the change against")
        command.add_argument("--max-regression", default=MAX_REGRESSION, help="changes above this are highlighted")
        command.set_defaults(func=func)
    html.add_argument("-o", "--output", required=True, help="write the page here")
    summary.add_argument("-o", "--output", help="write the Markdown here (e.g. $GITHUB_STEP_SUMMARY)")
    metrics = report_commands.add_parser("openmetrics", help="a report's figures as OpenMetrics text (stdout without -o)")
    metrics.add_argument("report")
    metrics.add_argument("--commit", help="the commit label of every sample (default: none)")
    metrics.add_argument("-o", "--output", help="write the text here (e.g. a textfile collector's folder)")
    metrics.set_defaults(func=openmetrics_command)

    device.add_arguments(commands)
    env.add_arguments(commands)
    history.add_arguments(commands)

    args = parser.parse_args(argv)
    if args.command == "init":  # it runs the project's pytest and prints its output as is
        return args.func(args)
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _VisibleText(out), _VisibleText(err)
    try:
        return args.func(args)
    finally:
        sys.stdout, sys.stderr = out, err
